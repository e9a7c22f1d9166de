"""Lab 02's analytic counts checked against PyTorch's own FLOP counter and reference attention.

FLOPs: `torch.utils.flop_counter.FlopCounterMode` counts a matmul of (m x k) by (k x n) as
2 * m * k * n. Traffic: the naive and tiled byte models are checked against the closed forms of the
FlashAttention paper's IO analysis (standard attention moves Theta(N d + N^2) elements; with every
query in one tile, only Q, K, V and O move). Parity: both attentions against
`torch.nn.functional.scaled_dot_product_attention`.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from fractions import Fraction

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-02-roofline/roofline.py"
roofline = load_starter(STARTER)


def counted_flops(fn, *shapes: tuple[int, ...]) -> int:
    """FLOPs as PyTorch counts them, on meta tensors so nothing is computed."""
    with FlopCounterMode(display=False) as counter:
        fn(*(torch.empty(shape, device="meta") for shape in shapes))
    return counter.get_total_flops()


@pytest.mark.parametrize("n", [64, 256, 1024])
def test_matmul_flops_match_torch_flop_counter(n: int) -> None:
    assert roofline.matmul_cost(n).flops == counted_flops(torch.mm, (n, n), (n, n))


@pytest.mark.parametrize("seq_len, head_dim, block_q", [(2048, 64, 256), (1000, 32, 128)])
def test_attention_matmul_flops_match_and_tiling_adds_none(seq_len: int, head_dim: int,
                                                           block_q: int) -> None:
    shapes = [(seq_len, head_dim)] * 3
    naive = counted_flops(roofline.naive_attention, *shapes)
    tiled = counted_flops(lambda q, k, v: roofline.tiled_attention(q, k, v, block_q), *shapes)
    # The counter sees only the two matmuls; the softmax term is the starter's own convention.
    softmax = roofline.SOFTMAX_FLOPS_PER_ELEMENT * seq_len**2
    assert naive == tiled == roofline.attention_flops(seq_len, head_dim) - softmax


def test_intensities_are_the_textbook_closed_forms() -> None:
    for n in (64, 256, 1024, 4096):
        assert roofline.add_cost(n).intensity == Fraction(1, 12)  # 1 FLOP per 12 bytes
        assert roofline.softmax_cost(n).intensity == Fraction(5, 8)
        assert roofline.matmul_cost(n).intensity == Fraction(n, 6)  # 2n^3 / 12n^2


def test_attention_bytes_match_the_io_closed_forms() -> None:
    n, d = 2048, 64  # the starter's defaults, whose figures the page states
    naive = roofline.naive_attention_cost(n, d).bytes_moved
    assert naive == 4 * (4 * n * d + 4 * n * n) == 69_206_016
    # One tile holding every query: Q, K, V and O each move exactly once, the lower bound.
    assert roofline.tiled_attention_cost(n, d, block_q=n).bytes_moved == 4 * 4 * n * d
    # The default tile: K and V stream once per block of 256 queries, 8 blocks.
    assert roofline.tiled_attention_cost(n, d, block_q=256).bytes_moved == 4 * (
        2 * n * d + 2 * n * d * 8) == 9_437_184
    # A ragged last block still streams K and V once more.
    assert roofline.tiled_attention_cost(1000, d, block_q=256).bytes_moved == 4 * (
        2 * 1000 * d + 2 * 1000 * d * 4)


def test_naive_and_tiled_attention_match_torch_sdpa() -> None:
    generator = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 517, 64, generator=generator).unbind()
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    scaled_q = q / math.sqrt(64)  # the starter expects q already scaled by 1/sqrt(d)
    torch.testing.assert_close(roofline.naive_attention(scaled_q, k, v), reference)
    torch.testing.assert_close(roofline.tiled_attention(scaled_q, k, v, 128), reference)


def test_svg_is_small_self_contained_and_titled() -> None:
    points = [("add n=4096", 1 / 12, 0.9), ("matmul n=1024", 170.67, 40.0)]
    svg = roofline.roofline_svg(gflops=100.0, gbps=20.0, points=points)
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert len(svg.encode()) < 20_000
    assert "ridge 5.00 FLOP/B" in root.find(f"{ns}title").text
    assert "<script" not in svg and "href" not in svg and "@import" not in svg
    labels = [t.text for t in root.iter(f"{ns}text")]
    assert "add n=4096" in labels and "matmul n=1024" in labels
    # The roof's corner sits at the ridge: memory diagonal meets the compute ceiling there.
    (roof,) = root.iter(f"{ns}polyline")
    (_, y_start), (_, y_corner), (_, y_end) = (
        map(float, pair.split(",")) for pair in roof.get("points").split())
    assert y_corner == y_end < y_start
