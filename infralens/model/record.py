"""A run record read back: result.json's text → a RunResult, or every problem with it.

Pure. A record may come from this machine's store or from a results folder another machine wrote
(`infralens results merge`), so it is read as untrusted data: each field must have the type
RunResult declares, the caps `check` keeps to (output, state, answers), and artifact names that are
plain file names; a recorded state must have the tracer's shape (see trace_state.py). Text that
cannot be written as UTF-8 (a lone surrogate) is refused: every page that showed it would fail.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import MISSING, fields
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from infralens.errors import InputError, Mark, Problem, did_you_mean
from infralens.model.run import RunResult
from infralens.model.starter import ARTIFACT

KEPT_OUTPUT = 1 << 20
"""Bytes of a run's stdout (and stderr) stored with its result: its first and last, with a note of the gap."""
MAX_STATE_BYTES = 80 * 1024
"""Largest recorded state: the tracer caps its JSON at 64 KiB, a bigger one is not its own."""
MAX_ANSWER_BYTES = 1 << 20
"""Largest answers of the parity probe: a calculator's few cases are a few kilobytes."""
MAX_ARTIFACT_BYTES = 8 << 20
"""Largest artifact a run may leave: it is stored with the result and published with the lab page."""
MAX_RECORD_BYTES = 16 << 20
"""Largest result.json read: its output, state and answers at their caps, JSON-escaped, fit."""

_GAP_NOTE = 200
"""Room for the note `stored` puts between the first and last of a long output."""
_TEXT_CAPS = {"stdout": KEPT_OUTPUT + _GAP_NOTE, "stderr": KEPT_OUTPUT + _GAP_NOTE, "state": MAX_STATE_BYTES, "answers": MAX_ANSWER_BYTES}
_SHORT_TEXT = 64 * 1024
"""Longest other text field (a reason, a hardware line, a path)."""
_FINISHED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_LINE_KEY = re.compile(r"[1-9]\d{0,6}")
_IMAGE_SIDE = 1 << 16


def parse_run(path: str, text: str) -> RunResult:
    """Read a run record (a result.json's text) into a RunResult; raise InputError with every
    problem, each at the line of its field where the text shows one."""
    problems: list[Problem] = []
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError([Problem(Mark(path, exc.lineno, exc.colno), f"not a run record: {exc.msg}")]) from None
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise InputError([Problem(Mark(path), "not a run record: not JSON, or nested too deeply")]) from None
    if not isinstance(record, dict):
        raise InputError([Problem(Mark(path), f"not a run record: a JSON {type(record).__name__}, not an object")])

    def add(field: str, message: str) -> None:
        problems.append(Problem(field_mark(path, text, field), message))

    hints = get_type_hints(RunResult)
    declared = {f.name: f for f in fields(RunResult)}
    for name in record:
        if name not in declared:
            add(name, f"unknown field {name!r}{did_you_mean(str(name), declared)}")
    values: dict[str, Any] = {}
    for name, field in declared.items():
        if name not in record:
            if field.default is MISSING:
                add(name, f"missing field {name!r}")
            continue
        value, why = typed(record[name], hints[name])
        if why is None:
            why = field_problem(name, value)
        if why is not None:
            add(name, f"{name}: {why}")
        else:
            values[name] = value
    if problems:
        raise InputError(problems)
    return RunResult(**values)


def typed(value: Any, hint: Any) -> tuple[Any, str | None]:
    """The value as the type hint wants it (lists as tuples, a mark as a Mark), or why it is not one."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Mark:
        if not isinstance(value, dict) or set(value) != {"path", "line", "col"}:
            return None, "must be an object of path, line and col"
        path, why = typed(value["path"], str)
        line, col = value["line"], value["col"]
        if why or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 10**7 for n in (line, col)):
            return None, why or "line and col must be whole numbers from 1"
        return Mark(path, line, col), None
    if origin is Literal:
        return (value, None) if isinstance(value, str) and value in args else (None, f"must be one of {', '.join(map(repr, args))}")
    if origin in (Union, UnionType):
        for one in args:
            if one is type(None) and value is None:
                return None, None
        return typed(value, next(one for one in args if one is not type(None)))
    if origin is tuple:
        if not isinstance(value, list):
            return None, "must be a list"
        if len(args) == 2 and args[1] is Ellipsis:
            items = [typed(item, args[0]) for item in value]
        elif len(value) == len(args):
            items = [typed(item, one) for item, one in zip(value, args)]
        else:
            return None, f"must be a list of {len(args)} values"
        why = next((why for _, why in items if why), None)
        return (None, why) if why else (tuple(item for item, _ in items), None)
    if hint is bool:
        return (value, None) if isinstance(value, bool) else (None, "must be true or false")
    if hint is int:
        return (value, None) if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 63 else (None, "must be a whole number")
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return (float(value), None) if ok else (None, "must be a finite number")
    if hint is str:
        if not isinstance(value, str):
            return None, "must be a string"
        return (value, None) if utf8(value) else (None, "holds text that cannot be written as UTF-8 (a lone surrogate)")
    raise TypeError(f"no reader for {hint!r}")  # a field added to RunResult needs one


def field_problem(name: str, value: Any) -> str | None:
    """Why a well-typed field's value is still not one a run could record, or None."""
    if isinstance(value, str) and len(value) > _TEXT_CAPS.get(name, _SHORT_TEXT):
        return f"is {len(value):,} characters, more than a run records ({_TEXT_CAPS.get(name, _SHORT_TEXT):,})"
    if name == "seconds" and value < 0:
        return "must not be negative"
    if name == "finished" and value and not _FINISHED.fullmatch(value):
        return f"{value[:40]!r} is not a UTC time such as '2026-11-20T09:00:00Z'"
    if name == "artifacts":
        bad = next((one for one in value if not plain_name(one)), None)
        if bad is not None:
            return f"{bad[:80]!r} is not a plain file name such as 'roofline.svg' (svg, png, txt, json or csv)"
        if len(set(value)) != len(value):
            return "names an artifact twice"
    if name == "sizes" and not all(plain_name(n) and 0 < w <= _IMAGE_SIDE and 0 < h <= _IMAGE_SIDE for n, w, h in value):
        return "each must name an artifact and its width and height in pixels"
    if name == "traced" and not all(1 <= first <= last for first, last in value):
        return "each must be a span [first, last] of lines from 1"
    if name == "state" and value:
        return state_problem(value)
    if name == "answers" and value:
        return answers_problem(value)
    return None


def plain_name(name: str) -> bool:
    """Whether an artifact name is a plain file name of the kinds a manifest may declare."""
    return ARTIFACT.pattern is not None and len(name) <= 255 and re.fullmatch(ARTIFACT.pattern, name) is not None


def utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def field_mark(path: str, text: str, field: str) -> Mark:
    """Where a field's key stands in the record's text (its first mention), else the file's start."""
    at = text.find(json.dumps(field) + ":")
    if at < 0:
        return Mark(path)
    line = text.count("\n", 0, at) + 1
    return Mark(path, line, at - (text.rfind("\n", 0, at) + 1) + 1)


# ---------------------------------------------------------------- a recorded state

_SAMPLE_KEYS: dict[str, Any] = {"n": int, "call": int, "t": int, "l": list, "values": dict, "inputs": dict, "return": str, "raised": bool, "branch": bool, "at": str}
_ENTRY_KEYS: dict[str, Any] = {"count": int, "exact": bool, "samples": list, "taken": list, "calls": int, "end": int, "process": str}


def state_problem(text: str) -> str | None:
    """Why a recorded state (JSON) does not have the tracer's shape, or None.

    Each group (lines, calls, loops) maps a line number to an entry of counts and samples; each
    sample's values are short texts by name. Nothing deeper is read: a page shows these alone.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_STATE_BYTES:
        return f"is more than the {MAX_STATE_BYTES:,} bytes a recorded state may be"
    try:
        state = json.loads(text)
    except (ValueError, RecursionError):
        return "is not JSON"
    if not isinstance(state, dict) or state.get("version") != 1:
        return "is not a recorded state (version 1)"
    for key, value in state.items():
        if key in ("lines", "calls", "loops"):
            if not isinstance(value, dict):
                return f"{key} must be an object"
            for line, entry in value.items():
                why = entry_problem(line, entry)
                if why:
                    return f"{key} {line[:20]!r}: {why}"
        elif key in ("truncated", "printed") and not isinstance(value, bool) or key == "process" and not isinstance(value, str):
            return f"{key} has the wrong type"
        elif key not in ("version", "truncated", "printed", "process"):
            return f"unknown key {key[:40]!r}"
    return None


def entry_problem(line: str, entry: Any) -> str | None:
    """Why one line's (call's, loop's) entry of a recorded state is not the tracer's shape, or None."""
    if not _LINE_KEY.fullmatch(line):
        return "is not a line number"
    if not isinstance(entry, dict) or not isinstance(entry.get("samples"), list):
        return "must be an object with samples"
    for key, value in entry.items():
        if key not in _ENTRY_KEYS:
            return f"unknown key {key[:40]!r}"
        if not kind_of(value, _ENTRY_KEYS[key]) or key == "taken" and not (len(value) == 2 and all(kind_of(n, int) for n in value)):
            return f"{key} has the wrong type"
    for sample in entry["samples"]:
        if not isinstance(sample, dict):
            return "a sample must be an object"
        for key, value in sample.items():
            if key not in _SAMPLE_KEYS:
                return f"unknown key {key[:40]!r} in a sample"
            if not kind_of(value, _SAMPLE_KEYS[key]):
                return f"{key} has the wrong type in a sample"
            if key == "l" and not all(kind_of(n, int) for n in value):
                return "l must list whole numbers"
            if key in ("values", "inputs") and not all(isinstance(v, str) for v in value.values()):
                return f"{key} must map names to texts"
            if key == "at" and value != "return":
                return "at must be 'return'"
    return None


def kind_of(value: Any, kind: type) -> bool:
    """isinstance, where a bool is no whole number."""
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def answers_problem(text: str) -> str | None:
    """Why the parity probe's answers (JSON) do not have the probe's shape, or None."""
    try:
        answers = json.loads(text)
    except (ValueError, RecursionError):
        return "is not JSON"
    if not isinstance(answers, dict) or not isinstance(answers.get("calculators"), dict):
        return "must be an object of calculators"
    for one in answers["calculators"].values():
        if not isinstance(one, dict) or not isinstance(one.get("cases"), list) or not isinstance(one.get("error", ""), str):
            return "each calculator must have a list of cases"
        for case in one["cases"]:
            if not isinstance(case, dict) or not isinstance(case.get("values"), dict) or not isinstance(case.get("answers"), dict) or not isinstance(case.get("label"), str):
                return "each case must have a label, values and answers"
    return None
