"""Lab 21's findings checked against IEEE 754 float32, PyTorch's documented behaviour and the run.

Published references:
- IEEE 754 binary32 (float32) has a 24-bit significand, so the gap between 1 and the next float32
  is 2^-23 (`torch.finfo(torch.float32).eps`), the largest float32 below 1 is 1 - 2^-24, and
  0 * inf is an invalid operation whose result is NaN (Goldberg, "What Every Computer Scientist
  Should Know About Floating-Point Arithmetic", ACM Computing Surveys 23(1), 1991, table D-1 and
  the section on special quantities). The largest float32 is (2 - 2^-23) * 2^127, whose natural
  log is 88.722839: past it e^x overflows to inf.
- PyTorch's CPU sigmoid kernel (aten/src/ATen/native/cpu/UnaryOpsKernel.cpp, sigmoid_kernel)
  computes 1 / (1 + exp(-x)): a scalar lambda with std::exp, and a vectorised one with
  Vectorized<float>::exp (Sleef_expf16_u10 on AVX512, Sleef_expf8_u10 on AVX2, both within 1 ulp,
  per ATen/cpu/vec/vec512/vec512_float.h and vec256/vec256_float.h). ATen/native/cpu/Loops.h
  (vectorized_loop) runs the vectorised lambda on blocks of 2 * Vec::size() elements and the
  scalar one on the tail, so a one-element tensor takes the scalar path and a batch the vectorised
  one.
- torch.nn.BCELoss docs: "BCELoss clamps its log function outputs to be greater than or equal to
  -100" (https://pytorch.org/docs/stable/generated/torch.nn.BCELoss.html).
- torch.nn.BCEWithLogitsLoss docs: the loss is -[y log sigma(x) + (1 - y) log(1 - sigma(x))],
  computed with the log-sum-exp trick
  (https://pytorch.org/docs/stable/generated/torch.nn.BCEWithLogitsLoss.html); algebraically
  that is (1 - y) x + log(1 + e^-x).
- torch.autograd.detect_anomaly docs: any backward computation that generates NaN raises, and the
  traceback of the forward operation that created the failing backward function is reported
  (https://pytorch.org/docs/stable/autograd.html#anomaly-detection).
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, load_starter, torch_threads

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-21-nan-failure-trace/nan_failure_trace.py"
trace = load_starter(STARTER)
DEFAULT = trace.Config()


@pytest.fixture(scope="module")
def broken():
    """The default run with the written-out loss, as the starter runs it (one thread, deterministic)."""
    with torch_threads(1):
        before = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            yield trace.train(DEFAULT, trace.make_model(DEFAULT, with_sigmoid=True), trace.ProbabilityBCE())
        finally:
            torch.use_deterministic_algorithms(before)


def test_float32_facts_the_page_relies_on() -> None:
    one = torch.tensor(1.0)
    assert torch.finfo(torch.float32).eps == 2.0 ** -23
    assert torch.nextafter(one, torch.tensor(0.0)).item() == 1 - 2.0 ** -24
    assert torch.tensor(1.0 + 2.0 ** -24).item() == 1.0  # a tie rounds to even: back to 1
    assert torch.tensor(1 - 1e-8).item() == 1.0  # the epsilon a clamp would use vanishes
    assert math.isnan((torch.tensor(0.0) * torch.tensor(-math.inf)).item())


def test_saturation_threshold_is_the_first_float32_at_24_ln_2() -> None:
    threshold = torch.tensor(trace.saturation_logit())
    expected = torch.tensor(24 * math.log(2), dtype=torch.float64)
    assert threshold.item() >= expected.item()  # the float32 at or just above 24 ln 2
    below = torch.nextafter(threshold, torch.tensor(0.0))
    assert below.item() < expected.item()
    assert torch.sigmoid(threshold).item() == 1.0
    assert torch.sigmoid(below).item() < 1.0
    assert round(threshold.item(), 6) == 16.635532
    assert 0 < torch.sigmoid(-threshold).item() < 1e-7  # no cliff at the other end


def test_vectorised_sigmoid_switches_to_one_at_the_same_float32() -> None:
    """The bisection runs on one-element tensors (the scalar tail loop); a batch takes the vectorised loop."""
    threshold = torch.tensor([trace.saturation_logit()])
    bits = threshold.view(torch.int32).item()
    z = torch.arange(bits - 2048, bits + 2048, dtype=torch.int32).view(torch.float32)  # 4,096 neighbours
    ones = torch.sigmoid(z) == 1.0
    assert torch.equal(ones, z >= threshold)
    assert torch.sigmoid(z.view(64, 64)).eq(1.0).sum().item() == 2048  # a 2-D batch, as nn.Sigmoid sees it


def test_sigmoid_is_exactly_zero_only_where_exp_overflows() -> None:
    zero = torch.tensor([trace.zero_logit()])
    ln_max = math.log(torch.finfo(torch.float32).max)
    assert round(zero.item(), 6) == -88.722839 and abs(zero.item() + ln_max) < 1e-5
    assert torch.exp(-zero).item() == math.inf and torch.sigmoid(zero).item() == 0.0
    above = torch.nextafter(zero, torch.tensor([0.0]))
    assert 0 < torch.sigmoid(above).item() < 1e-38  # a subnormal, not zero
    batch = torch.cat([zero, above]).repeat(64)  # the vectorised loop agrees
    assert torch.sigmoid(batch).eq(0.0).sum().item() == 64
    loss = trace.ProbabilityBCE()
    assert math.isnan(loss(torch.sigmoid(zero).view(1, 1), torch.tensor([[0.0]])).item())  # the mirror image


def test_written_out_bce_is_nan_for_a_confident_positive_and_inf_for_a_confident_negative() -> None:
    loss = trace.ProbabilityBCE()
    p_one = torch.sigmoid(torch.tensor([[20.0]]))
    assert p_one.item() == 1.0
    assert math.isnan(loss(p_one, torch.tensor([[1.0]])).item())
    assert loss(p_one, torch.tensor([[0.0]])).item() == math.inf
    finite = torch.sigmoid(torch.tensor([[16.0]]))  # below the threshold: still finite
    assert math.isfinite(loss(finite, torch.tensor([[1.0]])).item())


def test_clamping_with_1e_8_leaves_a_saturated_probability_at_one() -> None:
    p = torch.tensor([1.0]).clamp(1e-8, 1 - 1e-8)
    assert p.item() == 1.0 and (1 - p).log().item() == -math.inf


def test_bce_loss_clamps_the_log_at_minus_100_but_with_logits_gives_the_true_loss() -> None:
    z, y = torch.tensor([30.0]), torch.tensor([0.0])
    assert F.binary_cross_entropy(torch.sigmoid(z), y).item() == 100.0
    assert F.binary_cross_entropy_with_logits(z, y).item() == pytest.approx(30.0)


def test_bce_with_logits_is_the_stable_closed_form_at_any_logit() -> None:
    z = torch.tensor([-1e4, -50.0, -17.0, -1.0, 0.0, 1.0, 16.7, 17.0, 50.0, 1e4])
    for target in (0.0, 1.0):
        y = torch.full_like(z, target)
        loss = F.binary_cross_entropy_with_logits(z, y, reduction="none")
        assert torch.isfinite(loss).all()
        torch.testing.assert_close(loss, (1 - y) * z + F.softplus(-z))


def test_clean_label_is_never_flipped_even_at_full_noise() -> None:
    inputs, noisy = trace.make_data(replace(DEFAULT, label_noise=1.0))
    _, clean = trace.make_data(replace(DEFAULT, label_noise=0.0))
    c = DEFAULT.clean_label
    assert torch.equal(noisy[:, c], clean[:, c])
    others = [i for i in range(DEFAULT.labels) if i != c]
    assert torch.equal(noisy[:, others], 1 - clean[:, others])


def test_default_run_fails_at_step_60_and_only_there(broken) -> None:
    assert broken.failed_at == 60 and len(broken.losses) == 60
    assert all(math.isfinite(v) for v in broken.losses[:-1]) and math.isnan(broken.losses[-1])
    assert broken.losses[0] == pytest.approx(0.7078, abs=5e-5)


def test_failing_step_is_reproducible_bit_for_bit(broken) -> None:
    with torch_threads(1):
        again = trace.train(DEFAULT, trace.make_model(DEFAULT, with_sigmoid=True), trace.ProbabilityBCE())
    assert again.failed_at == broken.failed_at and again.losses[:-1] == broken.losses[:-1]


def test_the_only_saturated_probability_is_the_clean_label(broken) -> None:
    inputs, targets = broken.batch
    with torch.no_grad():
        probs = broken.model(inputs)
    rows, channels = (probs == 1.0).nonzero(as_tuple=True)
    assert rows.tolist() == [43] and channels.tolist() == [DEFAULT.clean_label]
    assert targets[43, DEFAULT.clean_label].item() == 1.0


def test_anomaly_mode_names_log_backward_and_the_negative_term(broken) -> None:
    message, blamed = trace.replay_with_anomaly_mode(broken, trace.ProbabilityBCE())
    assert message == "Function 'LogBackward0' returned nan values in its 0th output."
    assert blamed == "negative = (1 - targets) * (1 - probs).log()"
    assert not torch.is_anomaly_enabled()  # the context manager restored the global flag


def test_forward_hooks_report_the_loss_first_and_are_removed(broken) -> None:
    seen = trace.finiteness_by_module(broken, trace.ProbabilityBCE())
    assert seen == [("hidden", True), ("relu", True), ("logits", True), ("sigmoid", True), ("loss", False)]
    assert all(not module._forward_hooks for module in broken.model.modules())


def test_one_update_after_the_nan_poisons_the_weights(broken) -> None:
    poisoned, total, next_loss = trace.one_more_update(broken)
    assert total == (16 * 64 + 64) + (64 * 8 + 8) == 1608
    assert 0 < poisoned < total and math.isnan(next_loss)
    assert all(p.isfinite().all() for p in broken.model.parameters())  # the copy took the hit


def test_after_that_update_every_output_on_every_input_is_nan(broken) -> None:
    model = copy.deepcopy(broken.model)
    optimizer = torch.optim.Adam(model.parameters())
    trace.ProbabilityBCE()(model(broken.batch[0]), broken.batch[1]).backward()
    optimizer.step()
    with torch.no_grad():
        outputs = model(trace.make_data(DEFAULT)[0])
    assert outputs.isnan().all()


def test_channel_stats_record_min_max_mean_std_per_channel() -> None:
    layer = torch.nn.Identity()
    stats = trace.ChannelStats(layer)
    batches = [torch.tensor([[1.0, -2.0], [3.0, 4.0]]), torch.tensor([[0.0, 0.0], [2.0, 2.0]])]
    for batch in batches:
        layer(batch)
    stats.handle.remove()
    table = stats.table()
    assert table.shape == (2, 4, 2)
    torch.testing.assert_close(table[0], torch.tensor([[1.0, -2.0], [3.0, 4.0], [2.0, 1.0],
                                                       [math.sqrt(2), math.sqrt(18)]]))
    layer(batches[0])
    assert len(stats.per_step) == 2  # removed hooks record nothing


def test_first_saturating_channel_edges() -> None:
    stats = torch.zeros(3, 4, 3)
    stats[1, 1, 2] = 17.0
    stats[2, 1, 0] = 17.0
    assert trace.first_saturating_channel(stats, 16.6) == (2, 2)
    stats[1, 1, 1] = 16.6  # "at or past": equal counts, and the lower channel wins a tie of steps
    assert trace.first_saturating_channel(stats, 16.6) == (2, 1)
    with pytest.raises(IndexError):
        trace.first_saturating_channel(torch.zeros(3, 4, 3), 16.6)


def test_fix_keeps_every_loss_finite_and_learns(broken) -> None:
    with torch_threads(1):
        fixed = trace.fixed_run(DEFAULT)
    assert fixed.failed_at is None and len(fixed.losses) == DEFAULT.steps
    assert all(math.isfinite(v) for v in fixed.losses)
    assert fixed.losses[-1] < fixed.losses[0]
    gap = max(abs(a - b) for a, b in zip(broken.losses[:59], fixed.losses[:59]))
    assert gap < 1e-4  # same model, data and optimiser: only the loss's rounding differs
    with torch.no_grad():
        largest = fixed.model(trace.make_data(DEFAULT)[0]).amax(0)
    assert int(largest.argmax()) == DEFAULT.clean_label and largest.max().item() > trace.saturation_logit()


def first_crossings(config) -> list[int | None]:
    """Train with the stable loss (so the run goes on) and return each label's first step with a logit past the threshold."""
    model = trace.make_model(config, with_sigmoid=False)
    stats = trace.ChannelStats(model.logits)
    with torch_threads(1):
        trace.train(config, model, torch.nn.BCEWithLogitsLoss())
    stats.handle.remove()
    crossed = stats.table()[:, 1, :] >= trace.saturation_logit()
    return [int(c.nonzero()[0]) + 1 if c.any() else None for c in crossed.T]


def test_noise_decides_which_labels_cross_not_when_label_5_does() -> None:
    noisy = first_crossings(DEFAULT)
    assert noisy[DEFAULT.clean_label] == 60
    assert all(step is None for c, step in enumerate(noisy) if c != DEFAULT.clean_label)  # 200 steps
    clean = first_crossings(replace(DEFAULT, label_noise=0.0, steps=100))
    assert all(step is not None for step in clean)  # every label crosses within 100 steps
    assert min(clean) == clean[DEFAULT.clean_label] == 60
    assert clean.count(60) == 1


def test_the_failure_follows_the_clean_label() -> None:
    config = replace(DEFAULT, clean_label=2)
    with torch_threads(1):
        run = trace.train(config, trace.make_model(config, with_sigmoid=True), trace.ProbabilityBCE())
    assert run.failed_at is not None
    with torch.no_grad():
        _, channels = (run.model(run.batch[0]) == 1.0).nonzero(as_tuple=True)
    assert set(channels.tolist()) == {2}


def test_lower_learning_rate_only_delays_the_failure() -> None:
    slower = replace(DEFAULT, lr=DEFAULT.lr / 10, steps=10 * DEFAULT.steps)
    with torch_threads(1):
        late = trace.train(slower, trace.make_model(slower, with_sigmoid=True), trace.ProbabilityBCE())
    assert late.failed_at == 595
