"""Calculators: what the parity probe is asked, whether its answers agree, and what a page shows.

Pure. Input: a lab's `Calculator` models and, when `check` has recorded them, the probe's answers
(infralens/child/probe.py, stored with the starter's run). Output: the probe's request, the problems of a
calculator that disagrees with its starter (each at its manifest line), and the values a page
shows: a table of the defaults and presets with their results, the arithmetic of each result
with its inputs in place, and the data of the page's "Try it" script. Numbers are shown by
`lab.shown.show`, which templates/static/calculator.js repeats character for character; the
roofline picture is `lab.roofline`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import PurePosixPath

from infralens.errors import Mark, Problem
from infralens.lab.roofline import RooflineView, roofline_view
from infralens.lab.shown import (
    Case,
    arithmetic,
    branches,
    headed,
    show,
    show_input,
)
from infralens.model.calculator import (
    Calculator,
    PresetTable,
    Printed,
    PrintedPreset,
)
from infralens.model.expr import (
    EXACT,
    Expr,
    ExprError,
    condition_js,
    evaluate,
    holds,
    parse_call,
    parse_condition,
    parse_expr,
    to_js,
)
from infralens.model.lab import Lab, mirrored_starter
from infralens.model.resolved import Excerpt, Published
from infralens.model.run import RunResult
from infralens.text.patterns import PatternTimeout, search_output
from infralens.text.source import SourceFile
from infralens.urls import lab_url

Numeric = int | float

CALCULATORS_FILE = "calculators.js"
"""The lab's calculators for its page's script, beside the page (labs/<id>/calculators.js)."""


def chart_file(calc_id: str) -> str:
    """The file of a calculator's chart, beside the lab page: an image until the script inlines it."""
    return f"calc-{calc_id}.svg"


# ---------------------------------------------------------------- the probe's request


def printed_value(printed: Printed, stdout: str) -> Numeric | None:
    """The number a run printed where the pattern's first group matches, scaled; None if none
    (also when the pattern ran out of time: `check_calculator` says so at the pattern)."""
    try:
        match = search_output(printed.pattern, stdout)
    except PatternTimeout:
        return None
    try:
        digits = match.group(1).replace(",", "") if match else None
        # ASCII digits only, as the page reads a number: float() also takes '٤٢' and '４２'
        number = float(digits) if digits is not None and digits.isascii() else None
    except (IndexError, ValueError, TypeError, AttributeError):
        return None
    return number * printed.scale if number is not None and math.isfinite(number) else None


def printed_values(preset: PrintedPreset, stdout: str) -> dict[str, Numeric] | None:
    """The values a printed preset reads from a run's output, or None if any figure is missing."""
    values = {name: printed_value(printed, stdout) for name, printed, _ in preset.printed}
    return None if any(value is None for value in values.values()) else values


def preset_items(calc: Calculator, stdout: str) -> list[dict]:
    """The presets as the probe takes them, in order: listed values, or a table of the starter.
    A printed preset is listed with what the run printed; one whose figures are missing is left out."""
    items = []
    for preset in calc.presets:
        if isinstance(preset, PresetTable):
            items.append({"table": preset.table, "fields": list(preset.fields)})
        elif isinstance(preset, PrintedPreset):
            values = printed_values(preset, stdout)
            items.append({"label": preset.label, "values": values} if values is not None else {"label": preset.label, "missing": True})
        else:
            items.append({"label": preset.label, "values": {name: value for name, value, _ in preset.values}})
    return items


def probe_request(calc: Calculator, stdout: str = "") -> dict:
    """What the probe is asked for one calculator: its mirrors at the defaults and every preset."""
    names = {i.name for i in calc.inputs}
    return {
        "defaults": {i.name: i.default for i in calc.inputs},
        "choices": {i.name: {name: number for name, number, _ in i.choices} for i in calc.inputs if i.choices},
        "presets": [item for item in preset_items(calc, stdout) if "missing" not in item],
        "mirrors": {o.name: parse_call(o.mirrors.text, names) for o in calc.outputs},
    }


def starter_probe(lab: Lab, starter: str, stdout: str = "") -> dict | None:
    """The probe's request for every calculator of the lab that mirrors this starter, or None.
    `stdout` is the starter's checked output, where printed presets are read."""
    calcs = {c.id: probe_request(c, stdout) for c in lab.calculators if mirrored_starter(lab, c) == starter}
    return {"calculators": calcs} if calcs else None


def probe_digest(request: dict | None) -> str:
    """Identify a request: stored answers count only for the same one (the probe's own version is
    part of the run's key, results.recorders_digest)."""
    if request is None:
        return ""
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:24]


# ---------------------------------------------------------------- parity


@dataclass(frozen=True)
class Checked:
    """A calculator and its cases; `verified` when the starter gave the same value for every one."""

    calc: Calculator
    cases: tuple[Case, ...]
    verified: bool
    checked: str = ""
    """When the run whose probe agreed finished (ISO 8601), when verified."""


def outputs_at(calc: Calculator, values: dict[str, Numeric | str]) -> dict[str, Numeric]:
    """Evaluate every output, in order, at these input values; raise ExprError."""
    numbers: dict[str, Numeric] = {i.name: i.number(values[i.name]) for i in calc.inputs}
    results = {}
    for output in calc.outputs:
        results[output.name] = numbers[output.name] = evaluate(compiled(output.expr.text, frozenset(numbers)), numbers)
    return results


@lru_cache(maxsize=1024)
def compiled(text: str, names: frozenset[str]) -> Expr:
    return parse_expr(text, names)


def unmet(calc: Calculator, values: dict[str, Numeric | str]):
    """The first requirement these input values break (or cannot be computed for), or None."""
    numbers = {i.name: i.number(values[i.name]) for i in calc.inputs}
    names = frozenset(numbers)
    for requirement in calc.requires:
        try:
            if not holds(parse_condition(requirement.that.text, names), numbers):
                return requirement
        except ExprError:  # `heads % 0`: a condition that cannot be computed does not hold
            return requirement
    return None


def agrees(ours: Numeric, theirs, tolerance: float) -> bool:
    """Exactly equal when the starter's value is a whole number a browser holds exactly; else
    within the relative tolerance (an integer beyond 2**53 is a float on the page)."""
    if isinstance(theirs, int) and abs(theirs) < EXACT:
        return ours == theirs
    if isinstance(theirs, int):
        return math.isclose(ours, theirs, rel_tol=1e-15)
    return math.isclose(ours, theirs, rel_tol=tolerance, abs_tol=0.0)


def listed_cases(calc: Calculator, stdout: str = "") -> list[tuple[str, dict, str]]:
    """The defaults and the presets known without the probe: listed ones, and printed ones the
    output holds (a table's rows need the probe). Each as (label, values, group)."""
    defaults = {i.name: i.default for i in calc.inputs}
    cases = [("Defaults", defaults, "")]
    for preset, item in zip(calc.presets, preset_items(calc, stdout)):
        if "values" in item:
            cases.append((item["label"], {**defaults, **item["values"]}, preset.group))
    return cases


def check_calculator(calc: Calculator, answer: dict | None, finished: str = "", stdout: str = "") -> tuple[Checked, list[Problem]]:
    """Compare a calculator's outputs with the probe's answers, case by case.

    Without answers (no check has probed this version), the cases known without the probe are
    computed and the result is not verified. A problem points at the manifest: a preset the table
    gives wrongly at the table's `from`, a printed figure the run did not print at its pattern, a
    call that failed at its `mirrors`, a disagreeing value at its `expr`.
    """
    if answer is None:
        cases = [Case(label, tuple(values.items()), tuple(outputs_at(calc, values).items()), group) for label, values, group in listed_cases(calc, stdout)]
        return Checked(calc, tuple(cases), False), []
    problems: list[Problem] = []
    for preset in calc.presets:
        if isinstance(preset, PrintedPreset):
            for _, printed, _ in preset.printed:
                try:
                    search_output(printed.pattern, stdout)
                except PatternTimeout as slow:
                    problems.append(Problem(printed.mark, f"preset {preset.label!r}: {slow.reason}"))
                    continue
                if printed_value(printed, stdout) is None:
                    problems.append(Problem(printed.mark, f"preset {preset.label!r}: the checked run printed nothing that matches {printed.pattern!r} (with a number in its first group)"))
    if "error" in answer:
        item = answer.get("item")
        where = calc.presets[item].mark if isinstance(item, int) and item < len(calc.presets) else calc.mark
        return Checked(calc, (), False), problems + [Problem(where, f"calculator {calc.id!r}: the starter's presets cannot be read: {answer['error']}")]
    cases = []
    wrong: dict[str, list[tuple[str, str, Mark]]] = {}  # output → (case, what went wrong, where), in case order
    for case in answer["cases"]:
        label = "Defaults" if case["label"] == "defaults" else case["label"]
        where = "the defaults" if label == "Defaults" else f"preset {label!r}"
        item = case.get("item")
        source = calc.presets[item] if isinstance(item, int) and 0 <= item < len(calc.presets) else None
        values = case["values"]
        refused = [p for i in calc.inputs if (p := i.refuse(values.get(i.name)))]
        if refused:
            problems.append(Problem(source.mark if source else calc.mark, f"calculator {calc.id!r}: {where} from the starter's table: {refused[0]}"))
            continue
        broken = unmet(calc, values)
        if broken is not None:
            problems.append(Problem(source.mark if source else calc.mark, f"calculator {calc.id!r}: {where} breaks requires {broken.that.text!r}: {broken.message}"))
            continue
        try:
            results = outputs_at(calc, values)
        except ExprError as exc:
            problems.append(Problem(source.mark if source else calc.mark, f"calculator {calc.id!r}: at {where}: {exc.message}"))
            continue
        for output in calc.outputs:
            got = case["answers"].get(output.name, {"error": "no answer"})
            theirs = got.get("value")
            theirs = int(theirs) if isinstance(theirs, bool) else theirs  # a yes/no of the starter is 1 or 0
            if "error" in got:
                wrong.setdefault(output.name, []).append((where, f"mirrors: at {where}, {output.mirrors.text} raised {got['error']}", output.mirrors.mark))
            elif not isinstance(theirs, (int, float)):
                wrong.setdefault(output.name, []).append((where, f"mirrors: at {where}, {output.mirrors.text} gave {json.dumps(theirs)[:80]}, not a number", output.mirrors.mark))
            elif not agrees(results[output.name], theirs, output.tolerance):
                said = f"expr: at {where}, {output.name} = {results[output.name]!r} but the starter's {output.mirrors.text} gives {theirs!r}"
                wrong.setdefault(output.name, []).append((where, said, output.expr.mark))
        group = source.group if source else ""
        cases.append(Case(label, tuple((i.name, values[i.name]) for i in calc.inputs), tuple(results.items()), group))
    for found in wrong.values():  # one problem per output: its first case, and how many more
        (_, message, mark), rest = found[0], [where for where, _, _ in found[1:]]
        more = f" (also at {', '.join(rest)})" if rest else ""
        problems.append(Problem(mark, message + more))
    return Checked(calc, tuple(cases), not problems, finished if not problems else ""), problems


def stored_answers(result: RunResult | None, request: dict | None) -> dict | None:
    """The probe's answers a stored run holds for this very request, or None."""
    if result is None or request is None or not result.passed or result.probed != probe_digest(request):
        return None
    try:
        answers = json.loads(result.answers)
    except ValueError:
        return None
    return answers.get("calculators") if isinstance(answers, dict) else None


def check_lab_calculators(lab: Lab, runs: dict[str, RunResult]) -> tuple[list[Checked], list[Problem]]:
    """Check every calculator of a lab against the answers its starter's stored run holds."""
    checked, problems = [], []
    for calc, one, found in _each(lab, runs):
        checked.append(one)
        problems += found
    return checked, problems


def calculator_problems(lab: Lab, runs: dict[str, RunResult]) -> dict[str, list[Problem]]:
    """The problems of a lab's calculators, by the starter each mirrors."""
    found: dict[str, list[Problem]] = {}
    for calc, _, problems in _each(lab, runs):
        found.setdefault(mirrored_starter(lab, calc), []).extend(problems)
    return found


def _each(lab: Lab, runs: dict[str, RunResult]):
    for calc in lab.calculators:
        path = mirrored_starter(lab, calc)
        result = runs.get(path)
        stdout = result.stdout if result is not None and result.passed else ""
        answers = stored_answers(result, starter_probe(lab, path, stdout))
        one, problems = check_calculator(calc, answers.get(calc.id) if answers else None, result.finished if result else "", stdout)
        yield calc, one, problems


# ---------------------------------------------------------------- the page's script


def calculator_data(checked: Checked) -> dict:
    """What the page's script needs of one calculator: fields, presets, and each output compiled."""
    calc = checked.calc
    cases = page_cases(checked)
    names = {i.name for i in calc.inputs}
    outputs = []
    for output in calc.outputs:
        expr = compiled(output.expr.text, frozenset(names))
        choice = branches(expr)
        names.add(output.name)
        outputs.append({
            "name": output.name,
            "label": output.label,
            "format": output.format,
            "unit": output.unit or "",
            "labels": list(output.labels or ()),
            "digits": output.digits,
            "pieces": [] if choice else slots(arithmetic(expr)),
            "branches": [{"when": slots(when), "then": None if then is None else slots(then)} for when, then in choice or ()],
            "js": to_js(expr),
            "test": condition_js(Expr("", expr.tree.test, frozenset())) if isinstance(expr.tree, ast.IfExp) else None,
        })
    return {
        "inputs": [{
            "name": i.name, "label": i.label, "unit": i.unit or "", "whole": i.whole, "scale": i.scale,
            "min": i.min, "max": i.max,
            "choices": {name: number for name, number, _ in i.choices} if i.choices else None,
        } for i in calc.inputs],
        "presets": [{"label": case.label, "group": case.group, "values": dict(case.values)} for case in cases],
        "groups": calc.groups(),
        "chart": chart_data(calc, cases),
        "requires": [r.message for r in calc.requires],
        "outputs": outputs,
    }


def slots(pieces) -> list:
    """Arithmetic pieces as the script reads them: text, or {"slot": name}."""
    return [piece if isinstance(piece, str) else {"slot": piece[0]} for piece in pieces]


def chart_data(calc: Calculator, cases: tuple[Case, ...]) -> dict | None:
    """What the script needs to move the roofline's marker: the inputs it reads and the axes."""
    if calc.chart is None or not cases:
        return None
    view = roofline_view(calc, cases)
    lx0, lx1, ly0, ly1 = view.span
    return {
        "x": calc.chart.x, "y": calc.chart.y, "peak": calc.chart.peak, "bandwidth": calc.chart.bandwidth,
        "box": [view.left, view.top, view.right, view.bottom], "span": [lx0, lx1, ly0, ly1],
    }


def calculators_script(checked: list[Checked]) -> str:
    """The lab's calculators as a script the page loads on first use: data plus compiled functions."""
    parts = []
    for one in checked:
        data = calculator_data(one)
        # Keyed by names from the manifest, so built as entries: in an object literal a key
        # `"__proto__"` sets the prototype instead of making a property (JSON.parse makes one).
        functions = ", ".join(f"[{json.dumps(o['name'])}, (v) => {o.pop('js')}]" for o in data["outputs"])
        # The test of a choice (`a if test else b`), so the line says in words which side held.
        tests = ", ".join(f"[{json.dumps(o['name'])}, (v) => {test}]" for o in data["outputs"] if (test := o.pop("test")))
        names = frozenset(i.name for i in one.calc.inputs)
        conditions = ", ".join(f"(v) => {condition_js(parse_condition(r.that.text, names))}" for r in one.calc.requires)
        text = json.dumps(json.dumps(data, ensure_ascii=False, separators=(",", ":")), ensure_ascii=False)
        parts.append(f"[{json.dumps(one.calc.id)}, Object.assign(JSON.parse({text}), {{compute: Object.fromEntries([{functions}]), tests: Object.fromEntries([{tests}]), holds: [{conditions}]}})]")
    return "window.InfraLensCalculators = Object.fromEntries([" + ",\n".join(parts) + "]);\n"


# ---------------------------------------------------------------- the page


@dataclass(frozen=True)
class Row:
    """A row of a calculator's table: an input or an output, with its value in each case."""

    label: str
    output: bool
    cells: tuple[str, ...]


@dataclass(kw_only=True, frozen=True)
class CalcView:
    """What a lab page shows of one calculator (templates/_calc.html)."""

    calc: Calculator
    verified: bool
    checked: str
    functions: tuple[str, ...]
    """The starter's functions its outputs mirror, in order."""
    cases: tuple[str, ...]
    rows: tuple[Row, ...]
    constant: tuple[str, ...]
    """The inputs no column changes, each as 'label value', said once."""
    chart: "RooflineView | None" = None


def page_cases(checked: Checked) -> tuple[Case, ...]:
    """The cases a page shows, defaults first: a preset equal to the defaults in every input stands
    for them (and the table shows one column, not two alike)."""
    cases = checked.cases
    if not cases:
        return cases
    twin = next((case for case in cases[1:] if case.values == cases[0].values), None)
    if twin is None:
        return cases
    # It keeps its group: "A100 (defaults)" among the hardware switches the hardware, not the operator.
    merged = replace(cases[0], label=f"{twin.label} (defaults)", group=twin.group)
    return (merged, *(case for case in cases[1:] if case is not twin))


def calculator_view(checked: Checked) -> CalcView:
    """The page's view of a checked calculator: the table of cases and the results at the defaults."""
    calc = checked.calc
    names = {i.name for i in calc.inputs}
    functions = tuple(dict.fromkeys(parse_call(o.mirrors.text, names)["call"] for o in calc.outputs))
    cases = page_cases(checked)
    # Units go in the row's heading, once, where a format does not write its own (bytes, FLOP/s, %).
    inputs = [Row(headed(i.label, i.unit), False, tuple(show_input(calc, i.name, dict(case.values)[i.name], bare=True) for case in cases)) for i in calc.inputs]
    # An input no column changes is said once, under the table, not repeated in every column.
    constant = tuple(f"{row.label} {row.cells[0]}" for row in inputs if len(cases) > 1 and len(set(row.cells)) == 1)
    rows = [row for row in inputs if len(cases) == 1 or len(set(row.cells)) > 1]
    bare = {"number", "int"}
    rows += [Row(headed(o.label, o.unit if o.format in bare else None), True,
                 tuple(show(dict(case.results)[o.name], o.format, None if o.format in bare else o.unit, o.labels, o.digits) for case in cases)) for o in calc.outputs]
    chart = roofline_view(calc, cases) if calc.chart is not None and cases else None
    return CalcView(calc=calc, verified=checked.verified, checked=checked.checked, functions=functions, cases=tuple(case.label for case in cases), rows=tuple(rows), constant=constant, chart=chart)


# ---------------------------------------------------------------- the page feature (see features.py)

NAME = "calculators"


def manifest_problems(lab: Lab, excerpt: Excerpt, source: SourceFile) -> list[Problem]:
    """None beyond the model's: a calculator's expressions, calls and presets are checked as the manifest is read."""
    return []


def run_problems(lab: Lab, runs: dict[str, RunResult], excerpt: Excerpt | None) -> dict[str, list[Problem]]:
    """Each output equals its starter's value at the defaults and every preset."""
    return calculator_problems(lab, runs)


def published(lab: Lab, runs: dict[str, RunResult], excerpt: Excerpt, sources: dict[str, SourceFile]) -> Published:
    """Each calculator's view (a calculator that disagrees with its starter is not published) and the form's script."""
    checked, problems = check_lab_calculators(lab, runs)
    if problems or not checked:
        return Published((), (), tuple(problems))
    script = (f"{PurePosixPath(lab_url(lab.id)).parent}/{CALCULATORS_FILE}", calculators_script(checked))
    return Published(tuple(calculator_view(one) for one in checked), (script,))
