"""The model of a calculator: inputs, outputs, presets and requirements, each expression checked as the manifest is read."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import yaml

from infralens.errors import Mark, Note, Problems
from infralens.model.declare import declared, derived, record
from infralens.model.expr import (
    FUNCTIONS,
    ExprError,
    evaluate,
    holds,
    parse_call,
    parse_condition,
    parse_expr,
)
from infralens.model.schema import (
    INVALID,
    MARKDOWN,
    Choice,
    Context,
    Either,
    Fields,
    Integer,
    ListOf,
    MappingOf,
    Prose,
    Regex,
    Source,
    Spec,
    Text,
    Value,
    Written,
    did_you_mean,
    scalar_value,
)
from infralens.model.site import ID_PATTERN

IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"


Format = Literal["number", "int", "bytes", "bytes-iec", "si", "ratio", "percent", "label"]
FORMATS: tuple[Format, ...] = get_args(Format)
"""How an output's value is shown: as it is (3 significant digits), whole with separators, bytes
scaled by 1000 (KB, MB, GB) or 1024 (KiB, MiB, GiB), any unit scaled by 1000 (k, M, G, T: FLOP/s),
a ratio (4.2x), a fraction as a percentage, or one of `labels` by its index (0 or 1: a yes/no)."""


DEFAULT_TOLERANCE = 1e-9
"""Relative gap allowed between an output and the starter's value when either is not whole."""


Numeric = int | float


DEFAULT_GROUP = "Presets"


GROUP_DOC = (
    "The row of buttons the preset joins (default 'Presets'). A preset sets every input its group's "
    "presets set, so picking hardware keeps the operator picked in another group."
)


@dataclass(frozen=True, kw_only=True)
class CalcInput:
    """A value the reader sets: a number within bounds, or one of named choices."""

    name: str = declared(Text("The name expressions and `mirrors` read, e.g. `kv_heads`.", IDENTIFIER, "an identifier like 'kv_heads'"), required=True)
    label: str = declared(Text("The field's label, e.g. 'KV heads'."), required=True)
    unit: str | None = declared(Text("What the value counts, shown after it and in the arithmetic, e.g. 'layers' or 'B'."))
    default: Numeric | str = declared(Value("The value the calculator opens with: a number, or a choice's name.", text=True), required=True)
    min: Numeric | None = declared(Value("Smallest value accepted."))
    max: Numeric | None = declared(Value("Largest value accepted."))
    choices: tuple[tuple[str, Numeric, Mark], ...] | None = declared(MappingOf(
        Value(), "Named values to pick from, e.g. `{bf16: 2, fp32: 4}`: expressions and `mirrors` read the number; `mirrors` passes the name where it writes `NAME.name`.",
        min_items=2,
    ))
    scale: Numeric = declared(Value(
        "What the field's number is multiplied by (default 1): with `scale: 1.0e+12` and `unit: TFLOP/s` "
        "the reader types 312 and expressions and `mirrors` read 312e12. Default, bounds and presets stay unscaled."
    ), default=1)
    whole: bool = derived("Whether only whole numbers are accepted: the default and bounds are all integers.")
    mark: Mark = derived("Where the input is declared.")

    def number(self, value: Numeric | str) -> Numeric:
        """The number expressions read for a value of this input (a choice's number for its name)."""
        if self.choices is None:
            assert not isinstance(value, str)
            return value
        return next(number for name, number, _ in self.choices if name == value)

    def shown(self, value: Numeric) -> str:
        """A number of this input as its field shows it: divided by the scale, shortest exact form."""
        number = value / self.scale if self.scale != 1 else value
        return str(int(number)) if float(number).is_integer() and abs(number) < 2**53 else repr(float(number))

    def refuse(self, value) -> str | None:
        """Why a value cannot be this input's, or None."""
        if self.choices is not None:
            names = [name for name, _, _ in self.choices]
            return None if value in names else f"{self.name} must be one of: {', '.join(names)}; got {value!r}"
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"{self.name} must be a number, got {value!r}"
        if self.whole and not float(value).is_integer():
            return f"{self.name} must be a whole number, got {value!r}"
        if self.min is not None and value < self.min:
            return f"{self.name} must be at least {self.min:,}, got {value:,}"
        if self.max is not None and value > self.max:
            return f"{self.name} must be at most {self.max:,}, got {value:,}"
        return None


def _calc_input(f: Fields, ctx: Context) -> dict:
    v = f.values
    if v["choices"] is not None:
        extra = [key for key in ("min", "max") if key in f.nodes]
        if extra:
            return ctx.error(f.nodes[extra[0]], f"input {v['name']!r} has choices, so it takes no {extra[0]}")
    elif isinstance(v["default"], str):
        return ctx.error(f.nodes["default"], f"input {v['name']!r} has no choices, so its default must be a number, got {v['default']!r}")
    if v["min"] is not None and v["max"] is not None and v["min"] > v["max"]:
        return ctx.error(f.nodes["max"], f"max ({v['max']}) is below min ({v['min']})")
    if v["scale"] <= 0 or (v["scale"] != 1 and v["choices"] is not None):
        return ctx.error(f.nodes["scale"], "scale must be above 0, on an input without choices")
    whole = v["choices"] is None and v["scale"] == 1 and all(isinstance(v[k], int) for k in ("default", "min", "max") if v[k] is not None)
    made = CalcInput(**v, whole=whole, mark=f.mark)
    problem = made.refuse(v["default"])
    if problem:
        return ctx.error(f.nodes["default"], f"default: {problem}")
    return {"whole": whole, "mark": f.mark}


@dataclass(frozen=True, kw_only=True)
class CalcOutput:
    """A result the calculator shows, and the starter's value it must equal."""

    name: str = declared(Text("The result's name; later outputs' expressions may read it.", IDENTIFIER, "an identifier like 'kv_bytes'"), required=True)
    label: str = declared(Text("What the result is, e.g. 'KV cache per token'."), required=True)
    expr: Written = declared(Source(
        "An expression over the inputs and earlier outputs: numbers, `+ - * / // % **`, parentheses, "
        "`min max ceil floor abs sqrt log2`, and `a if condition else b`. Never eval'd.", numbers=True,
    ), required=True)
    mirrors: Written = declared(Source(
        "The starter's value this output must equal at the defaults and every preset: a call of a "
        "function (or class) of the starter whose arguments are inputs, numbers, text or other calls, "
        "optionally followed by `.attribute` or `[index]` steps, e.g. "
        "`estimate_memory(Config(num_layers=layers)).kv_cache_bytes`."
    ), required=True)
    unit: str | None = declared(Text("Text after the value, e.g. 'per token' (bytes formats write their own B)."))
    format: Format = declared(Choice(FORMATS, "How the value is shown (default `number`): " + ", ".join(FORMATS) + " (`si` puts a prefix before the unit: n, µ, m below 1, k, M, G, T, P, E above 1,000: 0.0125 with unit `s` shows as 12.5 ms)."), default="number")
    tolerance: Numeric = declared(Value(f"Relative gap allowed from the starter's value when either is not a whole number (default {DEFAULT_TOLERANCE:g})."), default=DEFAULT_TOLERANCE)
    labels: tuple[str, ...] | None = declared(ListOf(Text(), "With `format: label`: what the values 0, 1, ... read as, e.g. `[compute-bound, memory-bound]`.", min_items=2))
    digits: int = declared(Integer("Significant digits shown below 1,000 (default 3; 4.125 needs 4).", minimum=1), default=3)
    mark: Mark = derived("Where the output is declared.")


def _calc_output(f: Fields, ctx: Context) -> dict:
    if f.values["digits"] > 15:
        return ctx.error(f.nodes["digits"], f"digits: at most 15 (a float holds no more), got {f.values['digits']}")
    if (f.values["format"] == "label") != (f.values["labels"] is not None):
        where = f.nodes.get("labels") or f.nodes.get("format")
        return ctx.error(where, "format: label and labels go together" if where is not None else "format: label needs labels")
    return {"mark": f.mark}


@dataclass(frozen=True, kw_only=True)
class Requirement:
    """A condition the inputs must meet for the outputs to mean anything, and what to tell the reader."""

    that: Written = declared(Source("A condition over the inputs, e.g. `seq_len <= max_seq_len` or `num_heads % kv_heads == 0`."), required=True)
    message: str = declared(Text("What the page says when it does not hold, e.g. 'A sequence must fit its reservation.'"), required=True)
    mark: Mark = derived("Where the requirement is declared.")


ChartKind = Literal["roofline"]
CHARTS: tuple[ChartKind, ...] = get_args(ChartKind)


@dataclass(frozen=True, kw_only=True)
class Chart:
    """A picture of the calculator: a log-log roofline drawn at build, whose marker follows the inputs."""

    kind: ChartKind = declared(Choice(CHARTS, "The kind of picture: `roofline`."), required=True)
    x: str = declared(Text("The input along the x axis: the kernel's arithmetic intensity (FLOP/B); it gets a log-scale slider.", IDENTIFIER), required=True)
    y: str = declared(Text("The output up the y axis: the attainable FLOP/s at x.", IDENTIFIER), required=True)
    peak: str = declared(Text("The input holding the compute ceiling (FLOP/s).", IDENTIFIER), required=True)
    bandwidth: str = declared(Text("The input holding the memory bandwidth (B/s).", IDENTIFIER), required=True)
    mark: Mark = derived("Where the chart is declared.")


@dataclass(frozen=True, kw_only=True)
class PresetTable:
    """Presets read from a table the starter defines, one per entry."""

    table: str = declared(Text("A module-level mapping of the starter, e.g. `REFERENCE_MODELS`: each key a preset's label.", IDENTIFIER, "a name like 'REFERENCE_MODELS'"), required=True, key="from")
    fields: tuple[str, ...] = declared(ListOf(
        Text(pattern=IDENTIFIER, pattern_hint="an input's name"),
        "The inputs an entry sets: in order when entries are lists or tuples, by name when they are "
        "mappings or dataclasses (a single number sets the one field).",
        min_items=1,
    ), required=True)
    group: str = declared(Text(GROUP_DOC), default=DEFAULT_GROUP)
    mark: Mark = derived("Where `from` is written.")

    @property
    def sets(self) -> tuple[str, ...]:
        return self.fields


@dataclass(frozen=True, kw_only=True)
class Preset:
    """A named set of input values."""

    label: str = declared(Text("The preset's name, e.g. 'Llama-3-8B'."), required=True)
    values: tuple[tuple[str, Numeric | str, Mark], ...] = declared(
        MappingOf(Value(text=True), "Input name → value; inputs its group sets and it leaves out take their defaults.", min_items=1, key_pattern=IDENTIFIER, key_hint="an input's name"),
        required=True,
    )
    group: str = declared(Text(GROUP_DOC), default=DEFAULT_GROUP)
    mark: Mark = derived("Where the preset is declared.")

    @property
    def sets(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.values)


@dataclass(frozen=True, kw_only=True)
class Printed:
    """A figure the starter's checked run printed, read as an input's value."""

    pattern: str = declared(Regex("A regex whose first group matches the number in the run's output, e.g. `peak compute: ([\\d.]+) GFLOP/s`."), required=True)
    scale: Numeric = declared(Value("What the printed number is multiplied by (e.g. 1e9 for GFLOP/s into FLOP/s; default 1)."), default=1)
    mark: Mark = derived("Where the pattern is written.")


@dataclass(frozen=True, kw_only=True)
class PrintedPreset:
    """A preset whose values the starter's checked run printed (a measured ceiling, say)."""

    label: str = declared(Text("The preset's name, e.g. 'This machine (measured)'."), required=True)
    printed: tuple[tuple[str, Printed, Mark], ...] = declared(
        MappingOf(record(Printed, "printed value", finish=lambda f, ctx: {"mark": f.marks["pattern"]}), "Input name → {pattern, scale}.", min_items=1, key_pattern=IDENTIFIER, key_hint="an input's name"),
        required=True,
    )
    group: str = declared(Text(GROUP_DOC), default=DEFAULT_GROUP)
    mark: Mark = derived("Where the preset is declared.")

    @property
    def sets(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.printed)


PresetSource = Preset | PresetTable | PrintedPreset


class PresetItem(Spec):
    """One entry of `presets`: a listed preset, a table of the starter (`from`), or printed figures (`printed`)."""

    def __init__(self) -> None:
        self.doc = "A listed preset {label, values}, a table of the starter {from, fields}, or figures its run printed {label, printed}; each may name a `group`."
        self.kinds = {
            "from": record(PresetTable, "preset table", finish=lambda f, ctx: {"mark": f.marks["from"]}),
            "printed": record(PrintedPreset, "printed preset", finish=lambda f, ctx: {"mark": f.mark}),
            "": record(Preset, "preset", finish=lambda f, ctx: {"mark": f.mark}),
        }

    def check(self, node, ctx: Context):
        keys = {scalar_value(k) for k, _ in node.value if isinstance(k, yaml.ScalarNode)} if isinstance(node, yaml.MappingNode) else set()
        kind = "from" if "from" in keys else "printed" if "printed" in keys else ""
        return self.kinds[kind].check(node, ctx)

    def json_schema(self) -> dict:
        return {"anyOf": [spec.json_schema() for spec in self.kinds.values()], "description": self.doc}


def named_inputs(request) -> list[str]:
    """The inputs a `mirrors` request passes by their choice's name (`precision.name`)."""
    if isinstance(request, list):
        return [name for item in request for name in named_inputs(item)]
    if not isinstance(request, dict):
        return []
    if "input" in request:
        return [request["input"]] if request.get("name") else []
    return named_inputs(request["args"]) + named_inputs(list(request["kwargs"].values()))


def safely_holds(condition, numbers: dict) -> bool:
    """Whether a requirement holds; one that cannot be computed (`heads % 0`) does not."""

    try:
        return holds(condition, numbers)
    except ExprError:
        return False


def _calculator(f: Fields, ctx: Context) -> dict:
    """Check what one calculator's parts say of each other: names, expressions, calls, presets.

    The expressions are evaluated at the defaults and at each listed preset, so one that divides by
    zero there is an error at its manifest line, not a message on the page.
    """
    inputs, outputs = f.values["inputs"], f.values["outputs"]
    presets = f.values["presets"]
    presets = (presets,) if isinstance(presets, PresetTable) else presets
    by_name = {i.name: i for i in inputs}
    problems = ctx.problems
    before = len(problems)
    _check_names(inputs, outputs, problems)
    parsed = _parsed_outputs(outputs, by_name, problems)
    if f.values["chart"] is not None:
        _check_chart(f.values["chart"], by_name, outputs, problems)
    cases = [("the defaults", {i.name: i.default for i in inputs}), *_preset_cases(presets, inputs, by_name, problems)]
    conditions = _parsed_requirements(f.values["requires"], by_name, problems)
    if len(problems) == before:
        _check_at_cases(cases, conditions, outputs, parsed, by_name, problems, f.values["chart"])
    return {"mark": f.mark, "presets": presets} if len(problems) == before else INVALID


def _check_names(inputs, outputs, problems: Problems) -> None:
    """Each input and output has a name of its own, and none is a function's."""
    seen: dict[str, Mark] = {}
    for name, mark in [(i.name, i.mark) for i in inputs] + [(o.name, o.mark) for o in outputs]:
        if name in seen:
            problems.add(mark, f"{name!r} is already the name of an input or output", Note(seen[name], f"{name!r} is first named here"))
        elif name in FUNCTIONS:
            problems.add(mark, f"{name!r} is a function of expressions; name it otherwise")
        seen.setdefault(name, mark)


def _parsed_outputs(outputs, by_name: dict, problems: Problems) -> dict:
    """Parse each output's expression (over the inputs and earlier outputs) and its `mirrors` call."""
    readable = set(by_name)
    parsed = {}
    for output in outputs:
        try:
            parsed[output.name] = parse_expr(output.expr.text, readable)
        except ExprError as exc:
            problems.add(output.expr.at(exc.offset), f"expr: {exc.message}")
        try:
            request = parse_call(output.mirrors.text, set(by_name))
        except ExprError as exc:
            problems.add(output.mirrors.at(exc.offset), f"mirrors: {exc.message}")
        else:
            for name in named_inputs(request):
                if by_name[name].choices is None:
                    problems.add(output.mirrors.mark, f"mirrors: {name}.name: only an input with choices has a name; {name!r} is a number")
        readable.add(output.name)
    return parsed


def _check_chart(chart, by_name: dict, outputs, problems: Problems) -> None:
    """A chart plots number inputs against an output, on a log-scale x whose bounds are positive."""
    numbers = {name for name, i in by_name.items() if i.choices is None}
    for key, wanted, known in (("x", chart.x, numbers), ("peak", chart.peak, numbers), ("bandwidth", chart.bandwidth, numbers), ("y", chart.y, {o.name for o in outputs})):
        if wanted not in known:
            what = "an output" if key == "y" else "a number input"
            problems.add(chart.mark, f"chart: {key}: {wanted!r} is not {what}{did_you_mean(wanted, known)}")
    x_input = by_name.get(chart.x)
    if x_input is not None and not (x_input.min is not None and x_input.max is not None and 0 < x_input.min < x_input.max):
        problems.add(x_input.mark, f"chart: the x input {chart.x!r} needs 0 < min < max, for its log-scale slider")
    for key, name in (("peak", chart.peak), ("bandwidth", chart.bandwidth)):
        ceiling = by_name.get(name)
        if ceiling is not None and ceiling.choices is None and not (ceiling.min is not None and ceiling.min > 0):
            problems.add(ceiling.mark, f"chart: the {key} input {name!r} needs min > 0: a roof's ridge is peak / bandwidth, on log-scale axes")


def _preset_cases(presets, inputs, by_name: dict, problems: Problems) -> list[tuple[str, dict]]:
    """Check each preset against the inputs; return the listed ones as (where, input values) to evaluate at."""
    cases = []
    labels: set[str] = set()
    for preset in presets:
        if isinstance(preset, PresetTable):
            for name in preset.fields:
                if name not in by_name:
                    hint = did_you_mean(name, by_name) or f" (inputs: {', '.join(by_name)})"
                    problems.add(preset.mark, f"fields: {name!r} is not an input{hint}")
            if len(set(preset.fields)) != len(preset.fields):
                problems.add(preset.mark, "fields: an input is listed twice")
            continue
        if preset.label in labels or preset.label == "Defaults":
            problems.add(preset.mark, f"duplicate preset {preset.label!r}")
        labels.add(preset.label)
        if isinstance(preset, PrintedPreset):
            for name, _, mark in preset.printed:
                if name not in by_name:
                    problems.add(mark, f"preset {preset.label!r}: {name!r} is not an input{did_you_mean(name, by_name)}")
                elif by_name[name].choices is not None:
                    problems.add(mark, f"preset {preset.label!r}: {name!r} has choices; a printed figure sets a number")
            continue
        values = {i.name: i.default for i in inputs}
        for name, value, mark in preset.values:
            if name not in by_name:
                problems.add(mark, f"preset {preset.label!r}: {name!r} is not an input{did_you_mean(name, by_name)}")
            elif problem := by_name[name].refuse(value):
                problems.add(mark, f"preset {preset.label!r}: {problem}")
            values[name] = value
        cases.append((f"preset {preset.label!r}", values))
    return cases


def _parsed_requirements(requirements, by_name: dict, problems: Problems) -> list:
    """Parse each requirement's condition over the inputs: (requirement, condition) pairs."""
    conditions = []
    for requirement in requirements:
        try:
            conditions.append((requirement, parse_condition(requirement.that.text, set(by_name))))
        except ExprError as exc:
            problems.add(requirement.that.at(exc.offset), f"requires: {exc.message}")
    return conditions


def _check_at_cases(cases, conditions, outputs, parsed: dict, by_name: dict, problems: Problems, chart: Chart | None = None) -> None:
    """At the defaults and each listed preset, the requirements hold, every output evaluates, and
    a chart's y is above 0 (its axis is log-scale)."""
    for where, values in cases:
        numbers = {name: by_name[name].number(value) for name, value in values.items()}
        broken = [r for r, condition in conditions if not safely_holds(condition, numbers)]
        if broken:
            problems.add(broken[0].that.mark, f"requires: {broken[0].that.text!r} does not hold at {where}")
            continue
        for output in outputs:
            try:
                numbers[output.name] = evaluate(parsed[output.name], numbers)
            except ExprError as exc:
                problems.add(output.expr.at(exc.offset), f"expr: at {where}: {exc.message}")
                break
        else:
            y = numbers.get(chart.y) if chart is not None else None
            if y is not None and not (math.isfinite(y) and y > 0):
                output = next(o for o in outputs if o.name == chart.y)
                problems.add(output.expr.mark, f"chart: at {where}, {chart.y} = {y!r}; the chart's y axis is log-scale and shows only values above 0")


@dataclass(frozen=True, kw_only=True)
class Calculator:
    """A "Try it" block: inputs, presets and outputs, each output proven equal to the starter's value."""

    id: str = declared(Text("Identifier in the page's address (`#calc-ID`).", ID_PATTERN, "a lowercase id like 'kv-cache'"), required=True)
    title: str = declared(Text("Heading of the block, e.g. 'KV cache of a published model'."), required=True)
    intro: str | None = declared(Prose("A sentence above the fields. " + MARKDOWN))
    after: str | None = declared(Text("The key block (its name) whose note the block follows; default: after the last note."))
    starter: str | None = declared(Text("The starter whose values it mirrors (default: the previewed one)."))
    inputs: tuple[CalcInput, ...] = declared(ListOf(record(CalcInput, "input", finish=_calc_input), "The values a reader sets.", min_items=1), required=True)
    presets: tuple[PresetSource, ...] = declared(
        Either(
            mapping=record(PresetTable, "preset table", finish=lambda f, ctx: {"mark": f.marks["from"]}),
            sequence=ListOf(PresetItem(), min_items=1),
            expected="a {from, fields} mapping or a list of presets",
            doc="Named input sets: one table of the starter (`from`, `fields`), or a list of listed "
                "presets, tables and printed figures. Presets of one `group` share a row of buttons.",
        ),
        default=(),
    )
    outputs: tuple[CalcOutput, ...] = declared(ListOf(record(CalcOutput, "output", finish=_calc_output), "The results, in order.", min_items=1), required=True)
    requires: tuple[Requirement, ...] = declared(
        ListOf(record(Requirement, "requirement", finish=lambda f, ctx: {"mark": f.mark}), "Conditions the inputs must meet; the page names the first one broken instead of showing results.", min_items=1),
        default=(),
    )
    chart: Chart | None = declared(record(Chart, "chart", finish=lambda f, ctx: {"mark": f.mark}))
    mark: Mark = derived("Where the calculator is declared.")

    def input(self, name: str) -> CalcInput:
        return next(i for i in self.inputs if i.name == name)

    def groups(self) -> dict[str, tuple[str, ...]]:
        """Each group of presets, in order, with the inputs its presets set (in input order)."""
        sets: dict[str, set[str]] = {}
        for preset in self.presets:
            sets.setdefault(preset.group, set()).update(preset.sets)
        return {group: tuple(i.name for i in self.inputs if i.name in names) for group, names in sets.items()}


CALCULATOR = record(Calculator, "calculator", finish=_calculator)
"""How a manifest's `calculators:` item is read."""
