"""Lab 03's exact claims: every rung computes the same product and counts its steps, the row-block
sweep makes ceil(n / k) calls and its overhead inputs make the same calls with inner dimension 1,
and the parity tolerance is tight enough to reject reduced-precision matmuls that a looser one
accepts.

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


@pytest.mark.parametrize("n, heights", [(1, [1]), (2, [1, 2]), (4, [1, 4]), (5, [1, 4, 5]),
                                        (64, [1, 4, 16, 64]), (256, [1, 4, 16, 64, 256])])
def test_the_sweep_runs_from_one_row_per_call_to_one_call(n: int, heights: list[int]) -> None:
    assert vectorization.rows_per_call_sweep(n) == heights


@pytest.mark.parametrize("n", [1, 7, 48])
@pytest.mark.parametrize("rows_per_call", [1, 3, 4, 16, 48])
def test_row_blocks_match_the_loop_within_fp32_rounding_and_count_calls(
        n: int, rows_per_call: int, one_thread) -> None:
    a, b = vectorization.make_inputs(n, seed=5)
    c, calls = vectorization.matmul_row_blocks(a, b, rows_per_call)
    assert calls == -(-n // rows_per_call)  # ceil(n / k): a last, shorter block when k does not divide n
    assert c.shape == (n, n) and c.dtype == torch.float32
    assert vectorization.error_ratio(c, a.double() @ b.double(), a, b) <= 1.0


def test_one_block_of_all_rows_is_exactly_the_gemm(one_thread) -> None:
    a, b = vectorization.make_inputs(64, seed=1)
    c, calls = vectorization.matmul_row_blocks(a, b, 64)
    assert calls == 1 and torch.equal(c, torch.matmul(a, b))


def test_one_row_per_call_is_the_vector_matrix_product(one_thread) -> None:
    # The ladder's GEMV rung splits A into 1-row matrices; torch runs `vector @ matrix` as a
    # 1-row mm too, so both give the same bits.
    a, b = vectorization.make_inputs(32, seed=2)
    c, calls = vectorization.matmul_row_blocks(a, b, 1)
    assert calls == 32 and torch.equal(c, torch.stack([row @ b for row in a]))


def test_overhead_inputs_keep_the_calls_and_output_but_not_the_arithmetic() -> None:
    n = 48
    a, b = vectorization.make_inputs(n, seed=4)
    a_fixed, b_fixed = vectorization.overhead_inputs(a, b)
    assert a_fixed.shape == (n, 1) and b_fixed.shape == (1, n)
    assert a_fixed.is_contiguous() and b_fixed.is_contiguous()
    for k in vectorization.rows_per_call_sweep(n):
        c_fixed, calls_fixed = vectorization.matmul_row_blocks(a_fixed, b_fixed, k)
        assert calls_fixed == vectorization.matmul_row_blocks(a, b, k)[1]
        assert c_fixed.shape == (n, n)
        # One product per element, rounded once: exact against the outer product.
        assert torch.equal(c_fixed, a[:, :1] * b[:1, :])


def test_the_split_counts_calls_and_restores_the_thread_count() -> None:
    n = 20
    a, b = vectorization.make_inputs(n, seed=6)
    before = torch.get_num_threads()
    splits = vectorization.measure_row_blocks(a, b, budget=0.0)
    assert torch.get_num_threads() == before
    assert [split.rows_per_call for split in splits] == [1, 4, 16, 20]
    assert [split.rung.steps for split in splits] == [20, 5, 2, 1]
    assert [split.fixed.steps for split in splits] == [20, 5, 2, 1]
    for split in splits:
        assert split.rest_seconds == split.rung.seconds - split.fixed.seconds
        assert vectorization.error_ratio(split.rung.result, a.double() @ b.double(), a, b) <= 1.0


def test_torch_threads_restores_the_setting_after_an_error() -> None:
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), vectorization.torch_threads(1):
        assert torch.get_num_threads() == 1
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before
