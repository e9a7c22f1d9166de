"""FlashAttention-style tiled attention in plain PyTorch, checked against naive attention and SDPA.

The tiled version walks blocks of query rows and, for each, blocks of keys and values, keeping a
running row max `m`, a running softmax denominator `l` and an unnormalised output accumulator.
Only one `block_q x block_k` tile of scores exists at a time, never the `N x N` matrix. Each
variant's peak memory is measured in a child process of its own, so neither sees the other's pages.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from dataclasses import astuple, dataclass
from functools import partial

import torch
import torch.nn.functional as F

FP32_BYTES = 4
BF16_BYTES = 2
TOLERANCE = 1e-5  # max absolute difference allowed between any two fp32 attention outputs


@dataclass(frozen=True)
class AttentionShape:
    """One attention call to price: heads (times batch), tokens, head size, tile, element bytes."""

    heads: int
    seq_len: int
    head_dim: int
    block_q: int
    block_k: int
    elem_bytes: int


# Shapes the report prices next to what it measures. Llama-2-7B: num_attention_heads 32 and
# hidden_size 4096 (so head_dim 128), max_position_embeddings 4096, from
# https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json; the 32k row keeps that
# layer and stretches its context eight times. The first row is also the command line's defaults.
ATTENTION_SHAPES = {
    "Starter defaults": AttentionShape(1, 4096, 64, 128, 128, FP32_BYTES),
    "Llama-2-7B, 4k": AttentionShape(32, 4096, 128, 128, 128, BF16_BYTES),
    "Llama-2-7B-like, 32k": AttentionShape(32, 32768, 128, 128, 128, BF16_BYTES),
}
DEFAULTS = ATTENTION_SHAPES["Starter defaults"]


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                    causal: bool = False) -> torch.Tensor:
    """Return softmax(q k^T / sqrt(d)) v, building the whole score matrix."""
    n = q.shape[-2]
    # Two N x N tensors are alive at once here: the scores and the probabilities made from them.
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    if causal:
        above_diagonal = torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)
        scores = scores.masked_fill(above_diagonal, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return probs @ v


@dataclass(frozen=True)
class TileCounts:
    """How the tiled pass spent its (query block, key block) grid."""

    computed: int  # tiles whose scores were built
    skipped: int  # causal tiles lying wholly above the diagonal, never touched
    largest_tile: int  # elements in the biggest score tensor built: block_q * block_k at most


# region tiled
def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                    block_q: int = 128, block_k: int = 128,
                    causal: bool = False) -> tuple[torch.Tensor, TileCounts]:
    """Return exact attention, built one score tile at a time, and the tile counts."""
    *heads, n, d = q.shape
    out = torch.empty_like(q)
    computed = skipped = largest_tile = 0
    for q_start in range(0, n, block_q):
        q_end = min(q_start + block_q, n)
        rows = q_end - q_start
        # Fold the 1/sqrt(d) scale into this block of Q once, not into every tile.
        q_block = q[..., q_start:q_end, :] * d ** -0.5
        # The running state: max and softmax denominator per row, and sum of p @ V.
        m = q.new_full((*heads, rows, 1), float("-inf"))
        l = q.new_zeros((*heads, rows, 1))
        acc = q.new_zeros((*heads, rows, d))

        for k_start in range(0, n, block_k):
            k_end = min(k_start + block_k, n)
            if causal and k_start >= q_end:
                # Every key here comes after every query of the block: all masked.
                skipped += 1
                continue
            scores = q_block @ k[..., k_start:k_end, :].transpose(-2, -1)
            if causal and k_end - 1 > q_start:
                # The tile straddles the diagonal: mask by absolute position.
                # Key 0 is in the first tile and every query sees it, so m is
                # finite from then on and masked entries give exp(-inf) = 0.
                query_pos = torch.arange(q_start, q_end).unsqueeze(-1)
                key_pos = torch.arange(k_start, k_end)
                scores = scores.masked_fill(key_pos > query_pos, float("-inf"))

            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
            p = torch.exp(scores - m_new)  # this tile's weights, under the new max
            rescale = torch.exp(m - m_new)  # moves old sums to the new max; 0 at first
            l = rescale * l + p.sum(dim=-1, keepdim=True)
            acc = rescale * acc + p @ v[..., k_start:k_end, :]
            m = m_new
            computed += 1
            largest_tile = max(largest_tile, scores.shape[-2] * scores.shape[-1])

        out[..., q_start:q_end, :] = acc / l  # normalise once, after the last tile
    return out, TileCounts(computed, skipped, largest_tile)
# endregion


def expected_causal_tiles(n: int, block_q: int, block_k: int) -> tuple[int, int]:
    """Return (computed, skipped) causal tiles, counted from the grid rather than by running it.

    Query block i needs every key block that starts at or before its last row r, which is
    r // block_k + 1 blocks. With square blocks and n = T * block, that sums to T (T + 1) / 2.
    """
    q_blocks, k_blocks = math.ceil(n / block_q), math.ceil(n / block_k)
    computed = sum((min((i + 1) * block_q, n) - 1) // block_k + 1 for i in range(q_blocks))
    return computed, q_blocks * k_blocks - computed


def naive_score_bytes(heads: int, seq_len: int, elem_bytes: int = FP32_BYTES) -> int:
    """Return the bytes naive_attention holds beyond q, k, v and its output (a non-causal call).

    Its named tensors are `scores` and `probs`, each heads x N x N, both alive once softmax has
    written `probs`. The scaled copy of q is a temporary, freed before `probs` exists.
    """
    return 2 * heads * seq_len * seq_len * elem_bytes


def tiled_block_bytes(heads: int, seq_len: int, head_dim: int, block_q: int, block_k: int,
                      elem_bytes: int = FP32_BYTES) -> int:
    """Return the bytes flash_attention holds for one full query block beyond q, k, v and output.

    Counted as for naive_attention, the tensors the loop names (non-causal), all alive at the
    `acc` update, each heads x rows x something: `scores` and `p`, one tile each (rows x cols);
    `q_block` and `acc`, head_dim per row; `m`, `m_new`, `rescale` and `l`, one value per row.
    The K and V blocks are views, not copies. None of it grows with N once N exceeds the blocks.
    """
    rows, cols = min(block_q, seq_len), min(block_k, seq_len)
    return heads * rows * (2 * cols + 2 * head_dim + 4) * elem_bytes


def naive_to_tiled_ratio(heads: int, seq_len: int, head_dim: int, block_q: int, block_k: int,
                         elem_bytes: int = FP32_BYTES) -> float:
    """Return how many times more the naive kernel holds than the tiled one holds per block."""
    return (naive_score_bytes(heads, seq_len, elem_bytes)
            / tiled_block_bytes(heads, seq_len, head_dim, block_q, block_k, elem_bytes))


def make_inputs(heads: int, seq_len: int, head_dim: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Return random fp32 q, k, v of shape (heads, seq_len, head_dim)."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(heads, seq_len, head_dim, generator=generator) for _ in range(3))


def peak_rss_bytes() -> int:
    """Return this process's peak resident set size so far, from Linux's VmHWM."""
    # Not ru_maxrss: Linux carries the parent's peak into a child's ru_maxrss across fork and
    # exec, so a child started after the parent ran naive attention would report the parent's peak.
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # reported in kB
    raise RuntimeError("no VmHWM line in /proc/self/status")


def peak_growth(variant: str, args: argparse.Namespace) -> int:
    """Run one attention variant once and return how far it raised this process's peak RSS."""
    q, k, v = make_inputs(args.heads, args.seq_len, args.head_dim, args.seed)
    run = naive_attention if variant == "naive" else partial(
        flash_attention, block_q=args.block_q, block_k=args.block_k)
    # Warm up on a small slice so thread pools and kernel workspaces are not charged to the call.
    run(*(t[..., : 2 * args.block_q, :] for t in (q, k, v)))
    baseline = peak_rss_bytes()
    run(q, k, v)
    # The peak only ever rises, so its rise is what the call needed beyond everything before it.
    return peak_rss_bytes() - baseline


def start_peak_child(variant: str, args: argparse.Namespace) -> subprocess.Popen:
    """Start a fresh interpreter that runs this file in child mode to measure one variant."""
    flags = ["--heads", str(args.heads), "--seq-len", str(args.seq_len), "--head-dim",
             str(args.head_dim), "--block-q", str(args.block_q), "--block-k", str(args.block_k),
             "--seed", str(args.seed), "--threads", str(args.threads)]
    return subprocess.Popen([sys.executable, __file__, "--peak-of", variant, *flags],
                            stdout=subprocess.PIPE, text=True)


def peak_from_child(child: subprocess.Popen) -> int:
    """Wait for a child started by start_peak_child and return the peak growth it printed."""
    stdout, _ = child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"peak child exited with status {child.returncode}")
    return int(stdout.split()[-1])


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Return the largest absolute elementwise difference."""
    return (a - b).abs().max().item()


def print_report(args: argparse.Namespace) -> None:
    """Check tiled attention against naive and SDPA, count tiles, then compare peak memory."""
    # The children pay for their own torch import, so start them now and collect them at the end.
    children = {variant: start_peak_child(variant, args) for variant in ("naive", "tiled")}
    n, d, bq, bk = args.seq_len, args.head_dim, args.block_q, args.block_k
    q, k, v = make_inputs(args.heads, n, d, args.seed)
    grid_q, grid_k = math.ceil(n / bq), math.ceil(n / bk)
    rows, cols = min(bq, n), min(bk, n)  # the full-size tile; ragged edge tiles are smaller
    print(f"shape: heads={args.heads}, seq_len={n:,}, head_dim={d}, fp32; "
          f"tiles of {bq} x {bk} scores on a {grid_q} x {grid_k} grid")

    print(f"\nparity (max abs diff, must be below {TOLERANCE:g})")
    seconds = {}
    for causal, label in ((False, "non-causal"), (True, "causal")):
        started = time.perf_counter()
        naive = naive_attention(q, k, v, causal=causal)
        seconds[f"naive {label}"] = time.perf_counter() - started
        started = time.perf_counter()
        tiled, counts = flash_attention(q, k, v, block_q=bq, block_k=bk, causal=causal)
        seconds[f"tiled {label}"] = time.perf_counter() - started
        sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        vs_naive, vs_sdpa = max_diff(tiled, naive), max_diff(tiled, sdpa)
        print(f"  {label:<11} tiled vs naive {vs_naive:.1e}, tiled vs sdpa {vs_sdpa:.1e}")
        assert vs_naive < TOLERANCE and vs_sdpa < TOLERANCE, f"{label}: tiled output drifted"
        assert counts.largest_tile == rows * cols, "a score tensor outgrew one tile"
        expected = expected_causal_tiles(n, bq, bk) if causal else (grid_q * grid_k, 0)
        assert (counts.computed, counts.skipped) == expected, f"{counts}, grid says {expected}"
        print(f"  {label:<11} tiles: {counts.computed:,} computed, {counts.skipped:,} skipped "
              f"of {grid_q * grid_k:,}")
    computed, skipped = expected_causal_tiles(n, bq, bk)
    print(f"  causal tiles from the grid alone: {computed:,} computed, {skipped:,} skipped")

    full_scores = args.heads * n * n * FP32_BYTES
    tile_scores = args.heads * rows * cols * FP32_BYTES
    naive_bytes = naive_score_bytes(args.heads, n)
    block_bytes = tiled_block_bytes(args.heads, n, d, bq, bk)
    output_bytes = args.heads * n * d * FP32_BYTES
    print("\nscore memory (analytic, fp32)")
    print(f"  full score matrix ({args.heads} x {n} x {n}): {full_scores:,} bytes")
    print(f"  naive scores + probs: {naive_bytes:,} bytes")
    print(f"  one score tile ({args.heads} x {rows} x {cols}): {tile_scores:,} bytes "
          f"({full_scores // tile_scores:,}x smaller)")
    state = args.heads * rows * (d + 2) * FP32_BYTES
    print(f"  running acc, m, l of one query block: {state:,} bytes")
    print(f"  tiled, one query block in all (scores, p, q_block, acc, m, m_new, rescale, l): "
          f"{block_bytes:,} bytes ({naive_to_tiled_ratio(args.heads, n, d, bq, bk):,.1f}x less)")
    print(f"  output, both variants: {output_bytes:,} bytes")

    naive_peak, tiled_peak = (peak_from_child(children[v]) for v in ("naive", "tiled"))
    print("\npeak RSS growth during one non-causal call (measured, one child process each)")
    print(f"  naive peak: {naive_peak / 2**20:.1f} MiB; analytic: scores + probs "
          f"{naive_bytes / 2**20:.2f} MiB, output {output_bytes / 2**20:.2f} MiB")
    ratio = naive_peak / max(tiled_peak, 1)
    print(f"  tiled peak: {tiled_peak / 2**20:.1f} MiB ({ratio:.1f}x lower); analytic: one query "
          f"block {block_bytes / 2**20:.2f} MiB, output {output_bytes / 2**20:.2f} MiB")
    assert tiled_peak < naive_peak / 2, "tiling should at least halve the peak"

    print("\nthe same count at ATTENTION_SHAPES (analytic; heads x tokens x head_dim, element "
          "bytes, tile)")
    for name, shape in ATTENTION_SHAPES.items():
        sizes = astuple(shape)
        naive_at = naive_score_bytes(shape.heads, shape.seq_len, shape.elem_bytes)
        print(f"  {name}: {shape.heads} x {shape.seq_len:,} x {shape.head_dim}, "
              f"{shape.elem_bytes} B, {shape.block_q} x {shape.block_k}: naive {naive_at:,} bytes, "
              f"tiled block {tiled_block_bytes(*sizes):,} bytes "
              f"({naive_to_tiled_ratio(*sizes):,.1f}x)")

    print("\ntime (measured, this process; Python loops on a CPU, not a fused kernel)")
    print("  " + ", ".join(f"{name} {value:.2f} s" for name, value in seconds.items()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read sizes and block shapes from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=DEFAULTS.heads)
    parser.add_argument("--seq-len", type=int, default=DEFAULTS.seq_len)
    parser.add_argument("--head-dim", type=int, default=DEFAULTS.head_dim)
    parser.add_argument("--block-q", type=int, default=DEFAULTS.block_q, help="query rows per tile")
    parser.add_argument("--block-k", type=int, default=DEFAULTS.block_k, help="keys per tile")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads; one, because handing tiny tiles to a thread pool "
                             "costs more than it saves, worst of all on a busy machine")
    parser.add_argument("--peak-of", choices=["naive", "tiled"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.heads, args.seq_len, args.head_dim, args.block_q, args.block_k, args.threads) < 1:
        parser.error("sizes and block shapes must be positive")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    torch.set_num_threads(arguments.threads)
    if arguments.peak_of:
        print(peak_growth(arguments.peak_of, arguments))  # child mode: one number for the parent
    else:
        print_report(arguments)
