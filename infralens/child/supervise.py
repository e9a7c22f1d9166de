"""Run one starter and make sure nothing it started outlives it: the program `check` starts.

Usage: python supervise.py [--parent PID] [--remove FOLDER ...] -- COMMAND [ARG ...]

A process group is not enough to stop a starter: a child can start a new session, or fork twice,
and live on after the group is killed (holding the output pipe open, or running for good). This
supervisor makes itself a child subreaper (Linux prctl), so every process the starter starts, and
every orphan of those, stays its descendant. When the starter exits, or when `check` sends SIGTERM
at the timeout, it kills every descendant, reaps them, and exits with the starter's status.

It also dies with `check`: a `check` killed outright (SIGKILL, the OOM killer) runs no cleanup of
its own, so the supervisor watches its parent (`--parent`, the pid `check` had when it started it)
and, once that is gone, kills the starter's whole tree and removes the run's folders (`--remove`)
as `check` would have.
Run by path; imports nothing of InfraLens.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER = 36

WATCH_SECONDS = 0.2
"""How often the supervisor looks whether `check` is still its parent."""


def descendants(pid: int, depth: int = 0) -> list[int]:
    """Return every living descendant of pid (its children only, with depth=1), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the fields follow its last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    if depth == 1:
        return children.get(pid, [])
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def kill_all() -> None:
    """Kill and reap every descendant, again until none is left (one may fork while others die)."""
    me = os.getpid()
    for _ in range(100):
        alive = descendants(me)
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()


def reap() -> None:
    """Collect every child that has exited (orphans adopted by this subreaper included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def arguments(argv: list[str]) -> tuple[int | None, list[str], list[str]]:
    """The parent to watch, the folders to remove if it dies, and the command."""
    parent, folders = None, []
    while argv and argv[0] != "--":
        option, value, argv = argv[0], argv[1], argv[2:]
        if option == "--parent":
            parent = int(value)
        elif option == "--remove":
            folders.append(value)
        else:
            raise SystemExit(f"supervise.py: unknown option {option}")
    return parent, folders, argv[1:]


ORPHANED = threading.Event()
"""Set once `check` is gone: the watcher then stops the tree and removes the folders, and the
main thread, whose starter that kills, leaves the exit to it."""


def watch(parent: int, folders: list[str]) -> None:
    """Once `parent` is no longer this process's parent (it died, and the orphan was adopted),
    stop the starter's tree and remove the run's folders: nobody else will."""
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    ORPHANED.set()
    kill_all()
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)  # unlinks symlinks, never follows them
    os._exit(128 + signal.SIGKILL)


def main() -> None:
    parent, folders, command = arguments(sys.argv[1:])
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the process group `check` kills is the only bound

    def stop(signum, frame) -> None:
        kill_all()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    watcher = threading.Thread(target=watch, args=(parent, folders), daemon=True)
    if parent is not None:
        watcher.start()
    starter = subprocess.Popen(command)
    status = starter.wait()
    if ORPHANED.is_set():
        watcher.join()  # it exits the process once the folders are gone
    kill_all()
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    main()
