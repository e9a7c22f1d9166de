"""Roofline model of this CPU and two datasheet GPUs: FLOPs and bytes per op, ceilings, SVG plots.

Counts are exact and machine-independent: fp32 tensors, each input read once and each output
written once (the compulsory traffic). This CPU's ceilings are measured: the best fp32 matmul rate
over several sizes for FLOP/s, a large copy for bytes/s. Their ratio, the ridge point, splits
memory-bound from compute-bound ops. The A100 and H100 ceilings are datasheet figures, used to
place a decode step's matrix-vector product; no GPU is needed.

A CUDA GPU is optional: `--device cuda` prints the same counts, then measures that GPU's ceilings
(the best bf16 matmul rate, a device-to-device copy) and places the same ops, run in bf16, under its
roof in cuda_roofline.svg. Without both a GPU and a CUDA build of torch it exits with status 2.
"""

from __future__ import annotations

import argparse
import html
import math
import sys
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import partial
from pathlib import Path

import torch

FP32_BYTES = 4
BF16_BYTES = 2
# max, subtract, exp, sum, divide: exp counts as one FLOP here, though it costs many instructions.
SOFTMAX_FLOPS_PER_ELEMENT = 5
WEIGHT_BITS = {"fp32": 32, "bf16": 16, "int8": 8, "int4": 4}  # weight formats of the decode GEMV


@dataclass(frozen=True)
class OpCost:
    """Work and compulsory memory traffic of one op."""

    name: str
    flops: int
    bytes_moved: int

    @property
    def intensity(self) -> Fraction:
        """FLOPs per byte, as an exact fraction so ratios between sizes compare exactly."""
        return Fraction(self.flops, self.bytes_moved)


@dataclass(frozen=True)
class Gpu:
    """Datasheet ceilings of one GPU (SXM boards; the PCIe cards have lower figures)."""

    name: str
    bf16_flops: float  # dense tensor-core FLOP/s, the roof for ordinary (dense) weights
    bf16_sparse_flops: float  # the datasheet's headline: 2:4 structured sparsity, twice dense
    hbm_bytes_per_s: float
    shared_kb_per_sm: int  # the largest shared-memory carveout of one SM

    @property
    def ridge(self) -> float:
        return self.bf16_flops / self.hbm_bytes_per_s


def best_seconds(fn, repeats: int) -> float:
    """Return the fastest of several runs after one warm-up: a busy machine only ever adds time."""
    fn()
    return min(timeit.repeat(fn, repeat=repeats, number=1))


# region roofline
def add_cost(n: int) -> OpCost:
    # z = x + y on n x n: one FLOP per element against three tensors of traffic (x, y in; z out).
    return OpCost(f"add n={n}", n * n, 3 * n * n * FP32_BYTES)


def softmax_cost(n: int) -> OpCost:
    # Row softmax on n x n: a few FLOPs per element, one read and one write of the whole matrix.
    return OpCost(f"softmax n={n}", SOFTMAX_FLOPS_PER_ELEMENT * n * n, 2 * n * n * FP32_BYTES)


def matmul_cost(n: int) -> OpCost:
    # n^3 multiply-adds (2 FLOPs each) over only 3 n^2 elements: each element is reused n times.
    return OpCost(f"matmul n={n}", 2 * n**3, 3 * n * n * FP32_BYTES)


def attention_flops(seq_len: int, head_dim: int) -> int:
    # Q K^T and P V are two matmuls of N x N x d; softmax touches all N x N scores.
    return 4 * seq_len**2 * head_dim + SOFTMAX_FLOPS_PER_ELEMENT * seq_len**2


def naive_attention_cost(seq_len: int, head_dim: int) -> OpCost:
    n, d = seq_len, head_dim
    # Q, K, V read and O written once; S written by Q K^T and read by softmax, P written by
    # softmax and read by P V: the N x N matrix crosses the memory bus four times.
    elements = 4 * n * d + 4 * n * n
    return OpCost(f"attention naive N={n} d={d}", attention_flops(n, d), elements * FP32_BYTES)


def tiled_attention_cost(seq_len: int, head_dim: int, block_q: int) -> OpCost:
    n, d = seq_len, head_dim
    query_blocks = -(-n // block_q)
    # Q read and O written once. A block_q x N slab of scores is assumed to stay in cache, so S
    # and P never reach memory; the price is that every query block streams all of K and V again.
    elements = 2 * n * d + 2 * n * d * query_blocks
    return OpCost(f"attention tiled N={n} d={d}", attention_flops(n, d), elements * FP32_BYTES)


def score_slab_bytes(seq_len: int, block_q: int) -> int:
    # While P V runs, the tile's scores S and their softmax P are both alive: two block_q x N slabs.
    return 2 * min(block_q, seq_len) * seq_len * FP32_BYTES


# NVIDIA datasheets (SXM columns); shared memory (KB of 1,024 bytes) from the tuning guides.
A100_SXM = Gpu("A100 80GB SXM", 312e12, 624e12, 2.039e12, 164)
H100_SXM = Gpu("H100 SXM", 989e12, 1979e12, 3.35e12, 228)
GPUS = (A100_SXM, H100_SXM)


def gemv_cost(n: int, weight_bits: int) -> OpCost:
    # One decode step through an n x n layer, y = W x: every weight is read once for one
    # multiply-add. x and y stay bf16 whatever the weights are stored in (weight-only quantization).
    weight_bytes = n * n * weight_bits // 8
    return OpCost(f"gemv n={n}", 2 * n * n, weight_bytes + 2 * n * BF16_BYTES)


# The ops this report counts, at its default sizes, by name: where the page's roofline puts them.
REFERENCE_INTENSITY = {cost.name: float(cost.intensity) for cost in (
    add_cost(4096), softmax_cost(4096), gemv_cost(4096, 16), naive_attention_cost(2048, 64),
    tiled_attention_cost(2048, 64, 256), matmul_cost(1024))}
HARDWARE = {gpu.name: gpu for gpu in GPUS}


def matmul_gflops(sizes: list[int], repeats: int) -> dict[int, float]:
    """Measure fp32 matmul GFLOP/s at each size; the best of them is the compute ceiling."""
    rates = {}
    for n in sizes:
        a, b, out = torch.rand(n, n), torch.rand(n, n), torch.empty(n, n)
        seconds = best_seconds(lambda: torch.mm(a, b, out=out), repeats)
        rates[n] = 2 * n**3 / seconds / 1e9
    return rates


def peak_gbps(megabytes: int, repeats: int) -> float:
    """Measure copy bandwidth on buffers far larger than the last-level cache."""
    src = torch.ones(megabytes * 2**20 // FP32_BYTES)
    dst = torch.empty_like(src)
    seconds = best_seconds(lambda: dst.copy_(src), repeats)
    # Read once plus written once. A cache that reads each line before writing it moves more,
    # so this figure is a floor on the bus's real rate.
    return 2 * src.nbytes / seconds / 1e9
# endregion


def attainable(gpu: Gpu, intensity: float) -> float:
    # The roofline itself: the lower of the compute ceiling and the memory diagonal.
    return min(gpu.bf16_flops, intensity * gpu.hbm_bytes_per_s)


def efficiency(gpu: Gpu, intensity: float) -> float:
    """Return the largest share of the compute peak a kernel of this intensity can reach."""
    return attainable(gpu, intensity) / gpu.bf16_flops


def memory_bound(gpu: Gpu, intensity: float) -> bool:
    """Return whether a kernel of this intensity sits left of the ridge, under the memory slope."""
    return intensity < gpu.ridge


def batch_at_ridge(gpu: Gpu, n: int, weight_bits: int, count_activations: bool) -> int | None:
    """Return the fewest sequences B whose batched GEMV through an n x n layer reaches the ridge."""
    # B sequences share one read of the weights for 2 B n^2 FLOPs, but each also reads its own x
    # and writes its own y in bf16, which the weights-only count leaves out:
    # 2 B n^2 >= ridge (n^2 bits/8 + B 4n)  <=>  B >= ridge n^2 bits/8 / (2 n^2 - ridge 4n).
    per_sequence = 2 * n * BF16_BYTES if count_activations else 0
    spare = 2 * n * n - gpu.ridge * per_sequence
    if spare <= 0:
        return None  # x and y alone keep the intensity under the ridge, whatever the batch
    return math.ceil(gpu.ridge * n * n * weight_bits / 8 / spare)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Single-head attention that materialises N x N scores; q comes pre-scaled by 1/sqrt(d)."""
    scores = q @ k.T
    return torch.softmax(scores, dim=-1) @ v


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    block_q: int) -> torch.Tensor:
    """The same attention, block_q query rows at a time: scores live as block_q x N slabs."""
    out = torch.empty_like(q)
    for start in range(0, q.shape[0], block_q):
        rows = slice(start, start + block_q)
        scores = q[rows] @ k.T
        torch.mm(torch.softmax(scores, dim=-1), v, out=out[rows])
    return out


Stopwatch = Callable[[Callable[[], object]], float]
"""Seconds one call of a function takes on some device, as best measured."""


def measure_points(args: argparse.Namespace, matmul_rates: dict[int, float], *,
                   device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                   seconds: Stopwatch | None = None) -> dict[str, float]:
    """Time the other ops; return achieved GFLOP/s by op name, matmuls from their own timing."""
    seconds = seconds or partial(best_seconds, repeats=args.repeats)
    tensor = {"device": device, "dtype": dtype}
    big = torch.ones(args.stream_n, args.stream_n, **tensor)
    other, out = torch.ones_like(big), torch.empty_like(big)
    n, d = args.seq_len, args.head_dim
    q, k, v = (torch.rand(n, d, **tensor) / math.sqrt(d), torch.rand(n, d, **tensor),
               torch.rand(n, d, **tensor))
    ops = [
        (add_cost(args.stream_n), lambda: torch.add(big, other, out=out)),
        (softmax_cost(args.stream_n), lambda: torch.softmax(big, dim=-1)),
        (naive_attention_cost(n, d), lambda: naive_attention(q, k, v)),
        (tiled_attention_cost(n, d, args.block_q), lambda: tiled_attention(q, k, v, args.block_q)),
    ]
    achieved = {cost.name: cost.flops / seconds(fn) / 1e9 for cost, fn in ops}
    return achieved | {matmul_cost(size).name: matmul_rates[size] for size in args.sizes}


# --- Drawing: plain SVG whose text rows never overlap and never leave the picture ---

FONT_PX = 11
ROW_PX = 15  # height of one text row; an 11 px sans-serif line inks about 13 px of it
CHAR_EM = 0.64  # average advance per character, at least DejaVu Sans's digit width
INK, GRID, ABOVE = "#222", "#ddd", "#c0392b"


@dataclass(frozen=True)
class Box:
    """The rectangle a text row may ink, in SVG user units; y is its top edge."""

    x: float
    y: float
    width: float
    height: float = ROW_PX

    def overlaps(self, other: Box) -> bool:
        return (self.x < other.x + other.width and other.x < self.x + self.width
                and self.y < other.y + other.height and other.y < self.y + self.height)

    def inside(self, width: float, height: float) -> bool:
        return (0 <= self.x and self.x + self.width <= width
                and 0 <= self.y and self.y + self.height <= height)


def text_width(text: str) -> float:
    return len(text) * FONT_PX * CHAR_EM


def text_box(x: float, baseline: float, text: str, anchor: str = "start") -> Box:
    """The row a text element occupies, from its SVG x, baseline and text-anchor."""
    width = text_width(text)
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return Box(left, baseline - 11, width)


def stack_labels(anchors: list[float], labels: list[str], x: float, top: float,
                 bottom: float) -> list[Box]:
    """Place one row per label in a column at x, each as near its anchor's height as room allows.

    Rows keep their anchors' top-to-bottom order (ties keep input order), so the layout is
    deterministic and leader lines from the dots cross as little as possible. Rows never overlap
    and stay within [top, bottom]; more rows than the column holds is an error.
    """
    if len(labels) * ROW_PX > bottom - top:
        raise ValueError(f"{len(labels)} labels need {len(labels) * ROW_PX} px; "
                         f"the column has {bottom - top}")
    order = sorted(range(len(labels)), key=lambda i: (anchors[i], i))
    tops, previous = {}, top - ROW_PX
    for i in order:  # downwards: centre each row on its anchor unless the row above is in the way
        # Whole pixels keep the sums exact: with fractions, a row pulled up to `limit - ROW_PX`
        # can end a rounding error past the next row's top, and render() rejects the overlap.
        previous = tops[i] = max(round(anchors[i] - ROW_PX / 2), previous + ROW_PX)
    limit = bottom
    for i in reversed(order):  # upwards: pull rows pushed past the bottom back into the column
        limit = tops[i] = min(tops[i], limit - ROW_PX)
    return [Box(x, tops[i], text_width(labels[i])) for i in range(len(labels))]


class Canvas:
    """SVG elements, and the box of every text row so the drawing can check its own layout."""

    def __init__(self) -> None:
        self.elements: list[str] = []
        self.texts: list[Box] = []

    def add(self, element: str) -> None:
        self.elements.append(element)

    def text(self, x: float, baseline: float, content: str, anchor: str = "start") -> None:
        self.texts.append(text_box(x, baseline, content, anchor))
        self.add(f'<text x="{x:.1f}" y="{baseline:.1f}" text-anchor="{anchor}">'
                 f"{html.escape(content)}</text>")

    def render(self, width: int, height: int, title: str) -> str:
        assert all(box.inside(width, height) for box in self.texts), "a text row leaves the picture"
        rows = self.texts
        assert not any(a.overlaps(b) for i, a in enumerate(rows) for b in rows[i + 1:]), \
            "two text rows overlap"
        return "\n".join([
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img">',
            f"<title>{html.escape(title)}</title>",
            f"<style>text{{font:{FONT_PX}px sans-serif;fill:{INK}}}</style>",
            f'<rect width="{width}" height="{height}" fill="#fff"/>',  # readable in dark mode too
            *self.elements, "</svg>"]) + "\n"


@dataclass(frozen=True)
class Roof:
    """One roofline: rate = min(peak, intensity x bandwidth), in the chart's units."""

    name: str
    peak: float
    bandwidth: float
    color: str


@dataclass(frozen=True)
class Point:
    """An op at its intensity and rate; above_roof marks a rate its roof says is out of reach."""

    label: str
    intensity: float
    rate: float
    color: str
    above_roof: bool = False


def decades(values: list[float]) -> tuple[float, float]:
    """The powers of ten just below the smallest value and at or above the largest."""
    return 10 ** math.floor(math.log10(min(values))), 10 ** math.ceil(math.log10(max(values)))


def roofline_svg(title: str, unit: str, roofs: list[Roof], points: list[Point],
                 legend: list[tuple[str, str]]) -> str:
    """Draw roofs and points on log-log axes, with each point's label in a column at the right.

    `legend` rows are (marker, text); a marker is "line:<color>", "dot:<color>" or "ring".
    """
    plot_w, plot_h, left = 420, 300, 56
    top = 12 + ROW_PX * len(legend) + 26  # the legend rows, then the unit above the y axis
    right, bottom = left + plot_w, top + plot_h
    x_lo, x_hi = decades([p.intensity for p in points] + [r.peak / r.bandwidth for r in roofs])
    y_lo, y_hi = decades([p.rate for p in points] + [r.peak for r in roofs]
                         + [r.bandwidth * x_lo for r in roofs])

    def px(intensity: float) -> float:
        return left + math.log(intensity / x_lo, x_hi / x_lo) * plot_w

    def py(rate: float) -> float:
        return bottom - math.log(rate / y_lo, y_hi / y_lo) * plot_h

    labels = [p.label + (" (above its roof)" if p.above_roof else "") for p in points]
    boxes = stack_labels([py(p.rate) for p in points], labels, right + 24, top, bottom)
    width = math.ceil(max([b.x + b.width for b in boxes]
                          + [48 + text_width(text) for _, text in legend]) + 10)
    canvas = Canvas()
    for row, (marker, content) in enumerate(legend):
        y = 12 + ROW_PX * row + ROW_PX / 2
        kind, _, color = marker.partition(":")
        canvas.add({
            "line": f'<line x1="12" y1="{y}" x2="40" y2="{y}" stroke="{color}" '
                    'stroke-width="2.5"/>',
            "dot": f'<circle cx="26" cy="{y}" r="4" fill="{color}"/>',
            "ring": f'<circle cx="26" cy="{y}" r="5" fill="#fff" stroke="{ABOVE}" '
                    'stroke-width="2"/>',
        }[kind])
        canvas.text(48, y + 4, content)
    for k in range(round(math.log10(x_lo)), round(math.log10(x_hi)) + 1):  # gridline per decade
        x = px(10.0**k)
        canvas.add(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="{GRID}"/>')
        canvas.text(x, bottom + 20, f"{10.0**k:g}", "middle")
    for k in range(round(math.log10(y_lo)), round(math.log10(y_hi)) + 1):
        y = py(10.0**k)
        canvas.add(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="{GRID}"/>')
        canvas.text(left - 6, y + 4, f"{10.0**k:g}", "end")
    canvas.text(8, top - 12, f"{unit} (log)")
    canvas.text((left + right) / 2, bottom + 40, "arithmetic intensity (FLOP/byte, log)", "middle")
    for roof in roofs:  # the memory diagonal, bending at the ridge into the flat compute ceiling
        ridge_x, peak_y = px(roof.peak / roof.bandwidth), py(roof.peak)
        canvas.add(f'<polyline points="{px(x_lo):.1f},{py(roof.bandwidth * x_lo):.1f} '
                   f'{ridge_x:.1f},{peak_y:.1f} {right},{peak_y:.1f}" '
                   f'fill="none" stroke="{roof.color}" stroke-width="2.5"/>')
        canvas.add(f'<line x1="{ridge_x:.1f}" y1="{peak_y:.1f}" x2="{ridge_x:.1f}" y2="{bottom}" '
                   f'stroke="{roof.color}" stroke-dasharray="4 4"/>')
    for point, label, box in zip(points, labels, boxes):  # leader lines first, under every dot
        canvas.add(f'<line x1="{px(point.intensity):.1f}" y1="{py(point.rate):.1f}" '
                   f'x2="{box.x - 4:.1f}" y2="{box.y + ROW_PX / 2:.1f}" stroke="{point.color}" '
                   'stroke-opacity=".45"/>')
        canvas.text(box.x, box.y + 11, label)
    for point in points:
        x, y = px(point.intensity), py(point.rate)
        canvas.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="#fff" stroke="{ABOVE}" '
                   'stroke-width="2" class="above"/>' if point.above_roof else
                   f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{point.color}"/>')
    return canvas.render(width, bottom + 48, title)


# --- The run: analytic counts, this machine's ceilings, the datasheet GPUs, the two charts ---

def check_counts(args: argparse.Namespace) -> list[OpCost]:
    """Print the analytic costs and assert what must hold for them on any machine."""
    n, d, block_q = args.seq_len, args.head_dim, args.block_q
    naive, tiled = naive_attention_cost(n, d), tiled_attention_cost(n, d, block_q)
    stream_sizes = [*args.sizes, args.stream_n]
    costs = ([add_cost(s) for s in stream_sizes] + [softmax_cost(s) for s in stream_sizes]
             + [matmul_cost(s) for s in args.sizes] + [naive, tiled])
    print("analytic costs (fp32; each input read once, each output written once)")
    print(f"  {'op':<30}{'FLOPs':>16}{'bytes':>16}{'FLOP/B':>10}")
    for c in costs:
        print(f"  {c.name:<30}{c.flops:>16,}{c.bytes_moved:>16,}{float(c.intensity):>10.3f}")

    for size in args.sizes:  # n^2 outputs, each a length-n dot product; A, B and C move once
        cost = matmul_cost(size)
        assert cost.flops == 2 * size**3 and cost.bytes_moved == 3 * torch.empty(size, size).nbytes
    assert naive.flops == tiled.flops, "tiling changes the traffic, never the work"
    assert len({add_cost(s).intensity for s in stream_sizes}) == 1, "add intensity is constant"
    assert len({softmax_cost(s).intensity for s in stream_sizes}) == 1, "so is softmax's"
    small, large = min(args.sizes), max(args.sizes)
    growth = matmul_cost(large).intensity / matmul_cost(small).intensity
    assert growth == Fraction(large, small), "matmul intensity grows linearly with n"
    assert tiled.bytes_moved < naive.bytes_moved, "tiling must save the N x N score traffic"
    print(f"  matmul intensity n={large} / n={small}: {float(growth):.2f} (linear in n); add stays "
          f"{float(add_cost(small).intensity):.3f}, softmax {float(softmax_cost(small).intensity)}")
    print(f"  tiled attention (block_q={block_q}) moves "
          f"{naive.bytes_moved / tiled.bytes_moved:.2f}x fewer bytes; "
          f"N x N score traffic in naive: {4 * n * n * FP32_BYTES:,} bytes")
    return costs


def print_tiles(args: argparse.Namespace) -> None:
    """Show the tile trade: a bigger block_q re-reads K and V less often but needs bigger slabs."""
    n, d, block_q = args.seq_len, args.head_dim, args.block_q
    rows = min(block_q, n)
    slab, kv_bytes = score_slab_bytes(n, block_q), 2 * n * d * FP32_BYTES
    q_o_rows = 2 * rows * d * FP32_BYTES
    print(f"  live while one tile runs (block_q={block_q}): S and P, 2 x {rows} x {n:,} x "
          f"{FP32_BYTES} bytes = {slab:,} bytes ({slab / 2**20:.2f} MiB)")
    print(f"  plus K and V ({kv_bytes:,} bytes) and the tile's Q and O rows ({q_o_rows:,} bytes): "
          f"{slab + kv_bytes + q_o_rows:,} bytes")
    print(f"  {'block_q':>9}{'S and P bytes':>16}{'tiled bytes':>14}{'FLOP/B':>10}")
    for size in sorted({*(4**k for k in range(3, 9) if 4**k < n), block_q, n}):
        cost = tiled_attention_cost(n, d, size)
        print(f"  {size:>9,}{score_slab_bytes(n, size):>16,}{cost.bytes_moved:>14,}"
              f"{float(cost.intensity):>10.3f}")


def measure_ceilings(args: argparse.Namespace) -> tuple[float, float, dict[int, float]]:
    """Measure and print this machine's two ceilings; also return the matmul rate of each size."""
    sizes = sorted({*args.sizes, args.peak_n})
    matmul_rates = matmul_gflops(sizes, args.repeats)
    gflops = max(matmul_rates.values())  # the compute ceiling is the best any matmul size reached
    gbps = peak_gbps(args.copy_mb, args.repeats)
    # Loose bounds on purpose: a busy 2-core VM and a large server both land inside them.
    assert 0.1 < gflops < 1e5 and 0.1 < gbps < 1e4, "peaks outside any plausible range"
    print(f"\nthis machine (torch threads: {torch.get_num_threads()})")
    print(f"  peak compute: {gflops:.1f} GFLOP/s (best fp32 matmul over n = "
          f"{', '.join(map(str, sizes))}; best of {args.repeats} each)")
    print(f"  peak bandwidth: {gbps:.1f} GB/s ({args.copy_mb} MB copy, read + write counted)")
    print(f"  ridge point: {gflops / gbps:.2f} FLOP/B")
    return gflops, gbps, matmul_rates


PLACEMENT = "placement (roof = min(peak compute, intensity x peak bandwidth))"


def place_ops(costs: list[OpCost], achieved: dict[str, float], gflops: float,
              gbps: float, heading: str = PLACEMENT) -> list[Point]:
    """Print each op against the roof; return the timed ones as chart points, flagged if above."""
    ridge = gflops / gbps
    print(f"\n{heading}")
    print(f"  {'op':<30}{'FLOP/B':>10}{'roof GFLOP/s':>14}  {'bound':<15}{'achieved GFLOP/s':>17}")
    points = []
    for cost in costs:
        intensity = float(cost.intensity)
        roof = min(gflops, intensity * gbps)
        bound = "memory-bound" if intensity < ridge else "compute-bound"
        rate = achieved.get(cost.name)
        above = rate is not None and rate > roof
        measured = "-" if rate is None else f"{rate:.2f}"
        print(f"  {cost.name:<30}{intensity:>10.3f}{roof:>14.2f}  {bound:<15}{measured:>17}"
              + ("  above its roof" if above else ""))
        if rate is not None:
            points.append(Point(cost.name, intensity, rate, "#e07b39", above))
    flagged = [p.label for p in points if p.above_roof]
    print(f"  ops above their roof: {len(flagged)}" + (
        f" ({', '.join(flagged)}; cache, a leaner kernel or noise beat the roof's benchmark)"
        if flagged else ""))
    return points


def cpu_chart(points: list[Point], gflops: float, gbps: float) -> str:
    roof = Roof("this CPU", gflops, gbps, "#3d85c6")
    legend = [(f"line:{roof.color}", f"measured roof: {gflops:.1f} GFLOP/s, {gbps:.1f} GB/s, "
               f"ridge {gflops / gbps:.2f} FLOP/B (dashed)"),
              ("dot:#e07b39", "timed op at its analytic intensity")]
    if any(p.above_roof for p in points):
        legend.append(("ring", "above its roof: beat the roof's benchmark "
                               "(cache, leaner kernel, noise)"))
    svg = roofline_svg(f"Roofline of this CPU: ridge {gflops / gbps:.2f} FLOP/B, peak {gflops:.1f} "
                       f"GFLOP/s, memory {gbps:.1f} GB/s", "GFLOP/s", [roof], points, legend)
    # The chart's invariant: no dot sits above its roof unless it is drawn as a ring and explained.
    assert svg.count('class="above"') == sum(p.above_roof for p in points)
    return svg


def print_gpus(slab: int) -> None:
    """Print each datasheet GPU's ceilings, ridge point and largest shared memory per SM."""
    print("\ndatasheet GPUs (bf16 dense tensor-core peak, HBM bandwidth; no GPU is used)")
    for gpu in GPUS:
        smem = gpu.shared_kb_per_sm * 1024
        print(f"  {gpu.name}: {gpu.bf16_flops / 1e12:g} TFLOP/s bf16 dense "
              f"({gpu.bf16_sparse_flops / 1e12:,g} with sparsity), "
              f"{gpu.hbm_bytes_per_s / 1e12:g} TB/s, ridge {gpu.ridge:.1f} FLOP/B")
        print(f"    shared memory up to {gpu.shared_kb_per_sm} KB ({smem:,} bytes) per SM; "
              f"this run's S and P slab is {slab / smem:.1f}x that")


def print_reference_ops() -> None:
    """Place the report's ops, at its default sizes, on each datasheet GPU's roof."""
    print("\nthe same ops, fp32 bytes as counted above, on the datasheet bf16 roofs (bound, best share of the dense peak)")
    print(f"  {'op':<30}{'FLOP/B':>10}" + "".join(f"{name:>28}" for name in HARDWARE))
    for name, intensity in REFERENCE_INTENSITY.items():
        row = f"  {name:<30}{intensity:>10.3f}"
        for gpu in HARDWARE.values():
            bound = "memory-bound" if memory_bound(gpu, intensity) else "compute-bound"
            row += f"{bound:>20}{efficiency(gpu, intensity):>8.2%}"
        print(row)


def print_decode(n: int) -> None:
    """Place one decode GEMV on both GPUs for each weight dtype."""
    print(f"decode GEMV y = W x, W {n:,} x {n:,}, x and y bf16: {2 * n * n:,} FLOPs")
    print("  weights only, 2 FLOPs per weight of bits/8 bytes: "
          + ", ".join(f"{dtype} {16 / bits:g}" for dtype, bits in WEIGHT_BITS.items()) + " FLOP/B")
    print("  attainable = min(peak, FLOP/B x bandwidth), and its share of the bf16 dense peak")
    print(f"  {'weights':<9}{'bytes':>12}{'FLOP/B':>9}"
          + "".join(f"{gpu.name:>26}" for gpu in GPUS))
    for dtype, bits in WEIGHT_BITS.items():
        cost, weights_only = gemv_cost(n, bits), Fraction(16, bits)  # 2 n^2 FLOPs / (n^2 bits/8) B
        assert cost.intensity < weights_only, "x and y only add bytes"
        row = f"  {dtype:<9}{cost.bytes_moved:>12,}{float(cost.intensity):>9.4f}"
        for gpu in GPUS:
            rate = attainable(gpu, float(cost.intensity))
            assert memory_bound(gpu, float(cost.intensity)), "decode at batch 1 is memory-bound on both GPUs"
            row += f"{rate / 1e12:>10.2f} TFLOP/s{efficiency(gpu, float(cost.intensity)):>8.2%}"
        print(row)
    # B sequences share each weight: about B FLOP/B counting the weights alone, less once each
    # sequence's x and y are counted too (and each sequence has its own KV cache besides).
    alone = [batch_at_ridge(gpu, n, 16, count_activations=False) for gpu in GPUS]
    full = [batch_at_ridge(gpu, n, 16, count_activations=True) for gpu in GPUS]
    assert alone == [math.ceil(gpu.ridge) for gpu in GPUS]
    assert all(b is None or b > a for a, b in zip(alone, full)), "x and y only add bytes"
    print("  a bf16 batch reaches the ridge at "
          + ", ".join(f"{f'B = {b}' if b else 'no B'} on {gpu.name}" for b, gpu in zip(full, GPUS))
          + f" (weight bytes alone: {alone[0]} and {alone[1]})")


def gpu_chart(n: int) -> str:
    colors = {A100_SXM.name: "#3d85c6", H100_SXM.name: "#8e44ad"}
    roofs = [Roof(g.name, g.bf16_flops / 1e12, g.hbm_bytes_per_s / 1e12, colors[g.name])
             for g in GPUS]
    dots = []
    for dtype, bits in WEIGHT_BITS.items():
        intensity = float(gemv_cost(n, bits).intensity)
        for gpu in GPUS:
            rate = attainable(gpu, intensity)
            dots.append(Point(f"{gpu.name.split()[0]} {dtype}: {rate / 1e12:.2f} TFLOP/s "
                              f"({rate / gpu.bf16_flops:.2%})", intensity, rate / 1e12,
                              colors[gpu.name]))
    legend = [(f"line:{r.color}", f"{r.name}: {r.peak:g} TFLOP/s bf16 dense, {r.bandwidth:g} "
               f"TB/s, ridge {r.peak / r.bandwidth:.1f} FLOP/B (dashed)") for r in roofs]
    legend.append((f"dot:{INK}", "decode GEMV, fp32 to int4 weights: rate (share of dense peak)"))
    return roofline_svg("Datasheet rooflines of A100 80GB SXM and H100 SXM with a decode GEMV",
                        "TFLOP/s", roofs, dots, legend)


def cpu_report(args: argparse.Namespace) -> None:
    """Count the ops, measure this CPU's ceilings and place the ops, then the datasheet GPUs."""
    costs = check_counts(args)
    # Parity on a short sequence; 1000 is not a multiple of the default tile, so one is ragged.
    q, k, v = torch.rand(3, 1000, args.head_dim).unbind()
    error = (tiled_attention(q, k, v, args.block_q) - naive_attention(q, k, v)).abs().max().item()
    assert error < 1e-5, "tiling reorders the work but must compute the same attention"
    print(f"  max |tiled - naive| attention output: {error:.1e}")
    print_tiles(args)

    gflops, gbps, matmul_rates = measure_ceilings(args)
    achieved = measure_points(args, matmul_rates)
    assert achieved[f"matmul n={max(args.sizes)}"] > achieved[f"add n={args.stream_n}"], \
        "a compute-bound matmul must beat a memory-bound add in FLOP/s"
    assert all(rate <= gflops for rate in matmul_rates.values()), "the ceiling is their best"
    points = place_ops(costs, achieved, gflops, gbps)

    print_gpus(score_slab_bytes(args.seq_len, args.block_q))
    print_reference_ops()
    print_decode(args.gemv_n)

    print()
    for what, path, svg in (("roofline", args.svg, cpu_chart(points, gflops, gbps)),
                            ("gpu roofline", args.gpu_svg, gpu_chart(args.gemv_n))):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg)
        print(f"{what} svg: {path} ({len(svg.encode()):,} bytes)")


# --- The CUDA run: the same ops in bf16 on this GPU, under the ceilings measured on it ---

CUDA_CALLS_PER_RUN = 10  # one sync's latency, some 10 us, would swamp a single small kernel
CUDA_PLACEMENT = ("placement, every op in bf16 on this GPU: the FLOPs above, half their bytes "
                  "(roof = min(peak compute, intensity x peak bandwidth))")


def timed(fn: Callable[[], object], repeats: int, sync: Callable[[], object], calls: int = 1,
          clock: Callable[[], float] = time.perf_counter) -> float:
    """Return the best seconds per call over `repeats` runs of `calls` calls, after a warm-up.

    A CUDA call returns once its kernel is queued, so every run starts on an idle device and stops
    the clock only after `sync` has waited for the queue to drain.
    """
    fn()  # the first call pays for library handles, kernel choice and the allocator's first blocks
    sync()
    best = math.inf
    for _ in range(repeats):
        start = clock()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, clock() - start)  # a busy device, like a busy CPU, only adds time
    return best / calls


def device_matmul_gflops(sizes: list[int], device: torch.device | str, dtype: torch.dtype,
                         seconds: Stopwatch) -> dict[int, float]:
    """Measure matmul GFLOP/s at each size on a device; the best of them is its compute ceiling."""
    rates = {}
    for n in sizes:
        a, b, out = (torch.rand(n, n, device=device, dtype=dtype) for _ in range(3))
        rates[n] = 2 * n**3 / seconds(lambda: torch.mm(a, b, out=out)) / 1e9
    return rates


def device_copy_gbps(megabytes: int, device: torch.device | str, seconds: Stopwatch) -> float:
    """Measure a device-to-device copy's bandwidth on buffers far larger than the GPU's L2 cache."""
    src = torch.ones(megabytes * 2**20 // FP32_BYTES, device=device)
    dst = torch.empty_like(src)
    # Read once plus written once, as for the CPU: the STREAM convention.
    return 2 * src.nbytes / seconds(lambda: dst.copy_(src)) / 1e9


def measure_gpu_ceilings(args: argparse.Namespace, device: torch.device | str,
                         seconds: Stopwatch) -> tuple[float, float, dict[int, float]]:
    """Measure a GPU's two ceilings in bf16; also return the matmul rate of each size."""
    # The plotted sizes are timed with the large ones, so no plotted matmul can beat the ceiling.
    sizes = sorted({*args.sizes, *args.cuda_peak_sizes})
    matmul_rates = device_matmul_gflops(sizes, device, torch.bfloat16, seconds)
    gbps = device_copy_gbps(args.cuda_copy_mb, device, seconds)
    return max(matmul_rates.values()), gbps, matmul_rates


def datasheet_for(device_name: str) -> Gpu | None:
    """Return the datasheet GPU whose chip a device name names (A100 or H100), if either."""
    return next((gpu for gpu in GPUS if gpu.name.split()[0] in device_name), None)


def print_gpu_ceilings(name: str, memory_bytes: int, args: argparse.Namespace, gflops: float,
                       gbps: float) -> None:
    """Print a GPU's measured ceilings, and their share of its datasheet's when the file has it."""
    sizes = sorted({*args.sizes, *args.cuda_peak_sizes})
    print(f"\nthis GPU: {name}, {memory_bytes / 2**30:.1f} GiB")
    print(f"  peak compute: {gflops / 1e3:,.1f} TFLOP/s (best bf16 matmul over n = "
          f"{', '.join(map(str, sizes))}; best of {args.repeats} runs of "
          f"{CUDA_CALLS_PER_RUN} calls)")
    print(f"  peak bandwidth: {gbps:,.1f} GB/s ({args.cuda_copy_mb} MB device copy, "
          "read + write counted)")
    print(f"  ridge point: {gflops / gbps:.1f} FLOP/B")
    gpu = datasheet_for(name)
    if gpu is not None:
        compute, memory = gflops * 1e9 / gpu.bf16_flops, gbps * 1e9 / gpu.hbm_bytes_per_s
        print(f"  share of the {gpu.name} datasheet: {compute:.1%} of {gpu.bf16_flops / 1e12:g} "
              f"TFLOP/s bf16 dense, {memory:.1%} of {gpu.hbm_bytes_per_s / 1e12:g} TB/s "
              "(other boards of the chip are rated differently)")


def in_bf16(cost: OpCost) -> OpCost:
    """The same op on bf16 tensors: the same FLOPs over half the bytes of its fp32 count."""
    return OpCost(cost.name, cost.flops, cost.bytes_moved * BF16_BYTES // FP32_BYTES)


def cuda_chart(name: str, points: list[Point], gflops: float, gbps: float) -> str:
    """Draw a GPU's measured roof and the ops timed on it (given in GFLOP/s) in TFLOP/s."""
    roof = Roof(name, gflops / 1e3, gbps / 1e3, "#3d85c6")  # TFLOP/s and TB/s: the same ridge
    legend = [(f"line:{roof.color}", f"{name}, measured: {roof.peak:,.1f} TFLOP/s bf16, "
               f"{gbps:,.1f} GB/s, ridge {gflops / gbps:.1f} FLOP/B (dashed)"),
              ("dot:#e07b39", "timed bf16 op at its analytic intensity")]
    if any(p.above_roof for p in points):
        legend.append(("ring", "above its roof: beat the roof's benchmark "
                               "(L2 cache, leaner kernel, noise)"))
    svg = roofline_svg(f"Roofline of {name}: ridge {gflops / gbps:.1f} FLOP/B, peak "
                       f"{roof.peak:,.1f} TFLOP/s bf16, memory {gbps:,.1f} GB/s", "TFLOP/s", [roof],
                       [replace(p, rate=p.rate / 1e3) for p in points], legend)
    assert svg.count('class="above"') == sum(p.above_roof for p in points)
    return svg


def cuda_report(args: argparse.Namespace) -> None:
    """Count the ops, measure this GPU's ceilings, place the ops in bf16 under them, draw it."""
    costs = check_counts(args)
    device = torch.device("cuda", torch.cuda.current_device())
    seconds = partial(timed, repeats=args.repeats, sync=torch.cuda.synchronize,
                      calls=CUDA_CALLS_PER_RUN)
    gflops, gbps, matmul_rates = measure_gpu_ceilings(args, device, seconds)
    assert 1 < gflops < 1e7 and 1 < gbps < 1e5, "peaks outside any plausible range"
    properties = torch.cuda.get_device_properties(device)
    print_gpu_ceilings(properties.name, properties.total_memory, args, gflops, gbps)

    achieved = measure_points(args, matmul_rates, device=device, dtype=torch.bfloat16,
                              seconds=seconds)
    assert achieved[f"matmul n={max(args.sizes)}"] > achieved[f"add n={args.stream_n}"], \
        "a compute-bound matmul must beat a memory-bound add in FLOP/s"
    points = place_ops([in_bf16(cost) for cost in costs], achieved, gflops, gbps, CUDA_PLACEMENT)

    svg = cuda_chart(properties.name, points, gflops, gbps)
    args.cuda_svg.parent.mkdir(parents=True, exist_ok=True)
    args.cuda_svg.write_text(svg)
    print(f"\ncuda roofline svg: {args.cuda_svg} ({len(svg.encode()):,} bytes)")


# --- The command line: CPU by default, a CUDA GPU when asked ---

def main(args: argparse.Namespace) -> None:
    """Report on the device asked for; without a usable GPU, `--device cuda` is a usage error."""
    if args.device == "cpu":
        cpu_report(args)
    elif torch.cuda.is_available():
        cuda_report(args)
    else:
        found = "built without CUDA" if torch.version.cuda is None else "no GPU visible"
        print("roofline.py: --device cuda needs a CUDA GPU and a CUDA build of torch "
              f"(this torch: {torch.__version__}, {found})", file=sys.stderr)
        raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arg = parser.add_argument
    arg("--sizes", type=int, nargs="+", default=[64, 256, 1024], help="n of the n x n ops")
    arg("--stream-n", type=int, default=4096, help="n of the timed add and softmax (past cache)")
    arg("--seq-len", type=int, default=2048, help="attention sequence length N")
    arg("--head-dim", type=int, default=64, help="attention head dimension d")
    arg("--block-q", type=int, default=256, help="query rows per attention tile")
    arg("--peak-n", type=int, default=1536, help="largest matmul size tried for the compute peak")
    arg("--copy-mb", type=int, default=256, help="buffer size for the bandwidth peak")
    arg("--repeats", type=int, default=3, help="timed runs per measurement; the best one counts")
    arg("--gemv-n", type=int, default=4096, help="n of the decode GEMV's n x n weight")
    arg("--svg", type=Path, default=Path("roofline.svg"), help="where to write this CPU's plot")
    arg("--gpu-svg", type=Path, default=Path("gpu_roofline.svg"), help="where to write GPU plot")
    arg("--device", choices=["cpu", "cuda"], default="cpu",
        help="where to measure the ceilings and time the ops (cuda: in bf16, needs a GPU)")
    arg("--cuda-peak-sizes", type=int, nargs="+", default=[2048, 4096, 8192],
        help="bf16 matmul sizes tried for the GPU's compute peak")
    arg("--cuda-copy-mb", type=int, default=1024, help="device copy size for the GPU's bandwidth")
    arg("--cuda-svg", type=Path, default=Path("cuda_roofline.svg"),
        help="where to write the GPU's measured plot")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
