"""Lab 12's figures checked against exact arithmetic and a published model config.

Exact figures: a 4096 x 4096 layer holds 16,777,216 weights, so fp32 is 67,108,864 bytes and fp16
33,554,432; int8 with one fp16 scale per output row is 8 + 16/4096 bits per weight (16,785,408
bytes); int4 packed two per byte with one fp16 scale per 128 weights is 4 + 16/128 = 4.125 bits
per weight (8,650,752 bytes). Published config (Hugging Face config.json of
meta-llama/Llama-2-7b-hf, https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json):
32 layers, 32 attention heads, 32 key/value heads, hidden_size 4096, intermediate_size 11008, so
head_dim 128 and an fp16 KV cache of 524,288 bytes per token, as lab 07 also checks, and a
down_proj weight of 4096 x 11008.
"""

from __future__ import annotations

import pytest
import torch
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-12-quantization/quantization.py"
quant = load_starter(STARTER)

# https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
LLAMA2_7B = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
             "hidden_size": 4096, "intermediate_size": 11008}


def test_int4_packing_round_trips_every_code_and_every_byte() -> None:
    codes = torch.arange(-8, 8, dtype=torch.int8)
    assert torch.equal(quant.unpack_int4(quant.pack_int4(codes)), codes)
    every_byte = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    assert torch.equal(quant.pack_int4(quant.unpack_int4(every_byte)), every_byte)
    # Even columns go to the low nibble: codes (-8, 7) are nibbles (0, 15), so the byte is 0xF0.
    assert quant.pack_int4(torch.tensor([-8, 7], dtype=torch.int8)).tolist() == [0xF0]


@pytest.mark.parametrize("rows, cols", [(256, 1024), (1024, 384)])
def test_packed_int4_groups_of_128_take_exactly_4_125_bits_per_weight(rows: int, cols: int) -> None:
    weight = torch.randn(rows, cols, generator=torch.Generator().manual_seed(0))
    codes, scales = quant.quantize_groups(weight, 128, quant.INT4_MAX)
    packed = quant.pack_int4(codes)
    assert packed.dtype == torch.uint8 and packed.shape == (rows, cols // 2)
    assert scales.dtype == torch.float16 and scales.shape == (rows, cols // 128)
    size = quant.nbytes(packed, scales)
    assert size == rows * cols // 2 + 2 * rows * cols // 128
    assert 8 * size / weight.numel() == 4.125
    int8_codes, int8_scales = quant.quantize_groups(weight, cols, quant.INT8_MAX)
    assert quant.nbytes(int8_codes, int8_scales) == rows * cols + 2 * rows  # one fp16 scale a row


@pytest.mark.parametrize("rows, cols, bits, group", [(4096, 4096, 4, 128), (4096, 4096, 8, 4096),
                                                     (96, 1024, 4, 32), (96, 1024, 8, 128),
                                                     (64, 384, 4, 384)])
def test_quantized_bytes_counts_the_bytes_of_the_real_tensors(rows: int, cols: int, bits: int,
                                                              group: int) -> None:
    weight = torch.randn(rows, cols, generator=torch.Generator().manual_seed(6))
    qmax = quant.INT4_MAX if bits == 4 else quant.INT8_MAX
    codes, scales = quant.quantize_groups(weight, group, qmax)
    stored = quant.pack_int4(codes) if bits == 4 else codes
    size = quant.quantized_bytes(rows, cols, bits, group, quant.SCALE_DTYPE.itemsize)
    assert (size.codes, size.scales) == (quant.nbytes(stored), quant.nbytes(scales))
    assert size.total == quant.nbytes(stored, scales)
    assert size.overhead == size.scales / size.codes
    assert size.bits_per_weight == 8 * size.total / weight.numel() == bits + 16 / group


def test_quantized_bytes_gives_a_partial_group_and_an_odd_row_their_bytes() -> None:
    # 100 columns in groups of 64: two scales a row; 101 int4 codes: 51 bytes a row.
    assert quant.quantized_bytes(3, 100, 4, 64, 2).scales == 3 * 2 * 2
    assert quant.quantized_bytes(3, 101, 4, 64, 2).codes == 3 * 51


def test_llama_2_7b_layouts_follow_its_config() -> None:
    hidden, ffn = LLAMA2_7B["hidden_size"], LLAMA2_7B["intermediate_size"]
    layers = LLAMA2_7B["num_hidden_layers"]
    # Rows x cols: q, k, v, o hidden x hidden; gate, up ffn x hidden; down_proj hidden x ffn.
    block = [(hidden, hidden)] * 4 + [(ffn, hidden)] * 2 + [(hidden, ffn)]
    weights = layers * sum(rows * cols for rows, cols in block)
    assert weights == 6_476_005_376
    assert quant.LLAMA2_7B_LAYOUTS == {
        "Llama-2-7B down_proj, int4 g128": (4096, 11008, 4, 128),
        "Llama-2-7B down_proj, int8 per-channel": (4096, 11008, 8, 11008),
        "Llama-2-7B 32 blocks, int4 g128": (weights // 4096, 4096, 4, 128),
    }
    # Rows of 4096 count the same bytes as the real matrices: 128 divides 4096 and 11008.
    real = [quant.quantized_bytes(rows, cols, 4, 128, 2) for rows, cols in block]
    layouts = quant.LLAMA2_7B_LAYOUTS
    laid_out = quant.quantized_bytes(*layouts["Llama-2-7B 32 blocks, int4 g128"], 2)
    assert laid_out.codes == layers * sum(size.codes for size in real) == 3_238_002_688
    assert laid_out.scales == layers * sum(size.scales for size in real) == 101_187_584
    down_int4 = quant.quantized_bytes(*layouts["Llama-2-7B down_proj, int4 g128"], 2)
    assert (down_int4.codes, down_int4.scales) == (4096 * 11008 // 2, 4096 * 86 * 2)
    down_int8 = quant.quantized_bytes(*layouts["Llama-2-7B down_proj, int8 per-channel"], 2)
    assert (down_int8.codes, down_int8.scales) == (4096 * 11008, 4096 * 2)


def test_group_dequantization_is_within_half_a_step_of_each_weight() -> None:
    weight = torch.randn(64, 512, generator=torch.Generator().manual_seed(1))
    codes, scales = quant.quantize_groups(weight, 128, quant.INT4_MAX)
    assert codes.abs().max() <= quant.INT4_MAX
    error = (quant.dequantize_groups(codes, scales) - weight).reshape(64, 4, 128).abs()
    assert (error <= scales.float()[..., None] / 2).all()


def test_smaller_groups_confine_an_outlier() -> None:
    weight = torch.randn(64, 1024, generator=torch.Generator().manual_seed(5))
    weight[0, 0] = 10 * weight.abs().max()
    errors = {}
    for group in (1024, 128):
        codes, scales = quant.quantize_groups(weight, group, quant.INT4_MAX)
        errors[group] = quant.relative_error(quant.dequantize_groups(codes, scales), weight)
    assert errors[128] < errors[1024]


def int8_relative_error(weight: torch.Tensor, scale: torch.Tensor) -> float:
    q = quant.quantize(weight, scale, quant.INT8_MAX)
    return quant.relative_error(quant.dequantize(q, scale), weight)


def test_per_channel_int8_beats_per_tensor_when_row_ranges_differ() -> None:
    generator = torch.Generator().manual_seed(2)
    weight = torch.randn(256, 512, generator=generator) * torch.logspace(-2, 0, 256)[:, None]
    per_tensor = quant.absmax_scale(weight, quant.INT8_MAX)
    per_row = quant.absmax_scale(weight, quant.INT8_MAX, dim=1)
    assert int8_relative_error(weight, per_row) * 2 < int8_relative_error(weight, per_tensor)
    # One outlier stretches the shared step tenfold; per-channel confines it to its own row.
    weight[-1, 0] = 10 * weight.abs().max()
    per_tensor = quant.absmax_scale(weight, quant.INT8_MAX)
    per_row = quant.absmax_scale(weight, quant.INT8_MAX, dim=1)
    assert int8_relative_error(weight, per_row) * 4 < int8_relative_error(weight, per_tensor)
    # The smallest rows now fall under half of the shared step and vanish; their own scales keep them.
    assert (quant.quantize(weight, per_tensor, quant.INT8_MAX) == 0).all(dim=1).any()
    assert not (quant.quantize(weight, per_row, quant.INT8_MAX) == 0).all(dim=1).any()


def test_int8_matmul_equals_the_matmul_of_the_dequantized_operands() -> None:
    # The scales factor out of the int32 accumulation, so integer and float paths agree.
    generator = torch.Generator().manual_seed(3)
    x, weight = torch.randn(16, 256, generator=generator), torch.randn(32, 256, generator=generator)
    x_scale = quant.absmax_scale(x, quant.INT8_MAX, dim=1)
    w_scale = quant.absmax_scale(weight, quant.INT8_MAX, dim=1)
    x_back = quant.dequantize(quant.quantize(x, x_scale, quant.INT8_MAX), x_scale)
    w_back = quant.dequantize(quant.quantize(weight, w_scale, quant.INT8_MAX), w_scale)
    assert torch.allclose(quant.int8_matmul(x, weight), x_back @ w_back.T, rtol=1e-5, atol=1e-5)


def test_llm_int8_sends_outlier_channels_through_the_float_path() -> None:
    generator = torch.Generator().manual_seed(4)
    x, weight = torch.randn(8, 64, generator=generator), torch.randn(16, 64, generator=generator)
    assert torch.equal(quant.llm_int8_matmul(x, weight, threshold=float("inf")),
                       quant.int8_matmul(x, weight))
    # Only channels 3 and 40 are non-zero, both above the threshold: the int8 part sees zeros,
    # so the result is the exact float matmul, which plain int8 does not reproduce.
    spiky = torch.zeros_like(x)
    spiky[:, [3, 40]] = 10 + x[:, [3, 40]].abs()
    assert torch.allclose(quant.llm_int8_matmul(spiky, weight, threshold=6.0), spiky @ weight.T)
    assert not torch.allclose(quant.int8_matmul(spiky, weight), spiky @ weight.T)


def test_kv_cache_bytes_per_token_for_llama_2_7b() -> None:
    head_dim = LLAMA2_7B["hidden_size"] // LLAMA2_7B["num_attention_heads"]
    layers, kv_heads = LLAMA2_7B["num_hidden_layers"], LLAMA2_7B["num_key_value_heads"]
    assert quant.kv_bytes_per_token(layers, kv_heads, head_dim, int8=False) == 524_288
    # int8 codes plus one fp16 scale per layer, head and token, for K and for V.
    assert quant.kv_bytes_per_token(layers, kv_heads, head_dim, int8=True) == 2 * 32 * 32 * 130 == 266_240


def test_the_printed_report_carries_the_tested_figures(capsys: pytest.CaptureFixture[str]) -> None:
    generator = torch.Generator().manual_seed(0)
    quant.int4_weights(quant.parse_args([]), generator)  # the sections that print these figures
    quant.int8_kv_cache(quant.parse_args([]), generator)
    out = capsys.readouterr().out
    # A 4096 x 4096 layer: 16,777,216 weights.
    assert "pack/unpack round trip: exact (16,777,216 codes in 8,388,608 bytes)" in out
    assert "fp32               67,108,864 bytes  32.0 bits/weight" in out
    assert "fp16               33,554,432 bytes  16.0 bits/weight" in out
    assert "int8 per-channel   16,785,408 bytes  8.00390625 bits/weight" in out
    assert "int4 g128           8,650,752 bytes  4.125 bits/weight" in out
    assert ("scales: int8 per-channel 8,192 bytes (0.049% of the codes), "
            "int4 g128 262,144 bytes (3.125% of the codes)") in out
    assert "codes 22,544,384 + scales 704,512 = 23,248,896 bytes, 4.125 bits/weight" in out
    assert "codes 45,088,768 + scales 8,192 = 45,096,960 bytes" in out
    assert "codes 3,238,002,688 + scales 101,187,584 = 3,339,190,272 bytes, 4.125 bits" in out
    assert "fp16 524,288 bytes, int8 + scales 266,240 bytes" in out


def test_outlier_key_channels_break_the_bound_random_keys_keep() -> None:
    """KIVI (arXiv 2402.02750: "the key cache should be quantized per-channel") and KVQuant (arXiv
    2401.18079: "Per-Channel Key Quantization") both quantize keys per channel, because real keys
    have a few channels that are large in every token. The starter mimics such keys."""
    generator = torch.Generator().manual_seed(7)
    k, v = (torch.randn(4, 512, 64, generator=generator) for _ in range(2))
    q = torch.randn(4, 8, 64, generator=generator)
    quant.outlier_keys(quant.parse_args([]), q, k, v)  # asserts per-token fails, per-channel helps
    # Without large channels, per-token scales keep the attention error within twice K's own.
    with pytest.raises(AssertionError, match="no longer holds"):
        quant.outlier_keys(quant.parse_args(["--key-outlier-scale", "1"]), q, k, v)
