"""Lab 05's tiled attention checked for exact parity, tile counts and the figures its page states.

Parity is against `torch.nn.functional.scaled_dot_product_attention`, PyTorch's reference for
softmax(q k^T / sqrt(d)) v, on shapes the default run does not cover: ragged grids whose blocks do
not divide the sequence, unequal query and key blocks, several heads, and logits large enough to
overflow an exp() that skipped the running max.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import astuple

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, load_starter, torch_threads

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-05-flash-attention-cpu/flash_attention_cpu.py"
flash = load_starter(STARTER)


@pytest.fixture(autouse=True, scope="module")
def one_thread_for_module():
    """Run these tiny tiles on one thread, as the starter does, and restore the setting after."""
    with torch_threads(1):
        yield


SHAPES = [  # (heads, seq_len, head_dim, block_q, block_k)
    (1, 256, 64, 64, 64),  # square grid, blocks divide the sequence
    (2, 300, 32, 48, 80),  # ragged last blocks, unequal query and key blocks
    (3, 257, 16, 128, 32),  # one-row last query block
    (1, 40, 8, 64, 64),  # sequence shorter than one block
]


@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "h{}-n{}-d{}-bq{}-bk{}".format(*s))
def test_tiled_attention_matches_sdpa(shape: tuple[int, ...], causal: bool) -> None:
    heads, n, d, block_q, block_k = shape
    q, k, v = flash.make_inputs(heads, n, d, seed=1)
    tiled, counts = flash.flash_attention(q, k, v, block_q=block_q, block_k=block_k, causal=causal)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert (tiled - expected).abs().max().item() < flash.TOLERANCE
    assert counts.largest_tile == min(block_q, n) * min(block_k, n)


@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
def test_running_max_keeps_large_logits_finite(causal: bool) -> None:
    # Logits in the thousands: exp() overflows fp32 above about 88 unless the max is subtracted.
    q, k, v = flash.make_inputs(2, 200, 16, seed=2)
    q = q * 400
    tiled, _ = flash.flash_attention(q, k, v, block_q=32, block_k=48, causal=causal)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert torch.isfinite(tiled).all()
    assert (tiled - expected).abs().max().item() < flash.TOLERANCE


def test_fp64_inputs_stay_fp64_and_agree_tightly() -> None:
    q, k, v = (t.double() for t in flash.make_inputs(1, 300, 32, seed=3))
    tiled, _ = flash.flash_attention(q, k, v, block_q=64, block_k=96, causal=True)
    assert tiled.dtype == torch.float64
    assert (tiled - flash.naive_attention(q, k, v, causal=True)).abs().max().item() < 1e-12


@pytest.mark.parametrize("blocks", [1, 2, 8, 32, 64])
def test_square_causal_grid_computes_t_times_t_plus_one_over_two(blocks: int) -> None:
    block = 16
    computed, skipped = flash.expected_causal_tiles(blocks * block, block, block)
    assert computed == blocks * (blocks + 1) // 2
    assert skipped == blocks * (blocks - 1) // 2


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "h{}-n{}-d{}-bq{}-bk{}".format(*s))
def test_causal_run_skips_exactly_the_tiles_above_the_diagonal(shape: tuple[int, ...]) -> None:
    heads, n, d, block_q, block_k = shape
    q, k, v = flash.make_inputs(heads, n, d, seed=4)
    _, counts = flash.flash_attention(q, k, v, block_q=block_q, block_k=block_k, causal=True)
    assert (counts.computed, counts.skipped) == flash.expected_causal_tiles(n, block_q, block_k)
    _, full = flash.flash_attention(q, k, v, block_q=block_q, block_k=block_k)
    assert full.skipped == 0 and full.computed == counts.computed + counts.skipped


def test_default_grid_figures() -> None:
    # The page quotes these: a 4096 x 4096 fp32 score matrix and the default 128 x 128 grid.
    args = flash.parse_args([])
    n, block = args.seq_len, args.block_q
    assert (n, args.head_dim, block, args.block_k) == (4096, 64, 128, 128)
    assert n * n * flash.FP32_BYTES == 67_108_864
    assert block * block * flash.FP32_BYTES == 65_536
    assert flash.expected_causal_tiles(n, block, block) == (528, 496)


def test_attention_shapes_follow_published_configs() -> None:
    # Llama-2-7B: num_attention_heads 32, hidden_size 4096 (head_dim 4096 / 32 = 128) and
    # max_position_embeddings 4096, from
    # https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
    shapes = {name: astuple(shape) for name, shape in flash.ATTENTION_SHAPES.items()}
    assert shapes == {
        "Starter defaults": (1, 4096, 64, 128, 128, 4),
        "Llama-2-7B, 4k": (32, 4096, 4096 // 32, 128, 128, 2),
        "Llama-2-7B-like, 32k": (32, 8 * 4096, 4096 // 32, 128, 128, 2),
    }
    args = flash.parse_args([])
    defaults = flash.ATTENTION_SHAPES["Starter defaults"]
    from_args = (args.heads, args.seq_len, args.head_dim, args.block_q, args.block_k)
    assert from_args == astuple(defaults)[:5]


@pytest.mark.parametrize(("name", "naive", "block", "ratio"), [
    # The page's calculator shows these; the run prints them.
    ("Starter defaults", 134_217_728, 198_656, 134_217_728 / 198_656),  # 675.6x
    ("Llama-2-7B, 4k", 2_147_483_648, 4_227_072, 2_147_483_648 / 4_227_072),  # 2 GiB, 508.0x
    ("Llama-2-7B-like, 32k", 137_438_953_472, 4_227_072, 137_438_953_472 / 4_227_072),  # 128 GiB
])
def test_memory_figures(name: str, naive: int, block: int, ratio: float) -> None:
    shape = flash.ATTENTION_SHAPES[name]
    assert flash.naive_score_bytes(shape.heads, shape.seq_len, shape.elem_bytes) == naive
    assert flash.tiled_block_bytes(*astuple(shape)) == block
    assert flash.naive_to_tiled_ratio(*astuple(shape)) == pytest.approx(ratio, rel=1e-12)


def tensors_named_at(function, line_text: str, *args, **kwargs) -> dict[str, torch.Tensor]:
    """Run function and return the tensors its frame names when line_text is first about to run."""
    lines, start = inspect.getsourcelines(function)
    target = start + next(i for i, line in enumerate(lines) if line_text in line)
    seen: list[dict[str, torch.Tensor]] = []

    def in_frame(frame, event, arg):
        if event == "line" and frame.f_lineno == target and not seen:
            seen.append({name: value for name, value in frame.f_locals.items()
                         if isinstance(value, torch.Tensor)})
        return in_frame

    def tracer(frame, event, arg):
        return in_frame if frame.f_code is function.__code__ else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        function(*args, **kwargs)
    finally:
        sys.settrace(previous)
    assert seen, f"{line_text!r} never ran"
    return seen[0]


def held_bytes(named: dict[str, torch.Tensor], *given: torch.Tensor) -> int:
    """Bytes of the distinct storages named, besides those of the given inputs and output."""
    skip = {t.untyped_storage().data_ptr() for t in given}
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in named.values() if t.untyped_storage().data_ptr() not in skip}
    return sum(storages.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "h{}-n{}-d{}-bq{}-bk{}".format(*s))
def test_memory_functions_count_what_the_kernels_hold(shape: tuple[int, ...], dtype) -> None:
    # The analytic figures are the tensors each function names at its fullest point (non-causal):
    # naive's scores and probs as it returns, the tiled loop's first (full) block at its acc update.
    heads, n, d, block_q, block_k = shape
    q, k, v = (t.to(dtype) for t in flash.make_inputs(heads, n, d, seed=5))
    size = q.element_size()
    named = tensors_named_at(flash.naive_attention, "return probs @ v", q, k, v)
    assert set(named) == {"q", "k", "v", "scores", "probs"}
    assert held_bytes(named, q, k, v) == flash.naive_score_bytes(heads, n, size)
    named = tensors_named_at(flash.flash_attention, "acc = rescale * acc", q, k, v,
                             block_q=block_q, block_k=block_k)
    assert set(named) == {"q", "k", "v", "out", "q_block", "m", "l", "acc", "scores", "m_new", "p",
                          "rescale"}
    assert held_bytes(named, q, k, v, named["out"]) == flash.tiled_block_bytes(
        heads, n, d, block_q, block_k, size)
