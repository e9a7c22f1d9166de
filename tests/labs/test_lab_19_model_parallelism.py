"""Lab 19's schedules, splits and accounting checked against the papers, and its launcher's teardown.

Published references:
- Shoeybi et al., "Megatron-LM" (arXiv 1909.08053), section 3: the MLP's first GEMM is split by
  columns and the second by rows, self-attention is split by heads, and the operators f (identity
  forward, all-reduce backward) and g (all-reduce forward, identity backward) give two all-reduces
  in the forward pass and two in the backward pass of each transformer layer.
- Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (arXiv
  2205.05198), sections 4.1-4.2: with 16-bit activations each LayerNorm stores its 2sbh input and
  each of the two dropouts after attention and MLP stores an sbh mask; with the 2sbh inputs of the
  QKV and first MLP linear layers these make the 10sbh that tensor parallelism leaves replicated.
  Sequence parallelism splits a ring all-reduce into its reduce-scatter and all-gather, keeping
  the communication bandwidth of tensor parallelism.
- Huang et al., "GPipe" (arXiv 1811.06965): bubble overhead O((K-1)/(M+K-1)) for K
  partitions and M micro-batches.
- Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM" (arXiv 2104.04473), section 2.2.1: bubble time fraction t_pb/t_id = (p-1)/m for both
  GPipe and the 1F1B (PipeDream-Flush) schedule; 1F1B keeps at most p micro-batches in flight.
  Megatron-LM's schedules.py runs p - rank - 1 warm-up forwards (at most m) before 1F1B.
- PyTorch PR #149869: ProcessGroupGloo.reduce_scatter runs one all-reduce per rank, so it writes
  as many bytes as a whole all-reduce; PR #118911: its reduce_scatter_tensor (now
  reduce_scatter_single) is one whole all-reduce. gloo's all-reduce is a ring (gloo/allreduce.cc)
  and its all-gather a ring (gloo/allgather.cc). The wire test below measures all of this on Linux,
  with the installed torch.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-19-model-parallelism/model_parallelism.py"
mp = load_starter(STARTER)


def test_megatron_conjugates_give_two_all_reduces_per_block_each_way() -> None:
    tensor = mp.MODES["tensor"]
    assert tensor["enter"] == ("identity", "all_reduce")  # f
    assert tensor["leave"] == ("all_reduce", "identity")  # g
    # A block crosses into and out of a split region twice: once for attention, once for the MLP.
    for direction in (0, 1):
        ops = [tensor[border][direction] for border in ("enter", "leave")] * 2
        assert ops.count("all_reduce") == 2


def test_sequence_parallel_ops_are_the_halves_of_the_all_reduce_each_way() -> None:
    sequence = mp.MODES["sequence"]
    for direction in (0, 1):
        assert sorted([sequence["enter"][direction], sequence["leave"][direction]]) == [
            "all_gather", "reduce_scatter"]


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_reduce_scatter_plus_all_gather_moves_what_an_all_reduce_moves(ranks: int) -> None:
    nbytes = 8 * 16 * 2 * 32 * ranks
    halves = mp.bytes_sent("reduce_scatter", nbytes, ranks) + mp.bytes_sent("all_gather", nbytes, ranks)
    assert halves == mp.bytes_sent("all_reduce", nbytes, ranks) == 2 * (ranks - 1) * nbytes // ranks


def test_split_heads_and_columns_sum_to_the_whole_block_in_one_process() -> None:
    """Megatron's algebra without processes: per-rank partial outputs add up to the unsplit ones."""
    cfg = mp.Config()
    layers, x, _, _ = mp.make_problem(cfg)
    w, head_dim = layers[0], cfg.hidden // cfg.heads
    whole_attention = mp.attention(x, w["qkv"], w["proj"], head_dim)
    whole_mlp = F.gelu(x @ w["fc1"]) @ w["fc2"]
    parts = [mp.shard(w, rank, 2, cfg.heads) for rank in range(2)]
    split_attention = sum(mp.attention(x, p["qkv"], p["proj"], head_dim) for p in parts)
    split_mlp = sum(F.gelu(x @ p["fc1"]) @ p["fc2"] for p in parts)
    torch.testing.assert_close(split_attention, whole_attention, rtol=0, atol=1e-12)
    torch.testing.assert_close(split_mlp, whole_mlp, rtol=0, atol=1e-12)


def test_shards_cover_every_weight_exactly_once() -> None:
    cfg = mp.Config()
    w = mp.make_problem(cfg)[0][0]
    parts = [mp.shard(w, rank, 2, cfg.heads) for rank in range(2)]
    for name in ("qkv", "proj", "fc1", "fc2"):
        assert sum(p[name].numel() for p in parts) == w[name].numel()
    torch.testing.assert_close(torch.cat([p["fc1"] for p in parts], dim=1), w["fc1"], rtol=0, atol=0)
    torch.testing.assert_close(torch.cat([p["fc2"] for p in parts], dim=0), w["fc2"], rtol=0, atol=0)
    assert parts[0]["ln1_w"] is w["ln1_w"]  # LayerNorm weights are replicated, not split


def test_norm_region_accounting_matches_the_papers_6sbh_plus_mean_and_rstd() -> None:
    s, b, h = 2048, 1, 12288
    at_16_bit = mp.norm_region_bytes(s, b, h, itemsize=2, layers=1)
    # Two LayerNorm inputs at 2sbh and two dropout masks at sbh are 6sbh of the paper's 10sbh; the
    # starter also counts the per-position mean and rstd LayerNorm keeps (2 x 2 x sb x 2 bytes).
    assert at_16_bit == 6 * s * b * h + 8 * s * b
    assert mp.norm_region_bytes(s // 8, b, h, 2, 1) * 8 == at_16_bit  # sequence shards divide it by t


def test_saved_activation_meter_counts_one_layer_norm_and_mask() -> None:
    cfg = mp.Config()
    layers, x, _, masks = mp.make_problem(cfg)
    w = {k: v.clone().requires_grad_() for k, v in layers[0].items()}
    x = x.clone().requires_grad_()
    with mp.SavedActivations(list(w.values())) as saved:
        mp.dropout(F.layer_norm(x, x.shape[-1:], w["ln1_w"], w["ln1_b"]), masks[0][0])
    itemsize = x.element_size()
    assert saved.bytes == mp.norm_region_bytes(cfg.seq, cfg.batch, cfg.hidden, itemsize, 1) // 2


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
@pytest.mark.parametrize("micro", [1, 2, 3, 4, 7, 8, 16])
def test_both_schedules_leave_the_published_bubble(stages: int, micro: int) -> None:
    for name, schedule in mp.SCHEDULES.items():
        timeline = mp.simulate([schedule(s, stages, micro) for s in range(stages)])
        share = mp.bubble(timeline, stages)
        assert share == Fraction(stages - 1, micro + stages - 1), name  # GPipe's (K-1)/(M+K-1)
        assert share / (1 - share) == Fraction(stages - 1, micro), name  # Narayanan's (p-1)/m


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
@pytest.mark.parametrize("micro", [1, 2, 4, 8, 16])
def test_1f1b_holds_at_most_p_minus_stage_micro_batches_and_gpipe_holds_all(stages: int,
                                                                              micro: int) -> None:
    for stage in range(stages):
        assert mp.peak_in_flight(mp.gpipe(stage, stages, micro)) == micro
        assert mp.peak_in_flight(mp.one_f_one_b(stage, stages, micro)) == min(stages - stage, micro)


@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("micro", [1, 3, 8])
def test_1f1b_warms_up_like_megatron_and_runs_each_op_once(stages: int, micro: int) -> None:
    for stage in range(stages):
        order = mp.one_f_one_b(stage, stages, micro)
        warmup = min(stages - stage - 1, micro)
        assert order[:warmup] == [("F", j) for j in range(warmup)]
        assert sorted(order) == sorted(mp.gpipe(stage, stages, micro))


def test_simulate_refuses_a_schedule_that_deadlocks() -> None:
    # Stage 0 waits for a backward that needs a forward stage 0 has not run yet.
    with pytest.raises(RuntimeError, match="deadlocks"):
        mp.simulate([[("B", 0), ("F", 0)], [("F", 0), ("B", 0)]])


def run_starter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(STARTER), *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_failing_rank_stops_the_run_with_exit_status_1_and_a_clean_teardown(rank: int) -> None:
    result = run_starter("--fail-rank", str(rank))
    assert result.returncode == 1, result.stderr
    assert f"rank {rank}: failure injected before the pipeline" in result.stderr
    assert "stopped every rank still running" in result.stderr
    assert "exited with code 1" in result.stderr  # the other rank raised too; nobody was killed
    assert "terminate called" not in result.stderr  # no rank aborted in C++ teardown
    assert "Pipeline parallelism" not in result.stdout  # no report from a run that failed


def test_the_deadline_stops_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    # The ranks cannot even import torch in 50 ms, so the deadline always fires first.
    monkeypatch.syspath_prepend(str(STARTER.parent))
    with pytest.raises(mp.RankFailure, match="rank 0, rank 1 still running after 0.05 s"):
        mp.launch(mp.Config(), world_size=2, timeout=0.05)
    assert multiprocessing.active_children() == []


WIRE_PROBE = """
import os, sys
sys.path.insert(0, {starter_dir!r})
import torch, torch.distributed as dist, torch.multiprocessing as spawn
from torch.profiler import profile
import model_parallelism as mp


def written():
    return int(dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())["wchar"])


def rank_main(rank, store):
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    try:
        comm, x = mp.Collectives(2), torch.ones(2**22, 1, 1)  # 16 MiB, sequence dimension first
        ops = {{"all_reduce": lambda: comm.all_reduce(x),
               "reduce_scatter": lambda: comm.reduce_scatter(x),
               "all_gather": lambda: comm.all_gather(x[: 2**21]),
               "gloo reduce_scatter": lambda: dist.reduce_scatter(torch.empty(2**21, 1, 1),
                                                                  list(x.chunk(2))),
               "gloo reduce_scatter_single": lambda: dist.reduce_scatter_single(
                   torch.empty(2**21, 1, 1), x)}}
        shares, all_reduces = {{}}, {{}}
        for name, op in ops.items():
            dist.barrier()
            with profile() as prof:  # gloo records one "gloo:all_reduce" event per all-reduce it runs
                before = written()
                op()
                dist.barrier()
                shares[name] = (written() - before) / x.nbytes
            all_reduces[name] = sum(e.name == "gloo:all_reduce" for e in prof.events())
        if rank == 0:
            print(repr((shares, all_reduces)))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    spawn.spawn(rank_main, args=(sys.argv[1],), nprocs=2)
"""


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
def test_bytes_written_to_the_sockets_match_the_cost_model(tmp_path: Path) -> None:
    """Count what each collective writes (wchar) on rank 0, as a share of the full tensor."""
    probe = tmp_path / "wire.py"
    probe.write_text(textwrap.dedent(WIRE_PROBE.format(starter_dir=str(STARTER.parent))))
    result = subprocess.run([sys.executable, str(probe), str(tmp_path / "store")], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert result.returncode == 0, result.stderr
    shares, all_reduces = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        assert shares[kind] == pytest.approx(mp.bytes_sent(kind, 2**20, 2) / 2**20, rel=0.02), kind
    # gloo's own reduce-scatters write what a whole all-reduce writes: twice a real reduce-scatter.
    for name in ("gloo reduce_scatter", "gloo reduce_scatter_single"):
        assert shares[name] == pytest.approx(2 * shares["reduce_scatter"], rel=0.02), name
    # dist.reduce_scatter is one all-reduce per rank (PR #149869); reduce_scatter_single one whole
    # all-reduce (PR #118911); the starter's all-to-all form runs none.
    assert all_reduces == {"all_reduce": 1, "reduce_scatter": 0, "all_gather": 0,
                           "gloo reduce_scatter": 2, "gloo reduce_scatter_single": 1}
