"""Lab 20's formulas checked against the ZeRO and FSDP papers, gloo's reduce-scatter, and its launcher.

Published references:
- Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
  (arXiv 1910.02054). Section 3.1: mixed-precision Adam holds 2 + 2 + K bytes per parameter with
  K = 12 (fp32 master weights, momentum, variance). Section 5.3 and Figure 1: with P_os+g+p every
  term is divided by N_d, 1.9 GB per device for Psi = 7.5B and N_d = 64, against 120 GB for
  plain data parallelism. Section 7.1: data parallelism's all-reduce (a reduce-scatter then an
  all-gather) moves 2 Psi per step; 7.2.1: P_os+g moves the same 2 Psi; 7.2.2: P_os+g+p gathers
  the parameters in forward and again in backward, 3 Psi in total, "1.5x compared to the baseline".
- Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel" (arXiv 2304.11277).
  Section 3.2.1: full sharding has 1.5x the communication of DDP with a bandwidth-optimal ring;
  section 3.2.2: per-GPU traffic of an M-sized model is 2M(W-1)/W for full replication and
  3M(W-1)/W for full sharding.
- PyTorch's ProcessGroupGloo.cpp, reduce_scatter_tensor_coalesced: gloo reduce-scatters a tensor by
  all-reducing a clone of the whole buffer, then copying out this rank's chunk.
- torch 2.13.0's DTensor caches (MeshTopoInfo.build_from_mesh, the redistribute planner and
  _gen_transform_infos caches, sharding propagation) keep every DeviceMesh they have seen, so
  destroy_process_group cannot free a group a DTensor op has used: the reason the starter's ranks
  end with os._exit.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-20-fsdp/fsdp.py"
fsdp = load_starter(STARTER)

ZERO_K = 12  # section 3.1: fp32 master weights, momentum and variance, 4 bytes each


def test_ledger_reproduces_figure_1_for_full_sharding() -> None:
    ledger = fsdp.zero3_ledger(7.5e9, 64, 2, 2, ZERO_K)
    assert round(sum(ledger.values()) / 1e9, 1) == 1.9
    assert fsdp.zero3_ledger(7.5e9, 1, 2, 2, ZERO_K) == {"parameters": 15e9, "gradients": 15e9,
                                                         "optimizer": 90e9}  # 120 GB unsharded


@pytest.mark.parametrize("num_ranks", [1, 2, 8, 64, 1024])
def test_every_term_is_divided_by_the_number_of_ranks(num_ranks: int) -> None:
    psi = 1e9
    ledger = fsdp.zero3_ledger(psi, num_ranks, 2, 2, ZERO_K)
    assert sum(ledger.values()) == pytest.approx((2 + 2 + ZERO_K) * psi / num_ranks)


def test_fsdp_mixed_precision_holds_the_same_16_bytes_split_differently() -> None:
    # FSDP2 keeps fp32 shards (the master copy), fp32 gradient shards and two fp32 moments.
    fsdp_split, zero_split = (4, 4, 8), (2, 2, ZERO_K)
    assert sum(fsdp_split) == sum(zero_split) == 16
    assert fsdp_split[0] + fsdp_split[2] == ZERO_K  # master weights + moments = ZeRO's K
    assert fsdp.zero3_ledger(4224, 2, *fsdp_split) == {"parameters": 8448, "gradients": 8448,
                                                       "optimizer": 16896}


@pytest.mark.parametrize("num_ranks", [2, 8, 64, 1024])
def test_ring_volumes_match_both_papers(num_ranks: int) -> None:
    psi, m = 1e9, 2e9  # elements, and the same model in bytes at 2 bytes each
    ddp = fsdp.ring_bytes_per_rank(psi, num_ranks, 2, 2)
    full_shard = fsdp.ring_bytes_per_rank(psi, num_ranks, 3, 2)
    assert ddp == pytest.approx(2 * m * (num_ranks - 1) / num_ranks)  # FSDP paper 3.2.2
    assert full_shard == pytest.approx(3 * m * (num_ranks - 1) / num_ranks)
    assert full_shard / ddp == pytest.approx(1.5)  # ZeRO 7.2.2, FSDP paper 3.2.1


def test_ring_volumes_approach_zeros_2_psi_and_3_psi() -> None:
    psi, num_ranks = 1e9, 10**6
    assert fsdp.ring_bytes_per_rank(psi, num_ranks, 2, 1) == pytest.approx(2 * psi, rel=1e-5)
    assert fsdp.ring_bytes_per_rank(psi, num_ranks, 3, 1) == pytest.approx(3 * psi, rel=1e-5)


def test_printed_formula_for_8_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    fsdp.print_formula(7.5e9, 8, 2)
    out = capsys.readouterr().out
    assert "DDP, ring all-reduce: 2 x 7/8 x Psi x 2 = 26.25 GB" in out
    assert "FSDP, reshard after forward: 3 x 7/8 x Psi x 2 = 39.38 GB" in out
    assert "ZeRO-3 16 x Psi / 8 = 15.00 GB, DDP 16 x Psi = 120.00 GB" in out


@pytest.mark.parametrize("layers", [1, 2, 4, 12])
def test_peak_gathered_blocks(layers: int) -> None:
    resharding = fsdp.Variant("r", reshard_after_forward=True, bf16=False)
    keeping = fsdp.Variant("k", reshard_after_forward=False, bf16=False)
    assert fsdp.expected_peak_blocks(resharding, layers) == min(2, layers)  # in use + prefetched
    assert fsdp.expected_peak_blocks(keeping, layers) == layers  # all of Psi, gathered


def test_gloo_runs_reduce_scatter_as_an_all_reduce(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.profiler import profile

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", fsdp.LOOPBACK)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ran = {}
        for name, collective in (("reduce_scatter_single", dist.reduce_scatter_single),
                                 ("all_gather_single", dist.all_gather_single)):
            with profile() as prof:
                collective(torch.empty(4), torch.ones(4))
            ran[name] = sorted({e.name for e in prof.events() if e.name.startswith("gloo:")})
    finally:
        dist.destroy_process_group()
    assert ran == {"reduce_scatter_single": ["gloo:all_reduce"], "all_gather_single": ["gloo:all_gather"]}


def test_a_failing_rank_stops_the_run_with_exit_status_1() -> None:
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(STARTER), "--fail-rank", "1"],
                            capture_output=True, text=True, timeout=90)
    assert result.returncode == 1, result.stderr
    assert "rank 1: failure injected at step 1" in result.stderr
    assert "error: rank " in result.stderr and "stopped every rank still running" in result.stderr
    assert "terminate called" not in result.stderr
    assert "toy run" not in result.stdout  # no report from a run that failed
    assert time.monotonic() - started < 90


def test_the_deadline_stops_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    # The ranks cannot even import torch in 50 ms, so the deadline always fires first.
    monkeypatch.syspath_prepend(str(STARTER.parent))
    with pytest.raises(fsdp.RankFailure, match="rank 0, rank 1 still running after 0.05 s"):
        fsdp.launch(fsdp.Config(), world_size=2, timeout=0.05)
    assert multiprocessing.active_children() == []


def test_uneven_splits_are_refused() -> None:
    with pytest.raises(ValueError, match="split evenly"):
        fsdp.launch(fsdp.Config(width=31), world_size=2, timeout=1)


def test_the_tensor_collectives_are_deprecated_aliases_in_this_torch() -> None:
    # The page names all_gather_single / reduce_scatter_single, what FSDP2 calls in this release.
    assert torch.__version__.startswith("2.13.0")
    for old in (dist.all_gather_into_tensor, dist.reduce_scatter_tensor):
        assert "deprecated" in (old.__doc__ or "")


# Run in a fresh interpreter: one rank of gloo, a mesh, optionally one DTensor op, then teardown.
GLOO_THREADS_AFTER_TEARDOWN = """
import gc, os, sys, tempfile
from pathlib import Path
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

os.environ["GLOO_SOCKET_IFNAME"] = "lo"
with tempfile.TemporaryDirectory() as folder:
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    if sys.argv[1] == "dtensor":
        distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)]).full_tensor()
    dist.destroy_process_group()
    del mesh
    gc.collect()
    names = [comm.read_text().strip() for comm in Path("/proc/self/task").glob("*/comm")]
    print(sum("gloo" in name for name in names))
os._exit(0)  # the point of the test: without it, shutdown may abort around the live threads
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through Linux /proc")
def test_a_dtensor_op_keeps_the_group_alive_after_destroy_process_group() -> None:
    counts = {}
    for mode in ("plain", "dtensor"):
        result = subprocess.run([sys.executable, "-c", GLOO_THREADS_AFTER_TEARDOWN, mode],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        counts[mode] = int(result.stdout.split()[-1])
    assert counts["plain"] == 0  # nothing else holds the mesh: its group and threads are gone
    assert counts["dtensor"] > 0  # DTensor's caches still hold the mesh, so the group lives on
