"""Region markers: the `# region NAME` / `# endregion` lines editors fold, found in a starter's text.

Pure: a file's path and text → its marker lines, each with its region's name (or the end). In a
Python file a marker is a comment the tokenizer finds alone on its line, never text inside a
string, so a starter that prints or tests marker-like text keeps it; in other files (Markdown's
`<!-- region x -->`, `// region` in C-like code) a marker is a whole line of that shape.
"""

from __future__ import annotations

import functools
import io
import re
import tokenize
from dataclasses import dataclass

from infralens.text.python import string_lines

_MARKER = re.compile(r"^\s*(?:#|//|<!--)\s*(?P<end>end)?region\b\s*(?P<name>[^\s>-][^>]*?)?\s*(?:-->)?\s*$")


@dataclass(frozen=True)
class RegionMarker:
    """One marker line: where it is, and whether it opens (a region's name) or closes a region."""

    line: int
    """Its 1-based line number in the file."""
    end: bool
    """True for `# endregion`."""
    name: str
    """The region it opens ('' for an end, or an opening without a name)."""


def region_markers(path: str, text: str) -> tuple[RegionMarker, ...]:
    """Return the file's marker lines in order: comments alone on their line in Python, whole lines elsewhere."""
    return _markers(path.endswith(".py"), text)


@functools.lru_cache(maxsize=64)
def _markers(python: bool, text: str) -> tuple[RegionMarker, ...]:
    """The markers of a text, once per text (one starter listed under several spellings, or cut
    for both its excerpt and its notebook, is read once). Lines shaped like a marker are found
    first; Python's tokenizer, which is slow on a long file, runs only when one of them may be
    inside a string."""
    lines = text.split("\n")
    shaped = [number for number, line in enumerate(lines, 1) if "region" in line and _MARKER.match(line)]
    if not shaped:
        return ()
    if python:
        inside = string_lines(text)
        # In a file that parses, a line that starts with `#` and continues no string is a comment
        # (a string is the only token a line can continue): the tokenizer is asked only otherwise.
        if inside is None or any(number in inside for number in shaped):
            comments = _python_comment_lines(text)
            if comments is not None:
                alone = set(comments)
                shaped = [number for number in shaped if number in alone]
        else:  # `// region` is code in Python (a floor division continued from the line above)
            shaped = [number for number in shaped if lines[number - 1].lstrip().startswith("#")]
    found = []
    for number in shaped:
        match = _MARKER.match(lines[number - 1])
        found.append(RegionMarker(number, bool(match.group("end")), (match.group("name") or "").strip() if not match.group("end") else ""))
    return tuple(found)


def _python_comment_lines(text: str) -> list[int] | None:
    """The lines holding nothing but a comment, by Python's tokenizer; None if it cannot read the
    text (then every line counts, as in other languages: the starter's own run reports the error)."""
    try:
        return [
            token.start[0]
            for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type == tokenize.COMMENT and not token.line[: token.start[1]].strip()
        ]
    except (tokenize.TokenError, SyntaxError):
        return None
