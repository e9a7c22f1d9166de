"""Runner: a lab's starters → RunResult values, each run in a scratch folder with a clean environment.

`.py` starters run as scripts; `.md` starters run their fenced python blocks in order in one
process; C++ and CUDA starters are compiled (check/compile.py), then their program runs. Every
run, and every compile, is its own process group, killed whole at its timeout.
"""

from __future__ import annotations

import functools
import json
import secrets
import shutil
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from infralens.check.compile import built_with, compiler_of, first_error, first_problem_line, missing_compiler
from infralens.check.devices import Machine, detect_machine
from infralens.check.process import Running, execute, run_folder, sweep_orphans
from infralens.check.results import ResultStore, run_key
from infralens.check.sandbox import Sandbox
from infralens.check.verdicts import (
    artifact_problem,
    check_claims,
    check_features,
    run_verdict,
)
from infralens.child import PROBE, RUN_MARKDOWN, TRACE_STATE
from infralens.errors import InputError, Mark
from infralens.lab.calculators import probe_digest, starter_probe
from infralens.lab.resolve import plain_excerpt
from infralens.lab.state import traced_spans
from infralens.model.lab import Lab
from infralens.model.resolved import Excerpt
from infralens.model.record import KEPT_OUTPUT, MAX_ANSWER_BYTES, MAX_STATE_BYTES, state_problem
from infralens.model.run import RunResult
from infralens.model.starter import CompileStep, RunSpec, Starter, compile_step
from infralens.text.languages import language_of
from infralens.text.markdown import python_blocks

Spans = tuple[tuple[int, int], ...]


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
    *,
    text: str,
) -> RunResult:
    """Run one starter (its `run`, the first by default) and say whether it passed: exit 0 within
    the timeout, every expect found, every declared artifact written. Artifacts are copied into
    `keep` when it is given; with a sandbox, the starter runs inside it (see sandbox.py). With
    `spans`, a starter that passed runs once more under the tracer, which records the execution
    state of those lines (see `traced_state`). The result names what `machine` it ran on. `text`
    is the starter as the workspace read it (a Markdown starter's python blocks are cut from it).
    """
    spec = run or starter.run
    assert spec is not None
    source = (root / starter.path).resolve()
    step = compile_step(starter.path, spec)
    machine = machine or detect_machine()
    # The starter's working folder holds only what it writes; the list of a Markdown starter's
    # blocks, and a compiled starter's program, go in a folder beside it, with the TMPDIR a sandbox gives it.
    with run_folder("infralens-run-") as scratch, run_folder("infralens-blocks-") as side:
        Path(side, "tmp").mkdir()
        built = ""
        if step is not None:
            made = compiled(lab, starter, spec, step, source, scratch, side, running, sandbox, machine, text)
            if isinstance(made, RunResult):
                return made
            command, built = [made[0], *spec.args], made[1]
        elif source.suffix == ".md":
            blocks = Path(side, "blocks.json")
            blocks.write_text(json.dumps(python_blocks(text)), encoding="utf-8")
            command = [sys.executable, str(RUN_MARKDOWN), str(source), str(blocks), *spec.args]
        else:
            command = [sys.executable, str(source), *spec.args]
        run = execute(command, scratch, side, spec.timeout, running, sandbox, spec.device, spec.env)
        refused = {name: why for name in spec.artifacts if (why := artifact_problem(Path(scratch, name))) is not None}
        written = tuple(name for name in spec.artifacts if name not in refused and Path(scratch, name).exists())
        sizes = image_sizes(Path(scratch), written)
        if keep is not None:
            for name in written:
                shutil.copyfile(Path(scratch, name), keep / name, follow_symlinks=False)
    stdout, stderr, seconds = run.stdout, run.stderr, run.seconds
    status, reason = run_verdict(spec, run.returncode, stdout.text(), written, refused)
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
        sizes=sizes,
        traced=spans,
        **(traced_state(source, text, starter, spans, running, sandbox, printed=stdout.text()) if spans and status == "passed" else {}),
        device=spec.device,
        hardware=machine.hardware(spec.device, python=not built),
        built=built,
    )


def compiled(
    lab: Lab, starter: Starter, spec: RunSpec, step: CompileStep, source: Path, scratch: str, side: str,
    running: Running | None, sandbox: Sandbox | None, machine: Machine, text: str,
) -> tuple[str, str] | RunResult:
    """Compile a C++ or CUDA starter into the run's side folder, under the supervisor and sandbox
    a run has, within the run's timeout: (its program, what it was built with), or the result of a
    run that ends there: failed (no compiler, or a compile error, named at the starter's line as
    the compiler gave it), timed out, or compiled but not run (this machine lacks its device)."""
    compiler = compiler_of(step)
    built = built_with(compiler, step.flags)
    missing = machine.missing(spec, torch=False)
    ended = functools.partial(
        RunResult, lab=lab.id, starter=starter.path, mark=starter.mark, device=spec.device, hardware=machine.hardware(spec.device, python=False), built=built,
        finished=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    if compiler.path is None:
        why = missing_compiler(compiler, starter.path)
        if missing is not None:  # nothing this machine could do with it
            return ended(status="skipped", seconds=0.0, returncode=None, stdout="", stderr="", reason=f"{missing}; and {why}", built="")
        return ended(status="failed", seconds=0.0, returncode=None, stdout="", stderr="", reason=why, built="")
    program = str(Path(side, "tmp", step.program))
    made = execute([compiler.path, *step.flags, str(source), "-o", program], scratch, side, spec.timeout, running, sandbox)
    said = (made.stdout.text() + made.stderr.text()).strip()
    output = {"stdout": made.stdout.stored(KEPT_OUTPUT), "stderr": made.stderr.stored(KEPT_OUTPUT), "seconds": made.seconds, "returncode": made.returncode}
    if made.returncode is None:
        return ended(status="timeout", reason=f"compiling was killed after {spec.timeout:g} s timeout", **output)
    if made.returncode != 0 or not Path(program).is_file():
        error = first_error(said, str(source.parent), PurePosixPath(starter.path).parent.as_posix(), {starter.path: text})
        if error is None:
            return ended(status="failed", reason=f"does not compile with {compiler.identity}: {first_problem_line(said)}", **output)
        at = f"{error.path}:{error.line}:{error.column}"
        return ended(status="failed", reason=f"does not compile with {compiler.identity}: {at}: {error.message}", also=((Mark(error.path, error.line, error.column), error.message),), **output)
    if missing is not None:
        return ended(status="compiled", reason=missing, **output)
    return program, built


def image_sizes(folder: Path, names: tuple[str, ...]) -> tuple[tuple[str, int, int], ...]:
    """The pixel size of each PNG or SVG among `names` in `folder`, read from its header (imagesize,
    a small pure-Python reader: no image library to load); an image it cannot measure is left out."""
    import imagesize  # deferred: only a run that wrote an image needs it

    sizes = []
    for name in names:
        if name.endswith((".png", ".svg")):
            try:
                width, height = imagesize.get(str(folder / name))
            except (OSError, ValueError):
                continue
            if width > 0 and height > 0:
                sizes.append((name, int(width), int(height)))
    return tuple(sizes)


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


def traced_state(source: Path, text: str, starter: Starter, spans: Spans, running: Running | None, sandbox: Sandbox | None, *, printed: str) -> dict[str, str]:
    """Run a starter that passed once more, under the tracer, and return the RunResult fields it
    gives: the execution state recorded for `spans` (none when that run did not exit 0 in time)
    and, when that run printed otherwise than the plain run (`printed`), a note saying where.

    A run of its own, so the run the page shows and checks is never the traced one: tracing slows
    the lines it watches, which a starter that times a loop prints. Such a state is still shown,
    but marked ("printed": false) so that it backs no figure of the prose and no `recorded:`
    answer: a starter that computes otherwise when traced (it looks at sys.gettrace(), or the
    tracer changed it) must not have what only the traced run held taken for what it computes.
    """
    state, output = record_state(source, text, starter, spans, running, sandbox)
    if not state:
        return {}
    if output == printed:
        return {"state": state}
    ours, theirs = printed.splitlines(), output.splitlines()
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    plain, traced = (lines[at][:100] if at < len(lines) else "(nothing)" for lines in (ours, theirs))
    note = f"its recorded state backs no figure: under the tracer it printed {traced!r} where it printed {plain!r} (line {at + 1} of its output)"
    return {"state": json.dumps({**json.loads(state), "printed": False}, separators=(",", ":"), ensure_ascii=False), "note": note}


def record_state(source: Path, text: str, starter: Starter, spans: Spans, running: Running | None, sandbox: Sandbox | None) -> tuple[str, str]:
    """Run a starter that passed once more, under the tracer, and return the execution state it
    recorded for `spans` ("" when that run did not exit 0 in time) and what that run printed."""
    assert starter.run is not None
    with run_folder("infralens-trace-") as scratch, run_folder("infralens-blocks-") as side:
        Path(side, "tmp").mkdir()
        state_file = Path(side, "tmp", "state.json")  # where a sandbox lets it write (its TMPDIR)
        token = secrets.token_hex(16)  # the tracer stamps the state with it; the starter never sees it
        spec: dict = {"ranges": spans, "output": str(state_file), "token": token}
        if source.suffix == ".md":
            spec["blocks"] = python_blocks(text)
        Path(side, "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        command = [sys.executable, str(TRACE_STATE), str(source), str(Path(side, "spec.json")), *starter.run.args]
        traced = execute(command, scratch, side, starter.run.timeout, running, sandbox, env=starter.run.env)
        return (read_state(state_file, token), traced.stdout.text()) if traced.returncode == 0 else ("", "")


def read_state(path: Path, token: str) -> str:
    """Return the state the tracer wrote, as compact JSON, or "" when there is none to trust.

    The file is written by code the starter could have interfered with, so it is read as plain
    data, bounded, and must have the tracer's shape and the token this check handed the tracer
    (a state file the starter wrote itself, and ended before the tracer could, has none).
    """
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_STATE_BYTES:
            return ""
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(state, dict) or not secrets.compare_digest(str(state.pop("token", "")), token):
        return ""
    # A lone surrogate (a value's __format__ can make one) becomes "?": no page could be written with it.
    text = json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace").decode("utf-8")
    return "" if state_problem(text) else text


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
    *,
    text: str,
) -> RunResult:
    """Return the stored result of this exact version of the starter's run (its first, by
    default), or run it and store the result; skip it when `machine` lacks its device (a compiled
    starter is compiled all the same, and is then 'compiled', not run).

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
    step = compile_step(starter.path, spec)
    compiles = step is not None
    missing = machine.missing(spec, torch=not compiles)
    if store is None:
        if missing is not None and not compiles:
            return skipped(lab, starter, spec, missing, machine)
        result = run_starter(lab, starter, root, running=running, sandbox=sandbox, spans=spans, run=spec, machine=machine, text=text)
        return probed(result, lab, root, starter, running, sandbox) if spec is starter.run else result
    key = run_key(root, starter, spec)
    try:
        stored = store.load(key) if use_cache or missing is not None else None  # --no-cache reads one only to keep it from a skip
    except InputError:  # a record no run could have left: run again, and the fresh one replaces it
        stored = None
    if step is not None and stored is not None and stored.built and other_compiler(stored, step):
        stored = None  # built by another version of the compiler this machine has: build and run it again
    happened = stored if stored is not None and stored.ran else None
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
        # A compiled starter is compiled all the same (a broken kernel fails here too), once per version.
        if compiles and stored is not None and stored.compiled and use_cache:
            return replace(stored, lab=lab.id, mark=starter.mark, cached=True)
        result = run_starter(lab, starter, root, running=running, sandbox=sandbox, run=spec, machine=machine, text=text) if compiles else skipped(lab, starter, spec, missing, machine)
        if happened is None and (running is None or not running.stopping):
            store.save(key, result, store.staging(key))
        return result
    staging = store.staging(key)
    try:
        result = run_starter(lab, starter, root, keep=staging, running=running, sandbox=sandbox, spans=spans, run=spec, machine=machine, text=text)
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


def probed(result: RunResult, lab: Lab, root: Path, starter: Starter, running: Running | None, sandbox: Sandbox | None) -> RunResult:
    """A passed result with the parity probe's answers for the lab's calculators that mirror the
    starter (see infralens/child/probe.py); printed presets are read from the result's own output.

    The probe imports the starter in a process of its own, supervised and sandboxed like a run,
    and answers as plain JSON; when it cannot answer at all, every calculator gets the reason.
    """

    request = starter_probe(lab, starter.path, result.stdout) if result.passed and traceable(starter.path) else None
    if request is None:
        return result
    assert starter.run is not None
    source = (root / starter.path).resolve()
    with run_folder("infralens-probe-") as scratch, run_folder("infralens-blocks-") as side:
        Path(side, "tmp").mkdir()
        output = Path(side, "tmp", "answers.json")
        Path(side, "spec.json").write_text(json.dumps({**request, "output": str(output)}), encoding="utf-8")
        done = execute([sys.executable, str(PROBE), str(source), str(Path(side, "spec.json"))], scratch, side, starter.run.timeout, running, sandbox, env=starter.run.env)
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


def other_compiler(stored: RunResult, step: CompileStep) -> bool:
    """Whether a stored run of a compiled starter was built by another compiler version than the
    one here (never, where this machine has none: its record stands)."""
    here = compiler_of(step)
    return here.path is not None and not stored.built.startswith(here.identity + " ") and stored.built != here.identity


def traceable(path: str) -> bool:
    """Whether the tracer can record a starter's execution state: Python, and Markdown's python blocks."""
    language = language_of(path)
    return language is not None and language.runner in ("python", "markdown")


def runs_of(labs: tuple[Lab, ...], device: str | None = None) -> list[tuple[Lab, Starter, RunSpec]]:
    """List every run of every starter (only those on `device`, if given), in lab order."""
    return [(lab, starter, run) for lab in labs for starter in lab.starters for run in starter.runs if device in (None, run.device)]


def lab_excerpt(lab: Lab, texts: Mapping[str, str]) -> Excerpt | None:
    """The lab's excerpt, cut from its starters' texts alone (as the workspace read them, by path;
    no highlighting), or None when it cannot be: the build reports why."""
    return plain_excerpt(lab, {step.starter: texts[step.starter] for step in lab.steps if step.starter in texts})


def run_labs(
    labs: tuple[Lab, ...],
    root: Path,
    jobs: int,
    *,
    texts: Mapping[str, str],
    manifests: Mapping[str, str],
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

    `texts` (starter path → text) and `manifests` (lab id → text) are what the workspace read,
    behind its size and symlink guards: the runner reads no starter or manifest itself.
    """
    every = runs_of(labs, device)
    machine = machine or detect_machine(gpus=any(run.device != "cpu" for _, _, run in every))

    excerpts = {lab.id: lab_excerpt(lab, texts) for lab in labs}
    # Execution state is Python's: a compiled starter's lines are never traced.
    spans = {lab.id: traced_spans(lab, excerpts[lab.id]) if state and excerpts[lab.id] and traceable(lab.previewed) else () for lab in labs}
    running = Running(reaper=reaper)
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    done = sweep_orphans(running) if reaper else threading.Event()
    try:
        futures = {
            (lab.id, starter.path, run.device): pool.submit(
                run_or_recall, lab, starter, root, store, use_cache, running, sandbox,
                spans[lab.id] if starter.path == lab.previewed and run is starter.run else (), run, machine, text=texts[starter.path],
            )
            for lab, starter, run in every
        }
        results: list[RunResult] = []
        for lab in labs:
            runs = [future.result() for (lab_id, _, _), future in futures.items() if lab_id == lab.id]
            if device is None:
                runs = check_claims(lab, runs, manifests[lab.id])
                runs = check_features(lab, runs, excerpts[lab.id])
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
