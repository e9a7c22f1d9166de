"""Declarative schema: validate a composed YAML node tree and build frozen models from it.

Input: `yaml.Node` trees (with their marks). Output: model values, or problems collected in a
`Problems` list. A model declares each of its fields once, with `declared(spec, ...)`: the spec
is the field's type, constraints and documentation. `record(Model, ...)` turns a model into the
validator of its mapping; the editors' JSON Schema, the reference and every list of fields
elsewhere (what the claims check reads, what search indexes) come from the same declarations.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

import yaml

from infralens.errors import Mark, Problems, closest, did_you_mean

INVALID: Any = object()
"""Returned by a spec whose node had a problem; the problem is already recorded."""


@dataclass
class Context:
    """Where the nodes came from and where their problems go."""

    path: str
    problems: Problems
    text: str = ""
    """The text the nodes were composed from, to point at a place inside a scalar."""
    name: str = ""
    """The name of what is parsed, where its file name gives it one (a lab's id)."""

    def mark(self, node: yaml.Node) -> Mark:
        return Mark(self.path, node.start_mark.line + 1, node.start_mark.column + 1)

    def mark_within(self, node: yaml.Node, pattern: re.Pattern[str]) -> Mark:
        """Return where `pattern` first matches in the node's source, or the node's mark if nowhere.

        The source is the scalar as written, quotes, indentation and line breaks included: the
        pattern has to allow for the whitespace YAML folds, and misses text that quoting escaped.
        """
        source = self.text[node.start_mark.index : node.end_mark.index]
        match = pattern.search(source)
        if match is None:
            return self.mark(node)
        before = source[: match.start()]
        if "\n" not in before:
            return Mark(self.path, node.start_mark.line + 1, node.start_mark.column + len(before) + 1)
        return Mark(self.path, node.start_mark.line + before.count("\n") + 1, len(before) - before.rfind("\n"))

    def error(self, node: yaml.Node, message: str) -> Any:
        self.problems.add(self.mark(node), message)
        return INVALID


def scalar_value(node: yaml.ScalarNode) -> Any:
    """Return the Python value YAML's safe rules give a scalar node.

    A constructor per call: one kept for the process would remember every node it ever saw
    (`constructed_objects`), and `serve` parses manifests for as long as it runs.
    """
    return yaml.constructor.SafeConstructor().construct_object(node, deep=True)


def describe(node: yaml.Node) -> str:
    """Name a node's type the way a contributor thinks of it."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    value = scalar_value(node)
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({node.value})"
    if isinstance(value, int):
        return f"an integer ({node.value})"
    if isinstance(value, float):
        return f"a number ({node.value})"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


class Spec:
    """A type in the schema."""

    doc: str = ""

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        raise NotImplementedError

    def json_schema(self) -> dict:
        raise NotImplementedError


@dataclass
class Text(Spec):
    """A non-empty string; numbers are accepted and turned into text only when `numbers` is set."""

    doc: str = ""
    pattern: str | None = None
    pattern_hint: str = ""
    numbers: bool = False

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            return ctx.error(node, f"expected a string, got {describe(node)}")
        value = scalar_value(node)
        if self.numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = node.value
        if not isinstance(value, str):
            return ctx.error(node, f"expected a string, got {describe(node)}")
        value = value.strip()
        if not value:
            return ctx.error(node, "expected a non-empty string")
        if self.pattern and not re.fullmatch(self.pattern, value):
            return ctx.error(node, f"{value!r} is not {self.pattern_hint or 'valid'}")
        return value

    def json_schema(self) -> dict:
        schema: dict = {"type": "string", "minLength": 1}
        if self.numbers:
            schema = {"type": ["string", "number"]}
        if self.pattern:
            schema["pattern"] = f"^(?:{self.pattern})$"
        return _with_doc(schema, self.doc)


@dataclass
class Url(Spec):
    """An absolute http(s) URL."""

    doc: str = ""

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        value = Text().check(node, ctx)
        if value is INVALID:
            return INVALID
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in value):
            return ctx.error(node, f"{value!r} is not an http(s) URL")
        return value

    def json_schema(self) -> dict:
        return _with_doc({"type": "string", "pattern": "^https?://[^\\s/]+"}, self.doc)


@dataclass
class Integer(Spec):
    """An integer, at least `minimum`."""

    doc: str = ""
    minimum: int | None = None

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        value = scalar_value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, int) or isinstance(value, bool):
            return ctx.error(node, f"expected an integer, got {describe(node)}")
        if self.minimum is not None and value < self.minimum:
            return ctx.error(node, f"expected an integer >= {self.minimum}, got {value}")
        return value

    def json_schema(self) -> dict:
        schema: dict = {"type": "integer"}
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        return _with_doc(schema, self.doc)


@dataclass
class Number(Spec):
    """A positive number (seconds, say)."""

    doc: str = ""

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        value = scalar_value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return ctx.error(node, f"expected a number, got {describe(node)}")
        if not math.isfinite(value):
            return ctx.error(node, f"expected a finite number, got {node.value}")
        if value <= 0:
            return ctx.error(node, f"expected a number > 0, got {node.value}")
        return float(value)

    def json_schema(self) -> dict:
        return _with_doc({"type": "number", "exclusiveMinimum": 0}, self.doc)


@dataclass(frozen=True)
class Written:
    """Text as a manifest writes it, with where it is: a problem at a character of it gets a mark."""

    text: str
    mark: Mark
    inline: bool
    """True when the text sits on one line as written (plain or quoted), so columns add up."""

    def at(self, offset: int) -> Mark:
        """The mark of the character at `offset` of the text (the scalar's own mark when it spans lines)."""
        if not self.inline:
            return self.mark
        return Mark(self.mark.path, self.mark.line, self.mark.col + offset)


@dataclass
class Source(Text):
    """Text kept as `Written`, so a later check (an expression's names) can point inside it."""

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        value = super().check(node, ctx)
        if value is INVALID:
            return INVALID
        # Columns add up only when the scalar is on one line, as written: no escape or folding.
        quote = 1 if node.style in ("'", '"') else 0
        source = ctx.text[node.start_mark.index : node.end_mark.index]
        inline = node.start_mark.line == node.end_mark.line and source[quote : len(source) - quote] == node.value
        lead = len(node.value) - len(node.value.lstrip())
        mark = ctx.mark(node)
        return Written(value, Mark(mark.path, mark.line, mark.col + quote + lead), inline)


@dataclass
class Value(Spec):
    """A finite number of any sign (an input's default or bound), or, with `text`, also a string."""

    doc: str = ""
    text: bool = False

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        value = scalar_value(node) if isinstance(node, yaml.ScalarNode) else None
        if self.text and isinstance(value, str) and value.strip():
            return value.strip()
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return ctx.error(node, f"expected a number{' or a name' if self.text else ''}, got {describe(node)}")
        if not math.isfinite(value):
            return ctx.error(node, f"expected a finite number, got {node.value}")
        return value

    def json_schema(self) -> dict:
        return _with_doc({"type": ["number", "string"] if self.text else "number"}, self.doc)


@dataclass
class MappingOf(Spec):
    """A mapping from names to values of one spec, kept in order as (name, value, mark) triples."""

    item: Spec
    doc: str = ""
    min_items: int = 0
    key_pattern: str = r".+"
    key_hint: str = "a name"

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        if not isinstance(node, yaml.MappingNode):
            return ctx.error(node, f"expected a mapping, got {describe(node)}")
        if len(node.value) < self.min_items:
            return ctx.error(node, f"expected at least {self.min_items} entries, got {len(node.value)}")
        items, seen, ok = [], set(), True
        for key_node, value_node in node.value:
            key = scalar_value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            key = str(key) if isinstance(key, (int, float)) and not isinstance(key, bool) else key
            if not isinstance(key, str) or not re.fullmatch(self.key_pattern, key):
                ok = ctx.error(key_node, f"expected {self.key_hint} as the key, got {describe(key_node)}") is not INVALID
                continue
            if key in seen:
                ok = ctx.error(key_node, f"duplicate key {key!r}") is not INVALID
                continue
            seen.add(key)
            value = self.item.check(value_node, ctx)
            ok = ok and value is not INVALID
            items.append((key, value, ctx.mark(key_node)))
        return tuple(items) if ok else INVALID

    def json_schema(self) -> dict:
        schema = {"type": "object", "additionalProperties": self.item.json_schema()}
        if self.min_items:
            schema["minProperties"] = self.min_items
        return _with_doc(schema, self.doc)


@dataclass
class Choice(Spec):
    """One of a fixed set of strings."""

    values: tuple[str, ...]
    doc: str = ""

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        value = Text().check(node, ctx)
        if value is INVALID:
            return INVALID
        if value not in self.values:
            return ctx.error(node, f"{value!r} is not one of: {', '.join(self.values)}{did_you_mean(value, self.values)}")
        return value

    def json_schema(self) -> dict:
        return _with_doc({"enum": list(self.values)}, self.doc)


MAX_PATTERN = 1000
"""Longest `expect` pattern: one line of output to find, not a program."""

MAX_REPEAT = 1000
"""Largest `{n}` in an `expect` pattern: the regex module unrolls counts, (?:a{60000}){60000} took 24 GB."""


@dataclass
class Regex(Spec):
    """A Python regular expression."""

    doc: str = ""

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        value = Text(numbers=True).check(node, ctx)
        if value is INVALID:
            return INVALID
        if len(value) > MAX_PATTERN:
            return ctx.error(node, f"regular expression of {len(value):,} characters; at most {MAX_PATTERN:,}")
        counts = [int(number) for pair in re.findall(r"\{(\d*),?(\d*)\}", value) for number in pair if number]
        if any(count > MAX_REPEAT for count in counts):
            return ctx.error(node, f"regular expression {value!r} repeats {max(counts):,} times; at most {MAX_REPEAT:,} (matching a bigger count costs memory without end)")
        try:
            re.compile(value)
        except re.error as exc:
            return ctx.error(node, f"invalid regular expression {value!r}: {exc}")
        except (OverflowError, RecursionError, MemoryError, ValueError) as exc:
            return ctx.error(node, f"regular expression {value!r} is too large to compile ({type(exc).__name__})")
        return value

    def json_schema(self) -> dict:
        return _with_doc({"type": "string", "format": "regex"}, self.doc)


@dataclass
class ListOf(Spec):
    """A list of items of one spec, with at least `min_items` items."""

    item: Spec
    doc: str = ""
    min_items: int = 0

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        if not isinstance(node, yaml.SequenceNode):
            return ctx.error(node, f"expected a list, got {describe(node)}")
        if len(node.value) < self.min_items:
            noun = "item" if self.min_items == 1 else "items"
            return ctx.error(node, f"expected at least {self.min_items} {noun}, got {len(node.value)}")
        values = [self.item.check(child, ctx) for child in node.value]
        if any(v is INVALID for v in values):
            return INVALID
        return tuple(values)

    def json_schema(self) -> dict:
        schema: dict = {"type": "array", "items": self.item.json_schema()}
        if self.min_items:
            schema["minItems"] = self.min_items
        return _with_doc(schema, self.doc)


@dataclass
class Field:
    """One key of a record."""

    spec: Spec
    required: bool = False
    default: Any = None


@dataclass
class Fields:
    """What a record's builder receives: the checked values and the mark of each."""

    values: dict[str, Any]
    marks: dict[str, Mark]
    mark: Mark
    nodes: dict[str, yaml.Node]


@dataclass
class Record(Spec):
    """A mapping with declared keys, built into a model by `build`.

    `exclusive` lists groups of keys of which exactly one must be present.
    """

    name: str
    fields: dict[str, Field]
    build: Callable[[Fields, Context], Any]
    doc: str = ""
    exclusive: tuple[tuple[str, ...], ...] = ()

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        if not isinstance(node, yaml.MappingNode):
            return ctx.error(node, f"expected {self.name} (a mapping), got {describe(node)}")
        values: dict[str, Any] = {}
        marks: dict[str, Mark] = {}
        nodes: dict[str, yaml.Node] = {}
        ok = True
        suggested: set[str] = set()
        for key_node, value_node in node.value:
            key = scalar_value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                ctx.error(key_node, f"keys of {self.name} must be strings")
                ok = False
                continue
            if key in nodes:
                ctx.error(key_node, f"duplicate key {key!r} in {self.name}")
                ok = False
                continue
            spec_field = self.fields.get(key)
            if spec_field is None:
                guess = closest(key, self.fields)
                hint = f" (did you mean {guess!r}?)" if guess else ""
                suggested.add(guess or "")
                ctx.error(key_node, f"unknown key {key!r} in {self.name}{hint}")
                ok = False
                continue
            nodes[key] = value_node
            marks[key] = ctx.mark(value_node)
            value = spec_field.spec.check(value_node, ctx)
            ok = ok and value is not INVALID
            values[key] = value
        for key, spec_field in self.fields.items():
            if key in nodes:
                continue
            # A key of an exclusive group is required only as part of its group, checked below.
            if spec_field.required and not any(key in group for group in self.exclusive):
                if key not in suggested:  # a misspelt key already said "did you mean" this one
                    ctx.error(node, f"missing required key {key!r} in {self.name}")
                ok = False
            else:
                values[key] = spec_field.default
        for group in self.exclusive:
            present = [key for key in group if key in nodes]
            if len(present) != 1:
                keys = ", ".join(repr(k) for k in group)
                where = nodes[present[1]] if len(present) > 1 else node
                ctx.error(where, f"{self.name} needs exactly one of {keys}, got {len(present)}")
                ok = False
        if not ok:
            return INVALID
        return self.build(Fields(values, marks, ctx.mark(node), nodes), ctx)

    def json_schema(self) -> dict:
        schema: dict = {
            "type": "object",
            "additionalProperties": False,
            "properties": {key: f.spec.json_schema() for key, f in self.fields.items()},
        }
        required = [key for key, f in self.fields.items() if f.required]
        if required:
            schema["required"] = required
        if self.exclusive:
            schema["allOf"] = [
                {"oneOf": [{"required": [key]} for key in group]} for group in self.exclusive
            ]
        return _with_doc(schema, self.doc)


@dataclass
class Either(Spec):
    """Chooses a spec by the node's shape: a scalar, a mapping or a list."""

    scalar: Spec | None = None
    mapping: Spec | None = None
    sequence: Spec | None = None
    doc: str = ""
    expected: str = "a valid value"

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        if isinstance(node, yaml.MappingNode):
            spec = self.mapping
        elif isinstance(node, yaml.SequenceNode):
            spec = self.sequence
        else:
            spec = self.scalar
        if spec is None:
            return ctx.error(node, f"expected {self.expected}, got {describe(node)}")
        return spec.check(node, ctx)

    def json_schema(self) -> dict:
        options = [s.json_schema() for s in (self.scalar, self.mapping, self.sequence) if s is not None]
        return _with_doc({"anyOf": options}, self.doc)


@dataclass
class Constant(Spec):
    """Exactly one YAML scalar value, such as `false`."""

    value: Any
    doc: str = ""

    def check(self, node: yaml.Node, ctx: Context) -> Any:
        if isinstance(node, yaml.ScalarNode) and scalar_value(node) == self.value and type(scalar_value(node)) is type(self.value):
            return self.value
        return ctx.error(node, f"expected {yaml.safe_dump(self.value).splitlines()[0]}, got {describe(node)}")

    def json_schema(self) -> dict:
        return _with_doc({"const": self.value}, self.doc)


def _with_doc(schema: dict, doc: str) -> dict:
    if doc:
        schema["description"] = doc
    return schema


MARKDOWN = "Markdown: inline code, emphasis, links, `$…$` and `$$…$$` math (LaTeX, set as MathML)."


class Prose(Text):
    """Markdown text the page shows, whose every `$…$` and `$$…$$` formula converts to MathML."""

    def check(self, node, ctx: Context):
        # deferred: markdown-it and latex2mathml take ~0.1 s to load, and a build with nothing to parse never needs them
        from infralens.text.markdown import fetched, formulas, images
        from infralens.text.mathml import MalformedMath, to_mathml

        value = super().check(node, ctx)
        if value is INVALID:
            return INVALID
        ok = True
        for src in images(value):
            if fetched(src):
                where = re.compile(r"!\[[^\]]*\]\(\s*<?" + re.escape(src))
                ctx.problems.add(ctx.mark_within(node, where), f"image {src!r} would be fetched from the network; pages work offline, so show a file of the site")
                ok = False
        for formula in formulas(value):
            try:
                to_mathml(formula.latex, display=formula.display)
            except MalformedMath as exc:
                ctx.problems.add(ctx.mark_within(node, _written(formula)), f"malformed math {formula}: {exc}")
                ok = False
        return value if ok else INVALID


def _written(formula) -> re.Pattern[str]:
    """Match a formula as a manifest writes it, across the line breaks and indentation YAML folds."""
    dollars = re.escape(formula.markup)
    body = r"\s+".join(re.escape(part) for part in formula.latex.split())
    return re.compile(rf"(?<!\$){dollars}\s*{body}\s*{dollars}(?!\$)")


def parse_range(value: str) -> tuple[int, int] | None:
    """Parse 'A-B' or 'A' into 1-based inclusive line numbers, or None."""
    match = re.fullmatch(r"\s*(\d{1,9})\s*(?:-\s*(\d{1,9})\s*)?", value)
    if not match:
        return None
    first = int(match.group(1))
    last = int(match.group(2) or first)
    return (first, last) if 1 <= first <= last else None


# ------------------------------------------------------------------ declarations on models


