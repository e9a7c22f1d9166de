"""A starter's text as the pages use it: its lines, each with its real number and highlighted HTML.

Records only, so a module can name them without loading the highlighter."""

from __future__ import annotations

from dataclasses import dataclass


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
