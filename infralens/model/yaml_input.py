"""Reading YAML safely: manifest text → a composed node tree, or problems.

A manifest is plain YAML: tags, merge keys, nesting past MAX_DEPTH and aliases that expand a file
past MAX_NODES values or MAX_TEXT characters are refused at their line before anything is built."""

from __future__ import annotations

import yaml

from infralens.errors import Mark
from infralens.model.schema import Context

MAX_DEPTH = 64
"""Deepest nesting of lists and mappings a manifest may have (libyaml's composer recurses in C)."""


MAX_NODES = 100_000
"""Most values a manifest may expand to, aliases counted each time they are used."""


MAX_TEXT = 1_000_000
"""Most characters of text a manifest may expand to through aliases (a real one has a few thousand)."""


def compose(text: str, ctx: Context) -> yaml.Node | None:
    """Parse YAML text into a node tree, reporting a syntax error at its mark.

    The text is screened first (see `screen`): what YAML allows but a manifest must not use never
    reaches the composer.
    """
    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        if not screen(text, ctx, loader_class):
            return None
        node = yaml.compose(text, Loader=loader_class)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = f"YAML syntax error: {exc.problem or exc.context or 'invalid YAML'}"
        if exc.problem and exc.context and exc.context_mark and exc.context_mark.line + 1 != line:
            # libyaml notices a problem where parsing fails, often a line after the cause.
            message += f" ({exc.context} that starts at line {exc.context_mark.line + 1})"
        ctx.problems.add(Mark(ctx.path, line, col), message)
        return None
    except yaml.reader.ReaderError as exc:
        ctx.problems.add(_position(ctx.path, text, exc.position), f"YAML syntax error: unacceptable character #x{exc.character:04x}: {exc.reason}")
        return None
    except yaml.YAMLError as exc:
        ctx.problems.add(Mark(ctx.path), f"YAML syntax error: {' '.join(str(exc).split())}")
        return None
    if node is None:
        ctx.problems.add(Mark(ctx.path), "file is empty")
    return node


def _position(path: str, text: str, index: int) -> Mark:
    """Return the line and column of a character index of text."""
    before = text[:index]
    return Mark(path, before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1)


def screen(text: str, ctx: Context, loader_class) -> bool:
    """Refuse, at their marks, the parts of YAML a manifest has no use for and that break or swamp a parser.

    One pass over the parser's events, before any node is built: explicit tags (`!!python/…`,
    `!foo`, `!!int abc`), merge keys (`<<`), nesting deeper than MAX_DEPTH, more than MAX_NODES
    values once aliases are expanded, integers too long to convert and dates that do not exist.
    """
    resolver = yaml.resolver.Resolver()
    depth = 0
    expanded = 0  # values, aliases expanded
    chars = 0  # characters of scalar text, aliases expanded
    anchors: dict[str, tuple[int, int]] = {}
    open_anchors: list[tuple[str | None, int, int]] = []
    ok = True

    def refuse(event, message: str) -> None:
        nonlocal ok
        ctx.problems.add(Mark(ctx.path, event.start_mark.line + 1, event.start_mark.column + 1), message)
        ok = False

    for event in yaml.parse(text, Loader=loader_class):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            expanded += 1
            if depth > MAX_DEPTH:
                refuse(event, f"lists and mappings nest deeper than {MAX_DEPTH} levels")
                return False
            open_anchors.append((event.anchor, expanded, chars))
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
            anchor, start, start_chars = open_anchors.pop()
            if anchor:
                anchors[anchor] = (expanded - start + 1, chars - start_chars)
        elif isinstance(event, yaml.AliasEvent):
            values, text_size = anchors.get(event.anchor, (1, 0))
            expanded += values
            chars += text_size
        elif isinstance(event, yaml.ScalarEvent):
            expanded += 1
            chars += len(event.value)
            if event.anchor:
                anchors[event.anchor] = (1, len(event.value))
            if event.implicit[0] and event.value == "<<":
                refuse(event, "merge keys (<<) are not supported; write the keys out")
            elif event.implicit[0]:
                _check_plain(event, resolver, refuse)
        else:
            continue
        tag = getattr(event, "tag", None)
        if tag not in (None, "!") and not (isinstance(event, yaml.ScalarEvent) and event.implicit[0]):
            refuse(event, f"YAML tags are not supported ({_short(tag)}); write the plain value")
        if expanded > MAX_NODES or chars > MAX_TEXT:
            refuse(event, f"the file expands to more than {MAX_NODES:,} values or {MAX_TEXT:,} characters (through aliases); write it out plainly")
            return False
    return ok


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


def _check_plain(event, resolver, refuse) -> None:
    """Refuse a plain scalar that YAML reads as a value Python cannot hold: a huge integer, an impossible date."""
    tag = resolver.resolve(yaml.ScalarNode, event.value, (True, False))
    if tag == "tag:yaml.org,2002:int" and len(event.value) > 1000:
        refuse(event, f"a number of {len(event.value):,} characters is too long")
    elif tag == "tag:yaml.org,2002:timestamp":
        try:
            yaml.constructor.SafeConstructor().construct_yaml_timestamp(yaml.ScalarNode(tag, event.value))
        except ValueError as exc:
            refuse(event, f"{event.value!r} reads as a date that does not exist ({exc}); quote it to make it text")
