"""Runner: a lab's starters → RunResult values, each run in a scratch folder with a clean environment.

`.py` starters run as scripts; `.md` starters run their fenced python blocks in order in one
process. Every run is its own process group, killed whole at its timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from infralens.check.devices import Machine, detect_machine, device_files
from infralens.check.results import ResultStore, run_key
from infralens.check.sandbox import Sandbox
from infralens.child import PROBE, RUN_MARKDOWN, SUPERVISE, TRACE_STATE
from infralens.child.supervise import descendants
from infralens.errors import Mark, Problem
from infralens.lab.calculators import calculator_problems, probe_digest, starter_probe
from infralens.lab.claims import figure_line, unbacked_figures
from infralens.lab.questions import question_problems
from infralens.lab.resolve import plain_excerpt, traced_spans
from infralens.lab.state import recorded_text
from infralens.model.lab import Lab
from infralens.model.resolved import Excerpt, KeyBlock
from infralens.model.run import RunResult, first_runs
from infralens.model.starter import RunSpec, Starter
from infralens.text.markdown import python_blocks

Spans = tuple[tuple[int, int], ...]

# Environment variables a starter may see; everything else (tokens, the caller's PYTHONPATH) is
# left out so a run depends only on the file and its arguments. A run on a GPU also sees which
# GPUs the caller chose for it.
_KEPT_ENV = ("PATH", "SYSTEMROOT", "TMPDIR", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_DEVICE_ENV = {"cpu": (), "cuda": ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}


def clean_env(home: str, device: str = "cpu") -> dict[str, str]:
    """Return the small, fixed environment starters run with (on `device`)."""
    env = {key: os.environ[key] for key in (*_KEPT_ENV, *_DEVICE_ENV[device]) if key in os.environ}
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
    command: list[str], scratch: str, side: str, timeout: float, running: Running | None, sandbox: Sandbox | None, device: str = "cpu"
) -> Execution:
    """Run a starter's command in `scratch` under the supervisor (inside the sandbox, if any), at
    most `timeout` seconds, with what `device` needs, and return how it ended with what it printed."""
    if sandbox is not None:
        command = sandbox.wrap(command, scratch, str(Path(side, "tmp")), devices=device_files(device))
    started = time.perf_counter()
    options = dict(
        cwd=scratch,
        env=clean_env(scratch, device),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group too, the last resort below
    )
    supervised = [sys.executable, str(SUPERVISE), *command]
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


def run_starter(
    lab: Lab,
    starter: Starter,
    root: Path,
    keep: Path | None = None,
    running: Running | None = None,
    sandbox: Sandbox | None = None,
    spans: Spans = (),
    run: RunSpec | None = None,
    machine: Machine | None = None,
) -> RunResult:
    """Run one starter (its `run`, the first by default) and say whether it passed: exit 0 within
    the timeout, every expect found, every declared artifact written. Artifacts are copied into
    `keep` when it is given; with a sandbox, the starter runs inside it (see sandbox.py). With
    `spans`, a starter that passed runs once more under the tracer, which records the execution
    state of those lines (see `record_state`). The result names what `machine` it ran on.
    """
    spec = run or starter.run
    assert spec is not None
    source = (root / starter.path).resolve()
    # The starter's working folder holds only what it writes; the list of a Markdown starter's
    # blocks goes in a folder beside it, with the TMPDIR a sandbox gives it.
    with run_folder("infralens-run-") as scratch, run_folder("infralens-blocks-") as side:
        Path(side, "tmp").mkdir()
        if source.suffix == ".md":
            blocks = Path(side, "blocks.json")
            blocks.write_text(json.dumps(python_blocks(source.read_text(encoding="utf-8"))), encoding="utf-8")
            command = [sys.executable, str(RUN_MARKDOWN), str(source), str(blocks), *spec.args]
        else:
            command = [sys.executable, str(source), *spec.args]
        run = execute(command, scratch, side, spec.timeout, running, sandbox, spec.device)
        refused = {name: why for name in spec.artifacts if (why := artifact_problem(Path(scratch, name))) is not None}
        written = tuple(name for name in spec.artifacts if name not in refused and Path(scratch, name).exists())
        if keep is not None:
            for name in written:
                shutil.copyfile(Path(scratch, name), keep / name, follow_symlinks=False)
    stdout, stderr, seconds, timed_out = run.stdout, run.stderr, run.seconds, run.returncode is None
    text = stdout.text()
    if timed_out:
        status, reason = "timeout", f"killed after {spec.timeout:g} s timeout"
    elif run.returncode != 0:
        status, reason = "failed", f"exited with status {run.returncode}"
    else:
        missing, slow = [], []
        for pattern in spec.expect:
            found = expect_found(pattern, text)
            (slow if found is None else missing if not found else []).append(pattern)
        unwritten = [name for name in spec.artifacts if name not in written and name not in refused]
        if refused:
            name, why = next(iter(refused.items()))
            status, reason = "failed", f"artifact {name!r} {why}"
        elif slow:
            status, reason = "failed", f"expect {slow[0]!r} did not finish matching in {EXPECT_SECONDS:g} s (a pattern that backtracks without end?)"
        elif missing:
            status, reason = "failed", f"output does not match expect {missing[0]!r}"
        elif unwritten:
            status, reason = "failed", f"did not write artifact {unwritten[0]!r} into its working folder"
        else:
            status, reason = "passed", ""
    return RunResult(
        lab=lab.id,
        starter=starter.path,
        status=status,
        seconds=seconds,
        returncode=run.returncode,
        stdout=stdout.stored(KEPT_OUTPUT),
        stderr=stderr.stored(KEPT_OUTPUT),
        reason=reason,
        mark=starter.mark,
        finished=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        artifacts=written,
        traced=spans,
        state=record_state(source, starter, spans, running, sandbox) if spans and status == "passed" else "",
        device=spec.device,
        hardware=(machine or detect_machine()).hardware(spec.device),
    )


def skipped(lab: Lab, starter: Starter, run: RunSpec, why: str, machine: Machine) -> RunResult:
    """The result of a run this machine cannot make: it lacks the device the run needs."""
    return RunResult(
        lab=lab.id,
        starter=starter.path,
        status="skipped",
        seconds=0.0,
        returncode=None,
        stdout="",
        stderr="",
        reason=why,
        mark=starter.mark,
        finished=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        device=run.device,
        hardware=machine.hardware(run.device),
    )


def record_state(source: Path, starter: Starter, spans: Spans, running: Running | None, sandbox: Sandbox | None) -> str:
    """Run a starter that passed once more, under the tracer, and return the execution state it
    recorded for `spans` ("" when that run did not exit 0 in time).

    A run of its own, so the run the page shows and checks is never the traced one: tracing slows
    the lines it watches and keeps their values alive a little longer, which a starter that times
    a loop or measures peak memory would print.
    """
    assert starter.run is not None
    with run_folder("infralens-trace-") as scratch, run_folder("infralens-blocks-") as side:
        Path(side, "tmp").mkdir()
        state_file = Path(side, "tmp", "state.json")  # where a sandbox lets it write (its TMPDIR)
        spec: dict = {"ranges": spans, "output": str(state_file)}
        if source.suffix == ".md":
            spec["blocks"] = python_blocks(source.read_text(encoding="utf-8"))
        Path(side, "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        command = [sys.executable, str(TRACE_STATE), str(source), str(Path(side, "spec.json")), *starter.run.args]
        traced = execute(command, scratch, side, starter.run.timeout, running, sandbox)
        return read_state(state_file) if traced.returncode == 0 else ""


MAX_STATE_BYTES = 80 * 1024
"""Largest state file read back: the tracer caps its JSON at 64 KiB, a bigger file is not its own."""


def read_state(path: Path) -> str:
    """Return the state the tracer wrote, as compact JSON, or "" when there is none to trust.

    The file is written by code the starter could have interfered with, so it is read as plain
    data, bounded, and must have the tracer's shape.
    """
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_STATE_BYTES:
            return ""
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(state, dict) or state.get("version") != 1 or not isinstance(state.get("lines"), dict) or not isinstance(state.get("calls"), dict):
        return ""
    return json.dumps(state, separators=(",", ":"), ensure_ascii=False)


MAX_ARTIFACT_BYTES = 8 << 20
"""Largest artifact a run may leave: it is stored with the result and published with the lab page."""


def artifact_problem(path: Path) -> str | None:
    """Say why a file a run left cannot be kept as an artifact, or None (also when there is no file).

    Only a regular file is copied: a symlink could publish a file from anywhere on the machine, or
    point at /dev/zero and never end.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink; write the file itself"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_size > MAX_ARTIFACT_BYTES:
        return f"is {info.st_size:,} bytes; an artifact is published with the page, at most {MAX_ARTIFACT_BYTES:,}"
    if path.suffix.lower() == ".svg":
        return svg_problem(path.read_bytes())
    return None


ACTIVE_SVG = frozenset("script foreignobject iframe embed object handler listener animate set animatemotion animatetransform".split())
"""SVG elements that run script, embed other documents, or change attributes (such as a link's target) later."""


def svg_problem(data: bytes) -> str | None:
    """Say why an SVG artifact is not a plain drawing, or None.

    The site publishes it at its own URL, where a browser opening it runs any script it holds, so
    only static drawing is let through: no script or embedding elements, no `on…` handlers, no
    references but to the drawing's own `#ids`, no entity declarations.
    """
    import xml.etree.ElementTree as ET

    if b"<!ENTITY" in data:
        return "is an SVG that declares entities; an artifact is a plain drawing"
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        return f"is not well-formed SVG ({exc})"
    for element in root.iter():
        tag = str(element.tag).rsplit("}", 1)[-1].lower()
        if tag in ACTIVE_SVG:
            return f"is an SVG with a <{tag}> element, which runs or changes when the file is opened; an artifact is a plain drawing"
        texts = [element.text or ""] if tag == "style" else []
        for name, value in element.attrib.items():
            local = name.rsplit("}", 1)[-1].lower()
            if local.startswith("on"):
                return f"is an SVG with an {local} handler, which runs when the file is opened; an artifact is a plain drawing"
            if local == "href" and not value.strip().startswith("#"):
                return f"is an SVG linking to {value.strip()[:60]!r}; an artifact may refer only to its own #ids"
            if local == "style":
                texts.append(value)
        for text in texts:
            if "@import" in text or re.search(r"url\(\s*['\"]?\s*(?!#)", text):
                return "is an SVG whose style fetches a file; an artifact may refer only to its own #ids"
    return None


EXPECT_SECONDS = 2.0
"""How long one `expect` pattern may take to match a run's output."""


def expect_found(pattern: str, output: str, seconds: float = EXPECT_SECONDS) -> bool | None:
    """Say whether an expect pattern occurs in the output, or None when matching it ran out of time.

    The regex module matches with a time limit, and avoids the exponential backtracking of `re`,
    where `^(a+)+$` against 34 a's kept check busy forever. Patterns are checked with `re` syntax when the manifest is parsed.
    """
    import regex

    try:
        return regex.search(pattern, output, regex.MULTILINE, timeout=seconds) is not None
    except TimeoutError:
        return None


KEPT_OUTPUT = 1 << 20
"""Bytes of a run's stdout (and stderr) stored with its result; the checks read up to CAPTURE_BYTES."""


def run_or_recall(
    lab: Lab,
    starter: Starter,
    root: Path,
    store: ResultStore | None,
    use_cache: bool,
    running: Running | None = None,
    sandbox: Sandbox | None = None,
    spans: Spans = (),
    run: RunSpec | None = None,
    machine: Machine | None = None,
) -> RunResult:
    """Return the stored result of this exact version of the starter's run (its first, by
    default), or run it and store the result; skip it when `machine` lacks its device.

    A stored result counts only if it recorded the state of the same lines the page now shows.
    When the lab's calculators mirror the starter, a passed result carries the parity probe's
    answers to their current request: a stored one without them is probed, not run again. A stored
    "skipped" is never a result to reuse: whether this machine can make the run is asked each time,
    and a skipped run is stored only where no run of that version ever happened, so the page can
    say why there is none.
    """

    spec = run or starter.run
    assert spec is not None
    machine = machine or detect_machine()
    missing = machine.missing(spec)
    if store is None:
        if missing is not None:
            return skipped(lab, starter, spec, missing, machine)
        result = run_starter(lab, starter, root, running=running, sandbox=sandbox, spans=spans, run=spec, machine=machine)
        return probed(result, lab, root, starter, running, sandbox) if spec is starter.run else result
    key = run_key(root, starter, spec)
    stored = store.load(key) if use_cache or missing is not None else None  # --no-cache reads one only to keep it from a skip
    happened = stored if stored is not None and not stored.skipped else None
    if use_cache and happened is not None and happened.traced == spans:
        # The manifest may have moved since; point failures at where the starter is declared now.
        result = replace(happened, lab=lab.id, mark=starter.mark, cached=True)
        request = starter_probe(lab, starter.path, happened.stdout) if spec is starter.run else None
        if happened.passed and request is not None and happened.probed != probe_digest(request):
            result = probed(result, lab, root, starter, running, sandbox)
            if running is None or not running.stopping:
                store.update(key, result)
        return result
    if missing is not None:
        result = skipped(lab, starter, spec, missing, machine)
        if happened is None:
            store.save(key, result, store.staging(key))
        return result
    staging = store.staging(key)
    try:
        result = run_starter(lab, starter, root, keep=staging, running=running, sandbox=sandbox, spans=spans, run=spec, machine=machine)
        if spec is starter.run:
            result = probed(result, lab, root, starter, running, sandbox)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if running is not None and running.stopping:  # killed because check was stopped: not a result
        shutil.rmtree(staging, ignore_errors=True)
        return result
    store.save(key, result, staging)
    return result


MAX_ANSWER_BYTES = 1 << 20
"""Largest answers file read back from the probe: a calculator's few cases are a few kilobytes."""


def probed(result: RunResult, lab: Lab, root: Path, starter: Starter, running: Running | None, sandbox: Sandbox | None) -> RunResult:
    """A passed result with the parity probe's answers for the lab's calculators that mirror the
    starter (see infralens/probe.py); printed presets are read from the result's own output.

    The probe imports the starter in a process of its own, supervised and sandboxed like a run,
    and answers as plain JSON; when it cannot answer at all, every calculator gets the reason.
    """

    request = starter_probe(lab, starter.path, result.stdout) if result.passed else None
    if request is None:
        return result
    assert starter.run is not None
    source = (root / starter.path).resolve()
    with run_folder("infralens-probe-") as scratch, run_folder("infralens-blocks-") as side:
        Path(side, "tmp").mkdir()
        output = Path(side, "tmp", "answers.json")
        Path(side, "spec.json").write_text(json.dumps({**request, "output": str(output)}), encoding="utf-8")
        done = execute([sys.executable, str(PROBE), str(source), str(Path(side, "spec.json"))], scratch, side, starter.run.timeout, running, sandbox)
        answers = read_answers(output) if done.returncode == 0 else None
    if answers is None:
        last = (done.stderr.text().strip().splitlines() or ["no answers written"])[-1]
        why = "timed out" if done.returncode is None else f"exited with status {done.returncode}" if done.returncode else "wrote no answers it could read"
        answers = {"calculators": {key: {"error": f"the probe {why}: {last[:300]}", "cases": []} for key in request["calculators"]}}
    return replace(result, probed=probe_digest(request), answers=json.dumps(answers, separators=(",", ":")))


def read_answers(path: Path) -> dict | None:
    """The probe's answers as plain data with its shape, or None (a starter could have written them)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_ANSWER_BYTES:
            return None
        answers = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(answers, dict) or answers.get("version") != 1 or not isinstance(answers.get("calculators"), dict):
        return None
    for one in answers["calculators"].values():
        if not isinstance(one, dict) or not isinstance(one.get("cases"), list):
            return None
        for case in one["cases"]:
            if not isinstance(case, dict) or not isinstance(case.get("values"), dict) or not isinstance(case.get("answers"), dict) or not isinstance(case.get("label"), str):
                return None
    return {"calculators": answers["calculators"]}


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


def runs_of(labs: tuple[Lab, ...], device: str | None = None) -> list[tuple[Lab, Starter, RunSpec]]:
    """List every run of every starter (only those on `device`, if given), in lab order."""
    return [(lab, starter, run) for lab in labs for starter in lab.starters for run in starter.runs if device in (None, run.device)]


def check_claims(lab: Lab, results: list[RunResult], manifest_text: str) -> list[RunResult]:
    """Fail the lab's last run when its page states a figure that none of its runs printed and no
    line of its excerpt was recorded holding."""

    made = [index for index, result in enumerate(results) if not result.skipped]
    if not made:
        return results
    output = "\n".join([*(result.stdout for result in results), *(recorded_text(result.state) for result in results)])
    missing = unbacked_figures(lab, output)
    last = made[-1]
    if not missing or not results[last].passed:
        return results
    line, col = figure_line(manifest_text, missing[0])
    more = f" (and {len(missing) - 1} more: {', '.join(missing[1:])})" if len(missing) > 1 else ""
    reason = f"the page states {missing[0]} but no starter of the lab prints it or records it on a line{more}"
    failed = replace(results[last], status="failed", reason=reason, mark=Mark(lab.path, line, col))
    return [*results[:last], failed, *results[last + 1 :]]


def check_calculators(lab: Lab, results: list[RunResult]) -> list[RunResult]:
    """Fail a mirrored starter's run when a calculator of the lab disagrees with its probe's answers."""

    return failed_by(results, calculator_problems(lab, first_runs(lab.starters, {(r.starter, r.device): r for r in results})), lab)


def check_questions(lab: Lab, results: list[RunResult], blocks: tuple[KeyBlock, ...]) -> list[RunResult]:
    """Fail a passed run when a question's pattern matches nothing it printed, or a value it should
    have recorded is missing: its page could not give that answer."""

    return failed_by(results, question_problems(lab, first_runs(lab.starters, {(r.starter, r.device): r for r in results}), blocks), lab)


def failed_by(results: list[RunResult], by_starter: dict[str, list[Problem]], lab: Lab) -> list[RunResult]:
    """Fail each starter's first run that passed and has problems, at the first of them, saying how
    many more there are."""
    checked = []
    first = set(map(id, first_runs(lab.starters, {(r.starter, r.device): r for r in results}).values()))
    for result in results:
        problems = sorted(by_starter.get(result.starter, []), key=lambda p: p.mark)
        if problems and result.passed and id(result) in first:
            more = f"; and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''} (infralens build lists them)" if len(problems) > 1 else ""
            result = replace(result, status="failed", reason=problems[0].message + more, mark=problems[0].mark)
        checked.append(result)
    return checked


def become_subreaper() -> bool:
    """Make this process adopt what its starters' supervisors orphan (Linux); say whether it did."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def lab_excerpt(lab: Lab, root: Path) -> Excerpt | None:
    """The lab's excerpt, cut from its starters' text alone (no highlighting), or None when it
    cannot be: the build reports why."""

    try:
        texts = {step.starter: (root / step.starter).read_text(encoding="utf-8") for step in lab.steps}
    except (OSError, UnicodeDecodeError):
        return None
    return plain_excerpt(lab, texts)


def run_labs(
    labs: tuple[Lab, ...],
    root: Path,
    jobs: int,
    *,
    store: ResultStore | None = None,
    use_cache: bool = True,
    on_result=None,
    sandbox: Sandbox | None = None,
    reaper: bool = False,
    state: bool = True,
    machine: Machine | None = None,
    device: str | None = None,
) -> list[RunResult]:
    """Run every starter of the labs on `jobs` workers, once per device it declares, then check
    each lab's stated figures. A run whose device `machine` (this one, by default) lacks is
    skipped. With `device`, only the runs on that device are made, and the lab-wide checks
    (figures, calculators, questions), which read every starter's first run, are left out.

    With a store, a starter whose exact version already has a result is not run again (unless
    `use_cache` is off), and every fresh result is stored. Results come back in lab order;
    `on_result` sees each one as soon as its lab is complete. Without `state`, no starter is run
    again under the tracer (and a stored result counts only if it recorded no state either).
    """
    every = runs_of(labs, device)
    machine = machine or detect_machine(gpus=any(run.device != "cpu" for _, _, run in every))

    excerpts = {lab.id: lab_excerpt(lab, root) for lab in labs}
    spans = {lab.id: traced_spans(lab, excerpts[lab.id]) if state and excerpts[lab.id] else () for lab in labs}
    running = Running(reaper=reaper)
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    done = threading.Event()

    def sweep() -> None:
        while not done.wait(0.5):  # each look reads every process's /proc stat: not too often
            running.kill_orphans()

    if reaper:  # an orphan can reach us a moment after its supervisor died: look for one now and then
        threading.Thread(target=sweep, daemon=True).start()
    try:
        futures = {
            (lab.id, starter.path, run.device): pool.submit(
                run_or_recall, lab, starter, root, store, use_cache, running, sandbox,
                spans[lab.id] if starter.path == lab.previewed and run is starter.run else (), run, machine,
            )
            for lab, starter, run in every
        }
        results: list[RunResult] = []
        for lab in labs:
            runs = [future.result() for (lab_id, _, _), future in futures.items() if lab_id == lab.id]
            if device is None:
                runs = check_claims(lab, runs, (root / lab.path).read_text(encoding="utf-8"))
                runs = check_calculators(lab, runs)
                runs = check_questions(lab, runs, excerpts[lab.id].key_blocks if excerpts[lab.id] else ())
            for result in runs:
                if on_result:
                    on_result(result)
            results.extend(runs)
    except BaseException:  # Ctrl-C, SIGTERM: stop every starter now, run no more, let their folders go
        running.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        done.set()
        running.kill_orphans()
    pool.shutdown(wait=True)
    return results
