"""Lab 09's figures checked against the published formats and exact arithmetic.

Format facts: IEEE 754 binary16 (fp16) has 5 exponent and 10 stored significand bits, so its largest
finite value is 65504, its smallest normal 2^-14 and its smallest subnormal 2^-24; bfloat16 has
1 sign, 8 exponent and 7 stored significand bits (Kalamkar et al., arXiv 1905.12322; Google Cloud
TPU bfloat16 docs), the same exponent field as IEEE binary32 (8 exponent, 23 stored). GradScaler's
defaults (init_scale 2^16, growth_factor 2, backoff_factor 0.5) are those of PyTorch's AMP docs.
"""

from __future__ import annotations


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
