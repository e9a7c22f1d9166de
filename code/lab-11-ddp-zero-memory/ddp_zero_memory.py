"""DDP and ZeRO on a CPU: who holds which bytes, and a check that sharding leaves training unchanged.

1. The ZeRO ledger: per-rank bytes of model states for mixed-precision Adam (16 bytes/param) under
   DDP and ZeRO stages 1-3, reproducing the ZeRO paper's 7.5B-parameter, 64-rank example.
2. A real run: two processes join a gloo process group over loopback and train a small fp64 MLP
   with DistributedDataParallel, each on half of the batch, next to a ZeRO-1 copy whose Adam state
   is sharded. After every step both must equal one process trained on the whole batch, and each
   rank of the sharded optimizer must hold half of the Adam state.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
from pathlib import Path
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import wait

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

# Mixed-precision Adam, per parameter: fp16 weights and gradients, and K = 12 bytes of optimizer
# state (an fp32 master copy of the weights, the momentum and the variance).
WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 2, 12
WORLD_SIZE = 2  # ranks in the toy run, one per core of a small machine
TOLERANCE = 1e-12  # fp64, and DDP only regroups the gradient sum: gaps stay at rounding level
LOOPBACK = "lo0" if sys.platform == "darwin" else "lo"  # the only interface gloo may bind


@dataclass(frozen=True)
class Config:
    """The toy run: model and batch sizes, and what the ranks are told to do."""

    width: int = 32
    layers: int = 4
    batch_size: int = 16  # split evenly across the ranks
    steps: int = 5
    lr: float = 1e-2
    seed: int = 0
    fail_rank: int | None = None  # this rank raises at step 1, to show the others get stopped
    torch_zero: bool = False  # ZeRO-1 by torch's ZeroRedundancyOptimizer instead of ShardedAdam


class RankFailure(RuntimeError):
    """A rank exited with an error, or the ranks ran past the deadline."""


# region ledger
def zero_ledger(num_params: float, num_ranks: int) -> dict[str, int]:
    """Return the bytes of model states one rank holds under DDP and each ZeRO stage."""
    psi = round(num_params)  # whole parameters, so every entry is a whole number of bytes
    shard = -(-psi // num_ranks)  # parameters per rank of a sharded state: ceil, the last shard padded
    weights, grads, optimizer = WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES  # bytes per parameter
    return {
        "DDP (replicated)": (weights + grads + optimizer) * psi,
        "ZeRO-1 (P_os)": (weights + grads) * psi + optimizer * shard,
        "ZeRO-2 (P_os+g)": weights * psi + (grads + optimizer) * shard,
        "ZeRO-3 (P_os+g+p)": (weights + grads + optimizer) * shard,
    }


def partition(params: list[torch.Tensor], world_size: int) -> dict[torch.Tensor, int]:
    """Give each parameter an owner: largest first, to the rank with the fewest elements so far."""
    load, owner = [0] * world_size, {}
    for param in sorted(params, key=torch.Tensor.numel, reverse=True):
        owner[param] = load.index(min(load))
        load[owner[param]] += param.numel()
    return owner


class ShardedAdam:
    """ZeRO-1: Adam state only for this rank's shard; after each step every owner broadcasts."""

    def __init__(self, params, lr: float, rank: int, world_size: int) -> None:
        self.params = list(params)
        self.owner = partition(self.params, world_size)
        # A plain Adam over the owned parameters: the only moments this rank ever allocates.
        self.optim = torch.optim.Adam([p for p in self.params if self.owner[p] == rank], lr=lr)

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None  # owned or not: backward fills in every gradient

    @torch.no_grad()
    def step(self) -> None:
        self.optim.step()  # DDP already averaged every gradient; this updates the owned shard only
        for param in self.params:
            dist.broadcast(param, src=self.owner[param])  # the owner's new values replace the rest


def train_rank(rank: int, world_size: int, store_path: str, config: Config, reports) -> None:
    """One rank: train DDP and ZeRO-1 replicas on this rank's rows, checking every step."""
    torch.set_num_threads(1)  # the ranks share the cores
    import_before_group(config)  # else destroy_process_group cannot free the group: see there
    os.environ["GLOO_SOCKET_IFNAME"] = LOOPBACK
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=30))
    try:
        # Every rank draws the same whole batch from the same seed and keeps only its rows.
        generator = torch.Generator().manual_seed(config.seed + 1)
        inputs, targets = torch.randn(2, config.batch_size, config.width, generator=generator,
                                      dtype=torch.float64)
        per_rank = config.batch_size // world_size
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        single = make_model(config)  # the reference: one process, the whole batch
        ddp = DistributedDataParallel(make_model(config))
        zero = DistributedDataParallel(make_model(config))
        optimizers = (torch.optim.Adam(single.parameters(), lr=config.lr),
                      torch.optim.Adam(ddp.parameters(), lr=config.lr),
                      make_zero1(zero, config, rank, world_size))
        worst = {"DDP": 0.0, "ZeRO-1": 0.0}
        for step in range(config.steps):
            if rank == config.fail_rank and step == 1:
                raise RuntimeError(f"rank {rank}: failure injected at step {step} (--fail-rank)")
            for model, optimizer, rows in zip((single, ddp, zero), optimizers, (slice(None), mine, mine)):
                optimizer.zero_grad()
                # Mean over this rank's rows; backward() all-reduces and averages the gradients
                # across ranks, and the mean of equal halves' means is the whole batch's mean.
                F.mse_loss(model(inputs[rows]), targets[rows]).backward()
                optimizer.step()
            for name, model in (("DDP", ddp), ("ZeRO-1", zero)):
                gap = max((a - b).abs().max().item()
                          for a, b in zip(single.parameters(), model.module.parameters()))
                assert gap <= TOLERANCE, f"rank {rank}, step {step}: {name} is {gap:.1e} off"
                worst[name] = max(worst[name], gap)
        reports.put({"rank": rank, "worst": worst, "params": sum(p.numel() for p in zero.parameters()),
                     "ddp_bytes": moment_bytes(optimizers[1]), "zero_bytes": moment_bytes(optimizers[2])})
    finally:
        dist.destroy_process_group()  # on failure too, so no rank leaves its sockets behind
# endregion


def run_rank(rank: int, world_size: int, store_path: str, config: Config, reports) -> None:
    """One rank's process: train, then check the group is really gone once nothing holds it."""
    train_rank(rank, world_size, store_path, config, reports)
    # Gloo threads that outlive the group run on into interpreter shutdown, where they can abort
    # the process ("terminate called without an active exception"): see import_before_group.
    assert not gloo_threads(), f"rank {rank}: gloo threads outlived the group: {gloo_threads()}"


def gloo_threads() -> list[str]:
    """Name the threads of this process that belong to gloo (Linux; elsewhere, none are seen)."""
    names = []
    for comm in Path("/proc/self/task").glob("*/comm"):
        try:
            names.append(comm.read_text().strip())
        except OSError:  # the thread ended while we looked
            continue
    return [name for name in names if "gloo" in name]


def import_before_group(config: Config) -> None:
    """Import the torch modules that take `group.WORLD` as a default argument, before it exists.

    A default is evaluated once, at import. Imported after init_process_group, such a module holds
    the group for the rest of the process: destroy_process_group cannot free it, and its gloo
    threads keep running into interpreter shutdown, where tearing them down can abort the rank.
    """
    import torch.distributed.nn  # noqa: F401  (DDP and torch.optim import it on first use)
    if config.torch_zero:
        import torch.distributed.optim  # noqa: F401  (ZeroRedundancyOptimizer's module)


def make_model(config: Config) -> nn.Module:
    """Build the fp64 MLP from a fixed seed, so every copy on every rank starts identical."""
    torch.manual_seed(config.seed)
    layers: list[nn.Module] = []
    for _ in range(config.layers):
        layers += [nn.Linear(config.width, config.width, dtype=torch.float64), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def make_zero1(model: nn.Module, config: Config, rank: int, world_size: int):
    """Return a ZeRO-1 Adam for the model: ShardedAdam, or torch's ZeroRedundancyOptimizer."""
    if not config.torch_zero:
        return ShardedAdam(model.parameters(), config.lr, rank, world_size)
    # Same partition rule and same numbers, but importing it (FSDP, DTensor) costs every rank seconds.
    from torch.distributed.optim import ZeroRedundancyOptimizer
    return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=config.lr)


def moment_bytes(optimizer) -> int:
    """Return the bytes of Adam moments (exp_avg and exp_avg_sq) this rank holds."""
    # Both ZeRO-1 optimizers keep their shard's state in the local Adam they wrap, `.optim`.
    state = getattr(optimizer, "optim", optimizer).state
    return sum(moments[key].nbytes for moments in state.values() for key in ("exp_avg", "exp_avg_sq"))


def launch(config: Config, world_size: int, timeout: float) -> list[dict]:
    """Run train_rank (through run_rank) in fresh processes and return their reports, ordered by rank.

    If a rank fails or the deadline passes, stop every rank still running and raise RankFailure.
    """
    if config.batch_size % world_size:
        raise ValueError("batch_size must split evenly across the ranks")
    context = multiprocessing.get_context("spawn")  # a fresh interpreter per rank, as torchrun gives
    reports = context.Queue()
    with tempfile.TemporaryDirectory(prefix="ddp-zero-") as folder:
        # The ranks meet in a FileStore: no port to choose, no listening socket on any interface.
        store_path = os.path.join(folder, "store")
        ranks = [context.Process(target=run_rank, name=f"rank {rank}",
                                 args=(rank, world_size, store_path, config, reports))
                 for rank in range(world_size)]
        deadline = time.monotonic() + timeout
        try:
            for process in ranks:
                process.start()
            running = list(ranks)
            while running:
                left = deadline - time.monotonic()
                if left <= 0:
                    names = ", ".join(p.name for p in running)
                    raise RankFailure(f"{names} still running after {timeout:g} s")
                done = wait([p.sentinel for p in running], timeout=left)  # wakes when a rank exits
                for process in [p for p in running if p.sentinel in done]:
                    process.join()
                    if process.exitcode != 0:
                        raise RankFailure(f"{process.name} exited with code {process.exitcode}")
                running = [p for p in running if p.sentinel not in done]
            return sorted((reports.get(timeout=10) for _ in ranks), key=lambda r: r["rank"])
        finally:
            stop(ranks)


def stop(processes: list) -> None:
    """Terminate every started process still alive, then kill any that ignore it."""
    started = [process for process in processes if process.pid is not None]
    for process in started:
        if process.is_alive():
            process.terminate()
    for process in started:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join()


def print_ledger(num_params: float, num_ranks: int) -> None:
    """Print the per-rank ledger of model states for DDP and the three ZeRO stages."""
    print("ZeRO ledger: model states per rank, mixed-precision Adam")
    print(f"  {WEIGHT_BYTES + GRAD_BYTES + OPTIMIZER_BYTES} bytes/param = fp16 weights {WEIGHT_BYTES} "
          f"+ fp16 grads {GRAD_BYTES} + optimizer K = {OPTIMIZER_BYTES} (fp32 master weights, "
          f"momentum, variance)")
    print(f"  Psi = {num_params / 1e9:g}B parameters, N_d = {num_ranks} data-parallel ranks")
    ledger = zero_ledger(num_params, num_ranks)
    baseline = ledger["DDP (replicated)"]
    for stage, per_rank in ledger.items():
        saving = f", {baseline / per_rank:.1f}x less than DDP" if per_rank < baseline else ""
        print(f"  {stage}: {per_rank / 1e9:.1f} GB  ({per_rank / num_params:.2f} bytes/param{saving})")


def print_run(reports: list[dict], config: Config, world_size: int) -> None:
    """Print what the ranks measured and check how the Adam state was split."""
    params = reports[0]["params"]
    print(f"\ntoy run: {world_size} processes, gloo over loopback, {config.layers} x "
          f"Linear({config.width}, {config.width}) + Tanh in fp64, {params:,} parameters")
    print(f"  batch {config.batch_size}, {config.batch_size // world_size} rows per rank, "
          f"{config.steps} Adam steps, each checked against one process on the whole batch")
    for name in ("DDP", "ZeRO-1"):
        gap = max(report["worst"][name] for report in reports)
        print(f"  max |{name} - single process|, all steps and ranks: {gap:.1e} "
              f"(tolerance {TOLERANCE:.0e})")
    replicated = [report["ddp_bytes"] for report in reports]
    sharded = [report["zero_bytes"] for report in reports]
    print("Adam moments held per rank (exp_avg + exp_avg_sq, fp64)")
    print("  DDP, replicated: " + ", ".join(f"rank {r} {b:,} bytes" for r, b in enumerate(replicated)))
    print("  ZeRO-1, sharded: " + ", ".join(f"rank {r} {b:,} bytes" for r, b in enumerate(sharded))
          + f" ({max(sharded) / replicated[0]:.2f} of replicated on the fullest rank)")
    print(f"  parameters and gradients: all {params:,} on every rank in both runs "
          f"(ZeRO-1 shards only the optimizer state)")
    assert replicated == [2 * 8 * params] * world_size  # two fp64 moments per parameter, everywhere
    assert sum(sharded) == replicated[0]  # the shards cover the state exactly once
    assert max(sharded) <= 1.2 * replicated[0] / world_size  # and each holds about 1/N of it


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the ledger's sizes and the toy run's options from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=7.5e9, help="Psi for the ledger")
    parser.add_argument("--ranks", type=int, default=64, help="N_d for the ledger")
    parser.add_argument("--width", type=int, default=Config.width)
    parser.add_argument("--steps", type=int, default=Config.steps)
    parser.add_argument("--batch-size", type=int, default=Config.batch_size)
    parser.add_argument("--fail-rank", type=int, default=None,
                        help="make this rank raise at step 1; the run must stop and exit 1")
    parser.add_argument("--torch-zero", action="store_true",
                        help="run ZeRO-1 with torch's ZeroRedundancyOptimizer (slower start)")
    parser.add_argument("--timeout", type=float, default=100.0,
                        help="seconds before the parent stops every rank and exits 1")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Print the ledger, run the ranks, then print and check what they measured."""
    args = parse_args(argv)
    print_ledger(args.params, args.ranks)
    config = Config(width=args.width, steps=args.steps, batch_size=args.batch_size,
                    fail_rank=args.fail_rank, torch_zero=args.torch_zero)
    try:
        reports = launch(config, WORLD_SIZE, args.timeout)
    except RankFailure as error:
        sys.exit(f"error: {error}; stopped every rank still running")
    print_run(reports, config, WORLD_SIZE)


if __name__ == "__main__":
    main()
