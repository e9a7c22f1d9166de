"""Lab 02's figures checked against PyTorch, closed forms and NVIDIA's published specifications.

FLOPs: `torch.utils.flop_counter.FlopCounterMode` counts a matmul of (m x k) by (k x n) as
2 * m * k * n. Traffic: the naive and tiled byte models are checked against the closed forms of the
FlashAttention paper's IO analysis (standard attention moves Theta(N d + N^2) elements; with every
query in one tile, only Q, K, V and O move). Parity: both attentions against
`torch.nn.functional.scaled_dot_product_attention`. Memory: the score slab the page states is
measured by tracking every tensor the tiled attention allocates.

GPU ceilings, from NVIDIA's own documents (the tests below name the one each figure comes from):
- NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf),
  column "A100 80GB SXM": BFLOAT16 Tensor Core 312 TFLOPS (624 with sparsity), GPU memory
  bandwidth 2,039 GB/s. The A100 80GB PCIe column lists 1,935 GB/s, so the variant matters.
- NVIDIA H100 Tensor Core GPU datasheet, column "H100 SXM": BFLOAT16 Tensor Core 1,979 TFLOPS
  "with sparsity" (the footnote; dense is half, 989), GPU memory bandwidth 3.35 TB/s (HBM3).
- CUDA Ampere tuning guide, "Unified Shared Memory/L1/Texture Cache": "The NVIDIA A100 GPU supports
  shared memory capacity of 0, 8, 16, 32, 64, 100, 132 or 164 KB per SM."
- CUDA Hopper tuning guide, "Unified Shared Memory/L1/Texture Cache": "The NVIDIA H100 GPU supports
  shared memory capacities of 0, 8, 16, 32, 64, 100, 132, 164, 196 and 228 KB per SM." CUDA's KB
  are 1,024 bytes: a device with 228 KB per SM reports sharedMemPerMultiprocessor = 233,472.
"""

from __future__ import annotations

import math
import weakref
import xml.etree.ElementTree as ET
from fractions import Fraction

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
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


class LiveBytes(TorchDispatchMode):
    """Track the bytes of every tensor an op allocates, for as long as Python keeps it alive."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs or {}))[0]
                  if isinstance(t, torch.Tensor)}
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:  # views and out= results reuse an input's storage
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                nbytes = t.untyped_storage().nbytes()
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._free, nbytes)
        return out

    def _free(self, nbytes: int) -> None:
        self.live -= nbytes


@pytest.mark.parametrize("seq_len, block_q", [(2048, 256), (2048, 2048), (1000, 256), (300, 512)])
def test_score_slab_is_what_tiled_attention_really_holds(seq_len: int, block_q: int) -> None:
    q, k, v = torch.rand(3, seq_len, 64).unbind()
    with LiveBytes() as memory:
        tiled = roofline.tiled_attention(q, k, v, block_q)
    output = tiled.nbytes
    assert memory.peak - output == roofline.score_slab_bytes(seq_len, block_q)


def test_default_slab_is_4_mib_not_2() -> None:
    # S alone is block_q x N x 4 bytes = 2 MiB; softmax's P is a second slab alive with it.
    assert roofline.score_slab_bytes(2048, 256) == 2 * 256 * 2048 * 4 == 4_194_304 == 4 * 2**20


def test_gpu_datasheet_ceilings() -> None:
    """A100 80GB SXM and H100 SXM columns of NVIDIA's datasheets (module docstring)."""
    a100, h100 = roofline.A100_SXM, roofline.H100_SXM
    assert (a100.bf16_flops, a100.bf16_sparse_flops) == (312e12, 624e12)
    assert a100.hbm_bytes_per_s == 2_039e9
    assert (h100.bf16_sparse_flops, h100.hbm_bytes_per_s) == (1_979e12, 3.35e12)
    # H100's datasheet prints only the sparse rate and says dense is half: 989.5, quoted as 989.
    assert h100.bf16_flops == 989e12 and abs(2 * h100.bf16_flops - h100.bf16_sparse_flops) <= 1e12
    assert "SXM" in a100.name and "80GB" in a100.name and "SXM" in h100.name


def test_shared_memory_per_sm_from_the_tuning_guides() -> None:
    """Ampere and Hopper tuning guides: at most 164 KB (A100) and 228 KB (H100) per SM."""
    assert roofline.A100_SXM.shared_kb_per_sm == 164
    assert roofline.H100_SXM.shared_kb_per_sm == 228
    assert 228 * 1024 == 233_472 and 164 * 1024 == 167_936


def test_ridge_points_and_decode_gemv() -> None:
    a100, h100 = roofline.A100_SXM, roofline.H100_SXM
    assert round(a100.ridge, 1) == 153.0 and round(h100.ridge, 1) == 295.2
    # Weights only: 2 n^2 FLOPs over n^2 * bits / 8 bytes.
    limits = {dtype: Fraction(16, bits) for dtype, bits in roofline.WEIGHT_BITS.items()}
    assert limits == {"fp32": Fraction(1, 2), "bf16": 1, "int8": 2, "int4": 4}
    for bits in roofline.WEIGHT_BITS.values():
        small, large = roofline.gemv_cost(64, bits), roofline.gemv_cost(8192, bits)
        assert small.flops == 2 * 64 * 64
        assert small.intensity < large.intensity < Fraction(16, bits)  # x and y fade with n
    bf16 = roofline.gemv_cost(4096, 16)
    assert bf16.bytes_moved == 2 * 4096**2 + 2 * 4096 * 2 == 33_570_816
    assert roofline.attainable(a100, 1.0) == 2.039e12  # far below the ridge: bandwidth x 1 FLOP/B
    assert roofline.attainable(h100, 1000.0) == h100.bf16_flops
    assert f"{2.039e12 / 312e12:.2%}" == "0.65%" and f"{3.35e12 / 989e12:.2%}" == "0.34%"


SVG = "{http://www.w3.org/2000/svg}"


def text_boxes(svg: str) -> tuple[list, float, float]:
    """Every text row of a drawing as a box, from the x, y and anchor the SVG gives it."""
    root = ET.fromstring(svg)
    _, _, width, height = map(float, root.get("viewBox").split())
    boxes = [roofline.text_box(float(t.get("x")), float(t.get("y")), t.text, t.get("text-anchor"))
             for t in root.iter(f"{SVG}text")]
    return boxes, width, height


def assert_legible(boxes, width: float, height: float) -> None:
    assert all(box.inside(width, height) for box in boxes)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)


CROWDS = {  # adversarial point sets: (intensity, rate) pairs
    "identical": [(10.0, 50.0)] * 8,
    "near-identical": [(10.0 + 1e-6 * i, 50.0 * (1 + 1e-6 * i)) for i in range(10)],
    "one row apart": [(1.0, 1.0 + 0.01 * i) for i in range(6)],
    "all at the top": [(100.0 * (i + 1), 1000.0) for i in range(6)],
    "all at the bottom": [(0.01, 0.001)] * 6 + [(0.02, 0.0011)] * 6,
    "spread": [(10.0**e, 10.0 ** (e / 2)) for e in range(-3, 4)],
}


@pytest.mark.parametrize("crowd", CROWDS)
def test_stacked_labels_never_overlap_and_stay_in_their_column(crowd: str) -> None:
    anchors = [300 - 40 * math.log10(rate) for _, rate in CROWDS[crowd]]  # some fall outside
    labels = [f"attention tiled N=2048 d=64 #{i}" for i in range(len(anchors))]
    boxes = roofline.stack_labels(anchors, labels, x=500, top=60, bottom=360)
    assert all(60 <= b.y and b.y + b.height <= 360 and b.x == 500 for b in boxes)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b)
    # Rows keep the order of their anchors, so leader lines do not cross for no reason.
    by_anchor = sorted(range(len(anchors)), key=lambda i: (anchors[i], i))
    assert [boxes[i].y for i in by_anchor] == sorted(b.y for b in boxes)


def test_stacked_labels_fill_an_exact_column_and_refuse_one_more() -> None:
    rows = 300 // roofline.ROW_PX
    boxes = roofline.stack_labels([200.0] * rows, ["x"] * rows, x=0, top=60, bottom=360)
    assert min(b.y for b in boxes) == 60 and max(b.y + b.height for b in boxes) == 360
    with pytest.raises(ValueError, match="labels need"):
        roofline.stack_labels([200.0] * (rows + 1), ["x"] * (rows + 1), x=0, top=60, bottom=360)


@pytest.mark.parametrize("crowd", CROWDS)
def test_charts_keep_every_text_row_apart_and_inside_the_picture(crowd: str) -> None:
    points = [roofline.Point(f"attention naive N=2048 d=64 #{i}", x, y, "#e07b39",
                             above_roof=i % 3 == 0) for i, (x, y) in enumerate(CROWDS[crowd])]
    svg = roofline.cpu_chart(points, gflops=100.0, gbps=20.0)
    assert_legible(*text_boxes(svg))


def test_gpu_chart_is_legible_and_names_both_roofs() -> None:
    svg = roofline.gpu_chart(4096)
    assert_legible(*text_boxes(svg))
    texts = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert any("A100 80GB SXM: 312 TFLOP/s" in t and "ridge 153.0" in t for t in texts)
    assert any("H100 SXM: 989 TFLOP/s" in t and "ridge 295.2" in t for t in texts)
    assert sum(t.startswith(("A100 ", "H100 ")) and t.endswith("%)") for t in texts) == 8


def test_cpu_chart_is_self_contained_and_rings_what_beats_its_roof() -> None:
    points = [roofline.Point("add n=4096", 1 / 12, 0.9, "#e07b39"),  # roof 20 x 1/12 = 1.67
              roofline.Point("matmul n=1024", 170.67, 40.0, "#e07b39"),
              roofline.Point("softmax n=4096", 0.625, 30.0, "#e07b39", above_roof=True)]
    svg = roofline.cpu_chart(points, gflops=100.0, gbps=20.0)
    root = ET.fromstring(svg)
    assert len(svg.encode()) < 20_000
    assert "ridge 5.00 FLOP/B" in root.find(f"{SVG}title").text
    assert "<script" not in svg and "href" not in svg and "@import" not in svg
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert "add n=4096" in labels and "softmax n=4096 (above its roof)" in labels
    assert any(label.startswith("above its roof:") for label in labels)  # the legend explains it
    assert len(root.findall(f".//{SVG}circle[@class='above']")) == 1
    # The roof's corner sits at the ridge: memory diagonal meets the compute ceiling there.
    (roof,) = root.iter(f"{SVG}polyline")
    (_, y_start), (_, y_corner), (_, y_end) = (
        map(float, pair.split(",")) for pair in roof.get("points").split())
    assert y_corner == y_end < y_start
    # Without a point above the roof, no ring and no legend row for one.
    calm = roofline.cpu_chart(points[:2], gflops=100.0, gbps=20.0)
    assert 'class="above"' not in calm and "above its roof" not in calm


def test_batch_at_ridge_counts_each_sequences_x_and_y() -> None:
    """Same datasheet ridges as above. B sequences through a 4,096 x 4,096 bf16 layer do
    2 B n^2 FLOPs over 2 n^2 weight bytes plus 4 n bytes of x and y each: 154 and 296 sequences
    reach the ridge counting the weights alone, 166 and 345 counting x and y too."""
    a100, h100 = roofline.A100_SXM, roofline.H100_SXM
    alone = [roofline.batch_at_ridge(g, 4096, 16, count_activations=False) for g in (a100, h100)]
    full = [roofline.batch_at_ridge(g, 4096, 16, count_activations=True) for g in (a100, h100)]
    assert alone == [154, 296] == [math.ceil(a100.ridge), math.ceil(h100.ridge)]
    assert full == [166, 345]
    for gpu, batch in zip((a100, h100), full):  # the smallest such batch, by the exact byte count
        intensity = [Fraction(2 * b * 4096**2, 2 * 4096**2 + 4 * b * 4096) for b in (batch - 1, batch)]
        assert intensity[0] < gpu.ridge <= intensity[1]
    # x and y cap a bf16 GEMV's intensity below n / 2 FLOP/B: a 64-wide layer never gets there.
    assert roofline.batch_at_ridge(a100, 64, 16, count_activations=True) is None


def test_float_drift_in_a_crowded_column_does_not_break_the_chart() -> None:
    # Timings from a busy run whose labels, pulled up from the bottom, once ended 3e-14 px past
    # the next row's top: render() refused the chart and the whole run failed.
    rates = [0.007563327240131142, 0.36666584009419595, 0.1193167851190714, 0.1081700579103241,
             3.918092266247696, 0.24662556593599577, 23.100124438669333]
    ops = [("add n=4096", 1 / 12), ("softmax n=4096", 0.625), ("matmul n=64", 10.667),
           ("matmul n=256", 42.667), ("matmul n=1024", 170.667),
           ("attention naive N=2048 d=64", 15.818), ("attention tiled N=2048 d=64", 116.0)]
    points = [roofline.Point(name, x, y, "#e07b39") for (name, x), y in zip(ops, rates)]
    assert_legible(*text_boxes(roofline.cpu_chart(points, 29.611011189527634, 5.530392492728785)))


def test_the_pages_roofline_uses_the_datasheet_table_and_the_reports_own_counts() -> None:
    """The calculator's hardware and operators come from these tables: pin what they hold."""
    assert roofline.HARDWARE == {"A100 80GB SXM": roofline.A100_SXM, "H100 SXM": roofline.H100_SXM}
    intensities = {name: Fraction(value).limit_denominator(10_000) for name, value in roofline.REFERENCE_INTENSITY.items()}
    assert intensities == {
        "add n=4096": Fraction(1, 12), "softmax n=4096": Fraction(5, 8),
        "gemv n=4096": Fraction(2 * 4096 * 4096, 4096 * 4096 * 2 + 2 * 4096 * 2).limit_denominator(10_000),
        "attention naive N=2048 d=64": Fraction(roofline.attention_flops(2048, 64), (4 * 2048 * 64 + 4 * 2048 * 2048) * 4),
        "attention tiled N=2048 d=64": Fraction(116), "matmul n=1024": Fraction(512, 3),
    }


@pytest.mark.parametrize("intensity, bound, share", [(152.0, True, 152 * 2.039e12 / 312e12), (154.0, False, 1.0), (1.0, True, 2.039e12 / 312e12)])
def test_the_bound_and_share_of_the_peak_on_either_side_of_the_a100_ridge(intensity: float, bound: bool, share: float) -> None:
    a100 = roofline.A100_SXM
    assert a100.ridge == pytest.approx(153.016, abs=1e-3)
    assert roofline.memory_bound(a100, intensity) is bound
    assert roofline.efficiency(a100, intensity) == pytest.approx(share, rel=1e-12)
