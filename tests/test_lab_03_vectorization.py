"""Lab 03's exact claims: every rung computes the same product and counts its steps, and the
parity tolerance is tight enough to reject reduced-precision matmuls that a looser one accepts.

Timings are machine-dependent and are never checked here; the starter asserts only a 10x floor.
"""

from __future__ import annotations


import pytest
import torch

from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-03-vectorization/vectorization.py"
vectorization = load_starter(STARTER)


def truncate_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """Keep TF32's 10 explicit mantissa bits of each fp32 value (round toward zero)."""
    return (x.view(torch.int32) & ~((1 << 13) - 1)).view(torch.float32)


def test_the_python_loop_is_exact_on_small_integers() -> None:
    # Integer products and sums this small are exact in any float format and any order.
    a = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    b = [[7.0, 8.0], [9.0, 10.0], [11.0, 12.0]]
    c, steps = vectorization.matmul_python(a, b)
    assert c == [[58.0, 64.0], [139.0, 154.0]]
    assert steps == 2 * 3 * 2  # rows * inner * cols multiply-adds, also for non-square shapes


@pytest.mark.parametrize("n", [1, 17, 48])
def test_every_rung_matches_the_loop_within_fp32_rounding_and_counts_its_steps(n: int) -> None:
    a, b = vectorization.make_inputs(n, seed=3)
    rungs = vectorization.measure_ladder(a, b, budget=0.0)
    assert [rung.steps for rung in rungs] == [n**3, n**2, n, 1, 1, 1]
    ratios = vectorization.check_parity(a, b, rungs)
    assert len(ratios) == len(rungs) - 1 and all(ratio <= 1.0 for ratio in ratios.values())


def test_the_default_run_counts_n_cubed_multiply_adds() -> None:
    # The figures the page states at the default size: 256^3 multiply-adds, twice as many FLOPs.
    a, b = vectorization.make_inputs(256)
    c, steps = vectorization.matmul_python(a.tolist(), b.tolist())
    assert steps == 16_777_216 == 256**3
    assert 2 * steps == 33_554_432
    assert vectorization.parse_args([]).size == 256
    loop_result = torch.tensor(c, dtype=torch.float64)
    assert vectorization.error_ratio(loop_result, a.double() @ b.double(), a, b) < 1e-6


@pytest.mark.parametrize("round_inputs", [truncate_to_tf32, lambda x: x.bfloat16().float()],
                         ids=["tf32-inputs", "bf16-inputs"])
def test_the_bound_rejects_reduced_precision_inputs(round_inputs) -> None:
    a, b = vectorization.make_inputs(128)
    reference = a.double() @ b.double()
    assert vectorization.error_ratio(a @ b, reference, a, b) <= 1.0
    coarse = round_inputs(a) @ round_inputs(b)
    assert vectorization.error_ratio(coarse, reference, a, b) > 5.0


def test_a_tolerance_picked_by_eye_would_pass_tf32() -> None:
    # The page's claim: atol=1e-1 accepts a TF32-input matmul that the bound rejects.
    a, b = vectorization.make_inputs(256)
    coarse = truncate_to_tf32(a) @ truncate_to_tf32(b)
    assert torch.allclose(coarse.double(), a.double() @ b.double(), rtol=0.0, atol=1e-1)


def test_the_bound_is_gamma_n_times_the_absolute_product() -> None:
    a = torch.tensor([[1.0, -2.0]])
    b = torch.tensor([[3.0], [4.0]])
    u = 2.0**-24
    gamma = 2 * u / (1 - 2 * u)
    assert vectorization.error_bound(a, b, u).item() == pytest.approx(gamma * 11.0, rel=1e-15)
