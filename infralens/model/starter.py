"""What a manifest says about a lab's code: its starters and their runs, the preview, key blocks and the execution state they show."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from typing import Literal, get_args

import yaml

from infralens.errors import Mark
from infralens.model.declare import declared, derived, record
from infralens.model.devices import DEVICES, Device  # noqa: F401  (re-exported: the model names its devices here too)
from infralens.model.schema import (
    INVALID,
    MARKDOWN,
    Choice,
    Constant,
    Context,
    Either,
    Field,
    Fields,
    ListOf,
    MappingOf,
    Number,
    Prose,
    Record,
    Regex,
    Source,
    Spec,
    Text,
    Written,
    describe,
    parse_range,
    scalar_value,
)
from infralens.text.languages import COMPILED_SUFFIXES, RUNNABLE_SUFFIXES, language_of

DEFAULT_TIMEOUT = 60.0


ARTIFACT = Text(
    pattern=r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.(?:svg|png|txt|json|csv)",
    pattern_hint="a file name like 'roofline.svg' (svg, png, txt, json or csv)",
)




MEMORY_UNITS = {"GiB": 2**30, "GB": 10**9, "MiB": 2**20, "MB": 10**6}


GPU_MEMORY = r"([0-9]{1,6}(?:\.[0-9]{1,3})?) ?(" + "|".join(MEMORY_UNITS) + ")"
"""A size in ASCII digits, short enough to be one GPU's memory (a float, never inf)."""


ENV_NAME = r"[A-Z_][A-Z0-9_]{0,63}"
"""An environment variable's name as a run spec writes it: upper case."""

RESERVED_ENV = frozenset("PATH HOME TMPDIR LANG LC_ALL PYTHONHASHSEED PYTHONDONTWRITEBYTECODE PYTHONUNBUFFERED PYTHONIOENCODING CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER".split())
"""The variables `check` sets or passes through itself: a run spec may not set them (a run's HOME is its folder)."""


@dataclass(kw_only=True, frozen=True)
class RunSpec:
    """How `infralens check` runs the starter."""

    args: tuple[str, ...] = declared(ListOf(Text(numbers=True), "Command-line arguments passed after the script."), default=())
    timeout: float = declared(Number(f"Seconds before the run is killed (default {DEFAULT_TIMEOUT:g})."), default=DEFAULT_TIMEOUT)
    expect: tuple[str, ...] = declared(ListOf(Regex(), "Regexes that must each be found in the starter's stdout."), default=())
    artifacts: tuple[str, ...] = declared(
        ListOf(ARTIFACT, "Files the run writes into its working folder (regular files, not symlinks, of at most 8 MiB); the lab page shows them (SVG and PNG as figures)."), default=()
    )
    device: Device = declared(
        Choice(DEVICES, "What the run needs: cpu (any machine) or cuda (an NVIDIA GPU and a CUDA build of torch). Where it is missing, check reports the run skipped, never passed."),
        default="cpu",
    )
    gpu_memory: str | None = declared(
        Text("Least memory the GPU must have, such as '40 GiB' or '24 GB' (cuda runs only).", pattern=GPU_MEMORY, pattern_hint="a size such as '40 GiB' or '24 GB'")
    )
    compiler: str | None = declared(Text(
        "Compiled starters (.cpp, .cc, .cxx, .cu): the compiler, found on PATH (default g++ for C++, nvcc for CUDA).",
        pattern=r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}", pattern_hint="a program name on PATH, such as 'g++', 'clang++' or 'nvcc'",
    ))
    env: tuple[tuple[str, str], ...] = declared(MappingOf(
        Text("The variable's value.", numbers=True),
        "Environment variables set for the run, besides the small fixed environment every run gets "
        "(`TRITON_INTERPRET: \"1\"` runs Triton kernels on the CPU through Triton's interpreter); "
        "they join the run's key and its command on the page.",
        min_items=1, key_pattern=ENV_NAME, key_hint="an environment variable's name, such as 'TRITON_INTERPRET'",
    ), default=())
    flags: tuple[str, ...] | None = declared(ListOf(
        Text(numbers=True),
        "Compiled starters: the compiler's flags, before the file and `-o PROGRAM` (default for C++ "
        "`-std=c++20 -O2 -Wall -Wextra -Werror`; for CUDA `-std=c++20 -O2 -arch=sm_80 -Werror all-warnings`).",
    ))

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
    """A starter in a language that runs (.py, .md, and the compiled .cpp, .cc, .cxx, .cu) runs
    unless it says `run: false`; other files only with a reason to refuse. A list of runs runs it
    once per device, each device once. A CUDA program's run is on cuda unless it says otherwise,
    which is refused."""
    path, run = f.values["path"], f.values["run"]
    language = language_of(path)
    runner = language.runner if language is not None else None
    if "run" not in f.nodes:
        runs: tuple[RunSpec, ...] = (RunSpec(device=language.device),) if language is not None and runner else ()
    elif run is False:
        runs = ()
    elif runner is None:
        return ctx.error(f.nodes["run"], f"only starters in {' '.join(RUNNABLE_SUFFIXES)} can run, not {path!r}")
    else:
        runs = run if isinstance(run, tuple) else (run,)
        items = f.nodes["run"].value if isinstance(run, tuple) else [f.nodes["run"]]
        for spec in runs:
            reserved = next(((name, at) for name, _, at in spec.env if name in RESERVED_ENV), None)
            if reserved is not None:
                ctx.problems.add(reserved[1], f"{reserved[0]} is set by check for every run; a run's env cannot set it")
                return INVALID
        # (name, value) pairs: where a variable is written is no part of what the run depends on
        runs = tuple(replace(spec, env=tuple((name, value) for name, value, *_ in spec.env)) if spec.env else spec for spec in runs)
        if language is not None and language.device != "cpu":  # unless it names one, a CUDA program's run is on its device
            runs = tuple(spec if _names(node, "device") else replace(spec, device=language.device) for spec, node in zip(runs, items))
        seen: set[str] = set()
        for spec, node in zip(runs, items):
            if runner != "compiled" and (spec.compiler is not None or spec.flags is not None):
                key = "compiler" if spec.compiler is not None else "flags"
                return ctx.error(node, f"{key} is for a compiled starter ({' '.join(COMPILED_SUFFIXES)}); {path} runs as it is")
            if language is not None and spec.device != language.device and language.device != "cpu":
                return ctx.error(node, f"a {language.name} program runs on {language.device}: remove `device: {spec.device}` (a CPU reference of it is a starter of its own)")
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
            scalar=Constant(False, "Never run this starter."),
            mapping=record(RunSpec, "run"),
            sequence=ListOf(record(RunSpec, "run"), min_items=1),
            expected="a run mapping, a list of them (one per device) or false",
            doc=".py and .md starters run on cpu with no arguments unless this says otherwise; .cpp, .cc and .cxx starters are compiled (g++ -std=c++20 by default) and their program run on cpu, .cu starters compiled with nvcc and run on cuda; a list runs it once per device, each with its own arguments and expect patterns (a cpu run first: the page's figures come from the first); false never runs it.",
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

    kind: SelectorKind
    value: str
    mark: Mark


SelectorKind = Literal["region", "symbol", "lines", "heading"]
SELECTORS: tuple[SelectorKind, ...] = get_args(SelectorKind)


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


@dataclass(kw_only=True, frozen=True)
class LineBinding:
    """How a key block names its lines: one literal text, a from/to span, or file line numbers."""

    kind: Literal["text", "span", "range"]
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
            return LineBinding(kind="range", first=numbers[0], last=numbers[1])
        return LineBinding(kind="text", text=value)


SPAN = Record(
    "span",
    {
        "from": Field(Text("Text on exactly one line of the excerpt: the first line.", numbers=True), True),
        "to": Field(Text("Text on the last line: the first line at or after 'from' that contains it.", numbers=True), True),
    },
    lambda f, ctx: LineBinding(kind="span", text=f.values["from"], until=f.values["to"]),
    doc="Lines from one text to another.",
)


IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"


@dataclass(kw_only=True, frozen=True)
class DerivedSpec:
    """A figure a key block computes from the values its lines were recorded holding, shown beside them."""

    name: str = declared(Text("The figure's name, e.g. `flops`; later figures of the block may read it.", pattern=IDENTIFIER, pattern_hint="an identifier like 'flops'"), required=True)
    expr: Written = declared(Source(
        "An expression over names the block's lines bind (else other lines of the excerpt; their last values as "
        "the checked run recorded them, which must be numbers) and the block's earlier figures: numbers, `+ - * / // % **`, parentheses, "
        "`min max ceil floor abs sqrt log2`, `a if condition else b`. Never eval'd.", numbers=True,
    ), required=True)
    meaning: str | None = declared(Text("What the figure is, in a few words, e.g. 'FLOPs of one matmul (a multiply-add is 2)'."))
    mark: Mark = derived("Where the figure is named.")


@dataclass(kw_only=True, frozen=True)
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
    meaning: tuple[tuple[str, str, Mark], ...] = declared(MappingOf(
        Text("A few words, e.g. 'matrix dimension'."),
        "What the values of these lines mean, by name (`N: matrix dimension`): each name must be bound by a line of the block; "
        "the page shows the words beside the recorded value, in the note's table and in the state panel.",
        min_items=1, key_pattern=STATE_NAME, key_hint="a variable name like 'N' or 'self.blocks'",
    ), default=(), indexed=False)
    derived: tuple[DerivedSpec, ...] = declared(ListOf(
        record(DerivedSpec, "derived figure", finish=lambda f, ctx: {"mark": f.marks["name"]}),
        "Figures the build computes from the values the checked run recorded, never typed "
        "(`{name: flops, expr: 2 * N**3, meaning: FLOPs of one matmul}`), shown under the block's values in its "
        "table and the state panel; `check` fails one whose names were not recorded as numbers.", min_items=1,
    ), default=(), indexed=False)


@dataclass(frozen=True)
class CompileStep:
    """How a compiled starter's run builds its program: the run spec's compiler and flags, else
    its language's, and the program's name (the starter's stem)."""

    compiler: str
    """As written (looked up on PATH when the run is made): g++, nvcc."""
    flags: tuple[str, ...]
    program: str


def compile_step(path: str, spec: RunSpec) -> CompileStep | None:
    """How a run of the starter at `path` is compiled, or None when it runs as it is."""
    language = language_of(path)
    if language is None or not language.compiled:
        return None
    flags = spec.flags if spec.flags is not None else language.flags
    return CompileStep(spec.compiler or language.compiler, flags, path.rsplit("/", 1)[-1].rsplit(".", 1)[0])


def command_line(path: str, spec: RunSpec) -> str:
    """The command a reader types to run a starter as this run does, from the project's root:
    `python code/x/y.py --layers 32`, or for a compiled starter its compile then its program,
    `g++ -std=c++20 … code/x/queue.cpp -o queue && ./queue 4`."""
    args = "".join(f" {arg}" for arg in spec.args)
    env = "".join(f"{name}={shlex.quote(value)} " for name, value in spec.env)
    step = compile_step(path, spec)
    if step is None:
        return f"{env}python {path}{args}"
    return " ".join((step.compiler, *step.flags, path, "-o", step.program)) + f" && {env}./{step.program}{args}"


def _names(node: yaml.Node, key: str) -> bool:
    """Whether a run mapping writes `key` itself."""
    return isinstance(node, yaml.MappingNode) and any(isinstance(k, yaml.ScalarNode) and k.value == key for k, _ in node.value)


STARTER = record(Starter, "starter", finish=_starter)
"""How a manifest's `starters:` item is read."""
PREVIEW = record(Preview, "preview", finish=_preview, exclusive=(SELECTORS,))
"""How a manifest's `preview:` mapping is read."""
STEP = record(Preview, "walkthrough step", finish=_preview, exclusive=(SELECTORS,))
"""How a step of a walkthrough (`preview:` as a list) is read."""
