"""MHA, GQA and MQA as one attention module whose only knob is the number of K/V heads.

`GroupedQueryAttention` projects queries to `num_heads` heads and keys/values to `kv_heads` heads;
each K/V head serves a contiguous group of `num_heads // kv_heads` query heads. `kv_heads ==
num_heads` is multi-head attention (MHA), `kv_heads == 1` is multi-query attention (MQA). The
script checks both ends against separately written references, builds GQA from an MHA checkpoint
by mean-pooling K/V heads, and prints parameter counts and KV-cache bytes per token for a toy
model and for published configs.
"""

from __future__ import annotations

import argparse
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

# allclose, not torch.equal: the hand-written references add in a different order than the fused
# kernel, so fp32 outputs of size ~1 differ by a few ulps (~1e-7). A wrong head pairing or softmax
# scale moves them by ~1, so 1e-6 separates rounding from a real bug; bitwise equality would test BLAS.
PARITY_ATOL = 1e-6
BF16_BYTES = 2


class ModelShape(NamedTuple):
    """The attention shape of a published model, as its config.json states it."""

    num_layers: int
    num_heads: int
    kv_heads: int
    head_dim: int


PUBLISHED = {
    "Llama-2-7B": ModelShape(num_layers=32, num_heads=32, kv_heads=32, head_dim=128),
    "Llama-3-8B": ModelShape(num_layers=32, num_heads=32, kv_heads=8, head_dim=128),
    "Mistral-7B": ModelShape(num_layers=32, num_heads=32, kv_heads=8, head_dim=128),
    "Llama-2-70B": ModelShape(num_layers=80, num_heads=64, kv_heads=8, head_dim=128),
}


# region gqa
class GroupedQueryAttention(nn.Module):
    """Causal self-attention: `num_heads` query heads share `kv_heads` K/V heads."""

    def __init__(self, d_model: int, num_heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        if num_heads % kv_heads:
            raise ValueError("num_heads must be a multiple of kv_heads")
        self.num_heads, self.kv_heads, self.head_dim = num_heads, kv_heads, head_dim
        self.group_size = num_heads // kv_heads  # query heads per K/V head
        self.q_proj = nn.Linear(d_model, num_heads * head_dim, bias=False)
        # Only K and V narrow, and they are exactly what the KV cache keeps.
        self.k_proj = nn.Linear(d_model, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, d_model, bias=False)

    def split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        """Reshape (batch, seq, heads * head_dim) into (batch, heads, seq, head_dim)."""
        batch, seq, _ = x.shape
        return x.view(batch, seq, heads, self.head_dim).transpose(1, 2)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return K and V as (batch, kv_heads, seq, head_dim): what a decoder caches."""
        k = self.split_heads(self.k_proj(x), self.kv_heads)
        v = self.split_heads(self.v_proj(x), self.kv_heads)
        return k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.split_heads(self.q_proj(x), self.num_heads)
        k, v = self.project_kv(x)
        # Query head h reads K/V head h // group_size, so copies must sit side by side
        # (k0 k0 k0 k0 k1 ...): repeat_interleave, not repeat, which tiles k0 k1 k0 k1.
        # expand+reshape builds the same tensor, also a copy; this spelling names it.
        k = k.repeat_interleave(self.group_size, dim=1)
        v = v.repeat_interleave(self.group_size, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).flatten(start_dim=2))


def attention_params(d_model: int, num_heads: int, kv_heads: int, head_dim: int) -> int:
    """Return the weights of one bias-free block: Q and O full width, K and V narrow."""
    return 2 * d_model * num_heads * head_dim + 2 * d_model * kv_heads * head_dim


def kv_cache_bytes_per_token(num_layers: int, kv_heads: int, head_dim: int,
                             dtype_bytes: int) -> int:
    """Return what one token costs across all layers: a K and a V per K/V head."""
    return 2 * num_layers * kv_heads * head_dim * dtype_bytes


def kv_cache_bytes(tokens: int, num_layers: int, kv_heads: int, head_dim: int,
                   dtype_bytes: int) -> int:
    """Return the cache of `tokens` tokens in flight, summed over every sequence in the batch."""
    return tokens * kv_cache_bytes_per_token(num_layers, kv_heads, head_dim, dtype_bytes)


def mha_cache_ratio(num_layers: int, num_heads: int, kv_heads: int, head_dim: int,
                    dtype_bytes: int) -> float:
    """Return how many times smaller the cache is than MHA's, which keeps all `num_heads` K/V heads."""
    as_mha = kv_cache_bytes_per_token(num_layers, num_heads, head_dim, dtype_bytes)
    return as_mha / kv_cache_bytes_per_token(num_layers, kv_heads, head_dim, dtype_bytes)


def gqa_from_mha(mha: GroupedQueryAttention, kv_heads: int,
                 pool: str = "mean") -> GroupedQueryAttention:
    """Build GQA from an MHA checkpoint: a group's K/V heads become their mean."""
    d_model, head_dim = mha.q_proj.in_features, mha.head_dim
    size = mha.num_heads // kv_heads
    gqa = GroupedQueryAttention(d_model, mha.num_heads, kv_heads, head_dim)
    with torch.no_grad():
        gqa.q_proj.weight.copy_(mha.q_proj.weight)  # Q and O carry over unchanged
        gqa.o_proj.weight.copy_(mha.o_proj.weight)
        for name in ("k_proj", "v_proj"):
            # Heads g*size .. (g+1)*size-1 become K/V head g, as forward() groups them.
            heads = getattr(mha, name).weight.view(kv_heads, size, head_dim, d_model)
            # pool="first" keeps one head per group: the paper's weaker alternative.
            pooled = heads.mean(dim=1) if pool == "mean" else heads[:, 0]
            getattr(gqa, name).weight.copy_(pooled.flatten(end_dim=1))
    return gqa
# endregion


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Return causal softmax(q k^T / sqrt(head_dim)) v for one head, written out by hand."""
    seq = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    future = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v


def reference_mha(x: torch.Tensor, wq, wk, wv, wo, num_heads: int) -> torch.Tensor:
    """Textbook MHA: each head slices its own rows of Wq, Wk and Wv, one head at a time."""
    head_dim = wq.shape[0] // num_heads
    heads = []
    for h in range(num_heads):
        rows = slice(h * head_dim, (h + 1) * head_dim)
        heads.append(attend(x @ wq[rows].T, x @ wk[rows].T, x @ wv[rows].T))
    return torch.cat(heads, dim=-1) @ wo.T


def reference_mqa(x: torch.Tensor, wq, wk, wv, wo, num_heads: int) -> torch.Tensor:
    """Shazeer's MQA: one K and one V, computed once and read by every query head."""
    head_dim = wk.shape[0]
    k, v = x @ wk.T, x @ wv.T
    heads = [attend(x @ wq[h * head_dim:(h + 1) * head_dim].T, k, v) for h in range(num_heads)]
    return torch.cat(heads, dim=-1) @ wo.T


def module_weights(module: GroupedQueryAttention) -> tuple[torch.Tensor, ...]:
    return tuple(getattr(module, n).weight for n in ("q_proj", "k_proj", "v_proj", "o_proj"))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return ((approx - exact).norm() / exact.norm()).item()


def mha_checkpoint(d_model: int, num_heads: int, kv_heads: int, head_dim: int,
                   spread: float) -> GroupedQueryAttention:
    """Return a random MHA whose K/V heads sit `spread` of the way from their group's mean to random."""
    mha = GroupedQueryAttention(d_model, num_heads, num_heads, head_dim)
    with torch.no_grad():
        for proj in (mha.k_proj, mha.v_proj):
            heads = proj.weight.view(kv_heads, num_heads // kv_heads, head_dim, d_model)
            centre = heads.mean(dim=1, keepdim=True)
            heads.copy_(centre + spread * (heads - centre))  # trained heads in a group are related
    return mha


def check_parity(d_model: int, num_heads: int, kv_heads: int, head_dim: int, x: torch.Tensor) -> None:
    """Assert the grouping against a hand-written MHA, a hand-written MQA and PyTorch's own GQA."""
    k = torch.randn(2, kv_heads, 5, head_dim)
    size = num_heads // kv_heads
    expanded = k[:, :, None].expand(-1, -1, size, -1, -1).reshape(2, num_heads, 5, head_dim)
    assert torch.equal(k.repeat_interleave(size, dim=1), expanded), "two spellings of one copy"
    print("repeat_interleave == expand+reshape (Hugging Face's repeat_kv): torch.equal")

    for label, kv, reference in (("MHA", num_heads, reference_mha), ("MQA", 1, reference_mqa)):
        module = GroupedQueryAttention(d_model, num_heads, kv, head_dim)
        diff = max_diff(module(x), reference(x, *module_weights(module), num_heads))
        assert diff <= PARITY_ATOL, f"{label} parity: {diff:.2e}"
        print(f"parity kv_heads={kv} vs hand-written {label}: max |diff| {diff:.1e} <= {PARITY_ATOL:.0e}")

    gqa = GroupedQueryAttention(d_model, num_heads, kv_heads, head_dim)
    q = gqa.split_heads(gqa.q_proj(x), num_heads)
    fused = F.scaled_dot_product_attention(q, *gqa.project_kv(x), is_causal=True, enable_gqa=True)
    diff = max_diff(gqa(x), gqa.o_proj(fused.transpose(1, 2).flatten(start_dim=2)))
    assert diff <= PARITY_ATOL, f"GQA parity: {diff:.2e}"
    print(f"parity kv_heads={kv_heads} vs sdpa(enable_gqa=True): max |diff| {diff:.1e} <= {PARITY_ATOL:.0e}")


def check_uptraining(d_model: int, num_heads: int, kv_heads: int, head_dim: int, x: torch.Tensor,
                     spread: float) -> None:
    """Convert MHA checkpoints to GQA; pooling is lossless when a group's heads already agree."""
    tied = mha_checkpoint(d_model, num_heads, kv_heads, head_dim, spread=0.0)
    diff = max_diff(gqa_from_mha(tied, kv_heads)(x), tied(x))
    assert diff <= PARITY_ATOL, f"pooling identical heads must be lossless: {diff:.2e}"
    print(f"uptraining init, heads equal within groups: max |diff| {diff:.1e} (lossless)")

    mha = mha_checkpoint(d_model, num_heads, kv_heads, head_dim, spread=spread)
    target = mha(x)
    errors = {pool: relative_error(gqa_from_mha(mha, kv_heads, pool)(x), target)
              for pool in ("mean", "first")}
    assert errors["mean"] <= errors["first"], "the group mean is the closer single head"
    print(f"uptraining init, heads spread {spread}: relative output error "
          f"mean-pool {errors['mean']:.3f}, first-head {errors['first']:.3f}")


def print_report(args: argparse.Namespace) -> None:
    """Check parity and uptraining, then print parameters and KV-cache bytes per variant."""
    torch.manual_seed(args.seed)
    d_model, heads, head_dim = args.num_heads * args.head_dim, args.num_heads, args.head_dim
    x = torch.randn(args.batch, args.seq_len, d_model)
    print(f"toy attention: d_model={d_model}, heads={heads}, head_dim={head_dim}, "
          f"layers={args.num_layers}, batch={args.batch}, seq={args.seq_len}, fp32")
    with torch.no_grad():
        check_parity(d_model, heads, args.kv_heads, head_dim, x)
        check_uptraining(d_model, heads, args.kv_heads, head_dim, x, args.spread)

        print(f"\nper variant: attention params per layer, "
              f"KV cache per token ({args.num_layers} layers, fp32)")
        for label, kv in (("MHA", heads), ("GQA", args.kv_heads), ("MQA", 1)):
            module = GroupedQueryAttention(d_model, heads, kv, head_dim)
            params = sum(p.numel() for p in module.parameters())
            assert params == attention_params(d_model, heads, kv, head_dim)
            k, v = module.project_kv(x)  # measure the real cache tensors, then check the formulas
            tokens = args.batch * args.seq_len
            total = (k.nbytes + v.nbytes) * args.num_layers
            assert total == kv_cache_bytes(tokens, args.num_layers, kv, head_dim, x.element_size())
            cached = total // tokens
            assert cached == kv_cache_bytes_per_token(args.num_layers, kv, head_dim, x.element_size())
            print(f"  {label} kv_heads={kv} group={heads // kv}: "
                  f"params {params:,}, kv cache {cached:,} B/token, {total:,} B for {tokens} tokens")

    print("\npublished configs (KV cache per token: all layers, bf16)")
    for name, shape in PUBLISHED.items():
        per_token = kv_cache_bytes_per_token(shape.num_layers, shape.kv_heads, shape.head_dim, BF16_BYTES)
        d_model = shape.num_heads * shape.head_dim  # true of all four configs
        params = attention_params(d_model, shape.num_heads, shape.kv_heads, shape.head_dim)
        as_mha = kv_cache_bytes_per_token(shape.num_layers, shape.num_heads, shape.head_dim, BF16_BYTES)
        ratio = mha_cache_ratio(*shape, BF16_BYTES)
        print(f"  {name} (layers={shape.num_layers}, heads={shape.num_heads}, kv_heads={shape.kv_heads}, "
              f"head_dim={shape.head_dim}): kv cache {per_token:,} B/token, as MHA {as_mha:,} "
              f"({ratio:g}x); attention params/layer {params:,}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the toy model's shape from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2, help="K/V heads of the GQA variant")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=4, help="layers counted in the KV cache")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--spread", type=float, default=0.25,
                        help="how far an MHA checkpoint's K/V heads stray from their group mean")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.num_heads % args.kv_heads:
        parser.error("--num-heads must be a multiple of --kv-heads")
    return args


if __name__ == "__main__":
    print_report(parse_args())
