"""Parse stage: site.yml and lab manifest text → validated frozen models.

Pure: takes a path (for messages) and text, returns a model or raises `InputError` with every
problem found. The declarations below are the one schema: validation and the editors' JSON Schema
both come from them.
"""

from __future__ import annotations

import re

from infralens.errors import Problems
from infralens.mathml import Formula, MalformedMath, formulas, to_mathml
from infralens.models import (
    DEFAULT_KIND_LINE,
    SECTIONS,
    Intuition,
    KeyBlockSpec,
    Lab,
    LineBinding,
    Link,
    Preview,
    Reference,
    RunSpec,
    Selector,
    Site,
    Starter,
    Track,
)
from infralens.schema import (
    INVALID,
    Choice,
    Context,
    Either,
    Field,
    Fields,
    Integer,
    ListOf,
    Literal,
    Number,
    Record,
    Regex,
    Text,
    Url,
    compose,
)

ID_PATTERN = r"[a-z0-9][a-z0-9-]*"
DEFAULT_TIMEOUT = 60.0
RUNNABLE_SUFFIXES = (".py", ".md")

# ---------------------------------------------------------------- site.yml

TRACK = Record(
    "track",
    {
        "id": Field(Text("Identifier that lab manifests name in `track:`.", ID_PATTERN, "a lowercase id like 'foundations'"), True),
        "title": Field(Text("Heading of the track on the index, e.g. 'Foundations / Calculators'."), True),
    },
    lambda f, ctx: Track(f.values["id"], f.values["title"], f.mark),
    doc="A group of labs on the index.",
)

SITE = Record(
    "site.yml",
    {
        "title": Field(Text("Site name shown on every page."), True),
        "tagline": Field(Text("One line under the title on the index."), True),
        "base_url": Field(Url("Public address of the built site (used for canonical links; pages link relatively)."), False),
        "tracks": Field(ListOf(TRACK, "Tracks in the order the index lists them.", min_items=1), True),
    },
    lambda f, ctx: f.values,
    doc="InfraLens site configuration.",
)

# ---------------------------------------------------------------- lab manifests

MARKDOWN = "Markdown: inline code, emphasis, links, `$…$` and `$$…$$` math (LaTeX, set as MathML)."


class Prose(Text):
    """Markdown text whose every `$…$` and `$$…$$` formula converts to MathML."""

    def check(self, node, ctx: Context):
        value = super().check(node, ctx)
        if value is INVALID:
            return INVALID
        ok = True
        for formula in formulas(value):
            try:
                to_mathml(formula.latex, display=formula.display)
            except MalformedMath as exc:
                ctx.problems.add(ctx.mark_within(node, _written(formula)), f"malformed math {formula}: {exc}")
                ok = False
        return value if ok else INVALID


def _written(formula: Formula) -> re.Pattern[str]:
    """Match a formula as a manifest writes it, across the line breaks and indentation YAML folds."""
    dollars = re.escape(formula.markup)
    body = r"\s+".join(re.escape(part) for part in formula.latex.split())
    return re.compile(rf"(?<!\$){dollars}\s*{body}\s*{dollars}(?!\$)")


def _link(f: Fields, ctx: Context) -> Link:
    return Link(f.values["label"], f.values["title"], f.values["url"])


LINK = Record(
    "link",
    {
        "label": Field(Text("Short label before the title, e.g. 'Official' or 'Blog'."), True),
        "title": Field(Text("Link text."), True),
        "url": Field(Url("http(s) address."), True),
    },
    _link,
    doc="A labelled external link.",
)

HANDBOOK = Record(
    "handbook",
    {
        "title": Field(Text("Title of the related handbook section."), True),
        "url": Field(Url("http(s) address of the section."), True),
    },
    lambda f, ctx: Link("Handbook", f.values["title"], f.values["url"]),
    doc="The related handbook section, shown in the page header.",
)


def _run(f: Fields, ctx: Context) -> RunSpec:
    return RunSpec(
        f.values["args"] or (), f.values["timeout"] or DEFAULT_TIMEOUT, f.values["expect"] or (), f.values["artifacts"] or ()
    )


RUN = Record(
    "run",
    {
        "args": Field(ListOf(Text(numbers=True), "Command-line arguments passed after the script.")),
        "timeout": Field(Number(f"Seconds before the run is killed (default {DEFAULT_TIMEOUT:g}).")),
        "expect": Field(ListOf(Regex(), "Regexes that must each be found in the starter's stdout.")),
        "artifacts": Field(ListOf(
            Text(pattern=r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.(?:svg|png|txt|json|csv)", pattern_hint="a file name like 'roofline.svg' (svg, png, txt, json or csv)"),
            "Files the run writes into its working folder; the lab page shows them (SVG and PNG as figures).",
        )),
    },
    _run,
    doc="How `infralens check` runs the starter.",
)


def _starter(f: Fields, ctx: Context) -> Starter:
    path = f.values["path"]
    run = f.values["run"]
    if "run" not in f.nodes:
        run = RunSpec((), DEFAULT_TIMEOUT, ()) if path.endswith(RUNNABLE_SUFFIXES) else None
    elif run is False:
        run = None
    elif not path.endswith(RUNNABLE_SUFFIXES):
        ctx.error(f.nodes["run"], f"only .py and .md starters can run, not {path!r}")
        return INVALID
    return Starter(path, f.values["role"], run, f.marks["path"])


STARTER = Record(
    "starter",
    {
        "path": Field(Text("Repository-relative path under code/, e.g. code/lab-01-x/memory.py."), True),
        "role": Field(Prose("One line: what this file is for. " + MARKDOWN), True),
        "run": Field(Either(
            scalar=Literal(False, "Never run this starter."),
            mapping=RUN,
            expected="a run mapping or false",
            doc=".py and .md starters run with no arguments unless this says otherwise; false never runs it.",
        )),
    },
    _starter,
    doc="A file of the lab.",
)

SELECTORS = ("region", "symbol", "lines", "heading")


def _preview(f: Fields, ctx: Context) -> Preview:
    kind = next(k for k in SELECTORS if k in f.nodes)
    value = f.values[kind]
    if kind == "lines" and parse_range(value) is None:
        ctx.error(f.nodes[kind], f"lines must look like 'A-B' with 1 <= A <= B, got {value!r}")
        return INVALID
    return Preview(f.values["starter"], Selector(kind, value, f.marks[kind]), f.marks["starter"])


PREVIEW = Record(
    "preview",
    {
        "starter": Field(Text("One of the lab's starter paths."), True),
        "region": Field(Text("Lines between '# region NAME' and '# endregion' (markers hidden).")),
        "symbol": Field(Text("A Python function or class by name (dotted for methods), decorators included.")),
        "lines": Field(Text("Real file lines 'A-B'.", numbers=True)),
        "heading": Field(Text("Markdown starters: the section under this heading, to the next heading of the same or higher level.")),
    },
    _preview,
    doc="The excerpt the page shows: exactly one of region, symbol, lines, heading.",
    exclusive=(SELECTORS,),
)


def parse_range(value: str) -> tuple[int, int] | None:
    """Parse 'A-B' or 'A' into 1-based inclusive line numbers, or None."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", value)
    if not match:
        return None
    first = int(match.group(1))
    last = int(match.group(2) or first)
    return (first, last) if 1 <= first <= last else None


SPAN = Record(
    "span",
    {
        "from": Field(Text("Text on exactly one line of the excerpt: the first line.", numbers=True), True),
        "to": Field(Text("Text on the last line: the first line at or after 'from' that contains it.", numbers=True), True),
    },
    lambda f, ctx: LineBinding("span", text=f.values["from"], until=f.values["to"]),
    doc="Lines from one text to another.",
)


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


def _key_block(f: Fields, ctx: Context) -> KeyBlockSpec:
    return KeyBlockSpec(f.values["name"], f.values["lines"], f.values["note"], f.marks["lines"])


KEY_BLOCK = Record(
    "key block",
    {
        "name": Field(Text("An identifier such as `kv_cache_bytes`, or a role such as 'Setup / contract'."), True),
        "lines": Field(Either(
            scalar=LineText(numbers=True),
            mapping=SPAN,
            expected="text, 'A-B' or a from/to mapping",
            doc="Text that occurs on exactly one line of the excerpt; or real line numbers 'A-B'; or {from, to}.",
        ), True),
        "note": Field(Prose("What these lines do and why. " + MARKDOWN), True),
    },
    _key_block,
    doc="A note bound to lines of the excerpt.",
)


def _intuition(f: Fields, ctx: Context) -> Intuition:
    return Intuition(f.values["text"], f.values["link"])


INTUITION = Either(
    scalar=Prose(MARKDOWN),
    mapping=Record(
        "intuition",
        {
            "text": Field(Prose(MARKDOWN), True),
            "link": Field(LINK),
        },
        _intuition,
        doc="An intuition bullet with a labelled link.",
    ),
    expected="text or a {text, link} mapping",
    doc="A bullet of additional intuition, optionally with a labelled link.",
)

REFERENCE = Record(
    "reference",
    {
        "kind": Field(Choice(("official", "paper", "blog", "code"), "What sort of source this is."), True),
        "title": Field(Text("Title of the source."), True),
        "url": Field(Url("http(s) address."), True),
    },
    lambda f, ctx: Reference(f.values["kind"], f.values["title"], f.values["url"]),
    doc="A further-reading entry.",
)

TITLES = Record(
    "titles",
    {sid: Field(Text(f"Title of the '{eyebrow}' section (default: {title!r}).")) for sid, eyebrow, title in SECTIONS},
    lambda f, ctx: tuple((k, v) for k, v in f.values.items() if v is not None),
    doc="Per-lab section titles.",
)

BULLETS = ListOf(Prose(MARKDOWN), min_items=1)


LAB = Record(
    "lab manifest",
    {
        "number": Field(Integer("Lab number, unique in the site; shown as 'Lab 01'.", minimum=1), True),
        "title": Field(Text("Page title."), True),
        "track": Field(Text("A track id from site.yml."), True),
        "summary": Field(Prose("One line for the index. " + MARKDOWN), True),
        "topic": Field(Prose("Handbook topic in the index's map, e.g. 'KV cache' (default: the title). " + MARKDOWN)),
        "concrete": Field(Prose("One line in the index's map: what this lab makes concrete (default: the summary). " + MARKDOWN)),
        "kind": Field(Choice(("runnable", "reading"), "Index badge; default: runnable when a starter runs.")),
        "kind_line": Field(Prose(f"Line under the title (default: {DEFAULT_KIND_LINE!r}). " + MARKDOWN)),
        "handbook": Field(HANDBOOK),
        "concept_goal": Field(Prose("One paragraph: the concept the code makes concrete. " + MARKDOWN), True),
        "mechanism": Field(ListOf(Prose(MARKDOWN), "Bullets: the mechanism to keep in mind.", min_items=1), True),
        "starters": Field(ListOf(STARTER, "The lab's files under code/.", min_items=1), True),
        "preview": Field(PREVIEW, True),
        "key_blocks": Field(ListOf(KEY_BLOCK, "Notes bound to lines of the excerpt.", min_items=1), True),
        "checkpoints": Field(ListOf(Prose(MARKDOWN), "Bullets: how to read this code.", min_items=1), True),
        "misunderstandings": Field(ListOf(Prose(MARKDOWN), "Bullets: what this code does not mean.", min_items=1), True),
        "interview": Field(Prose("A paragraph: how to say it out loud. " + MARKDOWN), True),
        "intuition": Field(ListOf(INTUITION, "Bullets of additional intuition.", min_items=1), True),
        "further_reading": Field(ListOf(REFERENCE, "Official, paper and practical references.", min_items=1), True),
        "titles": Field(TITLES),
    },
    lambda f, ctx: f,  # parse_lab turns the fields into a Lab once the shape is known to be right
    doc="An InfraLens lab manifest (labs/<lab-id>.yml).",
)


def parse_site(path: str, text: str) -> Site:
    """Parse site.yml text into a Site."""
    problems = Problems()
    ctx = Context(path, problems, text)
    node = compose(text, ctx)
    values = SITE.check(node, ctx) if node is not None else INVALID
    if values is not INVALID:
        seen: dict[str, Track] = {}
        for track in values["tracks"]:
            if track.id in seen:
                problems.add(track.mark, f"duplicate track id {track.id!r} (first at line {seen[track.id].mark.line})")
            seen.setdefault(track.id, track)
    problems.raise_if_any()
    return Site(values["title"], values["tagline"], values["tracks"], values["base_url"], path)


def parse_lab(path: str, lab_id: str, text: str) -> Lab:
    """Parse one manifest's text into a Lab; `lab_id` is the file stem."""
    problems = Problems()
    ctx = Context(path, problems, text)
    node = compose(text, ctx)
    f: Fields = LAB.check(node, ctx) if node is not None else INVALID
    problems.raise_if_any()
    v = f.values
    starters: tuple[Starter, ...] = v["starters"]
    kind = v["kind"] or ("runnable" if any(s.run for s in starters) else "reading")
    lab = Lab(
        id=lab_id,
        path=path,
        number=v["number"],
        title=v["title"],
        track=v["track"],
        summary=v["summary"],
        topic=v["topic"] or v["title"],
        concrete=v["concrete"] or v["summary"],
        kind=kind,
        kind_line=v["kind_line"] or DEFAULT_KIND_LINE,
        handbook=v["handbook"],
        concept_goal=v["concept_goal"],
        mechanism=v["mechanism"],
        starters=starters,
        preview=v["preview"],
        key_blocks=v["key_blocks"],
        checkpoints=v["checkpoints"],
        misunderstandings=v["misunderstandings"],
        interview=v["interview"],
        intuition=tuple(i if isinstance(i, Intuition) else Intuition(i, None) for i in v["intuition"]),
        further_reading=v["further_reading"],
        titles=v["titles"] or (),
        number_mark=f.marks["number"],
        track_mark=f.marks["track"],
    )
    _check_lab(lab, f, ctx)
    problems.raise_if_any()
    return lab


def _check_lab(lab: Lab, f: Fields, ctx: Context) -> None:
    """Checks within one manifest that the schema cannot express."""
    paths: dict[str, Starter] = {}
    for starter in lab.starters:
        if starter.path in paths:
            ctx.problems.add(starter.mark, f"duplicate starter {starter.path!r}")
        paths[starter.path] = starter
    if lab.preview.starter not in paths:
        listed = ", ".join(repr(p) for p in paths)
        ctx.problems.add(lab.preview.starter_mark, f"preview starter {lab.preview.starter!r} is not one of the lab's starters ({listed})")
    seen: dict[str, KeyBlockSpec] = {}
    for block in lab.key_blocks:
        if block.name in seen:
            ctx.problems.add(block.mark, f"duplicate key block name {block.name!r}")
        seen[block.name] = block


def json_schemas() -> dict[str, dict]:
    """Return the editors' JSON Schemas, by file name, generated from the declarations above."""
    def document(record: Record, title: str) -> dict:
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": title,
            **record.json_schema(),
        }

    return {
        "lab.schema.json": document(LAB, "InfraLens lab manifest"),
        "site.schema.json": document(SITE, "InfraLens site.yml"),
    }


def _type_name(schema: dict) -> str:
    """Describe a JSON Schema type the way the reference tables do."""
    if "enum" in schema:
        return " \\| ".join(f"`{value}`" for value in schema["enum"])
    if "const" in schema:
        return f"`{str(schema['const']).lower()}`"
    if "anyOf" in schema:
        return " or ".join(_type_name(option) for option in schema["anyOf"])
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type_name(schema['items'])}"
    if kind == "object":
        return "mapping" if "title" not in schema else schema["title"]
    if kind == "integer" and "minimum" in schema:
        return f"integer ≥ {schema['minimum']}"
    if isinstance(kind, list):
        return "text"
    return {"string": "text", "number": "number", "integer": "integer"}.get(kind, str(kind))


def reference_markdown() -> str:
    """Return the manifest and site.yml reference as Markdown tables, from the same declarations."""
    lines = ["# Manifest reference", "", "Generated by `infralens schema` from the declarations the build validates with; do not edit.", ""]
    sections: list[tuple[str, dict]] = [("Lab manifest (`labs/<lab-id>.yml`)", LAB.json_schema()), ("`site.yml`", SITE.json_schema())]
    seen: set[str] = set()
    while sections:
        title, schema = sections.pop(0)
        lines += [f"## {title}", "", schema.get("description", ""), "", "| key | type | required | meaning |", "| --- | --- | --- | --- |"]
        required = set(schema.get("required", []))
        for key, field_schema in schema["properties"].items():
            nested = [field_schema] + field_schema.get("anyOf", []) + ([field_schema["items"]] if "items" in field_schema else [])
            nested += [option["items"] for option in field_schema.get("anyOf", []) if "items" in option]
            for candidate in nested:
                for option in [candidate] + candidate.get("anyOf", []):
                    if option.get("type") == "object" and option.get("description") and option["description"] not in seen:
                        seen.add(option["description"])
                        sections.append((f"`{key}` entries", option))
            description = field_schema.get("description", "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{key}` | {_type_name(field_schema)} | {'yes' if key in required else 'no'} | {description} |")
        if "allOf" in schema:
            groups = [", ".join(f"`{option['required'][0]}`" for option in rule["oneOf"]) for rule in schema["allOf"]]
            lines += ["", *(f"Exactly one of {group}." for group in groups)]
        lines.append("")
    return "\n".join(lines)
