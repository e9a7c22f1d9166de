"""Python syntax of a starter, parsed once per text: several stages read the same file.

Pure. The region markers and a starter's notebook both need the syntax tree of the
same text in the same render; it is parsed once (the last few texts are kept), never mutated.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import NamedTuple


@lru_cache(maxsize=8)
def syntax_tree(text: str) -> ast.Module | None:
    """The text's syntax tree; None if it does not parse. Shared: read it, never change it."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


class SyntaxFacts(NamedTuple):
    """What the stages ask of a text's syntax tree, found in one walk of it."""

    string_lines: frozenset[int]
    """The lines that continue a string literal begun on an earlier line (a triple-quoted string,
    an f-string, or literals joined across lines)."""
    names_its_file: bool
    """Whether it names `__file__`, an attribute `spawn` or the string "spawn": a program that
    starts processes importing it by its file (multiprocessing's spawn), or reads its own file."""


@lru_cache(maxsize=8)
def syntax_facts(text: str) -> SyntaxFacts | None:
    """The facts of a text that parses (one walk of its tree serves them all); None if it does not."""
    tree = syntax_tree(text)
    if tree is None:
        return None
    lines: set[int] = set()
    names_its_file = False
    for node in ast.walk(tree):
        kind = type(node)
        if kind is ast.Constant:
            value = node.value  # type: ignore[attr-defined]
            if isinstance(value, (str, bytes)):
                end = node.end_lineno or node.lineno  # type: ignore[attr-defined]
                if end != node.lineno:  # type: ignore[attr-defined]
                    lines.update(range(node.lineno + 1, end + 1))  # type: ignore[attr-defined]
                names_its_file = names_its_file or value == "spawn"
        elif kind is ast.JoinedStr:
            end = node.end_lineno or node.lineno  # type: ignore[attr-defined]
            if end != node.lineno:  # type: ignore[attr-defined]
                lines.update(range(node.lineno + 1, end + 1))  # type: ignore[attr-defined]
        elif kind is ast.Name:
            names_its_file = names_its_file or node.id == "__file__"  # type: ignore[attr-defined]
        elif kind is ast.Attribute:
            names_its_file = names_its_file or node.attr == "spawn"  # type: ignore[attr-defined]
    return SyntaxFacts(frozenset(lines), names_its_file)


def string_lines(text: str) -> frozenset[int] | None:
    """The lines that continue a string literal begun on an earlier line (see SyntaxFacts); None
    if the text does not parse."""
    facts = syntax_facts(text)
    return None if facts is None else facts.string_lines
