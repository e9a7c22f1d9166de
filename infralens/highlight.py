"""Highlight stage: starter text → per-line HTML, tokenized once per file.

Excerpts and the source view are cut from the same highlighted lines, so a file is tokenized once
per build; the load stage keeps the result on disk by `highlight_key`, so an unchanged file is not
tokenized again by a later build, check or serve.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import PurePosixPath
from html import escape

import pygments
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_by_name, get_lexer_for_filename
from pygments.token import Token
from pygments.util import ClassNotFound

from infralens.models import SourceFile, SourceLine


# Starters are nearly always one of these. Looking a lexer up by alias is instant, while
# get_lexer_for_filename compiles the file-name patterns of every Pygments lexer (~0.4 s per build).
_ALIASES = {
    ".py": "python", ".md": "markdown", ".yml": "yaml", ".yaml": "yaml", ".json": "json",
    ".sh": "bash", ".toml": "toml", ".c": "c", ".h": "c", ".cpp": "cpp", ".cu": "cuda", ".txt": "text",
}


KINDS: tuple[tuple[object, str], ...] = (
    (Token.Keyword, "k"),
    (Token.Operator.Word, "k"),  # and, or, not, in, is read as keywords
    (Token.Name.Builtin, "b"),
    (Token.Name.Function, "f"),
    (Token.Name.Class, "f"),
    (Token.Name.Namespace, "f"),
    (Token.Name.Decorator, "f"),
    (Token.Name.Exception, "f"),
    (Token.Literal.String, "s"),
    (Token.Literal.Number, "m"),
    (Token.Comment, "c"),
    (Token.Generic.Heading, "h"),
    (Token.Generic.Subheading, "h"),
    (Token.Generic.Emph, "e"),
    (Token.Generic.Strong, "g"),
)
"""The kinds of token the theme colours, each a one-letter class, most specific Pygments type
first. Every other token (plain names, operators, punctuation: most of a Python file) is plain
text with no span; the spans of Pygments' own fine-grained classes were a third of a lab page."""

FORMAT = "4"
"""Version of the HTML highlight_lines writes; part of highlight_key, so a change re-highlights."""


@lru_cache(maxsize=None)
def token_kind(token_type) -> str:
    """Return the theme's class for a Pygments token type, or "" for plain text."""
    for kind_type, kind in KINDS:
        if token_type in kind_type:
            return kind
    return ""


def lexer_for(path: str) -> Lexer:
    """Pick a lexer by file name; unknown kinds are shown as plain text."""
    options = {"stripnl": False, "stripall": False, "ensurenl": False, "tabsize": 0}
    alias = _ALIASES.get(PurePosixPath(path).suffix.lower())
    try:
        return get_lexer_by_name(alias, **options) if alias else get_lexer_for_filename(path, **options)
    except ClassNotFound:
        return TextLexer(**options)


def merged(tokens) -> list[tuple[str, str]]:
    """Turn Pygments tokens into (kind, text) runs, neighbours of the same kind joined."""
    runs: list[tuple[str, str]] = []
    for token_type, value in tokens:
        kind = token_kind(token_type)
        if runs and runs[-1][0] == kind:
            runs[-1] = (kind, runs[-1][1] + value)
        else:
            runs.append((kind, value))
    return runs


def highlight_lines(path: str, text: str) -> tuple[tuple[str, ...], str]:
    """Return the HTML of each line of `text`, and the language name."""
    lexer = lexer_for(path)
    lines: list[str] = []
    current: list[str] = []
    for kind, value in merged(lexer.get_tokens(text)):
        pieces = value.split("\n")
        for index, piece in enumerate(pieces):
            if index:
                lines.append("".join(current))
                current = []
            if piece:
                current.append(f'<span class="{kind}">{escape(piece)}</span>' if kind else escape(piece))
    lines.append("".join(current))
    count = len(text.split("\n"))
    return tuple(lines[:count]), lexer.name


def highlight_key(path: str, text: str) -> str:
    """Name what highlighting depends on: Pygments' version, the lexer's choice and the content."""
    digest = hashlib.sha256(f"{FORMAT}\0{pygments.__version__}\0{PurePosixPath(path).suffix.lower()}\0".encode())
    digest.update(text.encode())
    return digest.hexdigest()[:32]


def source_file(path: str, text: str, highlighted: tuple[tuple[str, ...], str] | None = None) -> SourceFile:
    """Return a starter as numbered lines, highlighting it unless `highlighted` is given."""
    html_lines, language = highlighted or highlight_lines(path, text)
    raw_lines = text.split("\n")
    if raw_lines and raw_lines[-1] == "":
        # A final newline ends the last line; it does not start another one.
        raw_lines.pop()
    lines = tuple(
        SourceLine(number, raw, html_lines[number - 1] if number - 1 < len(html_lines) else escape(raw))
        for number, raw in enumerate(raw_lines, start=1)
    )
    return SourceFile(path, text, lines, language)
