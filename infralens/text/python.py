"""Python syntax of a starter, parsed once per text: several stages read the same file.

Pure. The region markers and a starter's notebook both need the syntax tree of the
same text in the same render; it is parsed once (the last few texts are kept), never mutated.
"""

from __future__ import annotations

import ast
from functools import lru_cache


@lru_cache(maxsize=8)
def syntax_tree(text: str) -> ast.Module | None:
    """The text's syntax tree; None if it does not parse. Shared: read it, never change it."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


@lru_cache(maxsize=8)
def string_lines(text: str) -> frozenset[int] | None:
    """The lines that continue a string literal begun on an earlier line (a triple-quoted string,
    an f-string, or literals joined across lines); None if the text does not parse."""
    tree = syntax_tree(text)
    if tree is None:
        return None
    lines: set[int] = set()
    for node in ast.walk(tree):
        kind = type(node)
        if kind is ast.JoinedStr or kind is ast.Constant and isinstance(node.value, (str, bytes)):  # type: ignore[attr-defined]
            end = node.end_lineno or node.lineno  # type: ignore[attr-defined]
            if end != node.lineno:  # type: ignore[attr-defined]
                lines.update(range(node.lineno + 1, end + 1))  # type: ignore[attr-defined]
    return frozenset(lines)
