"""Ask a starter for values without running it as a script: the calculators' parity probe.

Usage: python probe.py STARTER SPEC.json. The starter is imported as a module (its
`if __name__ == "__main__":` part does not run), then SPEC's requests are answered and written,
as JSON, to SPEC's "output":
- "tables": names of module-level values (a config table such as REFERENCE_MODELS), read as data;
- "calls": {"id": {"call": "estimate_memory", "args": [...], "kwargs": {...}, "attrs": [...]}}:
  the function (a dotted path from the module's globals) called with the arguments, where an
  argument is a number, a string, or itself a {"call": ...}; then each attribute or key of
  "attrs" read from what it returned (all of it when "attrs" is absent).
- "calculators": {"id": {"defaults": {...}, "choices": {input: {name: number}}, "presets": [{"label",
  "values"} or {"table", "fields"}], "mirrors": {output: request}}}: each output's request answered
  at the defaults and at each preset in order, a table's entries read in its place. In a request,
  {"input": name} stands for the case's number of that input ({"input": name, "name": true} for its
  choice's name), and "path" lists the attribute, key or index steps into the result. Each case
  comes back with its label, the index of the preset item it came from ("item", null for the
  defaults), its values (a choice input by its name) and its answers; a bool answer is a number.
Each answer is {"value": ...} or {"error": "TypeError: ..."}: one bad request does not hide the
others. Values are plain data: numbers, strings, lists, string-keyed dicts, dataclasses as their
fields, one-element tensors and NumPy scalars as numbers; anything else is an error naming its type.

Like trace_state.py, this file is run by path and imports nothing of InfraLens.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import runpy
import sys

MAX_ITEMS = 10_000
"""Most elements a value may hold (a table of presets is small; a tensor is not a preset)."""


class Unanswerable(Exception):
    """A request the starter cannot answer as plain data."""


def plain(value, budget: list[int] | None = None):
    """Turn a starter's value into JSON data, or raise Unanswerable naming what could not be."""
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0:
        raise Unanswerable(f"more than {MAX_ITEMS:,} values")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, numbers.Rational) and not isinstance(value, int):
        return plain(float(value), budget)  # a Fraction (an exact intensity, say) as the float a page holds
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unanswerable(f"a value that is not finite ({value!r})")
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), budget) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(item, budget) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise Unanswerable("a dict whose keys are not all strings")
        return {key: plain(item, budget) for key, item in value.items()}
    library = type(value).__module__.split(".")[0]
    if library in ("torch", "numpy") and hasattr(value, "item"):
        count = value.numel() if library == "torch" else getattr(value, "size", 1)
        if count == 1:  # a one-element tensor or array, a NumPy scalar: the number it holds
            return plain(value.item(), budget)
        raise Unanswerable(f"a {library} value of {count:,} elements, not one number")
    raise Unanswerable(f"a {type(value).__module__}.{type(value).__qualname__}, not plain data")


def resolve(namespace: dict, path: str):
    """The value at a dotted path from the module's globals (`Config`, `Config.from_name`)."""
    head, *rest = path.split(".")
    if head not in namespace:
        raise Unanswerable(f"the starter defines no {head!r}")
    value = namespace[head]
    for name in rest:
        try:
            value = getattr(value, name)
        except AttributeError:
            raise Unanswerable(f"{path!r}: no attribute {name!r}") from None
    return value


def argument(namespace: dict, given):
    """An argument as the starter receives it: a {"call": ...} is made first."""
    if isinstance(given, dict) and "call" in given:
        return invoke(namespace, given)
    if isinstance(given, dict) and "input" in given:
        raise Unanswerable(f"input {given['input']!r} has no value here")
    if isinstance(given, list):
        return [argument(namespace, item) for item in given]
    return given


def invoke(namespace: dict, request: dict):
    function = resolve(namespace, request["call"])
    if not callable(function):
        raise Unanswerable(f"{request['call']!r} is not a function")
    args = [argument(namespace, item) for item in request.get("args", [])]
    kwargs = {name: argument(namespace, item) for name, item in request.get("kwargs", {}).items()}
    return function(*args, **kwargs)


def read(value, name: str):
    """An attribute, or a key of a mapping, of what a call returned."""
    if isinstance(value, dict) and name in value:
        return value[name]
    try:
        return getattr(value, name)
    except AttributeError:
        raise Unanswerable(f"the result ({type(value).__qualname__}) has no {name!r}") from None


def step(value, key):
    """One step of a request's "path": an index of a sequence, else a key or an attribute."""
    if isinstance(key, int) and not isinstance(value, dict):
        try:
            return value[key]
        except (IndexError, TypeError, KeyError):
            raise Unanswerable(f"the result ({type(value).__qualname__}) has no item [{key}]") from None
    return read(value, key)


def answer(namespace: dict, request: dict) -> dict:
    try:
        result = invoke(namespace, request)
        for key in request.get("path", []):
            result = step(result, key)
        if "attrs" in request:
            return {"value": {name: plain(read(result, name)) for name in request["attrs"]}}
        return {"value": plain(result)}
    except Exception as error:  # the starter's own exceptions too: each answer stands alone
        return {"error": f"{type(error).__name__}: {error}"}


def fill(request, numbers: dict, names: dict):
    """A request with each {"input": name} replaced by the case's value."""
    if isinstance(request, list):
        return [fill(item, numbers, names) for item in request]
    if not isinstance(request, dict):
        return request
    if "input" in request:
        return names[request["input"]] if request.get("name") else numbers[request["input"]]
    filled = {**request, "args": fill(request.get("args", []), numbers, names)}
    filled["kwargs"] = {key: fill(item, numbers, names) for key, item in request.get("kwargs", {}).items()}
    return filled


def table_cases(namespace: dict, table: dict, choices: dict) -> list[tuple[str, dict]]:
    """The presets a table of the starter holds: (its key, the values its entry gives the fields)."""
    rows = resolve(namespace, table["table"])
    if not isinstance(rows, dict) or not rows:
        raise Unanswerable(f"{table['table']!r} is not a mapping of presets ({type(rows).__qualname__})")
    fields = table["fields"]
    cases = []
    for label, entry in rows.items():
        entry = plain(entry)
        if isinstance(entry, (int, float)) and not isinstance(entry, bool) and len(fields) == 1:
            entry = [entry]  # a table of single numbers sets its one field
        if isinstance(entry, list):
            if len(entry) != len(fields):
                raise Unanswerable(f"entry {label!r} holds {len(entry)} values for {len(fields)} fields")
            values = dict(zip(fields, entry))
        elif isinstance(entry, dict):
            missing = [name for name in fields if name not in entry]
            if missing:
                raise Unanswerable(f"entry {label!r} has no {missing[0]!r}")
            values = {name: entry[name] for name in fields}
        else:
            raise Unanswerable(f"entry {label!r} is a {type(entry).__name__}, not a list or a mapping")
        for name, value in values.items():
            if name in choices and not isinstance(value, str):  # a choice given by its number
                values[name] = next((key for key, number in choices[name].items() if number == value), value)
        cases.append((str(label), values))
    return cases


def calculator(namespace: dict, spec: dict) -> dict:
    """Answer one calculator's mirrors at its defaults and at each of its presets, in order."""
    choices = spec.get("choices", {})
    cases: list[tuple[str, dict, int | None]] = [("defaults", {}, None)]
    for index, item in enumerate(spec.get("presets", [])):
        if "table" in item:
            try:
                cases += [(label, values, index) for label, values in table_cases(namespace, item, choices)]
            except Exception as error:
                return {"error": f"{type(error).__name__}: {error}", "item": index, "cases": []}
        else:
            cases.append((item["label"], item["values"], index))
    answered = []
    for label, given, index in cases:
        values = {**spec["defaults"], **given}
        names = {name: value for name, value in values.items() if name in choices}
        numbers = {name: choices[name].get(value, value) if name in choices else value for name, value in values.items()}
        answers = {output: answer(namespace, fill(request, numbers, names)) for output, request in spec["mirrors"].items()}
        answered.append({"label": label, "item": index, "values": values, "answers": answers})
    return {"cases": answered}


def main() -> None:
    source_path, spec_path = sys.argv[1:3]
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    sys.argv = [source_path]
    sys.path[0] = os.path.dirname(os.path.abspath(source_path))  # its own folder first, as a run has it
    namespace = runpy.run_path(source_path, run_name="infralens_probe")
    tables = {}
    for name in spec.get("tables", []):
        try:
            tables[name] = {"value": plain(resolve(namespace, name))}
        except Exception as error:
            tables[name] = {"error": f"{type(error).__name__}: {error}"}
    calls = {key: answer(namespace, request) for key, request in spec.get("calls", {}).items()}
    calculators = {key: calculator(namespace, item) for key, item in spec.get("calculators", {}).items()}
    with open(spec["output"], "w", encoding="utf-8") as handle:
        json.dump({"version": 1, "tables": tables, "calls": calls, "calculators": calculators}, handle)


if __name__ == "__main__":
    main()
