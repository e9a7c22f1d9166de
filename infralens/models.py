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
    Number,
    Prose,
    Record,
    Regex,
    Text,
    Spec,
    Url,
    declared,
    describe,
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


@dataclass(frozen=True)
class RunSpec:
    """How `infralens check` runs the starter."""

    args: tuple[str, ...] = declared(ListOf(Text(numbers=True), "Command-line arguments passed after the script."), default=())
    timeout: float = declared(Number(f"Seconds before the run is killed (default {DEFAULT_TIMEOUT:g})."), default=DEFAULT_TIMEOUT)
    expect: tuple[str, ...] = declared(ListOf(Regex(), "Regexes that must each be found in the starter's stdout."), default=())
    artifacts: tuple[str, ...] = declared(
        ListOf(ARTIFACT, "Files the run writes into its working folder (regular files, not symlinks, of at most 8 MiB); the lab page shows them (SVG and PNG as figures)."), default=()
    )


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
    """A .py or .md starter runs unless it says `run: false`; other files only with a reason to refuse."""
    path, run = f.values["path"], f.values["run"]
    if "run" not in f.nodes:
        run = RunSpec() if path.endswith(RUNNABLE_SUFFIXES) else None
    elif run is False:
        run = None
    elif not path.endswith(RUNNABLE_SUFFIXES):
        return ctx.error(f.nodes["run"], f"only .py and .md starters can run, not {path!r}")
    return {"run": run, "mark": f.marks["path"]}


@dataclass(frozen=True, kw_only=True)
class Starter:
    """A file of the lab."""

    path: str = declared(Text("Repository-relative path under code/, e.g. code/lab-01-x/memory.py."), required=True)
    role: str = declared(Prose("One line: what this file is for. " + MARKDOWN), required=True)
    run: RunSpec | None = declared(
        Either(
            scalar=Literal(False, "Never run this starter."),
            mapping=record(RunSpec, "run"),
            expected="a run mapping or false",
            doc=".py and .md starters run with no arguments unless this says otherwise; false never runs it.",
        ),
        indexed=False,
    )
    state: StateChoice | None = declared(StateSpec(
        "The execution state `check` records for the lines of the page's excerpt (on by default for the "
        "previewed starter): false records and shows none; a list of names shows only those variables."
    ), indexed=False)
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
    """The excerpt the page shows: exactly one of region, symbol, lines, heading."""

    starter: str = declared(Text("One of the lab's starter paths."), required=True)
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
    state: StateChoice | None = declared(StateSpec(
        "The execution state shown for these lines: false records and shows none (its lines are not "
        "traced); a list of names shows only those variables, each of which a line of the block must bind."
    ), indexed=False)


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
    preview: Preview = declared(record(Preview, "preview", finish=_preview, exclusive=(SELECTORS,)), required=True)
    key_blocks: tuple[KeyBlockSpec, ...] = declared(ListOf(record(KeyBlockSpec, "key block", finish=lambda f, ctx: {"mark": f.marks["lines"]}), "Notes bound to lines of the excerpt.", min_items=1), required=True)
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
    id: str = derived("The lab id: the manifest's file stem.")
    path: str = derived("The manifest, relative to the site root.")
    number_mark: Mark = derived("Where the manifest writes its number.")
    track_mark: Mark = derived("Where the manifest names its track.")

    def sections(self) -> tuple[tuple[str, str, str], ...]:
        """Return the page's sections in order: (id, eyebrow label, title), with this lab's titles."""
        titles = dict(self.titles)
        return tuple((sid, eyebrow, titles.get(sid, title)) for sid, eyebrow, title in sections_of(self.kind))

    def section_title(self, section: str) -> str:
        return next(title for sid, _, title in self.sections() if sid == section)


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


def card_of(lab: Lab) -> LabCard:
    """Return the card of a parsed lab."""
    return LabCard(
        lab.id, lab.path, lab.number, lab.title, lab.track, lab.summary, lab.topic, lab.concrete, lab.kind,
        lab.starters, lab.number_mark, lab.track_mark,
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


@dataclass(frozen=True)
class Excerpt:
    """The lines a lab page previews, with real numbers; marker lines are left out."""

    starter: str
    lines: tuple[SourceLine, ...]
    key_blocks: tuple[KeyBlock, ...]

    @property
    def first(self) -> int:
        return self.lines[0].number

    @property
    def last(self) -> int:
        return self.lines[-1].number


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
    """'passed', 'failed' or 'timeout'."""
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

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def tail(self, lines: int = 20) -> str:
        """The last lines of stdout, then of stderr: what usually says why a run failed."""
        parts = [text.rstrip("\n").split("\n")[-lines:] for text in (self.stdout, self.stderr) if text.strip()]
        return "\n".join(line for part in parts for line in part)
