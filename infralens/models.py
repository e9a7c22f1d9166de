"""Frozen models of the site, its labs and what the build resolves from them.

The models of site.yml and of a lab manifest declare each field once, with `declared(spec)`: its
type, constraints, default and documentation. The validator (parse.py), the editors' JSON
Schema, schema/reference.md, the text the claims check reads and the text search indexes are all
derived from these declarations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from infralens.errors import Mark

from infralens.schema import (
    INVALID,
    MARKDOWN,
    Choice,
    Context,
    Either,
    Field,
    Fields,
    Integer,
    ListOf,
    Literal,
    MappingOf,
    Number,
    Prose,
    Record,
    Regex,
    Source,
    Text,
    Spec,
    Url,
    Value,
    Written,
    declared,
    describe,
    did_you_mean,
    scalar_value,
    derived,
    parse_range,
    record,
)


ID_PATTERN = r"[a-z0-9][a-z0-9-]*"
"""What a track id and a lab id (a manifest's file stem) may look like."""

DEFAULT_TIMEOUT = 60.0
RUNNABLE_SUFFIXES = (".py", ".md")
DEFAULT_KIND_LINE = "Annotated code reading lab. Running code is optional."
TRACE_KIND_LINE = "Failure trace: what broke, how it was found, what fixed it. Every step runs and is checked."
KINDS: dict[str, str] = {"runnable": "Runnable", "reading": "Reading", "trace": "Failure trace"}
"""Lab kinds and their badges. A trace tells one failure in order: what broke, how it was found, what fixed it."""

SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("concept_goal", "Concept Goal", "Read code to understand the concept"),
    ("mechanism", "Mental Model", "Core mechanism"),
    ("starters", "Starter files", "Annotated starter links"),
    ("preview", "Annotated Code Preview", "Starter Preview"),
    ("key_blocks", "Line-by-line Explanation", "Key code blocks"),
    ("checkpoints", "What to Notice", "How to read this code"),
    ("misunderstandings", "Common Misunderstandings", "What this code does not mean"),
    ("interview", "Interview Explanation", "How to say it out loud"),
    ("intuition", "External intuition notes", "Additional intuition"),
    ("further_reading", "Further Reading", "Official, paper and practical references"),
)
"""The lab page's sections after the header, in order: (id, eyebrow label, default title)."""

TRACE_SECTIONS: dict[str, tuple[str, str]] = {
    "concept_goal": ("What broke", "The failure, as it first showed"),
    "mechanism": ("Root cause", "Why it broke"),
    "key_blocks": ("How it was found", "The investigation, step by step"),
    "checkpoints": ("What fixed it", "The fix and how it was verified"),
    "misunderstandings": ("What this trace prevents", "Wrong turns to avoid"),
}
"""A failure trace's own eyebrows and default titles, over SECTIONS."""


def sections_of(kind: str) -> tuple[tuple[str, str, str], ...]:
    """Return a kind's page sections in order: (id, eyebrow label, default title)."""
    if kind != "trace":
        return SECTIONS
    return tuple((sid, *TRACE_SECTIONS.get(sid, (eyebrow, title))) for sid, eyebrow, title in SECTIONS)

# ---------------------------------------------------------------- site.yml


@dataclass(frozen=True)
class Track:
    """A group of labs on the index."""

    id: str = declared(Text("Identifier that lab manifests name in `track:`.", ID_PATTERN, "a lowercase id like 'foundations'"), required=True)
    title: str = declared(Text("Heading of the track on the index, e.g. 'Foundations / Calculators'."), required=True)
    mark: Mark = derived("Where site.yml declares the track.")
    summary: str | None = declared(Prose("One or two sentences under the track's heading on the index: what it teaches and what it builds on. " + MARKDOWN))


@dataclass(frozen=True, kw_only=True)
class Site:
    """InfraLens site configuration."""

    title: str = declared(Text("Site name shown on every page."), required=True)
    tagline: str = declared(Text("One line under the title on the index."), required=True)
    base_url: str | None = declared(Url("Public address of the built site (used for canonical links; pages link relatively)."))
    tracks: tuple[Track, ...] = declared(ListOf(record(Track, "track", finish=lambda f, ctx: {"mark": f.mark}), "Tracks in the order the index lists them.", min_items=1), required=True)
    path: str = derived("site.yml, as given on the command line.")


# ---------------------------------------------------------------- lab manifests


@dataclass(frozen=True)
class Link:
    """A labelled external link."""

    label: str = declared(Text("Short label before the title, e.g. 'Official' or 'Blog'."), required=True)
    title: str = declared(Text("Link text."), required=True)
    url: str = declared(Url("http(s) address."), required=True)


@dataclass(frozen=True)
class Handbook:
    """The related handbook section, shown in the page header."""

    title: str = declared(Text("Title of the related handbook section."), required=True)
    url: str = declared(Url("http(s) address of the section."), required=True)
    label: str = "Handbook"


ARTIFACT = Text(
    pattern=r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.(?:svg|png|txt|json|csv)",
    pattern_hint="a file name like 'roofline.svg' (svg, png, txt, json or csv)",
)


DEVICES = ("cpu", "cuda")
"""What a run may need: any machine, or an NVIDIA GPU with a CUDA build of torch."""

MEMORY_UNITS = {"GiB": 2**30, "GB": 10**9, "MiB": 2**20, "MB": 10**6}
GPU_MEMORY = r"(\d+(?:\.\d+)?) ?(" + "|".join(MEMORY_UNITS) + ")"


@dataclass(frozen=True)
class RunSpec:
    """How `infralens check` runs the starter."""

    args: tuple[str, ...] = declared(ListOf(Text(numbers=True), "Command-line arguments passed after the script."), default=())
    timeout: float = declared(Number(f"Seconds before the run is killed (default {DEFAULT_TIMEOUT:g})."), default=DEFAULT_TIMEOUT)
    expect: tuple[str, ...] = declared(ListOf(Regex(), "Regexes that must each be found in the starter's stdout."), default=())
    artifacts: tuple[str, ...] = declared(
        ListOf(ARTIFACT, "Files the run writes into its working folder (regular files, not symlinks, of at most 8 MiB); the lab page shows them (SVG and PNG as figures)."), default=()
    )
    device: str = declared(
        Choice(DEVICES, "What the run needs: cpu (any machine) or cuda (an NVIDIA GPU and a CUDA build of torch). Where it is missing, check reports the run skipped, never passed."),
        default="cpu",
    )
    gpu_memory: str | None = declared(
        Text("Least memory the GPU must have, such as '40 GiB' or '24 GB' (cuda runs only).", pattern=GPU_MEMORY, pattern_hint="a size such as '40 GiB' or '24 GB'")
    )

    @property
    def gpu_bytes(self) -> int:
        """The least GPU memory the run needs, in bytes (0: any)."""
        if self.gpu_memory is None:
            return 0
        number, unit = re.fullmatch(GPU_MEMORY, self.gpu_memory).groups()  # type: ignore[union-attr]
        return round(float(number) * MEMORY_UNITS[unit])


@dataclass(frozen=True)
class StateChoice:
    """What a starter or key block shows of the execution state `check` records: nothing
    (`state: false`), or only the named variables (`state: [a, b]`)."""

    shown: bool
    names: tuple[tuple[str, Mark], ...] = ()
    """The variables to show, each with where the manifest names it; empty: every one."""
    mark: Mark | None = None

    def allows(self, name: str) -> bool:
        return self.shown and (not self.names or any(name == n or name.startswith(n + ".") for n, _ in self.names))


STATE_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"


class StateSpec(Spec):
    """`false`, or a list of variable names (`a`, `self.x`) whose recorded values to show."""

    def __init__(self, doc: str) -> None:
        self.doc = doc
        self.names = ListOf(Text(pattern=STATE_NAME, pattern_hint="a variable name like 'kv_bytes' or 'self.blocks'"), min_items=1)

    def check(self, node: yaml.Node, ctx: Context):
        if isinstance(node, yaml.SequenceNode):
            names = self.names.check(node, ctx)
            if names is INVALID:
                return INVALID
            return StateChoice(True, tuple(zip(names, (ctx.mark(child) for child in node.value))), ctx.mark(node))
        if not isinstance(node, yaml.ScalarNode) or scalar_value(node) is not False:
            return ctx.error(node, f"expected false or a list of variable names, got {describe(node)}")
        return StateChoice(False, (), ctx.mark(node))

    def json_schema(self) -> dict:
        return {"anyOf": [{"const": False}, self.names.json_schema()], "description": self.doc}


def _starter(f: Fields, ctx: Context) -> dict:
    """A .py or .md starter runs unless it says `run: false`; other files only with a reason to
    refuse. A list of runs runs it once per device, each device once."""
    path, run = f.values["path"], f.values["run"]
    if "run" not in f.nodes:
        runs: tuple[RunSpec, ...] = (RunSpec(),) if path.endswith(RUNNABLE_SUFFIXES) else ()
    elif run is False:
        runs = ()
    elif not path.endswith(RUNNABLE_SUFFIXES):
        return ctx.error(f.nodes["run"], f"only .py and .md starters can run, not {path!r}")
    else:
        runs = run if isinstance(run, tuple) else (run,)
        items = f.nodes["run"].value if isinstance(run, tuple) else [f.nodes["run"]]
        seen: set[str] = set()
        for spec, node in zip(runs, items):
            if spec.device in seen:
                return ctx.error(node, f"a second run on {spec.device}: a starter runs once per device (give each run its own device)")
            seen.add(spec.device)
            if spec.gpu_memory is not None and spec.device != "cuda":
                return ctx.error(node, "gpu_memory is for a run on cuda; add `device: cuda` or remove it")
            if spec.device == "cpu" and spec is not runs[0]:
                return ctx.error(node, "list the run on cpu first: the page's figures, state, calculators and questions come from the first run, and every machine can make a cpu run")
    return {"run": runs[0] if runs else None, "runs": runs, "mark": f.marks["path"]}


@dataclass(frozen=True, kw_only=True)
class Starter:
    """A file of the lab."""

    path: str = declared(Text("Repository-relative path under code/, e.g. code/lab-01-x/memory.py."), required=True)
    role: str = declared(Prose("One line: what this file is for. " + MARKDOWN), required=True)
    run: RunSpec | None = declared(
        Either(
            scalar=Literal(False, "Never run this starter."),
            mapping=record(RunSpec, "run"),
            sequence=ListOf(record(RunSpec, "run"), min_items=1),
            expected="a run mapping, a list of them (one per device) or false",
            doc=".py and .md starters run on cpu with no arguments unless this says otherwise; a list runs it once per device, each with its own arguments and expect patterns (a cpu run first: the page's figures come from the first); false never runs it.",
        ),
        indexed=False,
    )
    state: StateChoice | None = declared(StateSpec(
        "The execution state `check` records for the lines of the page's excerpt (on by default for the "
        "previewed starter): false records and shows none; a list of names shows only those variables."
    ), indexed=False)
    runs: tuple[RunSpec, ...] = derived("Every run of the starter, one per device; `run` is the first (none: it never runs).")
    mark: Mark = derived("Where the manifest declares the starter's path.")


@dataclass(frozen=True)
class Selector:
    """Which part of a starter the preview shows: a region, symbol, line range or heading."""

    kind: str
    value: str
    mark: Mark


SELECTORS = ("region", "symbol", "lines", "heading")


def _preview(f: Fields, ctx: Context) -> dict:
    """Keep the one selector given as a Selector, with where it is written."""
    kind = next(k for k in SELECTORS if k in f.nodes)
    value = f.values[kind]
    if kind == "lines" and parse_range(value) is None:
        return ctx.error(f.nodes[kind], f"lines must look like 'A-B' with 1 <= A <= B, got {value!r}")
    return {"selector": Selector(kind, value, f.marks[kind]), "starter_mark": f.marks["starter"]}


@dataclass(frozen=True, kw_only=True)
class Preview:
    """An excerpt the page shows (a step of a walkthrough): exactly one of region, symbol, lines, heading."""

    starter: str = declared(Text("One of the lab's starter paths."), required=True)
    title: str | None = declared(Text("In a walkthrough, the step's name in its header, e.g. 'Prefill'."))
    region: str | None = declared(Text("Lines between '# region NAME' and '# endregion' (markers hidden)."))
    symbol: str | None = declared(Text("A Python function or class by name (dotted for methods), decorators included."))
    lines: str | None = declared(Text("Real file lines 'A-B'.", numbers=True))
    heading: str | None = declared(Text("Markdown starters: the section under this heading, to the next heading of the same or higher level."))
    selector: Selector | None = derived("The one selector given, with where it is written.")
    starter_mark: Mark | None = derived("Where the manifest names the starter.")


@dataclass(frozen=True)
class LineBinding:
    """How a key block names its lines: one literal text, a from/to span, or file line numbers."""

    kind: str
    """'text', 'span' or 'range'."""
    text: str = ""
    until: str = ""
    first: int = 0
    last: int = 0


class LineText(Text):
    """Key-block lines as a scalar: 'A-B' (or 'A') is a range of real line numbers, anything else literal text."""

    def check(self, node, ctx: Context):
        value = super().check(node, ctx)
        if value is INVALID:
            return INVALID
        if re.fullmatch(r"[\d\s-]+", value):
            numbers = parse_range(value)
            if numbers is None:
                return ctx.error(node, f"line range must look like 'A-B' with 1 <= A <= B, got {value!r}")
            return LineBinding("range", first=numbers[0], last=numbers[1])
        return LineBinding("text", text=value)


SPAN = Record(
    "span",
    {
        "from": Field(Text("Text on exactly one line of the excerpt: the first line.", numbers=True), True),
        "to": Field(Text("Text on the last line: the first line at or after 'from' that contains it.", numbers=True), True),
    },
    lambda f, ctx: LineBinding("span", text=f.values["from"], until=f.values["to"]),
    doc="Lines from one text to another.",
)


@dataclass(frozen=True)
class KeyBlockSpec:
    """A note bound to lines of the excerpt."""

    name: str = declared(Text("An identifier such as `kv_cache_bytes`, or a role such as 'Setup / contract'."), required=True)
    lines: LineBinding = declared(
        Either(
            scalar=LineText(numbers=True),
            mapping=SPAN,
            expected="text, 'A-B' or a from/to mapping",
            doc="Text that occurs on exactly one line of the excerpt; or real line numbers 'A-B'; or {from, to}.",
        ),
        required=True,
    )
    note: str = declared(Prose("What these lines do and why. " + MARKDOWN), required=True)
    mark: Mark = derived("Where the `lines:` value is, so a binding error points at it.")
    starter_mark: Mark | None = derived("Where the key block names its starter, if it does.")
    state: StateChoice | None = declared(StateSpec(
        "The execution state shown for these lines: false records and shows none (its lines are not "
        "traced); a list of names shows only those variables, each of which a line of the block must bind."
    ), indexed=False)
    starter: str | None = declared(Text("In a walkthrough of several starters: the starter whose excerpt holds the lines (default: whichever step's lines match)."))


# ---------------------------------------------------------------- calculators

IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
FORMATS = ("number", "int", "bytes", "bytes-iec", "si", "ratio", "percent", "label")
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
    format: str = declared(Choice(FORMATS, "How the value is shown (default `number`): " + ", ".join(FORMATS) + "."), default="number")
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


CHARTS = ("roofline",)


@dataclass(frozen=True, kw_only=True)
class Chart:
    """A picture of the calculator: a log-log roofline drawn at build, whose marker follows the inputs."""

    kind: str = declared(Choice(CHARTS, "The kind of picture: `roofline`."), required=True)
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
    from infralens.expr import ExprError, holds

    try:
        return holds(condition, numbers)
    except ExprError:
        return False


def _calculator(f: Fields, ctx: Context) -> dict:
    """Check what one calculator's parts say of each other: names, expressions, calls, presets.

    The expressions are evaluated at the defaults and at each listed preset, so one that divides by
    zero there is an error at its manifest line, not a message on the page.
    """
    from infralens.expr import FUNCTIONS, ExprError, evaluate, parse_call, parse_condition, parse_expr

    inputs, outputs, presets = f.values["inputs"], f.values["outputs"], f.values["presets"]
    ok = True

    def refuse(mark: Mark, message: str) -> None:
        nonlocal ok
        ctx.problems.add(mark, message)
        ok = False

    seen: dict[str, Mark] = {}
    for name, mark in [(i.name, i.mark) for i in inputs] + [(o.name, o.mark) for o in outputs]:
        if name in seen:
            refuse(mark, f"{name!r} is already the name of an input or output (line {seen[name].line})")
        elif name in FUNCTIONS:
            refuse(mark, f"{name!r} is a function of expressions; name it otherwise")
        seen.setdefault(name, mark)
    by_name = {i.name: i for i in inputs}
    readable = set(by_name)
    parsed = {}
    for output in outputs:
        try:
            parsed[output.name] = parse_expr(output.expr.text, readable)
        except ExprError as exc:
            refuse(output.expr.at(exc.offset), f"expr: {exc.message}")
        try:
            request = parse_call(output.mirrors.text, set(by_name))
        except ExprError as exc:
            refuse(output.mirrors.at(exc.offset), f"mirrors: {exc.message}")
        else:
            for name in named_inputs(request):
                if by_name[name].choices is None:
                    refuse(output.mirrors.mark, f"mirrors: {name}.name: only an input with choices has a name; {name!r} is a number")
        readable.add(output.name)
    chart = f.values["chart"]
    if chart is not None:
        numbers = {i.name for i in inputs if i.choices is None}
        for key, wanted, known in (("x", chart.x, numbers), ("peak", chart.peak, numbers), ("bandwidth", chart.bandwidth, numbers), ("y", chart.y, {o.name for o in outputs})):
            if wanted not in known:
                what = "an output" if key == "y" else "a number input"
                refuse(chart.mark, f"chart: {key}: {wanted!r} is not {what}{did_you_mean(wanted, known)}")
        x_input = by_name.get(chart.x)
        if x_input is not None and not (x_input.min is not None and x_input.max is not None and 0 < x_input.min < x_input.max):
            refuse(x_input.mark, f"chart: the x input {chart.x!r} needs 0 < min < max, for its log-scale slider")
    presets = (presets,) if isinstance(presets, PresetTable) else presets
    cases = [("the defaults", {i.name: i.default for i in inputs})]
    labels: set[str] = set()
    groups: dict[str, set[str]] = {}
    for preset in presets:
        groups.setdefault(preset.group, set()).update(preset.sets)
    for preset in presets:
        if isinstance(preset, PresetTable):
            for name in preset.fields:
                if name not in by_name:
                    hint = did_you_mean(name, by_name) or f" (inputs: {', '.join(by_name)})"
                    refuse(preset.mark, f"fields: {name!r} is not an input{hint}")
            if len(set(preset.fields)) != len(preset.fields):
                refuse(preset.mark, "fields: an input is listed twice")
            continue
        if preset.label in labels or preset.label == "Defaults":
            refuse(preset.mark, f"duplicate preset {preset.label!r}")
        labels.add(preset.label)
        if isinstance(preset, PrintedPreset):
            for name, _, mark in preset.printed:
                if name not in by_name:
                    refuse(mark, f"preset {preset.label!r}: {name!r} is not an input{did_you_mean(name, by_name)}")
                elif by_name[name].choices is not None:
                    refuse(mark, f"preset {preset.label!r}: {name!r} has choices; a printed figure sets a number")
            continue
        values = {i.name: i.default for i in inputs}
        for name, value, mark in preset.values:
            if name not in by_name:
                refuse(mark, f"preset {preset.label!r}: {name!r} is not an input{did_you_mean(name, by_name)}")
            elif problem := by_name[name].refuse(value):
                refuse(mark, f"preset {preset.label!r}: {problem}")
            values[name] = value
        cases.append((f"preset {preset.label!r}", values))
    conditions = []
    for requirement in f.values["requires"]:
        try:
            conditions.append((requirement, parse_condition(requirement.that.text, set(by_name))))
        except ExprError as exc:
            refuse(requirement.that.at(exc.offset), f"requires: {exc.message}")
    if not ok:
        return INVALID
    for where, values in cases:
        numbers = {name: by_name[name].number(value) for name, value in values.items()}
        broken = [r for r, condition in conditions if not safely_holds(condition, numbers)]
        if broken:
            refuse(broken[0].that.mark, f"requires: {broken[0].that.text!r} does not hold at {where}")
            continue
        for output in outputs:
            try:
                numbers[output.name] = evaluate(parsed[output.name], numbers)
            except ExprError as exc:
                refuse(output.expr.at(exc.offset), f"expr: at {where}: {exc.message}")
                break
    return {"mark": f.mark, "presets": presets} if ok else INVALID


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


# ---------------------------------------------------------------- questions


UNIT_DOC = (
    "The unit of the answer without a prefix: `B`, `FLOP/s`, `s`, `x`, `%`, `tokens`... A reader may "
    "type a prefix (k, M, G, T, P; Ki, Mi, Gi, Ti for bytes and the like; m, u, µ, n), an exponent "
    "(2.15e9) or thousands separators (2,147,483,648); what the run printed is read the same way."
)


@dataclass(frozen=True, kw_only=True)
class RecordedValue:
    """A value the checked run recorded on a line of a key block (what the block's state table shows)."""

    block: str = declared(Text("The key block (its name) whose lines bind it; it must be the previewed starter's."), required=True)
    name: str = declared(Text("The name as a line of the block binds it (`kv_bytes`, `self.total`), or `return` for what a function defined there returned."), required=True)
    mark: Mark = derived("Where the recorded value is named.")
    block_mark: Mark = derived("Where its key block is named.")


@dataclass(frozen=True, kw_only=True)
class NumericAnswer:
    """A numeric answer from the starter's checked run, never typed into the manifest: a figure it
    printed, or a value it recorded on a line. Exactly one of printed, recorded."""

    printed: str | None = declared(
        Regex("A regex whose first group matches the figure in the run's output, with its prefixed unit "
              "when the run prints one: `per token: ([\\d,.]+ KiB)`."),
    )
    recorded: RecordedValue | None = declared(record(RecordedValue, "recorded value", finish=lambda f, ctx: {"mark": f.marks["name"], "block_mark": f.marks["block"]}))
    starter: str | None = declared(Text("The starter whose run prints it (default: the previewed one; a recorded value is always the previewed one's)."))
    unit: str | None = declared(Text(UNIT_DOC))
    tolerance: float = declared(Number("Relative error still graded close (default 0.05: within 5%)."), default=0.05)
    mark: Mark = derived("Where the answer is declared.")
    printed_mark: Mark | None = derived("Where the pattern is written.")
    starter_mark: Mark | None = derived("Where the answer names its starter, if it does.")


def _numeric_answer(f: Fields, ctx: Context) -> dict:
    """The pattern needs a group (the figure); the tolerance is a fraction below 1."""
    pattern = f.values["printed"]
    if pattern is not None and re.compile(pattern).groups < 1:
        return ctx.error(f.nodes["printed"], f"printed: '{pattern}' has no group; its first group is the figure")
    if f.values["tolerance"] >= 1:
        return ctx.error(f.nodes["tolerance"], f"tolerance is a fraction of the answer (0.05 for 5%), got {f.values['tolerance']}")
    unit = f.values["unit"]
    if unit is not None and not re.fullmatch(r"[^\s\d.,+-][^\s\d]*", unit):
        return ctx.error(f.nodes["unit"], f"unit {unit!r} is one word with no digits, like 'B' or 'FLOP/s'")
    return {"mark": f.mark, "printed_mark": f.marks.get("printed"), "starter_mark": f.marks.get("starter")}


@dataclass(frozen=True, kw_only=True)
class Option:
    """One choice of a question, with why it is right or not."""

    text: str = declared(Prose("The choice as the reader sees it. " + MARKDOWN), required=True)
    correct: bool = declared(Literal(True, "`true` on the one right choice."), default=False)
    why: str = declared(Prose("Why it is right, or why not: shown when the reader picks it and in the answer. " + MARKDOWN), required=True)
    mark: Mark = derived("Where the choice is declared.")


def _question(f: Fields, ctx: Context) -> dict:
    """A choice question has one right choice among at least two."""
    choices = f.values["choices"]
    if choices:
        right = [option for option in choices if option.correct]
        if len(right) != 1:
            return ctx.error(f.nodes["choices"], f"choices: exactly one is `correct: true`, got {len(right)}")
    return {"mark": f.mark}


@dataclass(frozen=True, kw_only=True)
class Question:
    """A question the reader answers before the page tells: a number the run printed, or a choice."""

    id: str | None = declared(Text("Identifier in the page's address (`#q-ID`) and in the reader's progress (default: q1, q2... by position).", ID_PATTERN, "a lowercase id like 'ridge'"))
    prompt: str = declared(Prose("The question. " + MARKDOWN), required=True)
    answer: NumericAnswer | None = declared(record(NumericAnswer, "answer", finish=_numeric_answer, exclusive=(("printed", "recorded"),)))
    choices: tuple[Option, ...] = declared(
        ListOf(record(Option, "choice", finish=lambda f, ctx: {"mark": f.mark}), "The choices, one of them `correct: true`.", min_items=2),
        default=(),
    )
    explanation: str = declared(Prose("Why the answer is what it is, shown with it. " + MARKDOWN), required=True)
    blocks: tuple[Written, ...] = declared(
        ListOf(Source("A key block's name."), "The key blocks the explanation relies on, linked beside it.", min_items=1),
        required=True,
    )
    mark: Mark = derived("Where the question is declared.")


@dataclass(frozen=True)
class Intuition:
    """An intuition bullet with a labelled link."""

    text: str = declared(Prose(MARKDOWN), required=True)
    link: Link | None = declared(record(Link, "link"))


@dataclass(frozen=True)
class Reference:
    """A further-reading entry."""

    kind: str = declared(Choice(("official", "paper", "blog", "code"), "What sort of source this is."), required=True)
    title: str = declared(Text("Title of the source."), required=True)
    url: str = declared(Url("http(s) address."), required=True)


TITLES = Record(
    "titles",
    {
        sid: Field(Text(f"Title of the '{eyebrow}' section (default: {title!r}"
                        + (f"; in a failure trace: {TRACE_SECTIONS[sid][1]!r}" if sid in TRACE_SECTIONS else "") + ")."))
        for sid, eyebrow, title in SECTIONS
    },
    lambda f, ctx: tuple((k, v) for k, v in f.values.items() if v is not None),
    doc="Per-lab section titles.",
)


def bullets(doc: str) -> ListOf:
    return ListOf(Prose(MARKDOWN), doc, min_items=1)


@dataclass(frozen=True, kw_only=True)
class Lab:
    """An InfraLens lab manifest (labs/<lab-id>.yml)."""

    number: int = declared(Integer("Lab number, unique in the site; shown as 'Lab 01'.", minimum=1), required=True)
    title: str = declared(Text("Page title."), required=True)
    track: str = declared(Text("A track id from site.yml."), required=True)
    summary: str = declared(Prose("One line for the index. " + MARKDOWN), required=True)
    topic: str = declared(Prose("Handbook topic in the index's map, e.g. 'KV cache' (default: the title). " + MARKDOWN))
    concrete: str = declared(Prose("One line in the index's map: what this lab makes concrete (default: the summary). " + MARKDOWN))
    kind: str = declared(Choice(
        tuple(KINDS),
        "Index badge and page shape; default: runnable when a starter runs. A 'trace' tells one failure in order "
        "(what broke, how it was found, what fixed it) under its own section titles.",
    ))
    kind_line: str = declared(Prose(
        f"Line under the title (default: {DEFAULT_KIND_LINE!r}; for a trace: {TRACE_KIND_LINE!r}). " + MARKDOWN
    ))
    handbook: Handbook | None = declared(record(Handbook, "handbook"))
    concept_goal: str = declared(Prose("One paragraph: the concept the code makes concrete. " + MARKDOWN), required=True, section="concept_goal")
    mechanism: tuple[str, ...] = declared(bullets("Bullets: the mechanism to keep in mind."), required=True, section="mechanism")
    starters: tuple[Starter, ...] = declared(ListOf(record(Starter, "starter", finish=_starter), "The lab's files under code/.", min_items=1), required=True, section="starters")
    preview: Preview | tuple[Preview, ...] = declared(
        Either(
            mapping=record(Preview, "preview", finish=_preview, exclusive=(SELECTORS,)),
            sequence=ListOf(record(Preview, "walkthrough step", finish=_preview, exclusive=(SELECTORS,)), min_items=1),
            expected="a {starter, region|symbol|lines|heading} mapping, or a list of them (a walkthrough)",
            doc="The code the page shows: one excerpt, or a walkthrough, several excerpts (regions, symbols, "
                "ranges, headings of one or several starters) shown in order, each under a header naming its "
                "file and lines. The first step's starter is the previewed one: its run records execution state.",
        ),
        required=True,
    )
    key_blocks: tuple[KeyBlockSpec, ...] = declared(ListOf(record(KeyBlockSpec, "key block", finish=lambda f, ctx: {"mark": f.marks["lines"], "starter_mark": f.marks.get("starter")}), "Notes bound to lines of the excerpt (any step of a walkthrough).", min_items=1), required=True)
    checkpoints: tuple[str, ...] = declared(bullets("Bullets: how to read this code."), required=True, section="checkpoints")
    misunderstandings: tuple[str, ...] = declared(bullets("Bullets: what this code does not mean."), required=True, section="misunderstandings")
    interview: str = declared(Prose("A paragraph: how to say it out loud. " + MARKDOWN), required=True, section="interview")
    intuition: tuple[Intuition, ...] = declared(
        ListOf(
            Either(
                scalar=Prose(MARKDOWN),
                mapping=record(Intuition, "intuition"),
                expected="text or a {text, link} mapping",
                doc="A bullet of additional intuition, optionally with a labelled link.",
            ),
            "Bullets of additional intuition.",
            min_items=1,
        ),
        required=True,
        section="intuition",
    )
    further_reading: tuple[Reference, ...] = declared(
        ListOf(record(Reference, "reference"), "Official, paper and practical references.", min_items=1), required=True, section="further_reading"
    )
    titles: tuple[tuple[str, str], ...] = declared(TITLES, default=())
    """Section id → title overrides."""
    calculators: tuple[Calculator, ...] = declared(
        ListOf(record(Calculator, "calculator", finish=_calculator), "\"Try it\" blocks whose results the starter's own functions confirm (see `infralens check`)."),
        default=(), indexed=False,
    )
    questions: tuple[Question, ...] = declared(
        ListOf(record(Question, "question", finish=_question, exclusive=(("answer", "choices"),)),
               "Questions the reader answers before the page tells: numeric ones graded by the checked run, or choices."),
        default=(), indexed=False,
    )
    id: str = derived("The lab id: the manifest's file stem.")
    path: str = derived("The manifest, relative to the site root.")
    number_mark: Mark = derived("Where the manifest writes its number.")
    track_mark: Mark = derived("Where the manifest names its track.")

    @property
    def steps(self) -> tuple[Preview, ...]:
        """The excerpts the page shows, in order: one, or a walkthrough's steps."""
        return self.preview if isinstance(self.preview, tuple) else (self.preview,)

    @property
    def previewed(self) -> str:
        """The previewed starter: the first step's. Its run records execution state, and calculators and
        questions take their values from it unless they name another."""
        return self.steps[0].starter

    def sections(self) -> tuple[tuple[str, str, str], ...]:
        """Return the page's sections in order: (id, eyebrow label, title), with this lab's titles."""
        titles = dict(self.titles)
        return tuple((sid, eyebrow, titles.get(sid, title)) for sid, eyebrow, title in sections_of(self.kind))

    def section_title(self, section: str) -> str:
        return next(title for sid, _, title in self.sections() if sid == section)


def question_id(question: Question, position: int) -> str:
    """A question's id: its own, or q1, q2... by its 1-based position in the lab."""
    return question.id or f"q{position}"


def answering_starter(lab: Lab, answer: NumericAnswer) -> str:
    """The starter whose checked run prints a numeric answer: its own, or the previewed one."""
    return answer.starter or lab.previewed


def mirrored_starter(lab: Lab, calc: Calculator) -> str:
    """The starter a calculator's outputs must agree with: its own, or the previewed one."""
    return calc.starter or lab.previewed


@dataclass(frozen=True)
class LabCard:
    """What other pages need of a lab: the index, the navigation of its neighbours, checks across labs.

    Small, so a build can keep the card of every lab between runs and parse only what changed.
    """

    id: str
    path: str
    number: int
    title: str
    track: str
    summary: str
    topic: str
    concrete: str
    kind: str
    starters: tuple[Starter, ...]
    number_mark: Mark
    track_mark: Mark
    questions: int = 0
    """How many questions the lab asks: the index and the navigation show the reader's score of them."""


def card_of(lab: Lab) -> LabCard:
    """Return the card of a parsed lab."""
    return LabCard(
        lab.id, lab.path, lab.number, lab.title, lab.track, lab.summary, lab.topic, lab.concrete, lab.kind,
        lab.starters, lab.number_mark, lab.track_mark, len(lab.questions),
    )


@dataclass(frozen=True)
class SourceLine:
    """One line of a starter: its real number, its text and its highlighted HTML."""

    number: int
    text: str
    html: str


@dataclass(frozen=True)
class SourceFile:
    """A starter file read from disk, highlighted once."""

    path: str
    text: str
    lines: tuple[SourceLine, ...]
    language: str


@dataclass(frozen=True)
class KeyBlock:
    """A key block bound to real file lines first..last."""

    name: str
    slug: str
    note: str
    first: int
    last: int
    ordinal: int
    """1-based position in the lab's list of key blocks, shown as the line's badge."""
    state: StateChoice | None = None
    """What the block shows of the recorded execution state (None: everything its lines bind)."""
    starter: str = ""
    """The starter whose lines it is bound to (in a walkthrough, any step's)."""
    part: int = 0
    """The position (0-based) of the step whose lines it is bound to."""


@dataclass(frozen=True)
class Part:
    """One excerpt of a page: a step of a walkthrough, or the whole preview."""

    starter: str
    lines: tuple[SourceLine, ...]
    title: str | None = None
    prefix: str = ""
    """What its lines' ids start with before 'L12': '' for the previewed starter, 's2-' for the
    lab's second starter, so two files' line 12 keep apart on one page."""

    @property
    def first(self) -> int:
        return self.lines[0].number

    @property
    def last(self) -> int:
        return self.lines[-1].number


@dataclass(frozen=True)
class Excerpt:
    """The lines a lab page previews, with real numbers, step by step (one step unless it is a
    walkthrough); marker lines are left out."""

    parts: tuple[Part, ...]
    key_blocks: tuple[KeyBlock, ...]

    @property
    def starter(self) -> str:
        """The previewed starter: the first step's, whose run records state."""
        return self.parts[0].starter

    @property
    def lines(self) -> tuple[SourceLine, ...]:
        """The previewed starter's lines, of every step that shows it: what its run records state for."""
        return tuple(line for part in self.parts if part.starter == self.starter for line in part.lines)

    @property
    def first(self) -> int:
        return self.lines[0].number

    @property
    def last(self) -> int:
        return self.lines[-1].number

    @property
    def walkthrough(self) -> bool:
        return len(self.parts) > 1


@dataclass(frozen=True)
class ResolvedLab:
    """A lab with its excerpt cut and its notes bound: everything its page needs."""

    lab: Lab
    excerpt: Excerpt


@dataclass(frozen=True)
class RunResult:
    """What running one starter showed."""

    lab: str
    starter: str
    status: str
    """'passed', 'failed', 'timeout', or 'skipped' (the machine lacks the device the run needs)."""
    seconds: float
    returncode: int | None
    stdout: str
    stderr: str
    reason: str
    """Why it failed, in one line; empty when it passed."""
    mark: Mark
    finished: str = ""
    """When the run ended, UTC, ISO 8601 to the second."""
    artifacts: tuple[str, ...] = ()
    """Names of the artifacts the run wrote, kept beside its stored result."""
    cached: bool = False
    """True when this result was read from the store instead of running again."""
    traced: tuple[tuple[int, int], ...] = ()
    """The line spans whose execution state the run recorded (none when it recorded none)."""
    state: str = ""
    """The recorded execution state, as trace_state.py wrote it (JSON), when the run passed."""
    probed: str = ""
    """The digest of the calculators' request the parity probe answered (see calculators.py)."""
    answers: str = ""
    """The probe's answers (JSON), when the run passed and the lab has calculators mirroring it."""
    device: str = "cpu"
    """The device the run is for (its run spec's); one starter has a result per device."""
    hardware: str = ""
    """What it ran on (see devices.py): CPU model, or GPU, memory, driver and CUDA; torch, Python."""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"

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
