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

The optional `--device cuda` run is checked as far as a machine without a GPU allows: the refusal
(exit status 2, one line on stderr), and its measurements run on CPU tensors with a stopwatch that
reports fixed seconds, so each rate must come out as exactly FLOPs (or bytes) over those seconds;
and the whole CUDA report runs with this CPU standing in for the GPU, and must print every line the
manifest's cuda run expects.
The default run is run for real and must still print every line the lab's manifest looks for.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import weakref
import xml.etree.ElementTree as ET
from fractions import Fraction
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO, load_starter
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-02-roofline/roofline.py"
MANIFEST = REPO / "labs/lab-02-roofline.yml"
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


# --- The optional CUDA run, as far as this machine can check it ---


def run_starter(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(STARTER), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


class FixedStopwatch:
    """Calls each function once, keeps what it returned, and says the call took `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.results: list = []

    def __call__(self, fn) -> float:
        self.results.append(fn())
        return self.seconds


def test_the_parser_takes_a_device_and_defaults_to_the_cpu() -> None:
    assert roofline.parse_args([]).device == "cpu"
    args = roofline.parse_args(["--device", "cuda"])
    assert (args.device, args.cuda_peak_sizes, args.cuda_copy_mb, args.cuda_svg) == (
        "cuda", [2048, 4096, 8192], 1024, Path("cuda_roofline.svg"))
    with pytest.raises(SystemExit) as refused:
        roofline.parse_args(["--device", "tpu"])
    assert refused.value.code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the CUDA run is tested below")
def test_device_cuda_without_a_gpu_exits_2_with_one_line_and_no_report(tmp_path: Path) -> None:
    result = run_starter(tmp_path, "--device", "cuda")
    found = "built without CUDA" if torch.version.cuda is None else "no GPU visible"
    assert result.returncode == 2
    assert result.stderr == ("roofline.py: --device cuda needs a CUDA GPU and a CUDA build of "
                             f"torch (this torch: {torch.__version__}, {found})\n")
    assert result.stdout == "" and list(tmp_path.iterdir()) == []


def test_timed_reads_the_clock_only_around_synced_runs_and_keeps_the_best_per_call() -> None:
    events, now = [], [0.0]
    waits = iter([7.0, 3.0, 2.0, 5.0])  # how long each sync waits: the warm-up's, then three runs

    def sync() -> None:
        events.append("sync")
        now[0] += next(waits)

    def clock() -> float:
        events.append("clock")
        return now[0]

    seconds = roofline.timed(lambda: events.append("call"), repeats=3, sync=sync, calls=4,
                             clock=clock)
    assert seconds == 2.0 / 4  # the best run, per call; the warm-up's 7 s never counts
    run = ["clock", "call", "call", "call", "call", "sync", "clock"]
    assert events == ["call", "sync"] + run * 3


def test_device_matmul_rates_are_flops_over_seconds() -> None:
    watch = FixedStopwatch(0.5)
    rates = roofline.device_matmul_gflops([8, 16, 32], "cpu", torch.bfloat16, watch)
    assert rates == {n: 2 * n**3 / 0.5 / 1e9 for n in (8, 16, 32)}
    assert [(r.shape, r.dtype) for r in watch.results] == [
        ((n, n), torch.bfloat16) for n in (8, 16, 32)]


def test_device_copy_bandwidth_counts_one_read_and_one_write() -> None:
    watch = FixedStopwatch(1e-3)
    gbps = roofline.device_copy_gbps(4, "cpu", watch)
    assert gbps == pytest.approx(2 * 4 * 2**20 / 1e-3 / 1e9, rel=1e-12)  # 8.39 GB/s
    (copied,) = watch.results
    assert copied.nbytes == 4 * 2**20 and bool((copied == 1).all())


def test_gpu_ceilings_take_the_best_matmul_over_the_plotted_and_the_large_sizes() -> None:
    args = roofline.parse_args(["--device", "cuda", "--sizes", "8", "16", "--cuda-peak-sizes",
                                "16", "32", "--cuda-copy-mb", "2"])
    gflops, gbps, rates = roofline.measure_gpu_ceilings(args, "cpu", FixedStopwatch(0.5))
    assert sorted(rates) == [8, 16, 32]  # the plotted sizes too, so none can beat the ceiling
    assert gflops == max(rates.values()) == 2 * 32**3 / 0.5 / 1e9
    assert gbps == pytest.approx(2 * 2 * 2**20 / 0.5 / 1e9, rel=1e-12)


def test_measure_points_times_the_ops_on_the_device_and_dtype_it_is_given() -> None:
    args = roofline.parse_args(["--sizes", "8", "16", "--stream-n", "32", "--seq-len", "64",
                                "--head-dim", "8", "--block-q", "16"])
    watch = FixedStopwatch(0.25)
    achieved = roofline.measure_points(args, {8: 1.5, 16: 2.5}, device="cpu",
                                       dtype=torch.bfloat16, seconds=watch)
    timed = [roofline.add_cost(32), roofline.softmax_cost(32),
             roofline.naive_attention_cost(64, 8), roofline.tiled_attention_cost(64, 8, 16)]
    assert achieved == {cost.name: cost.flops / 0.25 / 1e9 for cost in timed} | {
        "matmul n=8": 1.5, "matmul n=16": 2.5}
    assert [(r.shape, r.dtype) for r in watch.results] == [
        ((32, 32), torch.bfloat16)] * 2 + [((64, 8), torch.bfloat16)] * 2


def test_bf16_costs_keep_the_flops_and_halve_the_bytes() -> None:
    for cost in (roofline.add_cost(4096), roofline.softmax_cost(64), roofline.matmul_cost(1024),
                 roofline.naive_attention_cost(2048, 64),
                 roofline.tiled_attention_cost(1000, 64, 256)):
        bf16 = roofline.in_bf16(cost)
        assert (bf16.name, bf16.flops, 2 * bf16.bytes_moved) == (cost.name, cost.flops,
                                                                 cost.bytes_moved)
    assert roofline.in_bf16(roofline.matmul_cost(1024)).intensity == Fraction(1024, 3)
    assert roofline.in_bf16(roofline.add_cost(4096)).intensity == Fraction(1, 6)


@pytest.mark.parametrize("device_name, datasheet", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA A100-PCIE-40GB", "A100 80GB SXM"),
    ("NVIDIA A10G", None), ("NVIDIA GH200 480GB", None), ("NVIDIA GeForce RTX 4090", None)])
def test_a_device_name_finds_its_chips_datasheet(device_name: str, datasheet: str | None) -> None:
    gpu = roofline.datasheet_for(device_name)
    assert (gpu and gpu.name) == datasheet


def test_the_gpu_block_prints_both_ceilings_and_the_datasheet_share(capsys) -> None:
    args = roofline.parse_args(["--device", "cuda"])
    roofline.print_gpu_ceilings("NVIDIA H100 80GB HBM3", 85_520_809_984, args, 712_300.0, 2_913.4)
    assert capsys.readouterr().out.splitlines() == [
        "",
        "this GPU: NVIDIA H100 80GB HBM3, 79.6 GiB",
        "  peak compute: 712.3 TFLOP/s (best bf16 matmul over n = 64, 256, 1024, 2048, 4096, 8192; "
        "best of 3 runs of 10 calls)",
        "  peak bandwidth: 2,913.4 GB/s (1024 MB device copy, read + write counted)",
        "  ridge point: 244.5 FLOP/B",
        "  share of the H100 SXM datasheet: 72.0% of 989 TFLOP/s bf16 dense, 87.0% of 3.35 TB/s "
        "(other boards of the chip are rated differently)",
    ]
    roofline.print_gpu_ceilings("NVIDIA GeForce RTX 4090", 25_386_352_640, args, 150_000.0, 900.0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "this GPU: NVIDIA GeForce RTX 4090, 23.6 GiB" and len(lines) == 5


def test_the_cuda_chart_names_the_gpu_and_draws_in_tflops() -> None:
    points = [roofline.Point("add n=4096", 1 / 6, 450.0, "#e07b39"),  # GFLOP/s, as measured
              roofline.Point("matmul n=1024", 341.3, 400_000.0, "#e07b39"),
              roofline.Point("softmax n=4096", 1.25, 5_000.0, "#e07b39", above_roof=True)]
    svg = roofline.cuda_chart("NVIDIA H100 80GB HBM3", points, gflops=712_300.0, gbps=2_913.4)
    assert_legible(*text_boxes(svg))
    root = ET.fromstring(svg)
    assert root.find(f"{SVG}title").text == (
        "Roofline of NVIDIA H100 80GB HBM3: ridge 244.5 FLOP/B, peak 712.3 TFLOP/s bf16, "
        "memory 2,913.4 GB/s")
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert texts[0].startswith("NVIDIA H100 80GB HBM3, measured: 712.3 TFLOP/s bf16")
    assert "TFLOP/s (log)" in texts and "softmax n=4096 (above its roof)" in texts
    assert len(root.findall(f".//{SVG}circle[@class='above']")) == 1


def test_the_default_run_still_prints_every_line_the_lab_looks_for(tmp_path: Path) -> None:
    result = run_starter(tmp_path)
    assert result.returncode == 0, result.stderr
    lab = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    (starter,) = lab["starters"]
    cpu, cuda = starter["run"]  # the CPU run, then the one a GPU makes
    assert cuda["device"] == "cuda" and cuda["args"] == ["--device", "cuda"] and "device" not in cpu
    printed = [field["pattern"] for calculator in lab["calculators"]
               for preset in calculator["presets"] for field in preset.get("printed", {}).values()]
    answers = [q["answer"]["printed"] for q in lab["questions"] if "answer" in q]
    patterns = [*cpu["expect"], *printed, *answers]
    assert len(patterns) > 35
    missing = [p for p in patterns if not re.search(p, result.stdout, re.MULTILINE)]
    assert missing == []
    assert "\nplacement (roof = min(peak compute, intensity x peak bandwidth))\n" in result.stdout
    assert "this GPU" not in result.stdout and "bf16 on this GPU" not in result.stdout
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(cpu["artifacts"])
    assert not [p for p in cuda["expect"] if re.search(p, result.stdout, re.MULTILINE)]  # GPU lines only


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU and a CUDA build of torch")
def test_the_cuda_run_measures_this_gpu_places_the_ops_and_draws_its_chart(tmp_path: Path) -> None:
    result = run_starter(tmp_path, "--device", "cuda")
    assert result.returncode == 0, result.stderr
    for pattern in (
            r"^  add n=4096 +16,777,216 +201,326,592 +0\.083",  # the analytic table, unchanged
            r"^this GPU: .+, [\d.]+ GiB$",
            r"^  peak compute: [\d,.]+ TFLOP/s \(best bf16 matmul over n = 64, 256, 1024, 2048, "
            r"4096, 8192; best of 3 runs of 10 calls\)$",
            r"^  peak bandwidth: [\d,.]+ GB/s \(1024 MB device copy, read \+ write counted\)$",
            r"^  ridge point: [\d.]+ FLOP/B$",
            r"^placement, every op in bf16 on this GPU",
            r"^  add n=4096 +0\.167 +[\d.]+ +memory-bound +[\d.]+",
            r"^  matmul n=1024 +341\.333 ",
            r"^  ops above their roof: \d+",
            r"^cuda roofline svg: cuda_roofline\.svg \([\d,]+ bytes\)$"):
        assert re.search(pattern, result.stdout, re.MULTILINE), pattern
    assert "datasheet" not in result.stdout or re.search(
        r"^  share of the (A100 80GB SXM|H100 SXM) datasheet: [\d.]+% of", result.stdout, re.M)
    assert [path.name for path in tmp_path.iterdir()] == ["cuda_roofline.svg"]
    assert_legible(*text_boxes((tmp_path / "cuda_roofline.svg").read_text()))


class CpuAsCuda:
    """`torch` as the starter sees it, with a CUDA device that is this CPU: the whole CUDA report
    runs here, its stopwatch syncing nothing, so what it prints can be held to the manifest."""

    class cuda:
        current_device = staticmethod(lambda: 0)
        synchronize = staticmethod(lambda *args: None)
        get_device_properties = staticmethod(lambda device: type("Props", (), {"name": "NVIDIA H100 80GB HBM3", "total_memory": 85_520_809_984}))

    # A GPU's bf16 is its fast path (tensor cores); a CPU without avx512_bf16 emulates it, so a bf16
    # matmul there runs slower per FLOP than an add and breaks the report's own check that compute
    # beats memory. The stand-in computes in this CPU's fast type instead; the counts are analytic.
    bfloat16 = torch.float32

    @staticmethod
    def device(*args, **kwargs) -> torch.device:
        return torch.device("cpu")

    def __getattr__(self, name: str):
        return getattr(torch, name)


def test_the_cuda_report_prints_what_the_manifest_expects_of_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(roofline, "torch", CpuAsCuda())
    monkeypatch.chdir(tmp_path)  # where a run writes its artifacts
    small = ["--sizes", "64", "256", "--stream-n", "512", "--seq-len", "256", "--block-q", "64", "--repeats", "1",
             "--cuda-peak-sizes", "128", "--cuda-copy-mb", "4"]
    roofline.cuda_report(roofline.parse_args(["--device", "cuda", *small]))
    printed = capsys.readouterr().out
    (_, cuda) = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))["starters"][0]["run"]
    assert [p for p in cuda["expect"] if not re.search(p, printed, re.MULTILINE)] == []
    assert cuda["artifacts"] == ["cuda_roofline.svg"] and (tmp_path / "cuda_roofline.svg").is_file()
    assert "share of the H100 SXM datasheet: " in printed
