"""Four ways to tell attention where tokens are: sinusoidal, learned, RoPE, ALiBi; checked in fp64.

Sinusoidal and learned absolute encodings are tables added to the token embeddings once, at the
input. RoPE rotates every query and key by an angle proportional to its position, in every layer,
so q.k depends only on the offset between them. ALiBi adds no embedding at all: each head subtracts
a penalty proportional to the distance from its attention scores. The script asserts each scheme's
defining property, then prints what each costs (parameters, cached tables, extra FLOPs per token)
for a Llama-2-7B-sized decoder.
"""

from __future__ import annotations

import argparse
import math
from typing import NamedTuple

import torch
from torch import nn

F64 = torch.float64
BASE = 10000.0  # the base wavelength of Vaswani et al. and of RoFormer (Llama-2's rope_theta)
# Identities below are exact in real arithmetic; in fp64 only the rounding of position * theta
# (about 1e-16 relative, so ~1e-13 rad at position 1,500) remains, far below this tolerance.
EXACT = 1e-12
FP32_BYTES = 4  # tables and biases are priced in fp32, as kernels usually keep them


class Shape(NamedTuple):
    """The attention shape the cost table prices."""

    d_model: int
    num_heads: int
    kv_heads: int
    num_layers: int
    max_len: int  # the longest position a table must cover

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


LLAMA2_7B = Shape(d_model=4096, num_heads=32, kv_heads=32, num_layers=32, max_len=4096)
GPT2_WPE = (1024, 768)  # GPT-2 (124M): n_positions x n_embd, its learned position table


# region encodings
def inverse_frequencies(dim: int, base: float = BASE) -> torch.Tensor:
    """Return theta_i = base^(-2i/dim), i = 0 .. dim/2 - 1: one angular speed per pair of dims."""
    return base ** (-torch.arange(0, dim, 2, dtype=F64) / dim)


def sinusoidal_table(max_len: int, d_model: int, base: float = BASE) -> torch.Tensor:
    """Return Vaswani's (max_len, d_model) table: sin in even dims, cos in odd; no parameters."""
    angles = torch.arange(max_len, dtype=F64)[:, None] * inverse_frequencies(d_model, base)
    table = torch.empty(max_len, d_model, dtype=F64)
    table[:, 0::2], table[:, 1::2] = angles.sin(), angles.cos()
    return table  # added to the token embeddings: x = embed(tokens) + table[:seq_len]


def learned_table(max_len: int, d_model: int) -> nn.Embedding:
    """Return a trainable table: one free vector per position, and no row past max_len - 1."""
    return nn.Embedding(max_len, d_model, dtype=F64)


def rope_angles(positions: torch.Tensor, dim: int, base: float = BASE) -> torch.Tensor:
    """Return position * theta_i, shape (len(positions), dim/2): what cos/sin tables cache."""
    return positions.to(F64)[:, None] * inverse_frequencies(dim, base)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Map halves (x1, x2) to (-x2, x1): a quarter turn of every pair (x1[i], x2[i])."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = BASE) -> torch.Tensor:
    """Rotate pair (x[i], x[i + d/2]) by position * theta_i: the half-split layout (HF Llama)."""
    angles = rope_angles(positions, x.shape[-1], base).repeat(1, 2)  # dims i and i + d/2 share one
    return x * angles.cos() + rotate_half(x) * angles.sin()  # per element: 2 multiplies, 1 add


def apply_rope_interleaved(x: torch.Tensor, positions: torch.Tensor,
                           base: float = BASE) -> torch.Tensor:
    """Rotate pair (x[2i], x[2i + 1]) by position * theta_i: the RoFormer paper's layout."""
    angles = rope_angles(positions, x.shape[-1], base)
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Return m_h = 2^(-8h/H) for h = 1 .. H (Press et al.): a geometric sequence, one per head."""
    closest = 2 ** int(math.log2(num_heads))
    slopes = 2.0 ** (-8.0 * torch.arange(1, closest + 1, dtype=F64) / closest)
    # H not a power of two: the paper's code appends every other slope of the 2 * closest series.
    extra = 2.0 ** (-8.0 * torch.arange(1, 2 * closest, 2, dtype=F64) / (2 * closest))
    return torch.cat((slopes, extra[: num_heads - closest]))


def alibi_bias(num_heads: int, seq_len: int) -> torch.Tensor:
    """Return the (H, N, N) bias -m_h * (i - j) for query i and key j, added to the scores."""
    position = torch.arange(seq_len, dtype=F64)
    distance = position[:, None] - position[None, :]  # i - j: 0 on the diagonal, > 0 for past keys
    return -alibi_slopes(num_heads)[:, None, None] * distance


class Cost(NamedTuple):
    """What one scheme adds to a model of a given shape."""

    scheme: str
    params: int  # trainable: they also get gradients and optimizer state
    cached: int  # non-trainable elements kept around (each can be recomputed on the fly instead)
    flops_per_token: int  # extra FLOPs per token through the whole model


def position_costs(shape: Shape, context: int) -> list[Cost]:
    """Return each scheme's parameters, cached elements and extra FLOPs per token, analytically."""
    table = shape.max_len * shape.d_model
    # RoPE: 2 multiplies + 1 add per element of every query and key head, in every layer.
    rope_flops = 3 * (shape.num_heads + shape.kv_heads) * shape.head_dim * shape.num_layers
    # ALiBi: one add per score (and a multiply if the kernel forms m_h * (i - j) itself);
    # a query scores `context` keys per head, in every layer.
    alibi_flops = shape.num_heads * context * shape.num_layers
    return [Cost("sinusoidal", 0, table, shape.d_model),  # one add per element, at the input only
            Cost("learned", table, 0, shape.d_model),
            Cost("rope", 0, 2 * shape.max_len * shape.head_dim // 2, rope_flops),  # cos and sin
            Cost("alibi", 0, shape.num_heads, alibi_flops)]  # the slopes
# endregion


def random_unit(count: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    """Return unit vectors, so a score error of 1e-12 is relative to |q| |k|."""
    x = torch.randn(count, dim, dtype=F64, generator=gen)
    return x / x.norm(dim=-1, keepdim=True)


def check_sinusoidal(dim: int, max_len: int, shifts: list[int], gen: torch.Generator) -> None:
    """Assert PE_i . PE_j depends on i - j only, yet a score of content + PE does not."""
    table = sinusoidal_table(max_len, dim)
    offset = torch.arange(max_len)
    # sin a sin b + cos a cos b = cos(a - b), so PE_i . PE_j = sum_i cos((i - j) * theta_i).
    by_offset = torch.cos(rope_angles(offset, dim)).sum(dim=-1)
    gram = table @ table.T  # PE_i . PE_j for every pair of positions
    diff = (gram - by_offset[(offset[:, None] - offset[None, :]).abs()]).abs().max().item()
    assert diff <= EXACT, f"sinusoidal dot product is not a function of the offset: {diff:.1e}"
    print(f"sinusoidal: PE_i . PE_j == sum cos((i - j) theta) for all {max_len}x{max_len} pairs: "
          f"max |diff| {diff:.1e} <= {EXACT:.0e}")

    # Vaswani's argument: PE_(pos + k) is a fixed linear map (a rotation) of PE_pos.
    k = shifts[1]
    moved = apply_rope_interleaved(table[:-k], torch.full((max_len - k,), -k))
    diff = (moved - table[k:]).abs().max().item()
    assert diff <= EXACT, f"PE rows are not rotations of one another: {diff:.1e}"
    print(f"sinusoidal: PE_(pos+{k}) == PE_pos rotated by -{k} * theta_i: max |diff| {diff:.1e}")

    longer = sinusoidal_table(max_len + max(shifts), dim)  # rows for the shifted positions too
    q, k_vec = random_unit(2, dim, gen)
    i, j = torch.randint(0, max_len, (2, 64), generator=gen)
    scores = [((q + longer[i + s]) * (k_vec + longer[j + s])).sum(-1) for s in [0, *shifts]]
    moved = max((s - scores[0]).abs().max().item() for s in scores[1:])
    assert moved > 1e-3, "cross terms q.PE_j and PE_i.k should make an added PE shift-dependent"
    print(f"sinusoidal added to q and k: shifting both positions moves the score by up to "
          f"{moved:.2f}")


def check_learned(dim: int, max_len: int) -> None:
    """Count the learned table's parameters and show it has no row past max_len - 1."""
    table = learned_table(max_len, dim)
    params = sum(p.numel() for p in table.parameters())
    assert params == max_len * dim
    try:
        table(torch.tensor([max_len]))  # one past the last row: nothing was ever learned there
    except IndexError as error:
        print(f"learned: {params:,} parameters ({max_len} x {dim}); "
              f"position {max_len} -> IndexError: {error}")
    else:
        raise AssertionError("a learned table must refuse a position it has no row for")


def check_rope(dim: int, max_len: int, shifts: list[int], gen: torch.Generator) -> None:
    """Assert RoPE keeps norms, makes q.k a function of i - j, and that both layouts agree."""
    n = 256
    q, k = random_unit(2, dim, gen)
    i, j = torch.randint(0, max_len, (2, n), generator=gen)

    def score(qi: torch.Tensor, kj: torch.Tensor) -> torch.Tensor:
        return (apply_rope(q.expand(n, dim), qi) * apply_rope(k.expand(n, dim), kj)).sum(-1)

    base = score(i, j)
    diff = max((score(i + s, j + s) - base).abs().max().item() for s in shifts)
    assert diff <= EXACT, f"RoPE score changed under a shift: {diff:.1e}"
    print(f"rope: score(i + s, j + s) == score(i, j) for {n} pairs, s in {shifts}: "
          f"max |diff| {diff:.1e} <= {EXACT:.0e}")
    # R_i^T R_j = R_(j - i): rotate only the key, by the offset, and the score is the same.
    diff = (base - (q * apply_rope(k.expand(n, dim), j - i)).sum(-1)).abs().max().item()
    assert diff <= EXACT, f"RoPE score is not q . R_(j-i) k: {diff:.1e}"
    print(f"rope: score(i, j) == q . rope(k, j - i): max |diff| {diff:.1e}")

    x = torch.randn(n, dim, dtype=F64, generator=gen)
    diff = (apply_rope(x, i).norm(dim=-1) / x.norm(dim=-1) - 1).abs().max().item()
    assert diff <= EXACT, f"RoPE changed a norm: {diff:.1e}"
    print(f"rope: |rope(x, pos)| == |x|: max relative diff {diff:.1e}")

    # The layouts pair different dims; listing evens first, then odds, maps one onto the other.
    perm = torch.cat((torch.arange(0, dim, 2), torch.arange(1, dim, 2)))
    assert torch.equal(apply_rope(x[:, perm], i), apply_rope_interleaved(x, i)[:, perm])
    print("rope layouts: half-split(x[perm]) == interleaved(x)[perm]: torch.equal")


def check_alibi(num_heads: int, seq_len: int, gen: torch.Generator) -> None:
    """Assert the paper's slopes for 8 and 16 heads, the bias formula and its causal use."""
    paper = {8: [2.0 ** -h for h in range(1, 9)],  # 1/2, 1/4, ..., 1/256
             16: [2.0 ** (-h / 2) for h in range(1, 17)]}  # 1/2^0.5, 1/2^1, ..., 1/2^8
    for heads, expected in paper.items():
        slopes = alibi_slopes(heads)
        assert (slopes - torch.tensor(expected, dtype=F64)).abs().max().item() <= EXACT
        # Geometric: the ratio between neighbours is the first slope, 2^(-8/H).
        assert torch.allclose(slopes[1:] / slopes[:-1], slopes[0], rtol=EXACT, atol=0)
        shown = (f"1/{1 / m:g}" if heads == 8 else f"2^{math.log2(m):g}" for m in slopes)
        print(f"alibi slopes, {heads} heads: " + " ".join(shown))
    assert torch.equal(alibi_slopes(16)[1::2], alibi_slopes(8)), "16 heads interleave the 8"

    bias, slopes = alibi_bias(num_heads, seq_len), alibi_slopes(num_heads)
    for h, i in ((h, i) for h in range(num_heads) for i in range(seq_len)):  # entry by entry
        row = torch.tensor([-slopes[h].item() * (i - j) for j in range(i + 1)], dtype=F64)
        assert torch.equal(bias[h, i, : i + 1], row), f"bias row {i} of head {h}"
    assert torch.equal(bias.diagonal(dim1=1, dim2=2), torch.zeros(num_heads, seq_len, dtype=F64))
    future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(diagonal=1)
    assert (bias.masked_fill(future, 0) <= 0).all(), "past keys are only ever penalised"

    # Softmax ignores a constant per row, so -m (i - j) and +m j give the same attention:
    # kernels may keep an (H, 1, N) bias over key positions instead of (H, N, N).
    scores = torch.randn(num_heads, seq_len, seq_len, dtype=F64, generator=gen)
    per_key = slopes[:, None, None] * torch.arange(seq_len, dtype=F64)
    relative = (scores + bias).masked_fill(future, -math.inf).softmax(dim=-1)
    keyed = (scores + per_key).masked_fill(future, -math.inf).softmax(dim=-1)
    diff = (relative - keyed).abs().max().item()
    assert diff <= EXACT, f"row-shifted bias changed the attention: {diff:.1e}"
    print(f"alibi: bias == -m_h (i - j) for {num_heads} heads x {seq_len}x{seq_len}, 0 on the "
          f"diagonal, <= 0 for past keys; causal softmax with +m_h j instead: "
          f"max |diff| {diff:.1e}")


def print_costs(shape: Shape, context: int) -> None:
    """Print each scheme's parameters, cached bytes and extra FLOPs for one model shape."""
    name = " (Llama-2-7B)" if shape == LLAMA2_7B else ""
    print(f"\ncosts for d_model={shape.d_model}, heads={shape.num_heads}, "
          f"kv_heads={shape.kv_heads}, head_dim={shape.head_dim}, layers={shape.num_layers}, "
          f"max_len={shape.max_len}{name}, context {context:,}; cached tables in fp32")
    print(f"  {'scheme':<12}{'params':>12}{'cached elements':>17}{'cached bytes':>15}"
          f"{'extra FLOPs/token':>19}")
    for cost in position_costs(shape, context):
        print(f"  {cost.scheme:<12}{cost.params:>12,}{cost.cached:>17,}"
              f"{cost.cached * FP32_BYTES:>15,}{cost.flops_per_token:>19,}")
    print(f"  rope: 3 FLOPs per q/k element vs {2 * shape.d_model:,} to project it (2 x d_model)")
    print(f"  alibi: 1 FLOP per score vs {2 * shape.head_dim:,} for its q.k dot product "
          f"(2 x head_dim)")
    full, per_key = (shape.num_heads * context * n * FP32_BYTES for n in (context, 1))
    print(f"  alibi bias materialized (N={context:,}): heads x N x N {full:,} bytes, "
          f"heads x 1 x N over key positions {per_key:,} bytes")
    positions, d_model = GPT2_WPE
    params = sum(p.numel() for p in learned_table(positions, d_model).parameters())
    print(f"  GPT-2 (124M) learned table wpe: {positions:,} x {d_model} = {params:,} parameters")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the demo sizes and the shape to price from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=64, help="d_model and head_dim of the checks")
    parser.add_argument("--positions", type=int, default=512, help="positions the checks use")
    parser.add_argument("--alibi-heads", type=int, default=8)
    parser.add_argument("--alibi-len", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--d-model", type=int, default=LLAMA2_7B.d_model, help="shape to price")
    parser.add_argument("--num-heads", type=int, default=LLAMA2_7B.num_heads)
    parser.add_argument("--kv-heads", type=int, default=LLAMA2_7B.kv_heads)
    parser.add_argument("--num-layers", type=int, default=LLAMA2_7B.num_layers)
    parser.add_argument("--max-len", type=int, default=LLAMA2_7B.max_len)
    parser.add_argument("--context", type=int, default=4096, help="keys each query scores (ALiBi)")
    args = parser.parse_args(argv)
    if args.dim % 2 or args.d_model % (2 * args.num_heads) or args.positions <= 7:
        parser.error("--dim and head_dim must be even, --positions above 7 (a shift used)")
    return args


def main(args: argparse.Namespace) -> None:
    """Run every check in fp64, then print the cost table."""
    gen = torch.Generator().manual_seed(args.seed)
    shifts = [1, 7, 100, 1000]
    print(f"checks in float64: dim={args.dim}, positions 0..{args.positions - 1}, "
          f"shifts {shifts}, base {BASE:g}")
    check_sinusoidal(args.dim, args.positions, shifts, gen)
    check_learned(args.dim, args.positions)
    check_rope(args.dim, args.positions, shifts, gen)
    check_alibi(args.alibi_heads, args.alibi_len, gen)
    shape = Shape(args.d_model, args.num_heads, args.kv_heads, args.num_layers, args.max_len)
    print_costs(shape, args.context)


if __name__ == "__main__":
    main(parse_args())
