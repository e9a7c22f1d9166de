"""Roofline model of this CPU: analytic FLOPs and bytes per op, measured peaks, an SVG plot.

Counts are exact and machine-independent: fp32 tensors, each input read once and each output
written once (the compulsory traffic). Peaks are measured: a large fp32 matmul for FLOP/s and a
large copy for bytes/s. Their ratio, the ridge point, splits memory-bound from compute-bound ops.
"""

from __future__ import annotations

import argparse
import html
import math
import timeit
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import torch

FP32_BYTES = 4
# max, subtract, exp, sum, divide: exp counts as one FLOP here, though it costs many instructions.
SOFTMAX_FLOPS_PER_ELEMENT = 5


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


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Single-head attention that materialises N x N scores; q comes pre-scaled by 1/sqrt(d)."""
    scores = q @ k.T
    return torch.softmax(scores, dim=-1) @ v


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    block_q: int) -> torch.Tensor:
    """The same attention, block_q query rows at a time: only a block_q x N slab of scores."""
    out = torch.empty_like(q)
    for start in range(0, q.shape[0], block_q):
        rows = slice(start, start + block_q)
        scores = q[rows] @ k.T
        torch.mm(torch.softmax(scores, dim=-1), v, out=out[rows])
    return out


def best_seconds(fn, repeats: int) -> float:
    """Return the fastest of several runs: a busy machine only ever adds time."""
    return min(timeit.repeat(fn, repeat=repeats, number=1))


def peak_gflops(n: int, repeats: int) -> float:
    """Measure fp32 matmul throughput, large enough that the BLAS library runs at its best."""
    a, b, out = torch.rand(n, n), torch.rand(n, n), torch.empty(n, n)
    seconds = best_seconds(lambda: torch.mm(a, b, out=out), repeats)
    return 2 * n**3 / seconds / 1e9


def peak_gbps(megabytes: int, repeats: int) -> float:
    """Measure copy bandwidth on buffers far larger than the last-level cache."""
    src = torch.ones(megabytes * 2**20 // FP32_BYTES)
    dst = torch.empty_like(src)
    seconds = best_seconds(lambda: dst.copy_(src), repeats)
    # Read once plus written once. A cache that reads each line before writing it moves more,
    # so this figure is a floor on the bus's real rate.
    return 2 * src.nbytes / seconds / 1e9
# endregion


def measure_points(args: argparse.Namespace) -> dict[str, float]:
    """Time a few real ops; return achieved GFLOP/s by op name."""
    big = torch.ones(args.stream_n, args.stream_n)
    other, out = torch.ones_like(big), torch.empty_like(big)
    n, d = args.seq_len, args.head_dim
    q, k, v = torch.rand(n, d) / math.sqrt(d), torch.rand(n, d), torch.rand(n, d)
    timed = [
        (add_cost(args.stream_n), lambda: torch.add(big, other, out=out)),
        (softmax_cost(args.stream_n), lambda: torch.softmax(big, dim=-1)),
        (naive_attention_cost(n, d), lambda: naive_attention(q, k, v)),
        (tiled_attention_cost(n, d, args.block_q), lambda: tiled_attention(q, k, v, args.block_q)),
    ]
    for size in args.sizes:
        a, b = torch.rand(size, size), torch.rand(size, size)
        timed.append((matmul_cost(size), lambda a=a, b=b: torch.mm(a, b)))
    return {cost.name: cost.flops / best_seconds(fn, args.repeats) / 1e9 for cost, fn in timed}


def roofline_svg(gflops: float, gbps: float, points: list[tuple[str, float, float]]) -> str:
    """Draw the roofline on log-log axes: memory diagonal, compute ceiling, ridge, ops."""
    width, height, left, right, top, bottom = 640, 400, 64, 20, 36, 48
    ridge = gflops / gbps
    xs, ys = [p[1] for p in points] + [ridge], [p[2] for p in points] + [gflops]
    x_lo, x_hi = 10 ** math.floor(math.log10(min(xs))), 10 ** math.ceil(math.log10(max(xs) * 1.5))
    y_lo = 10 ** math.floor(math.log10(min(ys + [gbps * x_lo])))
    y_hi = 10 ** math.ceil(math.log10(max(ys) * 1.5))

    def px(intensity: float) -> float:
        return left + math.log(intensity / x_lo, x_hi / x_lo) * (width - left - right)

    def py(rate: float) -> float:
        return height - bottom - math.log(rate / y_lo, y_hi / y_lo) * (height - top - bottom)

    ridge_label = f"ridge {ridge:.2f} FLOP/B, peak {gflops:.1f} GFLOP/s"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img">',
        f"<title>Roofline of this CPU: {ridge_label}, memory {gbps:.1f} GB/s</title>",
        # currentColor follows the embedding page; the media query covers the file opened alone.
        "<style>svg{color:#222}@media (prefers-color-scheme:dark){svg{color:#ddd}}"
        "text{font:12px sans-serif;fill:currentColor}"
        ".grid{stroke:currentColor;stroke-opacity:.15}</style>",
    ]
    for k in range(round(math.log10(x_lo)), round(math.log10(x_hi)) + 1):  # gridline per decade
        x = px(10.0**k)
        parts += [f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{py(y_lo)}" class="grid"/>',
                  f'<text x="{x:.1f}" y="{height - 32}" text-anchor="middle">{10.0**k:g}</text>']
    for k in range(round(math.log10(y_lo)), round(math.log10(y_hi)) + 1):
        y = py(10.0**k)
        parts += [f'<line x1="{left}" y1="{y:.1f}" x2="{px(x_hi)}" y2="{y:.1f}" class="grid"/>',
                  f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{10.0**k:g}</text>']
    corner = f"{px(ridge):.1f},{py(gflops):.1f}"
    parts += [
        f'<polyline points="{px(x_lo):.1f},{py(gbps * x_lo):.1f} {corner} '
        f'{px(x_hi):.1f},{py(gflops):.1f}" fill="none" stroke="#3d85c6" stroke-width="2.5"/>',
        f'<line x1="{px(ridge):.1f}" y1="{py(gflops):.1f}" x2="{px(ridge):.1f}" '
        f'y2="{height - bottom}" stroke="#3d85c6" stroke-dasharray="4 4"/>',
        f'<text x="{px(ridge) + 6:.1f}" y="{py(gflops) - 8:.1f}">{ridge_label}</text>',
        f'<text x="{px(x_lo) + 6:.1f}" y="{py(gbps * x_lo) - 10:.1f}">'
        f"memory roof {gbps:.1f} GB/s</text>",
        f'<text x="{left}" y="{top - 14}">line: measured roof of this CPU; dots: timed ops</text>',
    ]
    placed = [(px(ridge) + 6, py(gflops) - 8, 6 * len(ridge_label))]  # (x, baseline, width)
    for label, intensity, rate in points:
        x, y, w = px(intensity), py(rate), 6 * len(label)  # about 6 px per character at 11 px
        # Right or left of the dot, above or below, then one row further out: first free spot.
        spots = [(sx, y + dy) for dy in (-7, 15, -20, 28) for sx in (x + 6, x - 6 - w)
                 if left < sx and sx + w < width - right]
        free = [(sx, sy) for sx, sy in spots if not any(
            sx < bx + bw and bx < sx + w and sy - 11 < by < sy + 11 for bx, by, bw in placed)]
        sx, sy = (free or spots or [(x + 6, y - 7)])[0]
        placed.append((sx, sy, w))
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#e07b39"/>',
                  f'<text x="{sx:.1f}" y="{sy:.1f}" font-size="11">{html.escape(label)}</text>']
    parts += [
        f'<text x="{(left + width - right) / 2}" y="{height - 10}" text-anchor="middle">'
        "arithmetic intensity (FLOP/byte, log)</text>",
        f'<text transform="translate(16 {(top + height - bottom) / 2}) rotate(-90)" '
        'text-anchor="middle">GFLOP/s (log)</text>',
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


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


def main(args: argparse.Namespace) -> None:
    costs = check_counts(args)
    # Parity on a short sequence; 1000 is not a multiple of the default tile, so one is ragged.
    q, k, v = torch.rand(3, 1000, args.head_dim).unbind()
    error = (tiled_attention(q, k, v, args.block_q) - naive_attention(q, k, v)).abs().max().item()
    assert error < 1e-5, "tiling reorders the work but must compute the same attention"
    print(f"  max |tiled - naive| attention output: {error:.1e}")

    gflops = peak_gflops(args.peak_n, args.repeats)
    gbps = peak_gbps(args.copy_mb, args.repeats)
    ridge = gflops / gbps
    # Loose bounds on purpose: a busy 2-core VM and a large server both land inside them.
    assert 0.1 < gflops < 1e5 and 0.1 < gbps < 1e4, "peaks outside any plausible range"
    print(f"\nthis machine (torch threads: {torch.get_num_threads()})")
    print(f"  peak compute: {gflops:.1f} GFLOP/s "
          f"(fp32 matmul n={args.peak_n}, best of {args.repeats})")
    print(f"  peak bandwidth: {gbps:.1f} GB/s ({args.copy_mb} MB copy, read + write counted)")
    print(f"  ridge point: {ridge:.2f} FLOP/B")

    achieved = measure_points(args)
    assert achieved[f"matmul n={max(args.sizes)}"] > achieved[f"add n={args.stream_n}"], \
        "a compute-bound matmul must beat a memory-bound add in FLOP/s"
    print("\nplacement (roof = min(peak compute, intensity x peak bandwidth))")
    print(f"  {'op':<30}{'FLOP/B':>10}{'roof GFLOP/s':>14}  {'bound':<15}{'achieved GFLOP/s':>17}")
    for cost in costs:
        intensity = float(cost.intensity)
        roof = min(gflops, intensity * gbps)
        bound = "memory-bound" if intensity < ridge else "compute-bound"
        measured = f"{achieved[cost.name]:.2f}" if cost.name in achieved else "-"
        print(f"  {cost.name:<30}{intensity:>10.3f}{roof:>14.2f}  {bound:<15}{measured:>17}")

    points = [(c.name, float(c.intensity), achieved[c.name]) for c in costs if c.name in achieved]
    svg = roofline_svg(gflops, gbps, points)
    args.svg.parent.mkdir(parents=True, exist_ok=True)
    args.svg.write_text(svg)
    print(f"\nroofline svg: {args.svg} ({len(svg.encode()):,} bytes)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arg = parser.add_argument
    arg("--sizes", type=int, nargs="+", default=[64, 256, 1024], help="n of the n x n ops")
    arg("--stream-n", type=int, default=4096, help="n of the timed add and softmax (past cache)")
    arg("--seq-len", type=int, default=2048, help="attention sequence length N")
    arg("--head-dim", type=int, default=64, help="attention head dimension d")
    arg("--block-q", type=int, default=256, help="query rows per attention tile")
    arg("--peak-n", type=int, default=1536, help="matmul size for the compute peak")
    arg("--copy-mb", type=int, default=256, help="buffer size for the bandwidth peak")
    arg("--repeats", type=int, default=3, help="timed runs per measurement; the best one counts")
    arg("--svg", type=Path, default=Path("roofline.svg"), help="where to write the plot")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
