"""Lab 09's figures checked against the published formats and exact arithmetic.

Format facts: IEEE 754 binary16 (fp16) has 5 exponent and 10 stored significand bits, so its largest
finite value is 65504, its smallest normal 2^-14 and its smallest subnormal 2^-24; bfloat16 has
1 sign, 8 exponent and 7 stored significand bits (Kalamkar et al., arXiv 1905.12322; Google Cloud
TPU bfloat16 docs), the same exponent field as IEEE binary32 (8 exponent, 23 stored). GradScaler's
defaults (init_scale 2^16, growth_factor 2, backoff_factor 0.5) are those of PyTorch's AMP docs.

TF32: NVIDIA A100 Tensor Core GPU Architecture whitepaper (Figure 9) and NVIDIA's TF32 blog post
(2020-05-14): 8 exponent bits like fp32, 10 mantissa bits like fp16. The PyTorch docs of
torch.set_float32_matmul_precision count stored bits the same way: fp32 23, TF32 10, bf16 7. With
round-to-nearest, p stored bits give a unit roundoff of 2^-(p+1): 2^-24, 2^-11, 2^-8.

FP8: Micikevicius et al., "FP8 Formats for Deep Learning" (arXiv 2209.05433), Table 1, which the OCP
8-bit floating point specification (OFP8) adopts: E4M3 has bias 7, no infinities, NaN only at
S.1111.111, max normal S.1111.110 = 1.75 * 2^8 = 448, min normal 2^-6, min subnormal 2^-9; E5M2 has
bias 15, IEEE infinities, max normal 1.75 * 2^15 = 57344, min normal 2^-14, min subnormal 2^-16.
Casts to E4M3 saturate at 448 (inf included, NaN kept) since PyTorch PR #178817
(torch/headeronly/util/Float8_e4m3fn.h of torch 2.13); E5M2 casts overflow to inf.

Memory: Rajbhandari et al., ZeRO (arXiv 1910.02054), section 3.1: mixed-precision Adam keeps fp16
weights and gradients (2 + 2 bytes) and K = 12 bytes of optimizer state (fp32 master weights,
momentum, variance), 16 bytes per parameter. fp32 Adam is 4 + 4 + 8 by the element sizes alone.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-09-mixed-precision/mixed_precision.py"
mixed = load_starter(STARTER)


@pytest.mark.parametrize(
    "dtype, bits",
    [(torch.float32, (8, 23)), (torch.bfloat16, (8, 7)), (torch.float16, (5, 10))],
    ids=["fp32", "bf16", "fp16"],
)
def test_exponent_and_significand_bits_match_the_published_formats(dtype, bits) -> None:
    assert mixed.format_bits(dtype) == bits


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_finfo_agrees_with_the_bit_layout(dtype) -> None:
    exponent, stored = mixed.format_bits(dtype)
    bias = 2 ** (exponent - 1) - 1
    info = torch.finfo(dtype)
    assert info.max == (2 - 2.0**-stored) * 2.0**bias  # all-ones significand, largest exponent
    assert info.smallest_normal == 2.0 ** (1 - bias)


def test_fp16_limits_are_ieee_binary16() -> None:
    assert torch.finfo(torch.float16).max == 65504
    assert mixed.format_bits(torch.float16) == (5, 10)


def test_bf16_running_sum_stalls_where_predicted_and_fp32_is_exact() -> None:
    values = torch.tensor(0.01, dtype=torch.bfloat16).repeat(10_000)
    assert values[0].item() == 0.010009765625  # 41 / 4096, the nearest bf16 to 0.01
    assert mixed.running_sum(values, torch.bfloat16) == mixed.stall_point(0.01, torch.bfloat16) == 4
    assert mixed.running_sum(values, torch.float32) == 100.09765625


@pytest.mark.parametrize("dtype, stall", [(torch.bfloat16, 256), (torch.float16, 2048)], ids=["bf16", "fp16"])
def test_counting_by_ones_stops_at_the_last_exact_integer_plus_one(dtype, stall: int) -> None:
    # 2^(stored bits + 1): bf16 counts exactly to 256, fp16 to 2048.
    ones = torch.ones(3000, dtype=dtype)
    assert mixed.stall_point(1.0, dtype) == stall
    assert mixed.running_sum(ones, dtype) == stall
    assert mixed.running_sum(ones, torch.float32) == 3000


def test_loss_scaling_rescues_gradients_that_fp16_flushes_to_zero() -> None:
    grads = torch.tensor([1e-9, -1e-8, 2.5e-8])
    assert (mixed.fp16_round_trip(grads, 1.0) == 0).all()
    rescued = mixed.fp16_round_trip(grads, 2.0**16)
    assert ((rescued - grads).abs() / grads.abs()).max() <= 2.0**-11


def test_grad_scaler_skips_the_overflowing_step_then_halves_and_regrows_the_scale() -> None:
    true_grads = [torch.full((4,), 1e-8) for _ in range(6)]
    true_grads[1][0] = 4.0
    history = mixed.dynamic_scaling(true_grads, growth_interval=3)
    assert [scale for scale, _ in history] == [65536, 65536, 32768, 32768, 32768, 65536]
    assert [taken for _, taken in history] == [True, False, True, True, True, True]


def test_autocast_runs_linear_in_bf16_and_losses_in_fp32() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    outputs = mixed.autocast_forward(model, torch.randn(4, 8))
    assert outputs["linear"].dtype == outputs["model output"].dtype == torch.bfloat16
    assert outputs["mse_loss"].dtype == outputs["cross_entropy"].dtype == torch.float32
    assert model[0].weight.dtype == torch.float32


def test_the_printed_report_carries_the_tested_figures(capsys: pytest.CaptureFixture[str]) -> None:
    mixed.print_report(mixed.parse_args([]))
    out = capsys.readouterr().out
    assert "fp16: 5 exponent + 10 stored significand bits, max 65504," in out
    assert "bf16: 8 exponent + 7 stored significand bits," in out
    assert "(stored in bf16 as 0.010009765625)" in out
    assert "exact sum: 100.09765625" in out
    assert "fp32 accumulator over bf16 inputs: 100.09765625" in out
    assert "bf16 accumulator: 4 (predicted stall: 4)" in out
    assert "no scaling: 10,000 of 10,000 flushed to zero" in out


def reference_round(x: float, stored_bits: int) -> float:
    """Round a normal float to `stored_bits` stored significand bits, to nearest, ties to even."""
    mantissa, exponent = math.frexp(x)  # x = mantissa * 2^exponent, 0.5 <= |mantissa| < 1
    steps = mantissa * 2.0 ** (stored_bits + 1)  # kept significand: an integer plus a fraction
    return round(steps) * 2.0 ** (exponent - stored_bits - 1)  # Python's round() is half-to-even


@pytest.mark.parametrize("stored_bits", [10, 7, 3])
def test_round_significand_is_round_to_nearest_even(stored_bits: int) -> None:
    generator = torch.Generator().manual_seed(1)
    exponents = torch.randint(-60, 60, (2000,), generator=generator)
    values = torch.randn(2000, generator=generator) * 2.0**exponents
    rounded = mixed.round_significand(values, stored_bits)
    assert rounded.tolist() == [reference_round(x, stored_bits) for x in values.tolist()]


def test_round_significand_breaks_ties_to_even_and_keeps_the_sign() -> None:
    half_ulp = 2.0**-11  # half the gap between TF32 neighbours at 1.0
    ties = torch.tensor([1 + half_ulp, 1 + 3 * half_ulp, -(1 + half_ulp), -(1 + 3 * half_ulp)])
    assert mixed.round_significand(ties, 10).tolist() == [1.0, 1 + 2**-9, -1.0, -(1 + 2**-9)]


def test_seven_stored_bits_is_exactly_torchs_bf16_cast() -> None:
    generator = torch.Generator().manual_seed(2)
    values = torch.randn(100_000, generator=generator) * 1e30
    values = torch.cat([values, torch.tensor([3.0e38, -3.0e38, 1.2e-38, 0.0, -0.0])])
    assert torch.equal(mixed.round_significand(values, 7), values.bfloat16().float())


def test_tf32_rounding_keeps_the_fp32_exponent_range() -> None:
    tf32_max = (2 - 2.0**-10) * 2.0**127
    smallest_normal = torch.finfo(torch.float32).smallest_normal
    edges = torch.tensor([tf32_max, smallest_normal, -tf32_max])
    assert torch.equal(mixed.round_significand(edges, 10), edges)
    # fp32's largest value has 13 more bits set; rounding them up carries into infinity.
    assert mixed.round_significand(torch.tensor([torch.finfo(torch.float32).max]), 10).isinf().all()


def test_stored_bits_and_unit_roundoffs_match_the_published_formats() -> None:
    assert mixed.STORED_BITS == {"fp32": 23, "tf32": 10, "bf16": 7}
    assert {name: 2.0 ** -(bits + 1) for name, bits in mixed.STORED_BITS.items()} == {
        "fp32": 2.0**-24, "tf32": 2.0**-11, "bf16": 2.0**-8}
    generator = torch.Generator().manual_seed(3)
    values = torch.randn(50_000, generator=generator)
    for bits in (10, 7):
        error = ((mixed.round_significand(values, bits) - values).abs() / values.abs()).max()
        assert error <= 2.0 ** -(bits + 1)


def test_matmul_error_grows_as_stored_bits_shrink() -> None:
    generator = torch.Generator().manual_seed(4)
    a, b = torch.randn(64, 96, generator=generator), torch.randn(96, 32, generator=generator)
    exact = a.double() @ b.double()
    errors = [mixed.relative_error(mixed.round_significand(a, bits) @ mixed.round_significand(b, bits),
                                   exact) for bits in (10, 7)]
    assert mixed.relative_error(a @ b, exact) < errors[0] < 2.0**-11 < errors[1] < 2.0**-8


def test_matmul_settings_are_restored_and_set_onednns_cpu_knob() -> None:
    generator = torch.Generator().manual_seed(5)
    a, b = torch.randn(64, 64, generator=generator), torch.randn(64, 64, generator=generator)
    before = torch.get_float32_matmul_precision()
    results = mixed.matmul_under_each_setting(a, b)
    assert torch.get_float32_matmul_precision() == before == "highest"
    # torch 2.13 maps each setting onto torch.backends.mkldnn.matmul.fp32_precision.
    assert {name: knob for name, (_, knob) in results.items()} == {
        "highest": "ieee", "high": "tf32", "medium": "bf16"}
    assert torch.equal(results["highest"][0], a @ b)
    exact = a.double() @ b.double()
    assert mixed.relative_error(results["medium"][0], exact) < 2.0**-8


FP8_TABLE_1 = {  # (exponent bits, stored bits), max normal, min normal, min subnormal
    "e4m3": (torch.float8_e4m3fn, (4, 3), 448.0, 2.0**-6, 2.0**-9),
    "e5m2": (torch.float8_e5m2, (5, 2), 57344.0, 2.0**-14, 2.0**-16),
}


@pytest.mark.parametrize("name", FP8_TABLE_1)
def test_fp8_limits_match_table_1_of_the_fp8_paper(name: str) -> None:
    dtype, bits, largest, smallest_normal, smallest_subnormal = FP8_TABLE_1[name]
    info = torch.finfo(dtype)
    assert mixed.format_bits(dtype) == bits
    assert info.max == largest == 1.75 * 2.0 ** {"e4m3": 8, "e5m2": 15}[name]
    assert info.smallest_normal == smallest_normal
    assert info.smallest_normal * info.eps == smallest_subnormal
    assert torch.tensor(smallest_subnormal).to(dtype).float().item() == smallest_subnormal
    assert torch.tensor(smallest_subnormal / 2).to(dtype).float().item() == 0.0  # tie to even: 0


def test_e4m3_casts_saturate_and_e5m2_casts_overflow_to_inf() -> None:
    e4m3 = torch.tensor([447.0, 464.0, 465.0, 1e6, math.inf, -math.inf, math.nan])
    cast = e4m3.to(torch.float8_e4m3fn).float().tolist()
    assert cast[:6] == [448.0, 448.0, 448.0, 448.0, 448.0, -448.0] and math.isnan(cast[6])
    e5m2 = torch.tensor([61439.0, 61440.0, 1e6, -1e6]).to(torch.float8_e5m2).float().tolist()
    assert e5m2 == [57344.0, math.inf, math.inf, -math.inf]  # 61440 is the tie, and 57344 is odd


def test_amax_scaling_fits_outliers_that_a_direct_cast_clips() -> None:
    values = torch.randn(4096, generator=torch.Generator().manual_seed(6))
    values[:4] = torch.tensor([1500.0, -900.0, 2000.0, -1200.0])
    scale = 448.0 / values.abs().max().item()
    unscaled = mixed.fp8_round_trip(values, torch.float8_e4m3fn, 1.0)
    scaled = mixed.fp8_round_trip(values, torch.float8_e4m3fn, scale)
    assert unscaled[:4].abs().max() == 448.0  # every outlier clipped to the format's max
    assert mixed.relative_error(unscaled, values.double()) > 0.5
    assert mixed.relative_error(scaled, values.double()) < 2.0**-4


def test_bytes_per_parameter_of_each_recipe() -> None:
    parts = {name: mixed.bytes_per_param(recipe) for name, recipe in mixed.RECIPES.items()}
    assert parts == {"fp32": [4, 4, 0, 8], "bf16 mixed precision": [2, 2, 4, 8],
                     "pure bf16, no master copy": [2, 2, 0, 8]}
    zero_k = 12  # ZeRO sec. 3.1: fp32 master weights, momentum and variance
    assert sum(parts["bf16 mixed precision"]) == 2 + 2 + zero_k == 16 == sum(parts["fp32"])
    assert sum(parts["pure bf16, no master copy"]) == 12


def test_without_a_master_copy_small_updates_round_away() -> None:
    updates = torch.tensor([1.0] + [-1e-3] * 100)
    assert mixed.running_sum(updates, torch.bfloat16) == 1.0  # under half of bf16's gap below 1
    assert mixed.running_sum(updates, torch.float32) == pytest.approx(0.9, abs=1e-5)
    assert 1e-3 < 2.0**-8 / 2  # the gap just below 1.0 in bf16 is 2^-8


def test_the_printed_report_carries_the_new_figures(capsys: pytest.CaptureFixture[str]) -> None:
    mixed.print_report(mixed.parse_args([]))
    out = capsys.readouterr().out
    assert "tf32: 10 stored bits," in out and "<= 2^-11 = 4.883e-04" in out
    assert "e4m3: 4 exponent + 3 stored significand bits, max 448," in out
    assert "e5m2: 5 exponent + 2 stored significand bits, max 57,344," in out
    assert "e4m3 cast: 448 -> 448, 464 -> 448, 1000 -> 448, inf -> 448, nan -> nan" in out
    assert "bf16 mixed precision: 2 + 2 + 4 + 8 = 16 bytes (ZeRO sec. 3.1" in out
    assert "pure bf16, no master copy: 2 + 2 + 0 + 8 = 12 bytes" in out
    assert "bf16 weight 1, fp32 master 0.9" in out
