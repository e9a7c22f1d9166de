"""Lab 11's figures checked against the ZeRO paper, and its launcher checked for failing ranks.

Published reference: Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models" (arXiv 1910.02054), Figure 1: mixed-precision Adam with K = 12, Psi = 7.5B
parameters and N_d = 64 give 120 GB per device for the data-parallel baseline, 31.4 GB with P_os,
16.6 GB with P_os+g and 1.9 GB with P_os+g+p. Section 5 states the asymptotic savings: 4x for P_os
and 8x for P_os+g as N_d grows, and a 1.5B-parameter model needs at least 24 GB of model states.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time

import pytest

from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-11-ddp-zero-memory/ddp_zero_memory.py"
ddp_zero = load_starter(STARTER)

FIGURE_1_GB = {
    "DDP (replicated)": 120.0,
    "ZeRO-1 (P_os)": 31.4,
    "ZeRO-2 (P_os+g)": 16.6,
    "ZeRO-3 (P_os+g+p)": 1.9,
}


def test_ledger_reproduces_figure_1_of_the_zero_paper() -> None:
    ledger = ddp_zero.zero_ledger(7.5e9, 64)
    assert {stage: round(per_rank / 1e9, 1) for stage, per_rank in ledger.items()} == FIGURE_1_GB


def test_ledger_matches_the_paper_formulas_at_any_degree() -> None:
    psi = 1e9
    for n_d in (1, 4, 64, 1024):
        ledger = ddp_zero.zero_ledger(psi, n_d)
        assert ledger["DDP (replicated)"] == pytest.approx(16 * psi)
        assert ledger["ZeRO-1 (P_os)"] == pytest.approx(4 * psi + 12 * psi / n_d)
        assert ledger["ZeRO-2 (P_os+g)"] == pytest.approx(2 * psi + 14 * psi / n_d)
        assert ledger["ZeRO-3 (P_os+g+p)"] == pytest.approx(16 * psi / n_d)


def test_savings_approach_the_papers_4x_and_8x_and_gpt2_needs_24_gb() -> None:
    ledger = ddp_zero.zero_ledger(7.5e9, 10**9)
    baseline = ledger["DDP (replicated)"]
    assert baseline / ledger["ZeRO-1 (P_os)"] == pytest.approx(4, rel=1e-6)
    assert baseline / ledger["ZeRO-2 (P_os+g)"] == pytest.approx(8, rel=1e-6)
    assert ddp_zero.zero_ledger(1.5e9, 1)["DDP (replicated)"] == pytest.approx(24e9)


def test_printed_ledger_carries_the_published_figures(capsys: pytest.CaptureFixture[str]) -> None:
    ddp_zero.print_ledger(7.5e9, 64)
    out = capsys.readouterr().out
    for stage, gigabytes in FIGURE_1_GB.items():
        assert f"{stage}: {gigabytes:.1f} GB" in out


def test_partition_covers_every_parameter_once_and_balances_equal_layers() -> None:
    model = ddp_zero.make_model(ddp_zero.Config())
    params = list(model.parameters())
    owner = ddp_zero.partition(params, 2)
    assert set(owner) == set(params)
    loads = [sum(p.numel() for p in params if owner[p] == rank) for rank in range(2)]
    assert loads == [2112, 2112]  # 4 x (32 * 32 + 32) parameters, half on each rank


def test_a_failing_rank_stops_the_run_with_exit_status_1() -> None:
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(STARTER), "--fail-rank", "1"],
                            capture_output=True, text=True, timeout=90)
    assert result.returncode == 1, result.stderr
    assert "rank 1: failure injected at step 1" in result.stderr
    assert "error: rank " in result.stderr and "stopped every rank still running" in result.stderr
    assert "toy run" not in result.stdout  # no report from a run that failed
    assert time.monotonic() - started < 90


def test_the_deadline_stops_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    # The ranks cannot even import torch in 50 ms, so the deadline always fires first.
    monkeypatch.syspath_prepend(str(STARTER.parent))
    with pytest.raises(ddp_zero.RankFailure, match="rank 0, rank 1 still running after 0.05 s"):
        ddp_zero.launch(ddp_zero.Config(), world_size=2, timeout=0.05)
    assert multiprocessing.active_children() == []

