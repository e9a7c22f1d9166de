"""Process control for `check`: one starter as a process group in a scratch folder, bounded and killed whole.

A run gets a small fixed environment, a folder of its own, a supervisor (child/supervise.py) that
kills whatever it started, and a cap on what it prints; stopping `check` stops every run at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from infralens.check.devices import device_files
from infralens.check.sandbox import Sandbox
from infralens.child import SUPERVISE
from infralens.child.supervise import descendants

# Environment variables a starter may see; everything else (tokens, the caller's PYTHONPATH) is
# left out so a run depends only on the file and its arguments. A run on a GPU also sees which
# GPUs the caller chose for it.
_KEPT_ENV = ("PATH", "SYSTEMROOT", "TMPDIR", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


_DEVICE_ENV = {"cpu": (), "cuda": ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}


def clean_env(home: str, device: str = "cpu", extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """Return the small, fixed environment starters run with (on `device`), with the run spec's
    own variables (`extra`: never one of those set here, which the model refuses)."""
    env = {key: os.environ[key] for key in (*_KEPT_ENV, *_DEVICE_ENV[device]) if key in os.environ}
    env.update(extra)
    env.update(
        HOME=home,
        LANG="C.UTF-8",
        LC_ALL="C.UTF-8",
        PYTHONHASHSEED="0",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONIOENCODING="utf-8",
    )
    return env


class Running:
    """The starters running now, so that Ctrl-C or SIGTERM on check can stop every one of them at once."""

    def __init__(self, *, reaper: bool = False) -> None:
        self.lock = threading.Lock()
        self.processes: set[subprocess.Popen] = set()
        self.stopping = False
        self.reaper = reaper
        """True when this process is a subreaper whose only children are starters' supervisors
        (`infralens check`): whatever else becomes its child was orphaned by a killed supervisor."""

    def start(self, command: list[str], **options) -> subprocess.Popen:
        """Start a supervisor and count it as running, in one step (see `kill_orphans`)."""
        with self.lock:
            process = subprocess.Popen(command, **options)
            self.processes.add(process)
            if self.stopping:  # started as check was being stopped: stop it too
                process.send_signal(signal.SIGTERM)
        return process

    def kill_orphans(self) -> None:
        """Kill, with all they started, the processes a starter's killed supervisor left to us.

        A starter can SIGKILL its own supervisor; what it started is then re-parented to check,
        the nearest subreaper, and would live on holding the output pipes.
        """
        if not self.reaper:
            return

        with self.lock:
            known = {process.pid for process in self.processes}
            for orphan in [pid for pid in descendants(os.getpid(), depth=1) if pid not in known]:
                for pid in [*descendants(orphan), orphan]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(orphan, 0)

    def remove(self, process: subprocess.Popen) -> None:
        with self.lock:
            self.processes.discard(process)

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            for process in self.processes:
                try:
                    process.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass


@contextlib.contextmanager
def run_folder(prefix: str):
    """A fresh folder for one run, removed afterwards whatever the starter did to it.

    The folder is made inside a private one, and that one is removed: a starter may remove its
    working folder, rename it beside itself, or leave a symlink in its place, and what it points
    at is never followed.
    """
    private = tempfile.mkdtemp(prefix=prefix)
    try:
        folder = os.path.join(private, "work")
        os.mkdir(folder)
        yield folder
    finally:
        shutil.rmtree(private, ignore_errors=True)  # unlinks symlinks, never follows them


class Capture:
    """Read one output pipe of a run on a thread, keeping its first and last bytes and counting the rest.

    A starter that prints without end for its whole timeout would otherwise fill check's memory.
    """

    def __init__(self, pipe, limit: int) -> None:
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_bytes = 0
        self.total = 0
        self.limit = limit
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe) -> None:
        half = self.limit // 2
        with pipe:
            while chunk := pipe.read1(1 << 16):
                self.total += len(chunk)
                room = half - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                if chunk:
                    self.tail.append(chunk)
                    self.tail_bytes += len(chunk)
                    while self.tail_bytes - len(self.tail[0]) >= half:
                        self.tail_bytes -= len(self.tail.popleft())

    def finish(self) -> "Output":
        """Return what was kept once the pipe closed (or after a few seconds, if a stray process holds it)."""
        self.thread.join(timeout=5)
        tail = b"".join(self.tail)
        return Output(bytes(self.head), tail, self.total - len(self.head) - len(tail))


@dataclass(frozen=True)
class Output:
    """What a run printed on one stream: its first and last bytes, and how many between were not kept."""

    head: bytes
    tail: bytes
    left_out: int = 0

    def text(self) -> str:
        """The kept output as text, for the expect patterns (which see no note of the gap)."""
        return (self.head + (b"\n" if self.left_out else b"") + self.tail).decode("utf-8", errors="replace")

    def stored(self, limit: int) -> str:
        """The output as stored with a run: whole up to `limit` bytes, else its first quarter and
        last three quarters with a note of how many bytes were left out, so 200 MB printed once does
        not weigh on every later build."""
        head, tail, left_out = self.head, self.tail, self.left_out
        if not left_out:  # all of it was read: one stretch to cut
            head, tail = head + tail, b""
        if len(head) + len(tail) > limit:
            if not tail:
                head, tail = head[: limit // 4], head[-(limit * 3 // 4) :]
            else:
                head = head[: limit // 4]
                tail = tail[-(limit - len(head)) :]
            left_out = self.left_out + len(self.head) + len(self.tail) - len(head) - len(tail)
        if not left_out:
            return (head + tail).decode("utf-8", errors="replace")
        note = f"\n[… {left_out:,} bytes of output left out …]\n"
        return head.decode("utf-8", errors="replace") + note + tail.decode("utf-8", errors="replace")


CAPTURE_BYTES = 16 << 20
"""Bytes of a run's stdout (and of its stderr) read into memory: the first and last halves of it."""


@dataclass(frozen=True)
class Execution:
    """How one supervised process of a starter ended."""

    returncode: int | None
    """None when it was killed at its timeout."""
    stdout: "Output"
    stderr: "Output"
    seconds: float


def execute(
    command: list[str], scratch: str, side: str, timeout: float, running: Running | None, sandbox: Sandbox | None, device: str = "cpu",
    env: tuple[tuple[str, str], ...] = (),
) -> Execution:
    """Run a starter's command in `scratch` under the supervisor (inside the sandbox, if any), at
    most `timeout` seconds, with what `device` needs and the run spec's `env`, and return how it
    ended with what it printed."""
    if sandbox is not None:
        command = sandbox.wrap(command, scratch, str(Path(side, "tmp")), devices=device_files(device))
    started = time.perf_counter()
    options = dict(
        cwd=scratch,
        env=clean_env(scratch, device, env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group too, the last resort below
    )
    # The supervisor dies with check, and then removes the run's private folders (run_folder's).
    folders = [option for folder in (scratch, side) for option in ("--remove", os.path.dirname(folder))]
    supervised = [sys.executable, str(SUPERVISE), "--parent", str(os.getpid()), *folders, "--", *command]
    process = running.start(supervised, **options) if running is not None else subprocess.Popen(supervised, **options)
    out, err = Capture(process.stdout, CAPTURE_BYTES), Capture(process.stderr, CAPTURE_BYTES)
    try:
        process.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        stop(process)
        timed_out = True
    except BaseException:  # Ctrl-C or SIGTERM on check: stop the starter's whole tree at once
        stop(process)
        raise
    finally:
        kill_group(process)
        if running is not None:
            running.remove(process)
            running.kill_orphans()
    stdout, stderr = out.finish(), err.finish()
    return Execution(None if timed_out else process.returncode, stdout, stderr, time.perf_counter() - started)


def stop(process: subprocess.Popen) -> None:
    """Stop a running starter and everything it started.

    SIGTERM asks the supervisor to kill the whole tree (new sessions and double forks included);
    if it does not finish in a few seconds, its process group is killed.
    """
    try:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        kill_group(process)
        process.wait()


def kill_group(process: subprocess.Popen) -> None:
    """Kill the process group a starter runs in, if any of it is still alive."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def become_subreaper() -> bool:
    """Make this process adopt what its starters' supervisors orphan (Linux); say whether it did."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def sweep_orphans(running: Running) -> threading.Event:
    """Kill the orphans that reach this subreaper, every half second, until the event returned is set.

    An orphan can reach `check` a moment after its supervisor died, so one look at the end is not
    enough; each look reads every process's /proc stat, so not more often.
    """
    done = threading.Event()

    def sweep() -> None:
        while not done.wait(0.5):
            running.kill_orphans()

    threading.Thread(target=sweep, daemon=True).start()
    return done
