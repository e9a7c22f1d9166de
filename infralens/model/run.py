"""What running one starter showed, and how a starter's runs are named."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from infralens.errors import Mark
from infralens.model.starter import Device, Starter

Status = Literal["passed", "failed", "timeout", "skipped", "compiled"]
"""How a run ended: skipped when the machine lacks the device it needs; compiled when it lacks the
device but could compile the program (a CUDA starter where nvcc is and no GPU): not run, so never
passed, yet its code is known to build."""


@dataclass(kw_only=True, frozen=True)
class RunResult:
    """What running one starter showed."""

    lab: str
    starter: str
    status: Status
    """'passed', 'failed', 'timeout', 'skipped' (the machine lacks the device the run needs), or
    'compiled' (it lacks the device, but compiled the program: compiled, not run)."""
    seconds: float
    returncode: int | None
    stdout: str
    stderr: str
    reason: str
    """Why it failed, in one line; empty when it passed."""
    mark: Mark
    also: tuple[tuple[Mark, str], ...] = ()
    """Further failures found with the run, each at its own place and reported on its own line
    (the claims check: every figure after the first that no run backs)."""
    finished: str = ""
    """When the run ended, UTC, ISO 8601 to the second."""
    artifacts: tuple[str, ...] = ()
    """Names of the artifacts the run wrote, kept beside its stored result."""
    sizes: tuple[tuple[str, int, int], ...] = ()
    """(name, width, height) in pixels of each image among the artifacts, read when the run ended:
    a page gives its <img> that size, so the image keeps its place before it loads."""
    cached: bool = False
    """True when this result was read from the store instead of running again."""
    traced: tuple[tuple[int, int], ...] = ()
    """The line spans whose execution state the run recorded (none when it recorded none)."""
    state: str = ""
    """The recorded execution state, as trace_state.py wrote it (JSON), when the run passed; with
    "printed": false when the traced run printed otherwise than this run (it then backs no figure)."""
    note: str = ""
    """What check says of a run beside its status, in one line: why its recorded state backs no figure."""
    probed: str = ""
    """The digest of the calculators' request the parity probe answered (see calculators.py)."""
    answers: str = ""
    """The probe's answers (JSON), when the run passed and the lab has calculators mirroring it."""
    device: Device = "cpu"
    """The device the run is for (its run spec's); one starter has a result per device."""
    hardware: str = ""
    """What it ran on (see devices.py): CPU model, or GPU, memory, driver and CUDA; torch, Python."""
    built: str = ""
    """A compiled starter's compiler, its version and flags ('g++ 12.2.0 -std=c++20 -O2 …'); empty for Python."""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"

    @property
    def compiled(self) -> bool:
        """Compiled, not run: the machine lacks the device its program needs."""
        return self.status == "compiled"

    @property
    def ran(self) -> bool:
        """Whether the starter's program ran here (passed, failed or timed out): it has output to judge."""
        return self.status not in ("skipped", "compiled")

    @property
    def name(self) -> str:
        return run_name(self.starter, self.device)

    def tail(self, lines: int = 20) -> str:
        """The last lines of stdout, then of stderr: what usually says why a run failed."""
        parts = [text.rstrip("\n").split("\n")[-lines:] for text in (self.stdout, self.stderr) if text.strip()]
        return "\n".join(line for part in parts for line in part)


def first_runs(starters: tuple[Starter, ...], every_run: dict[tuple[str, str], RunResult]) -> dict[str, RunResult]:
    """Each starter's result of its first run, by path, from the results of every run by (path,
    device): the run a lab's figures, state, calculators, questions and status come from. A run on
    another device reports only its own result."""
    return {s.path: every_run[s.path, s.run.device] for s in starters if s.run is not None and (s.path, s.run.device) in every_run}


def run_name(starter: str, device: str) -> str:
    """One run of a starter in a line of text: its path, and its device when it is not the CPU."""
    return starter if device == "cpu" else f"{starter} [{device}]"
