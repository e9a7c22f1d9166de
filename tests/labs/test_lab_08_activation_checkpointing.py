"""Lab 08's figures checked against Korthikanti et al. and against exact recomputation.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (arXiv
2205.05198), count the activations one transformer layer keeps for backward as sbh(34 + 5as/h)
bytes, with 16-bit activations and 1-byte dropout masks; full recomputation keeps 2sbh per layer.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, load_starter
from torch.utils.checkpoint import checkpoint

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-08-activation-checkpointing/activation_checkpointing.py"
lab = load_starter(STARTER)


@pytest.mark.parametrize(
    "s, b, h, a",
    [(2048, 1, 12288, 96), (2048, 1, 4096, 32), (32, 4, 64, 4)],
    ids=["gpt-3-175b-shape", "7b-shape", "lab-default"],
)
def test_16_bit_count_is_the_papers_formula(s: int, b: int, h: int, a: int) -> None:
    # sbh(34 + 5as/h) written without the division: 34sbh + 5as^2b.
    assert lab.paper_bytes_per_block(s, b, h, a, elem_bytes=2) == 34 * s * b * h + 5 * a * s * s * b


def saved_by_one_block(dtype: torch.dtype, s: int = 16, b: int = 2, h: int = 32, a: int = 4) -> int:
    torch.manual_seed(0)
    block = lab.Block(h, a, dropout=0.1).to(dtype).train()
    with lab.SavedActivations(list(block.parameters())) as saved:
        block(torch.randn(b, s, h, dtype=dtype))
    return saved.nbytes


def test_a_bf16_block_saves_the_papers_count_plus_layernorm_statistics() -> None:
    s, b, h, a = 16, 2, 32, 4
    layernorm_stats = 2 * 2 * s * b * 2  # two norms, mean and rstd per token, 2 bytes each
    assert saved_by_one_block(torch.bfloat16, s, b, h, a) == s * b * h * (34 + 5 * a * s // h) + layernorm_stats


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=["fp64", "bf16"])
def test_every_claim_holds_in_other_precisions(dtype: torch.dtype, capsys) -> None:
    # report() asserts the ledger, the inputs-only counts, the call counts and bitwise gradients.
    lab.report(layers=4, batch=2, seq=8, d=16, heads=2, dropout=0.1, dtype=dtype, segment=2, repeats=1)
    assert "gradients: bitwise identical" in capsys.readouterr().out


def test_recomputation_needs_the_stashed_rng_state() -> None:
    """Without restoring the RNG, the recomputed dropout masks differ and so do the gradients."""
    torch.manual_seed(0)
    block = lab.Block(16, 2, dropout=0.5).train()
    x, target = torch.randn(2, 8, 16), torch.randn(2, 8, 16)

    def grads(preserve: bool) -> list[torch.Tensor]:
        block.zero_grad(set_to_none=True)
        block.forward_calls = 0
        torch.manual_seed(1)
        out = checkpoint(block, x, use_reentrant=False, preserve_rng_state=preserve)
        F.mse_loss(out, target).backward()
        assert block.forward_calls == 2
        return [p.grad.clone() for p in block.parameters()]

    torch.manual_seed(1)
    block.zero_grad(set_to_none=True)
    F.mse_loss(block(x), target).backward()
    plain = [p.grad.clone() for p in block.parameters()]
    assert all(torch.equal(g, p) for g, p in zip(grads(preserve=True), plain))
    assert not all(torch.equal(g, p) for g, p in zip(grads(preserve=False), plain))


def small_stack(layers: int = 3) -> tuple[torch.nn.ModuleList, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(lab.Block(16, 2, dropout=0.0) for _ in range(layers)).train()
    return blocks, torch.randn(2, 8, 16), torch.randn(2, 8, 16)


def grads_of(blocks: torch.nn.ModuleList) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.clone() for p in blocks.parameters()]


def test_reentrant_checkpoint_of_every_block_leaves_nothing_to_differentiate() -> None:
    """torch.utils.checkpoint docs (use_reentrant): the reentrant variant needs at least one input
    and output with requires_grad=True, or the checkpointed part gets no gradients."""
    blocks, x, target = small_stack()
    error = lab.reentrant_without_input_grad(blocks, x, target)
    assert "element 0 of tensors does not require grad" in error
    assert all(g is None for g in grads_of(blocks))


def test_reentrant_checkpoint_of_the_leading_blocks_drops_their_gradients_silently() -> None:
    # Only block 0 is checkpointed: its output does not require grad, but block 1's parameters
    # do, so backward runs without an error and block 0 simply gets no gradients.
    blocks, x, target = small_stack()
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        out = checkpoint(blocks[0], x, use_reentrant=True)
    assert not out.requires_grad
    F.mse_loss(lab.run_plain(blocks[1:], out), target).backward()
    assert all(p.grad is None for p in blocks[0].parameters())
    assert all(p.grad is not None for p in blocks[1:].parameters())


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non-reentrant", "reentrant, x requires grad"])
def test_checkpointing_every_block_gives_the_plain_gradients(use_reentrant: bool) -> None:
    blocks, x, target = small_stack()
    F.mse_loss(lab.run_plain(blocks, x), target).backward()
    plain = grads_of(blocks)
    blocks.zero_grad(set_to_none=True)
    if use_reentrant:
        x = x.clone().requires_grad_()  # gives reentrant checkpoint an input to attach to
    out = x
    for block in blocks:
        out = checkpoint(block, out, use_reentrant=use_reentrant)
    F.mse_loss(out, target).backward()
    assert all(torch.equal(g, p) for g, p in zip(grads_of(blocks), plain))


def test_selective_recomputation_keeps_17_inputs_worth_per_block() -> None:
    """Korthikanti et al. (Table 2): selective recomputation keeps 34sbh bytes per layer in 16-bit,
    the sbh(34 + 5as/h) count without its attention-score terms, against a 2sbh layer input (what
    full recomputation keeps). The ratio, 17, is the deeper stack the starter's model evaluates."""
    s, b, h = 2048, 1, 12288
    without_scores = lab.paper_bytes_per_block(s, b, h, a=0, elem_bytes=2)
    assert without_scores == 17 * (2 * s * b * h)


@pytest.mark.parametrize("layers", [2, 3, 16, 17, 80, 81])
def test_single_blocks_are_best_exactly_while_a_block_keeps_half_the_depth(layers: int) -> None:
    for tenths in range(1, 10 * layers):
        growth = tenths / 10
        assert (lab.best_segment_size(layers, growth) == 1) == (growth >= layers // 2), growth


@pytest.mark.parametrize("layers", [4, 9, 16, 64, 81])
def test_sqrt_segments_beat_single_blocks_exactly_below_sqrt_l(layers: int) -> None:
    root = round(layers ** 0.5)
    for tenths in range(1, 300):
        growth = tenths / 10
        wins = lab.working_set_inputs(layers, growth, root) < lab.working_set_inputs(layers, growth, 1)
        assert wins == (growth < root), growth


def test_two_block_segments_win_for_80_blocks_at_17() -> None:
    assert [lab.working_set_inputs(80, 17, s) for s in (1, 2, 9)] == [97, 74, 162]
    assert lab.best_segment_size(80, 17) == 2
    # With Chen et al.'s assumption, a block that keeps about its own input, sqrt(L) segments win.
    assert lab.best_segment_size(81, 1) == 9
