"""Weight and KV-cache quantization in plain PyTorch: int8 channels, int4 groups, an int8 cache.

Four demonstrations, each asserting its own claim:
1. int8 weights: one scale per output channel against one scale for the whole tensor;
2. symmetric int4 weights in groups of 128 along the input dimension, packed two per byte, and the
   exact memory of a 4096 x 4096 layer in fp32, fp16, int8 and int4, then of Llama-2-7B's weights;
3. an int8 KV cache with one scale per head and token, and attention computed from it, with random
   keys and with keys that have a few large channels, as real keys do;
4. activation outliers: why they hurt an int8 x int8 matmul, and what LLM.int8 and SmoothQuant do.
"""

from __future__ import annotations

import argparse
import math
from typing import NamedTuple

import torch

INT8_MAX = 127  # symmetric int8 uses [-127, 127]; -128 stays unused so +x and -x round alike
INT4_MAX = 7  # symmetric int4 uses [-7, 7] of its 16 codes, for the same reason
SCALE_DTYPE = torch.float16  # every scale is stored in fp16 and counted in the memory figures

# Llama-2-7B's config.json (huggingface.co/meta-llama/Llama-2-7b-hf): hidden_size 4096,
# intermediate_size 11008, num_hidden_layers 32.
# Each block holds q, k, v, o (4096 x 4096), gate and up (11008 x 4096) and down (4096 x 11008).
HIDDEN, FFN, LAYERS = 4096, 11008, 32
BLOCK_WEIGHTS = 4 * HIDDEN * HIDDEN + 3 * FFN * HIDDEN
LLAMA2_7B_LAYOUTS = {  # label: (rows, cols, bits, group_size), with fp16 scales
    "Llama-2-7B down_proj, int4 g128": (HIDDEN, FFN, 4, 128),
    "Llama-2-7B down_proj, int8 per-channel": (HIDDEN, FFN, 8, FFN),
    # Every input dimension (4096, 11008) is a multiple of 128, so laying the 32 blocks' weights
    # out as rows of 4096 gives the same count of groups of 128 as the real matrices do.
    "Llama-2-7B 32 blocks, int4 g128": (LAYERS * BLOCK_WEIGHTS // HIDDEN, HIDDEN, 4, 128),
}


# region quantizers
def absmax_scale(x: torch.Tensor, qmax: int, dim: int | None = None) -> torch.Tensor:
    """Return the fp16 scale that maps the largest |x| (over `dim`, or all of x) to `qmax`."""
    amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    # An all-zero slice would get scale 0 and divide 0 by 0; any positive scale stores it exactly.
    return (amax / qmax).clamp(min=torch.finfo(SCALE_DTYPE).smallest_normal).to(SCALE_DTYPE)


def quantize(x: torch.Tensor, scale: torch.Tensor, qmax: int) -> torch.Tensor:
    """Round x / scale to the nearest integer in [-qmax, qmax] and store it as int8."""
    # The clamp only matters when rounding the scale to fp16 made it a hair too small.
    return torch.round(x / scale.float()).clamp(-qmax, qmax).to(torch.int8)


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale.float()


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Pack int4 codes in [-8, 7] two per uint8: even columns in the low nibble, odd in the high."""
    nibbles = (q + 8).to(torch.uint8)  # offset binary: -8..7 becomes 0..15
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Undo `pack_int4` exactly."""
    low, high = packed & 0x0F, packed >> 4
    return torch.stack((low, high), dim=-1).flatten(-2).to(torch.int8) - 8


def quantize_groups(weight: torch.Tensor, group_size: int,
                    qmax: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (codes, fp16 scales) with one scale per `group_size` inputs of each output row."""
    rows, cols = weight.shape
    groups = weight.reshape(rows, cols // group_size, group_size)
    scales = absmax_scale(groups, qmax, dim=-1)  # (rows, groups, 1): an outlier spoils one group
    return quantize(groups, scales, qmax).reshape(rows, cols), scales.squeeze(-1)


def dequantize_groups(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return dequantize(codes.reshape(*scales.shape, -1), scales[..., None]).reshape(codes.shape)


def quantize_kv(cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize K or V (heads, tokens, head_dim) to int8 with one scale per head and token."""
    # Per token: a new token is quantized on its own when appended, and older entries never change.
    scale = absmax_scale(cache, INT8_MAX, dim=-1)
    return quantize(cache, scale, INT8_MAX), scale


def int8_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Compute x @ weight.T as int8 x int8 -> int32, with per-token and per-channel scales."""
    x_scale, w_scale = absmax_scale(x, INT8_MAX, dim=1), absmax_scale(weight, INT8_MAX, dim=1)
    acc = quantize(x, x_scale, INT8_MAX).int() @ quantize(weight, w_scale, INT8_MAX).int().T
    # Both scales sit outside the sum over input channels, so they factor out of the integer
    # matmul. A scale per input channel would sit inside it, which is why activations get none.
    return acc.float() * x_scale.float() * w_scale.float().T


def llm_int8_matmul(x: torch.Tensor, weight: torch.Tensor, threshold: float) -> torch.Tensor:
    """LLM.int8's decomposition: input channels with any |x| over the threshold stay in float."""
    outlier = x.abs().amax(dim=0) > threshold  # found at run time, for every input
    return int8_matmul(x[:, ~outlier], weight[:, ~outlier]) + x[:, outlier] @ weight[:, outlier].T


def smoothquant_matmul(x: torch.Tensor, weight: torch.Tensor, act_absmax: torch.Tensor,
                       alpha: float) -> torch.Tensor:
    """SmoothQuant: move part of each input channel's range from x into w, then run int8."""
    # x @ w.T == (x / s) @ (w * s).T for any s > 0. In a model, 1/s folds into the preceding
    # LayerNorm and s into the weight offline, so the smoothing costs nothing at run time.
    s = act_absmax**alpha / weight.abs().amax(dim=0) ** (1 - alpha)
    return int8_matmul(x / s, weight * s)
# endregion


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return ((approx - exact).norm() / exact.norm()).item()


def weight_errors(label: str, weight: torch.Tensor, approx: torch.Tensor,
                  x: torch.Tensor) -> dict[str, float]:
    """Print and return the weight error (max abs, relative Frobenius) and that of x @ weight.T."""
    err = {"max abs": (approx - weight).abs().max().item(),
           "relative": relative_error(approx, weight),
           "matmul": relative_error(x @ approx.T, x @ weight.T)}
    print(f"  {label:<17} weight max abs error {err['max abs']:.3e}, "
          f"relative {err['relative']:.3e}; matmul relative error {err['matmul']:.3e}")
    return err


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class QuantizedBytes(NamedTuple):
    codes: int  # bytes of the packed codes
    scales: int  # bytes of the scales
    total: int
    overhead: float  # scales / codes
    bits_per_weight: float  # 8 * total / weights


def quantized_bytes(rows: int, cols: int, bits: int, group_size: int,
                    scale_bytes: int) -> QuantizedBytes:
    """Bytes of a rows x cols weight as `bits`-bit codes with one scale per `group_size` inputs.

    Codes are packed along each row (two int4 codes per byte); groups run along the input
    dimension, and a partial last group still needs its scale. `group_size = cols` is per-channel.
    """
    codes = rows * math.ceil(cols * bits / 8)
    scales = rows * math.ceil(cols / group_size) * scale_bytes
    total = codes + scales
    return QuantizedBytes(codes, scales, total, scales / codes, 8 * total / (rows * cols))


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, int8: bool) -> int:
    """Bytes of K and V for one token: fp16, or int8 plus one fp16 scale per layer and head."""
    per_vector = head_dim + SCALE_DTYPE.itemsize if int8 else 2 * head_dim
    return 2 * layers * kv_heads * per_vector


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax attention of new queries over every cached position, per head."""
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1) @ v


def int8_weights(args: argparse.Namespace, gen: torch.Generator) -> None:
    """Section 1: per-tensor against per-channel int8 on rows with very different ranges."""
    rows, cols = args.rows, args.cols
    # Row magnitudes spread over 100x, plus one weight 10x the largest: ranges differ per row.
    row_scale = torch.logspace(-2, 0, rows)[torch.randperm(rows, generator=gen)]
    weight = torch.randn(rows, cols, generator=gen) * row_scale[:, None]
    weight[0, 0] = 10 * weight.abs().max()
    x = torch.randn(args.batch, cols, generator=gen)
    print(f"1. int8 weights, {rows} x {cols}: row magnitudes span 100x, one weight 10x the largest")
    tensor_scale, row_scales = absmax_scale(weight, INT8_MAX), absmax_scale(weight, INT8_MAX, dim=1)
    per_tensor = quantize(weight, tensor_scale, INT8_MAX)
    per_row = quantize(weight, row_scales, INT8_MAX)
    tensor_err = weight_errors("per-tensor int8", weight, dequantize(per_tensor, tensor_scale), x)
    row_err = weight_errors("per-channel int8", weight, dequantize(per_row, row_scales), x)
    zero_rows = [int((q == 0).all(dim=1).sum()) for q in (per_tensor, per_row)]
    print(f"  rows rounded to all zeros: per-tensor {zero_rows[0]} of {rows}, "
          f"per-channel {zero_rows[1]} of {rows}")
    assert zero_rows[1] == 0
    # Round to nearest: every weight lies within half a step of its own row's grid.
    assert ((dequantize(per_row, row_scales) - weight).abs() <= row_scales.float() / 2).all()
    assert row_err["matmul"] * 4 < tensor_err["matmul"], "per-channel scales must be more accurate"


def int4_weights(args: argparse.Namespace, gen: torch.Generator) -> None:
    """Section 2: group-wise int4, packed, and the exact memory of each weight layout."""
    dim, g = args.layer_dim, args.group_size
    weight = torch.randn(dim, dim, generator=gen) * 0.02
    weight[0, 0] = 10 * weight.abs().max()
    x = torch.randn(args.batch, dim, generator=gen)
    print(f"\n2. int4 weights, {dim} x {dim}: symmetric (no zero-point), group size {g} along the "
          "input dimension, fp16 scales")
    codes, scales = quantize_groups(weight, g, INT4_MAX)
    packed = pack_int4(codes)  # only packed codes actually take 4 bits; int8 codes take 8
    every_code = torch.arange(-8, 8, dtype=torch.int8)
    assert torch.equal(unpack_int4(pack_int4(every_code)), every_code)
    assert torch.equal(unpack_int4(packed), codes), "pack/unpack must round-trip exactly"
    print(f"  pack/unpack round trip: exact ({codes.numel():,} codes in {packed.numel():,} bytes)")
    row_codes, row_scales = quantize_groups(weight, dim, INT4_MAX)  # a single group per row
    int4_row_err = weight_errors("int4 per-channel", weight,
                                 dequantize_groups(row_codes, row_scales), x)
    int4_err = weight_errors(f"int4 g{g}", weight,
                             dequantize_groups(unpack_int4(packed), scales), x)
    int8_codes, int8_scales = quantize_groups(weight, dim, INT8_MAX)
    weight_errors("int8 per-channel", weight, dequantize_groups(int8_codes, int8_scales), x)
    assert int4_err["matmul"] < int4_row_err["matmul"], "smaller groups must be more accurate"

    int8_size = quantized_bytes(dim, dim, 8, dim, SCALE_DTYPE.itemsize)
    int4_size = quantized_bytes(dim, dim, 4, g, SCALE_DTYPE.itemsize)
    # The arithmetic agrees with the real tensors, byte for byte.
    assert (int8_size.codes, int8_size.scales) == (nbytes(int8_codes), nbytes(int8_scales))
    assert (int4_size.codes, int4_size.scales) == (nbytes(packed), nbytes(scales))
    layouts = {"fp32": nbytes(weight), "fp16": nbytes(weight.half()),
               "int8 per-channel": int8_size.total, f"int4 g{g}": int4_size.total}
    print(f"  memory of one {dim} x {dim} layer, scales included:")
    for name, size in layouts.items():
        print(f"    {name:<17}{size:>12,} bytes  {8 * size / weight.numel()} bits/weight")
    assert layouts["fp32"] == 2 * layouts["fp16"] == 4 * weight.numel()
    # 4 bits per code plus one 16-bit scale shared by g codes: 4 + 16/128 = 4.125 at g = 128.
    assert 8 * layouts[f"int4 g{g}"] == (4 + 16 / g) * weight.numel()
    assert 8 * layouts["int8 per-channel"] == (8 + 16 / dim) * weight.numel()
    print(f"  scales: int8 per-channel {int8_size.scales:,} bytes ({int8_size.overhead:.3%} of the "
          f"codes), int4 g{g} {int4_size.scales:,} bytes ({int4_size.overhead:.3%} of the codes)")
    print(f"  int4 g{g} is {layouts['fp16'] / layouts[f'int4 g{g}']:.2f}x smaller than fp16")
    print(f"  Llama-2-7B ({LAYERS} layers, hidden {HIDDEN}, MLP {FFN}), fp16 scales:")
    for label, (rows, cols, bits, group) in LLAMA2_7B_LAYOUTS.items():
        size = quantized_bytes(rows, cols, bits, group, SCALE_DTYPE.itemsize)
        name, shape = label.removeprefix("Llama-2-7B "), f"{rows:,} x {cols:,}"
        print(f"    {name:<28}{shape:>18}: codes {size.codes:,} + scales {size.scales:,} = "
              f"{size.total:,} bytes, {size.bits_per_weight:g} bits/weight")


def int8_kv_cache(args: argparse.Namespace, gen: torch.Generator) -> None:
    """Section 3: attention over an int8 cache against fp32, and the bytes it saves."""
    heads, tokens, head_dim = args.kv_heads, args.cache_len, args.head_dim
    k, v = (torch.randn(heads, tokens, head_dim, generator=gen) for _ in range(2))
    q = torch.randn(heads, args.new_tokens, head_dim, generator=gen)
    print(f"\n3. int8 KV cache: {heads} heads x {tokens:,} cached tokens x head_dim {head_dim}, "
          f"{args.new_tokens} new queries; one fp16 scale per head and token")
    (k_q, k_scale), (v_q, v_scale) = quantize_kv(k), quantize_kv(v)
    k_back, v_back = dequantize(k_q, k_scale), dequantize(v_q, v_scale)
    cache_err = max(relative_error(k_back, k), relative_error(v_back, v))
    reference = attention(q, k, v)
    int8_err = relative_error(attention(q, k_back, v_back), reference)
    fp16_err = relative_error(attention(q, k.half().float(), v.half().float()), reference)
    print(f"  K and V round trip: relative error up to {cache_err:.3e}")
    print(f"  attention output relative error vs fp32: int8 cache {int8_err:.3e} (bound 2e-02), "
          f"fp16 cache {fp16_err:.3e}")
    # For random K and V the two round-trip errors add roughly in quadrature (about 1.4x).
    assert fp16_err < int8_err < min(2 * cache_err, 2e-2)
    outlier_keys(args, q, k, v)
    fp16_bytes, int8_bytes = nbytes(k.half(), v.half()), nbytes(k_q, v_q, k_scale, v_scale)
    print(f"  cache bytes: fp32 {nbytes(k, v):,}, fp16 {fp16_bytes:,}, "
          f"int8 + scales {int8_bytes:,} ({fp16_bytes / int8_bytes:.2f}x smaller than fp16)")
    assert int8_bytes == tokens * kv_bytes_per_token(1, heads, head_dim, int8=True)
    layers, kv_heads, dim = 32, 32, 128  # Llama-2-7B's config.json
    print(f"  Llama-2-7B per token ({layers} layers x {kv_heads} KV heads x {dim}): fp16 "
          f"{kv_bytes_per_token(layers, kv_heads, dim, int8=False):,} bytes, int8 + scales "
          f"{kv_bytes_per_token(layers, kv_heads, dim, int8=True):,} bytes")


def outlier_keys(args: argparse.Namespace, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor) -> None:
    """Give the keys a few channels that are large in every token; compare key scale axes."""
    k = k.clone()
    k[..., : args.outlier_channels] *= args.key_outlier_scale  # which channels does not matter here
    reference = attention(q, k, v)
    by_token = dequantize(*quantize_kv(k))  # one scale per token: the big channels set every step
    channel_scale = absmax_scale(k, INT8_MAX, dim=-2)  # one scale per head and channel, all tokens
    by_channel = dequantize(quantize(k, channel_scale, INT8_MAX), channel_scale)
    key_err = relative_error(by_token, k)  # small: the big channels dominate the norm of K
    token_err = relative_error(attention(q, by_token, v), reference)
    channel_err = relative_error(attention(q, by_channel, v), reference)
    print(f"  keys with {args.outlier_channels} channels scaled {args.key_outlier_scale:g}x: "
          f"K round trip {key_err:.3e}; attention output error with per-token key scales "
          f"{token_err:.3e}, per-channel {channel_err:.3e}")
    assert token_err > 2 * key_err, "the bound that held for random keys no longer holds"
    assert channel_err < token_err / 2, "per-channel scales must isolate the big channels"


def activation_outliers(args: argparse.Namespace, gen: torch.Generator) -> None:
    """Section 4: outlier activation channels in W8A8, with LLM.int8 and SmoothQuant."""
    weight = torch.randn(args.rows, args.cols, generator=gen) * 0.02
    outlier_channels = torch.randperm(args.cols, generator=gen)[: args.outlier_channels]

    def activations(outliers: bool) -> torch.Tensor:
        x = torch.randn(args.batch, args.cols, generator=gen)
        if outliers:  # the same few channels are large in every token
            x[:, outlier_channels] *= args.outlier_scale
        return x

    clean, spiky, calibration = activations(False), activations(True), activations(True)
    print(f"\n4. activations: int8 x int8 -> int32 matmul, {args.batch} tokens x {args.cols} "
          f"channels, {args.outlier_channels} channels scaled {args.outlier_scale:g}x")
    exact = spiky @ weight.T
    errs = {"no outlier channels": relative_error(int8_matmul(clean, weight), clean @ weight.T),
            "with outlier channels": relative_error(int8_matmul(spiky, weight), exact),
            "LLM.int8 decomposition": relative_error(
                llm_int8_matmul(spiky, weight, args.outlier_threshold), exact),
            f"SmoothQuant, alpha {args.alpha}": relative_error(smoothquant_matmul(
                spiky, weight, calibration.abs().amax(dim=0), args.alpha), exact)}
    for label, err in errs.items():
        print(f"  {label + ':':<28} matmul relative error {err:.3e}")
    clean_err, spiky_err, mixed_err, smooth_err = errs.values()
    assert spiky_err > 3 * clean_err, "a few large channels must inflate every token's scale"
    assert mixed_err < spiky_err / 4 and smooth_err < spiky_err / 2


def print_report(args: argparse.Namespace) -> None:
    """Run the four demonstrations from one seed; each asserts its claims and prints its figures."""
    gen = torch.Generator().manual_seed(args.seed)
    for section in (int8_weights, int4_weights, int8_kv_cache, activation_outliers):
        section(args, gen)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read sizes and the seed from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512, help="output channels, sections 1 and 4")
    parser.add_argument("--cols", type=int, default=1024, help="input channels, sections 1 and 4")
    parser.add_argument("--batch", type=int, default=64, help="activation rows (tokens)")
    parser.add_argument("--layer-dim", type=int, default=4096, help="square layer of section 2")
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--cache-len", type=int, default=1024)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--outlier-channels", type=int, default=4)
    parser.add_argument("--outlier-scale", type=float, default=50.0)
    parser.add_argument("--key-outlier-scale", type=float, default=20.0,
                        help="section 3: factor on the large key channels")
    parser.add_argument("--outlier-threshold", type=float, default=6.0,
                        help="LLM.int8: |x| above this marks an outlier channel")
    parser.add_argument("--alpha", type=float, default=0.5, help="SmoothQuant migration strength")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.layer_dim % args.group_size or args.group_size % 2:
        parser.error("--layer-dim must be a multiple of an even --group-size")
    return args


if __name__ == "__main__":
    print_report(parse_args())
