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
import yaml
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-11-ddp-zero-memory/ddp_zero_memory.py"
MANIFEST = REPO / "labs/lab-11-ddp-zero-memory.yml"
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


def test_ledger_is_exact_bytes_and_a_sharded_state_rounds_up_to_whole_parameters() -> None:
    assert ddp_zero.zero_ledger(10, 4) == {  # 10 parameters in 4 shards: 3 per rank, the last padded
        "DDP (replicated)": 160,
        "ZeRO-1 (P_os)": 4 * 10 + 12 * 3,
        "ZeRO-2 (P_os+g)": 2 * 10 + 14 * 3,
        "ZeRO-3 (P_os+g+p)": 16 * 3,
    }
    assert all(type(b) is int for b in ddp_zero.zero_ledger(7.5e9, 64).values())


def llama_2_7b_parameters() -> int:
    # https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json: vocab_size 32000,
    # hidden_size 4096, intermediate_size 11008, num_hidden_layers 32, untied embeddings, no biases.
    vocab, hidden, ffn, layers = 32000, 4096, 11008, 32
    per_layer = 4 * hidden * hidden + 3 * hidden * ffn + 2 * hidden  # q, k, v, o; gate, up, down; 2 RMSNorms
    return 2 * vocab * hidden + layers * per_layer + hidden  # embeddings, lm_head, layers, final norm


def test_calculator_preset_is_llama_2_7b_on_one_8_gpu_node() -> None:
    assert llama_2_7b_parameters() == 6_738_415_616
    (calc,) = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))["calculators"]
    (preset,) = calc["presets"]
    assert preset == {"label": "Llama-2-7B, 8 GPUs", "values": {"params": llama_2_7b_parameters(), "ranks": 8}}
    assert ddp_zero.zero_ledger(llama_2_7b_parameters(), 8) == {
        "DDP (replicated)": 107_814_649_856,
        "ZeRO-1 (P_os)": 37_061_285_888,
        "ZeRO-2 (P_os+g)": 25_269_058_560,
        "ZeRO-3 (P_os+g+p)": 13_476_831_232,
    }


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

