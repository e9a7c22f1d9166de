"""Resolve stage: a lab's preview selector and key blocks + its starter's lines → an Excerpt.

Pure: takes the highlighted SourceFile, returns an Excerpt or records problems that point at the
manifest line. Never falls back to the whole file and never returns an empty excerpt.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from infralens.errors import Mark, Note, Problem, Problems, did_you_mean
from infralens.lab.features import manifest_problems
from infralens.model.lab import Lab
from infralens.model.resolved import Excerpt, KeyBlock, Part
from infralens.model.schema import parse_range
from infralens.model.starter import KeyBlockSpec, Selector
from infralens.text.highlight import source_file
from infralens.text.languages import language_of, symbol_languages
from infralens.text.markdown import outline
from infralens.text.regions import region_markers
from infralens.text.source import SourceFile, SourceLine


def select_lines(source: SourceFile, selector: Selector, problems: Problems) -> tuple[int, int] | None:
    """Return the real (first, last) line numbers the selector names, or None with a problem added."""
    select = {"region": _region, "symbol": _symbol, "lines": _line_range, "heading": _heading}[selector.kind]
    found = select(source, selector.value, selector.mark)
    if isinstance(found, Problem):
        problems.extend([found])
        return None
    return found


def _region(source: SourceFile, name: str, mark: Mark) -> tuple[int, int] | Problem:
    language = language_of(source.path)
    opening, closing = (language.start_marker, language.end_marker) if language is not None else ("# region", "# endregion")
    stack: list[tuple[str, int]] = []
    spans: list[tuple[int, int]] = []
    names: list[str] = []
    for marker in region_markers(source.path, source.text):
        if marker.end:
            if not stack:
                return Problem(mark, f"'{closing}' without a matching '{opening}' in {source.path}", (Note(Mark(source.path, marker.line), f"this '{closing}' closes no region"),))
            opened, start = stack.pop()
            if opened == name:
                spans.append((start + 1, marker.line - 1))
        else:
            stack.append((marker.name, marker.line))
            names.append(marker.name)
    if stack:
        opened, start = stack[-1]
        return Problem(mark, f"region {opened!r} is never closed with '{closing}'", (Note(Mark(source.path, start), f"region {opened!r} opens here"),))
    if not spans:
        known = ", ".join(repr(n) for n in names) or "none"
        return Problem(mark, f"region {name!r} not found in {source.path} (regions there: {known})")
    if len(spans) > 1:
        return Problem(mark, f"region {name!r} occurs {len(spans)} times in {source.path}; region names must be unique")
    return spans[0]


def _symbol(source: SourceFile, name: str, mark: Mark) -> tuple[int, int] | Problem:
    language = language_of(source.path)
    if language is None or language.grammar is None:
        kind = f"a {language.name} file" if language is not None else "in no language a symbol can be found in"
        return Problem(mark, f"symbol selects a definition in {symbol_languages()}, but {source.path} is {kind}; use region or lines")
    if language.grammar != "python":
        return _c_symbol(source, name, mark, language.grammar)
    try:
        tree = ast.parse(source.text, filename=source.path)
    except SyntaxError as exc:
        return Problem(mark, f"cannot parse {source.path}: {exc.msg}", (Note(Mark(source.path, exc.lineno or 1, exc.offset or 1), exc.msg),))
    except (MemoryError, RecursionError, ValueError) as exc:  # nesting or chains too deep for the parser
        return Problem(mark, f"cannot parse {source.path}: too deeply nested for Python's parser ({type(exc).__name__})")
    scope: list[ast.stmt] = tree.body
    node = None
    for part in name.split("."):
        node = next(
            (n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part),
            None,
        )
        if node is None:
            defined = sorted(
                n.name for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            )
            return Problem(mark, f"symbol {name!r} not found in {source.path}{did_you_mean(part, defined)}")
        scope = node.body
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return first, node.end_lineno or node.lineno


def _c_symbol(source: SourceFile, name: str, mark: Mark, grammar: str) -> tuple[int, int] | Problem:
    """A C++ or CUDA definition by its name or qualified name (`push`, `BoundedQueue::push`)."""
    from infralens.text.clike import definitions, matching  # deferred: tree-sitter loads only for a C++ or CUDA symbol

    found = definitions(source.text, grammar)
    hits = matching(found, name)
    if not hits:
        return Problem(mark, f"symbol {name!r} not found in {source.path}{did_you_mean(name, sorted({d.name for d in found} | {d.name.rsplit('::', 1)[-1] for d in found}))}")
    if len(hits) > 1:
        listed = ", ".join(f"{d.name} ({d.kind}, {f'line {d.first}' if d.first == d.last else f'lines {d.first}-{d.last}'})" for d in hits)
        return Problem(
            mark,
            f"symbol {name!r} names {len(hits)} definitions in {source.path}: {listed}; select one with lines or a region",
            tuple(Note(Mark(source.path, d.first), f"{d.name} is defined here") for d in hits),
        )
    return hits[0].first, hits[0].last


def _line_range(source: SourceFile, value: str, mark: Mark) -> tuple[int, int] | Problem:
    first, last = parse_range(value)  # the manifest stage already checked the shape
    if last > len(source.lines):
        return Problem(mark, f"lines {first}-{last} are past the end of {source.path} ({len(source.lines)} lines)")
    return first, last


def _heading(source: SourceFile, title: str, mark: Mark) -> tuple[int, int] | Problem:
    headings = outline(source.text).headings
    hits = [h for h in headings if h.title == title]
    if not hits:
        return Problem(mark, f"heading {title!r} not found in {source.path}{did_you_mean(title, [h.title for h in headings])}")
    if len(hits) > 1:
        return Problem(mark, f"heading {title!r} occurs {len(hits)} times in {source.path} (lines {', '.join(str(h.line) for h in hits)})")
    start = hits[0]
    end = next((h.line - 1 for h in headings if h.line > start.line and h.level <= start.level), len(source.lines))
    return start.line, end


def cut_excerpt(source: SourceFile, first: int, last: int) -> tuple[SourceLine, ...]:
    """Return lines first..last without marker lines and without blank lines at either end."""
    hidden = {marker.line for marker in region_markers(source.path, source.text)}
    lines = [line for line in source.lines[first - 1 : last] if line.number not in hidden]
    while lines and not lines[0].text.strip():
        lines.pop(0)
    while lines and not lines[-1].text.strip():
        lines.pop()
    return tuple(lines)


def slugify(name: str) -> str:
    """Turn a key-block name into an id fragment: 'Setup / contract' → 'setup-contract'."""
    slug = re.sub(r"[^a-z0-9_]+", "-", name.lower()).strip("-")
    return slug or "block"


@dataclass(frozen=True)
class Unbound:
    """Why a key block's lines cannot be bound in one excerpt; `several` when its text matches
    more than one line there (a walkthrough then reports that step's own problem)."""

    problem: Problem
    several: bool = False


def bind_lines(lines: tuple[SourceLine, ...], spec: KeyBlockSpec, where: str) -> tuple[int, int] | Unbound:
    """Return the real (first, last) lines a key block names inside the excerpt, or why it can't."""
    binding = spec.lines
    shown = f"{where}:{lines[0].number}-{lines[-1].number}"
    if binding.kind == "range":
        numbers = {line.number for line in lines}
        if binding.first < lines[0].number or binding.last > lines[-1].number:
            return Unbound(Problem(spec.mark, f"key block {spec.name!r}: lines {binding.first}-{binding.last} are outside the excerpt ({shown})"))
        if binding.first not in numbers or binding.last not in numbers:
            return Unbound(Problem(spec.mark, f"key block {spec.name!r}: lines {binding.first}-{binding.last} start or end on a hidden marker line"))
        return binding.first, binding.last
    hits = [line for line in lines if binding.text in line.text]
    if not hits:
        return Unbound(Problem(spec.mark, f"key block {spec.name!r}: text {binding.text!r} matches no line of the excerpt ({shown})"))
    if len(hits) > 1:
        numbers = ", ".join(str(line.number) for line in hits)
        return Unbound(Problem(
            spec.mark,
            f"key block {spec.name!r}: text {binding.text!r} matches {len(hits)} lines of the excerpt "
            f"(lines {numbers}); quote more of the line so it matches exactly one",
        ), several=True)
    first = hits[0].number
    if binding.kind == "text":
        return first, first
    end = next((line for line in lines if line.number >= first and binding.until in line.text), None)
    if end is None:
        return Unbound(Problem(spec.mark, f"key block {spec.name!r}: 'to' text {binding.until!r} matches no line at or after line {first} of the excerpt ({shown})"))
    return first, end.number


def part_prefix(lab: Lab, starter: str) -> str:
    """What the ids of a step's lines start with: '' for the previewed starter, 's2-' for the lab's
    second starter (when it is not the previewed one), so two files' line 12 keep apart."""
    if starter == lab.previewed:
        return ""
    return f"s{next(i for i, s in enumerate(lab.starters, start=1) if s.path == starter)}-"


def resolve_excerpt(lab: Lab, sources: dict[str, SourceFile], problems: Problems) -> Excerpt | None:
    """Cut the lab's preview (every step of a walkthrough) from its starters and bind every key
    block to real lines of one step."""
    parts: list[Part] = []
    for number, step in enumerate(lab.steps, start=1):
        source = sources[step.starter]
        span = select_lines(source, step.selector, problems)
        if span is None:
            continue
        lines = cut_excerpt(source, *span)
        if not lines:
            problems.add(step.selector.mark, f"{step.selector.kind} {step.selector.value!r} selects no code in {source.path}")
            continue
        clash = next((p for p in parts if p.starter == step.starter and p.first <= lines[-1].number and lines[0].number <= p.last), None)
        if clash is not None:
            problems.add(step.selector.mark, f"step {number} (lines {lines[0].number}-{lines[-1].number} of {step.starter}) overlaps step {parts.index(clash) + 1} (lines {clash.first}-{clash.last}); a line is shown once")
            continue
        parts.append(Part(step.starter, lines, step.title, part_prefix(lab, step.starter)))
    if len(parts) != len(lab.steps):
        return None
    blocks: list[KeyBlock] = []
    slugs: set[str] = set()
    for spec in lab.key_blocks:
        bound = bind_block(parts, spec)
        if isinstance(bound, Problem):
            problems.extend([bound])
            continue
        at, first, last = bound
        base = slug = slugify(spec.name)
        suffix = 1
        while slug in slugs:  # 'a/b' and 'a b' both slugify to 'a-b'
            suffix += 1
            slug = f"{base}-{suffix}"
        slugs.add(slug)
        blocks.append(KeyBlock(name=spec.name, slug=slug, note=spec.note, first=first, last=last, ordinal=len(blocks) + 1, state=spec.state, starter=parts[at].starter, part=at, meaning=spec.meaning, derived=spec.derived))
    excerpt = Excerpt(tuple(parts), tuple(blocks))
    problems.extend(manifest_problems(lab, excerpt, sources[lab.previewed]))
    return excerpt


def bind_block(parts: list[Part], spec: KeyBlockSpec) -> tuple[int, int, int] | Problem:
    """Bind a key block to lines of one step: (step position, first, last), or why it cannot be."""
    if len(parts) == 1:
        bound = bind_lines(parts[0].lines, spec, parts[0].starter)
        return bound.problem if isinstance(bound, Unbound) else (0, *bound)
    # parse.py made sure a key block's `starter` is a step's.
    places = [i for i, part in enumerate(parts) if spec.starter is None or part.starter == spec.starter]
    found = [(i, bind_lines(parts[i].lines, spec, parts[i].starter)) for i in places]
    hits = [(i, bound) for i, bound in found if not isinstance(bound, Unbound)]
    shown = ", ".join(f"{parts[i].starter}:{parts[i].first}-{parts[i].last}" for i in places)
    if not hits:
        binding = spec.lines
        what = f"lines {binding.first}-{binding.last}" if binding.kind == "range" else f"text {binding.text!r}"
        several = [bound.problem for _, bound in found if bound.several]
        if several:  # many lines within one step: that step's own problem says which
            return several[0]
        return Problem(spec.mark, f"key block {spec.name!r}: {what} matches no line of the walkthrough ({shown})")
    if len(hits) > 1:
        where = "; ".join(f"step {i + 1} ({parts[i].starter}, line {bound[0]})" for i, bound in hits)
        fix = "give its line number" if len({parts[i].starter for i, _ in hits}) == 1 else "name its file with `starter:`"
        return Problem(spec.mark, f"key block {spec.name!r}: its lines match in {len(hits)} steps ({where}); quote more of the line or {fix}")
    i, (first, last) = hits[0]
    return i, first, last


def plain_excerpt(lab: Lab, texts: dict[str, str]) -> Excerpt | None:
    """The lab's excerpt from its starters' texts alone (what `check` needs: no highlighting), or
    None when it cannot be cut: the build reports why."""

    if any(step.starter not in texts for step in lab.steps):
        return None
    sources = {path: source_file(path, text, ((), "text")) for path, text in texts.items()}  # the lines alone, not highlighted
    problems = Problems()
    excerpt = resolve_excerpt(lab, sources, problems)
    return None if excerpt is None or problems else excerpt


