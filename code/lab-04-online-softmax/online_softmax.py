"""Online softmax: three passes, one pass with a running max, and per-block (max, sum) pairs merged.

The 1-D methods read and write through `SlowMemory`, a list that counts every element loaded or
stored, so the memory traffic printed for each method is measured rather than quoted. Every method
is checked against `torch.softmax` in float64, also on inputs near 1000 where an unshifted `exp`
overflows. `online_softmax_rows` is the same recurrence on a batch of rows, the shape it has inside
FlashAttention.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from functools import reduce

import torch

TOLERANCE = 1e-12  # float64 parity with torch.softmax, element by element
TRACE_INPUT = [2.0, 1.0, 0.5, 3.0]  # the max arrives last, so the running sum is rescaled once


class SlowMemory:
    """A vector in slow memory (a GPU's HBM) that counts every element loaded or stored."""

    def __init__(self, values: list[float]) -> None:
        self.values = list(values)
        self.loads = 0
        self.stores = 0

    def __len__(self) -> int:
        return len(self.values)

    def load(self, i: int) -> float:
        self.loads += 1
        return self.values[i]

    def store(self, i: int, value: float) -> None:
        self.stores += 1
        self.values[i] = value


def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """Return exp(x) / sum(exp(x)) unshifted: right on paper, inf/inf = nan once exp overflows."""
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)


@dataclass(frozen=True)
class Step:
    """The state of the online pass after it has seen one more element."""

    x: float
    m: float  # running max
    l: float  # running sum of exp(x_j - m) over the elements seen so far
    rescale: float | None  # exp(m_old - m_new) when this element raised an existing max


@dataclass(frozen=True)
class Partial:
    """Softmax state of a slice of x: max m, l = sum exp(x_i - m), acc = sum exp(x_i - m) * v_i."""

    m: float
    l: float
    acc: torch.Tensor | None = None  # only when the product with v is fused in


# region softmax
def three_pass_softmax(x: SlowMemory, out: SlowMemory) -> None:
    """Write softmax(x) to out the textbook way: max, then sum of exp, then normalize."""
    m = -math.inf
    for i in range(len(x)):  # pass 1: the max, so every exp below has an argument <= 0
        m = max(m, x.load(i))
    l = 0.0
    for i in range(len(x)):  # pass 2: the normalizer, which cannot start before the max is known
        l += math.exp(x.load(i) - m)
    for i in range(len(x)):  # pass 3: normalize
        out.store(i, math.exp(x.load(i) - m) / l)


def online_normalizer(x: SlowMemory) -> tuple[float, float, list[Step]]:
    """Return the max and the normalizer of x from one pass, and the state after each element."""
    m, l, steps = -math.inf, 0.0, []
    for i in range(len(x)):
        xi = x.load(i)
        m_new = max(m, xi)
        # l is a sum of exp(x_j - m); one multiply moves every term onto the new max at once.
        rescale = math.exp(m - m_new)  # 1.0 while the max holds (0.0 on the first element)
        l = l * rescale + math.exp(xi - m_new)
        steps.append(Step(xi, m_new, l, rescale if -math.inf < m < m_new else None))
        m = m_new
    return m, l, steps


def online_softmax(x: SlowMemory, out: SlowMemory) -> None:
    """Write softmax(x) to out in two passes: the online normalizer, then normalize."""
    m, l, _ = online_normalizer(x)
    for i in range(len(x)):
        out.store(i, math.exp(x.load(i) - m) / l)


def block_partial(x: SlowMemory, start: int, stop: int, v: torch.Tensor | None = None) -> Partial:
    """Load one block of x once and summarize it, independently of every other block."""
    # On a GPU the block now sits in on-chip SRAM: its local max and sum cost no further HBM reads.
    block = torch.tensor([x.load(i) for i in range(start, stop)], dtype=torch.float64)
    m = block.max().item()
    p = torch.exp(block - m)
    return Partial(m, p.sum().item(), None if v is None else p @ v[start:stop])


def merge(a: Partial, b: Partial) -> Partial:
    """Combine the states of two disjoint slices of x; associative, so any grouping works."""
    m = max(a.m, b.m)
    scale_a, scale_b = math.exp(a.m - m), math.exp(b.m - m)
    acc = None if a.acc is None else a.acc * scale_a + b.acc * scale_b
    return Partial(m, a.l * scale_a + b.l * scale_b, acc)


def online_softmax_rows(scores: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return softmax over the last dim and each row's logsumexp, one block of columns at a time."""
    m = torch.full((*scores.shape[:-1], 1), -math.inf, dtype=scores.dtype)
    l = torch.zeros_like(m)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        # Each row rescales by its own factor; a row whose max held multiplies by exactly 1.
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new).sum(dim=-1, keepdim=True)
        m = m_new
    probs = torch.exp(scores - m) / l
    return probs, (m + torch.log(l)).squeeze(-1)  # FlashAttention-2 saves m + log l for backward
# endregion


def merge_tree(parts: list[Partial]) -> Partial:
    """Merge neighbours pairwise, level by level, the way a parallel reduction does."""
    while len(parts) > 1:
        pairs = [merge(a, b) for a, b in zip(parts[0::2], parts[1::2])]
        parts = pairs + parts[2 * len(pairs):]  # an odd one out moves up a level unmerged
    return parts[0]


def blockwise_softmax(x: SlowMemory, out: SlowMemory, block_size: int) -> None:
    """Write softmax(x) to out from per-block (max, sum) pairs merged as a tree."""
    starts = range(0, len(x), block_size)
    total = merge_tree([block_partial(x, s, min(s + block_size, len(x))) for s in starts])
    for i in range(len(x)):  # the output needs the global (m, l), so x is read a second time
        out.store(i, math.exp(x.load(i) - total.m) / total.l)


def blockwise_attention_row(x: SlowMemory, v: torch.Tensor, out: SlowMemory, block_size: int) -> None:
    """Write softmax(x) @ v to out reading each score once: the division lands on acc, not on x."""
    starts = range(0, len(x), block_size)
    # A left fold is FlashAttention's inner loop: stream K/V blocks, keep one running (m, l, acc).
    total = reduce(merge, (block_partial(x, s, min(s + block_size, len(x)), v) for s in starts))
    for j, value in enumerate((total.acc / total.l).tolist()):
        out.store(j, value)


def measure(method, values: list[float], out_size: int | None = None) -> tuple[torch.Tensor, int, int]:
    """Run a 1-D method on fresh memory; return its output, loads of x and stores to out."""
    x, out = SlowMemory(values), SlowMemory([0.0] * (out_size or len(values)))
    method(x, out)
    return torch.tensor(out.values, dtype=torch.float64), x.loads, out.stores


def print_trace() -> None:
    """Print the online state element by element on the toy input and check the single rescale."""
    m, l, steps = online_normalizer(SlowMemory(TRACE_INPUT))
    print(f"online pass over x = {TRACE_INPUT}")
    for k, step in enumerate(steps, start=1):
        print(f"  step {k}: x = {step.x:.1f} -> m = {step.m:.1f}, l = {step.l:.4f}"
              + ("   <- new max: rescale" if step.rescale is not None else ""))
        if step.rescale is not None:
            old = steps[k - 2]
            new_term = math.exp(step.x - step.m)
            print(f"    l = {old.l:.4f} * exp({old.m:.1f} - {step.m:.1f})"
                  f" + exp({step.x:.1f} - {step.m:.1f})"
                  f" = {old.l:.4f} * {step.rescale:.4f} + {new_term:.4f} = {step.l:.4f}")
    rescales = sum(step.rescale is not None for step in steps)
    three_pass_sum = sum(math.exp(value - max(TRACE_INPUT)) for value in TRACE_INPUT)
    assert rescales == 1, "only 3.0 raises an existing max"
    assert abs(l - three_pass_sum) < TOLERANCE, "the rescaled running sum is the three-pass sum"
    print(f"rescales: {rescales}")
    print(f"three-pass sum of exp(x - {m:.1f}): {three_pass_sum:.4f}")
    probs = measure(online_softmax, TRACE_INPUT)[0]
    print("softmax: [" + ", ".join(f"{p:.4f}" for p in probs.tolist()) + "]")


def print_overflow(offset: float) -> None:
    """Show the unshifted exp overflowing on large inputs while the shifted methods do not."""
    shifted = [value + offset for value in TRACE_INPUT]
    print(f"\nlarge inputs: x + {offset:g} = {shifted}")
    print(f"  exp overflows above {math.log(torch.finfo(torch.float64).max):.2f} in float64, "
          f"{math.log(torch.finfo(torch.float32).max):.2f} in float32")
    naive = naive_softmax(torch.tensor(shifted, dtype=torch.float64))
    assert torch.isnan(naive).all(), "exp(x) is inf for every entry, and inf / inf is nan"
    print(f"  naive exp(x) / sum(exp(x)): {naive.tolist()}")
    stable = measure(online_softmax, shifted)[0]
    unshifted = torch.softmax(torch.tensor(TRACE_INPUT, dtype=torch.float64), dim=0)
    assert (stable - unshifted).abs().max() < TOLERANCE, "softmax(x + c) = softmax(x)"
    print("  online softmax: [" + ", ".join(f"{p:.4f}" for p in stable.tolist()) + "], as before")


def print_parity_and_traffic(x: torch.Tensor, v: torch.Tensor, block_size: int, offset: float) -> None:
    """Check every 1-D method against torch.softmax and print the memory traffic each one made."""
    n, head_dim = len(x), v.shape[1]
    methods = {
        "three-pass softmax": (three_pass_softmax, None),
        "online softmax": (online_softmax, None),
        "block-wise (m, l) merge": (lambda mem, out: blockwise_softmax(mem, out, block_size), None),
        "block-wise merge fused with @ v":
            (lambda mem, out: blockwise_attention_row(mem, v, out, block_size), head_dim),
    }
    print(f"\nmax |diff| vs torch.softmax (float64, N = {n:,}, block = {block_size}, "
          f"limit {TOLERANCE:g})")
    print(f"  {'method':<33}{'randn * 10':>12}{f'+ {offset:g}':>9}")
    traffic = {}
    for name, (method, out_size) in methods.items():
        diffs = []
        for scores in (x, x + offset):
            probs, loads, stores = measure(method, scores.tolist(), out_size)
            expected = torch.softmax(scores, dim=0)
            expected = expected if out_size is None else expected @ v
            diffs.append((probs - expected).abs().max().item())
            assert diffs[-1] < TOLERANCE, f"{name} is off by {diffs[-1]:.1e}"
        traffic[name] = (loads / n, stores / n)
        print(f"  {name:<33}{diffs[0]:>12.1e}{diffs[1]:>9.1e}")

    print(f"\nmemory traffic per element of x (N = {n:,}, counted by SlowMemory)")
    print(f"  {'method':<33}{'loads':>6}{'stores':>8}{'accesses':>10}")
    for name, (loads, stores) in traffic.items():
        print(f"  {name:<33}{loads:>6g}{stores:>8.3g}{loads + stores:>10.4g}")
    # Three passes, two, two, one; the fused method stores only its head_dim outputs.
    assert list(traffic.values()) == [(3, 1), (2, 1), (2, 1), (1, head_dim / n)]
    print(f"  (fused: {head_dim} outputs written, no probabilities; v is read once by any method)")


def print_rows(scores: torch.Tensor, block_size: int, offset: float) -> None:
    """Check the batched version against torch.softmax and torch.logsumexp, row by row."""
    rows, n = scores.shape
    print(f"\nrows: {rows} x {n:,} scores, randn * 10 plus a row offset from 0 to {offset:g}")
    probs, lse = online_softmax_rows(scores, block_size)
    diff = (probs - torch.softmax(scores, dim=-1)).abs().max().item()
    lse_diff = ((lse - torch.logsumexp(scores, dim=-1)).abs() / lse.abs().clamp(min=1)).max().item()
    overflowed = (~torch.isfinite(naive_softmax(scores))).any(dim=-1).sum().item()
    assert diff < TOLERANCE and lse_diff < TOLERANCE
    print(f"  online_softmax_rows max |diff| vs torch.softmax: {diff:.1e}")
    print(f"  m + log(l) vs torch.logsumexp, max relative diff: {lse_diff:.1e}")
    print(f"  naive rows with inf or nan: {overflowed} of {rows}")


def print_report(n: int, block_size: int, rows: int, head_dim: int, offset: float, seed: int) -> None:
    """Trace the toy input, show the overflow, check parity, and count memory traffic."""
    print_trace()
    print_overflow(offset)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=generator, dtype=torch.float64) * 10
    v = torch.randn(n, head_dim, generator=generator, dtype=torch.float64)
    print_parity_and_traffic(x, v, block_size, offset)
    row_offsets = torch.linspace(0, offset, rows, dtype=torch.float64).unsqueeze(-1)
    scores = torch.randn(rows, n, generator=generator, dtype=torch.float64) * 10 + row_offsets
    print_rows(scores, block_size, offset)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the sizes from the command line, rejecting ones that cannot form a block."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="length of the vector and of each row")
    parser.add_argument("--block-size", type=int, default=256, help="elements per block")
    parser.add_argument("--rows", type=int, default=64, help="rows in the 2-D check")
    parser.add_argument("--head-dim", type=int, default=64, help="width of v in the fused check")
    parser.add_argument("--offset", type=float, default=1000.0,
                        help="shift (>= 710) that makes the naive exp overflow in float64")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.n, args.block_size, args.rows, args.head_dim) < 1:
        parser.error("--n, --block-size, --rows and --head-dim must be positive")
    if args.offset < 710:
        parser.error("--offset must be at least 710, or the naive exp does not overflow")
    return args


if __name__ == "__main__":
    print_report(**vars(parse_args()))
