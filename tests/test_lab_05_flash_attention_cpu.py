"""Lab 05's tiled attention checked for exact parity, tile counts and the figures its page states.

Parity is against `torch.nn.functional.scaled_dot_product_attention`, PyTorch's reference for
softmax(q k^T / sqrt(d)) v, on shapes the default run does not cover: ragged grids whose blocks do
not divide the sequence, unequal query and key blocks, several heads, and logits large enough to
overflow an exp() that skipped the running max.
"""

from __future__ import annotations


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
