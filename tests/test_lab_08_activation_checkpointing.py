"""Lab 08's figures checked against Korthikanti et al. and against exact recomputation.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (arXiv
2205.05198), count the activations one transformer layer keeps for backward as sbh(34 + 5as/h)
bytes, with 16-bit activations and 1-byte dropout masks; full recomputation keeps 2sbh per layer.
"""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from conftest import REPO, load_starter

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
