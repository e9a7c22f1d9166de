"""Workers: apply a function to many items in forked processes that die with the build.

A cold build parses and renders hundreds of labs; below `PARALLEL_FROM` items, or with one job,
the work runs in this process. Each worker gets its share of the items and sends each result back
on a pipe of its own, so nothing it holds can leave the build waiting.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable, Iterator

from infralens.errors import InputError, Mark, Problem

PARALLEL_FROM = 24
"""Below this many labs to parse or render, a pool of processes costs more than it saves."""


def map_over(function, items: list, *, jobs: int, setup: Callable[[], None] | None = None, least: int = PARALLEL_FROM) -> Iterator:
    """Apply function to every item, in up to `jobs` worker processes when there are at least `least` items.

    `setup` runs first in this process and in each worker (the render context, say).
    """
    if not items:
        return iter(())
    if setup is not None:
        setup()
    if len(items) < least or jobs < 2:
        return map(function, items)
    return pool_map(function, items, jobs, setup)


def pool_map(function, items: list, jobs: int, setup: Callable[[], None] | None) -> Iterator:
    """Spread the items over `jobs` forked workers, each sending its results back on a pipe of its own.

    No queue or lock is shared with a worker, so a worker killed at any moment (by Ctrl-C, SIGTERM
    to the group, the OOM killer) cannot leave the build waiting on a lock it held, as
    multiprocessing's Pool and ProcessPoolExecutor can; stopping kills the workers outright.
    """
    # deferred: only a build big enough for a pool needs multiprocessing (and the socket, selectors
    # and pickle machinery it loads); a one-lab edit renders in this process
    from multiprocessing import get_context
    from multiprocessing.connection import wait

    fork = get_context("fork")
    # Workers are forked with Ctrl-C and SIGTERM held back, until start_worker has replaced the
    # build's own handlers (which would make a worker print a KeyboardInterrupt traceback).
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    workers = {}
    try:
        for share in range(jobs):
            reader, writer = fork.Pipe(duplex=False)
            worker = fork.Process(target=work, args=(os.getpid(), setup, function, items[share :: jobs], writer), daemon=True)
            worker.start()
            writer.close()
            workers[reader] = worker
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    try:
        pending = dict(workers)
        while pending:
            # Wake now and then: a stop whose KeyboardInterrupt was swallowed still stops.
            for reader in wait(list(pending), timeout=0.5):
                try:
                    kind, payload = reader.recv()
                except EOFError:
                    raise InputError([Problem(Mark("build"), f"a render worker died (exit status {pending[reader].exitcode}); build again")]) from None
                if kind == "done":
                    del pending[reader]
                elif kind == "raised":
                    raise payload
                else:
                    yield payload
            stop_if_asked()
    finally:
        for reader, worker in workers.items():
            if worker.is_alive():
                worker.kill()
            worker.join()
            reader.close()


def work(parent: int, setup: Callable[[], None] | None, function, items: list, results) -> None:
    """A render worker: apply function to each item, sending each result, or the exception, back."""
    start_worker(parent, setup)
    try:
        for item in items:
            results.send(("result", function(item)))
        results.send(("done", None))
    except Exception as exc:  # noqa: BLE001 - handed to the build, which raises it as its own
        try:
            results.send(("raised", exc))
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            results.send(("raised", RuntimeError(repr(exc))))
    finally:
        results.close()


STOP = threading.Event()
"""Set when the user asked the build to stop (Ctrl-C, SIGTERM). The KeyboardInterrupt raised then can
land where Python swallows it (a finalizer, a pool's start-up), so the pipeline also looks here."""


def stop_if_asked() -> None:
    if STOP.is_set():
        raise KeyboardInterrupt


def start_worker(parent: int, setup: Callable[[], None] | None) -> None:
    """Set up a render worker: it dies with the build, leaves Ctrl-C to it, and is set up.

    A worker shares the build's open lock file (fork): one that outlived a killed build would keep
    every later build waiting. Linux kills it when the build dies (PR_SET_PDEATHSIG); a build that
    stops kills its workers itself.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the build stops its workers itself, and says so once
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    try:
        import ctypes  # deferred: only a worker asks the kernel for this, and ctypes takes ~8 ms to load

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the build died before the line above took effect
        os._exit(1)
    if setup is not None:
        setup()


PR_SET_PDEATHSIG = 1
