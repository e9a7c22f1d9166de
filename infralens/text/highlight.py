"""Highlight stage: starter text → per-line HTML, tokenized once per file.

Excerpts and the source view are cut from the same highlighted lines, so a file is tokenized once
per build; the load stage keeps the result on disk by `highlight_key`, so an unchanged file is not
tokenized again by a later build, check or serve.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import io
import keyword
import re
import sys
import tokenize
from functools import lru_cache
from html import escape
from pathlib import PurePosixPath

from infralens.text.python import syntax_tree
from infralens.text.source import SourceFile, SourceLine

# Pygments is imported where it is used: a build that only highlights Python never loads it.


# Starters are nearly always one of these. Looking a lexer up by alias is instant, while
# get_lexer_for_filename compiles the file-name patterns of every Pygments lexer (~0.4 s per build).
_ALIASES = {
    ".py": "python", ".md": "markdown", ".yml": "yaml", ".yaml": "yaml", ".json": "json",
    ".sh": "bash", ".toml": "toml", ".c": "c", ".h": "cpp", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp",
    ".hpp": "cpp", ".hh": "cpp", ".cu": "cuda", ".cuh": "cuda", ".txt": "text",
}


KINDS: tuple[tuple[str, str], ...] = (
    ("Keyword", "k"),
    ("Operator.Word", "k"),  # and, or, not, in, is read as keywords
    ("Name.Builtin", "b"),
    ("Name.Function", "f"),
    ("Name.Class", "f"),
    ("Name.Namespace", "f"),
    ("Name.Decorator", "f"),
    ("Name.Exception", "f"),
    ("Literal.String", "s"),
    ("Literal.Number", "m"),
    ("Comment", "c"),
    ("Generic.Heading", "h"),
    ("Generic.Subheading", "h"),
    ("Generic.Emph", "e"),
    ("Generic.Strong", "g"),
)
"""The kinds of token the theme colours, each a one-letter class, most specific Pygments type
first. Every other token (plain names, operators, punctuation: most of a Python file) is plain
text with no element; the spans of Pygments' own fine-grained classes were a third of a lab page."""

FORMAT = "9"
"""Version of the HTML highlight_lines writes; part of highlight_key, so a change re-highlights."""


def text_of(piece: str) -> str:
    """Code as the text of an element: only &, < and > escaped. Quotes need no escaping outside an
    attribute, and `&quot;` would cost 5 bytes a quote on every string of every lab page."""
    return escape(piece, quote=False)


@lru_cache(maxsize=None)
def token_kind(token_type) -> str:
    """Return the theme's class for a Pygments token type, or "" for plain text."""
    from pygments.token import string_to_tokentype

    for kind_type, kind in KINDS:
        if token_type in string_to_tokentype(kind_type):
            return kind
    return ""


def lexer_for(path: str):
    """Pick a Pygments lexer by file name; unknown kinds are shown as plain text."""
    from pygments.lexers import TextLexer, get_lexer_by_name, get_lexer_for_filename
    from pygments.util import ClassNotFound

    options = {"stripnl": False, "stripall": False, "ensurenl": False, "tabsize": 0}
    alias = _ALIASES.get(PurePosixPath(path).suffix.lower())
    try:
        return get_lexer_by_name(alias, **options) if alias else get_lexer_for_filename(path, **options)
    except ClassNotFound:
        return TextLexer(**options)


def merged(runs) -> list[tuple[str, str]]:
    """Join neighbouring (kind, text) runs of the same kind."""
    joined: list[tuple[str, str]] = []
    for kind, value in runs:
        if joined and joined[-1][0] == kind:
            joined[-1] = (kind, joined[-1][1] + value)
        else:
            joined.append((kind, value))
    return joined


_BUILTINS = frozenset(
    "__import__ abs aiter all anext any bin bool bytearray breakpoint bytes callable chr classmethod compile complex "
    "delattr dict dir divmod enumerate eval filter float format frozenset getattr globals hasattr hash hex id input int "
    "isinstance issubclass iter len list locals map max memoryview min next object oct open ord pow print property range "
    "repr reversed round set setattr slice sorted staticmethod str sum super tuple type vars zip "
    "self cls Ellipsis NotImplemented".split()
)
"""The names Pygments shows as builtins: the builtin functions and types, and its pseudo-builtins."""
_EXCEPTIONS = frozenset(
    name for name in dir(builtins) if isinstance(getattr(builtins, name), type) and issubclass(getattr(builtins, name), BaseException)
)
_MAGIC_VARIABLES = frozenset(
    "__annotations__ __bases__ __class__ __closure__ __code__ __defaults__ __dict__ __doc__ __file__ __func__ "
    "__globals__ __kwdefaults__ __module__ __mro__ __name__ __objclass__ __qualname__ __self__ __slots__ __weakref__".split()
)
_MAGIC_METHODS = frozenset(
    name for kind in (object, int, float, list, dict, set, type) for name in dir(kind) if name.startswith("__") and name.endswith("__")
) | frozenset(
    "__init__ __enter__ __exit__ __aenter__ __aexit__ __call__ __iter__ __next__ __aiter__ __anext__ __await__ __missing__ "
    "__del__ __get__ __set__ __delete__ __set_name__ __prepare__ __instancecheck__ __subclasscheck__ __fspath__ "
    "__matmul__ __rmatmul__ __imatmul__ __length_hint__ __bytes__".split()
)
_MAGIC_METHODS -= _MAGIC_VARIABLES


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def python_runs(text: str, *, fragment: bool = False) -> list[tuple[str, str]] | None:
    """Return Python source as (kind, text) runs, or None if it cannot tokenize it.

    The kinds Pygments gives (keywords, builtins, defined, imported and magic names, decorators,
    strings with their replacement fields, numbers, comments) in a fraction of the time:
    highlighting with Pygments' regexes was about 40% of a cold build. A file that parses is
    scanned by `scanned_tokens`, the standard library's tokenizer (pure Python, and a sixth of a
    cold build) only what does not parse; Pygments stays for every other language and for a file
    that does not tokenize (an unterminated string, say).
    """
    # A fragment (an f-string's replacement field) is parsed on its own: through the shared cache
    # of syntax trees it would push out the whole file's, which the regions and notebook read next.
    parses = _parses(text) if fragment else syntax_tree(text) is not None
    tokens = scanned_tokens(text) if parses else None
    if tokens is None:
        try:
            tokens = list(tokenized(text))
        except (tokenize.TokenError, SyntaxError):
            return None
    runs: list[tuple[str, str]] = []
    at = 0
    previous = ""  # the last NAME or OP, to tell a defined name, an attribute or a decorator
    statement_start = True
    importing = ""  # "from": the module of a from-import; "import": the names of an import
    decorating = False  # from a statement's leading @ to its first (
    for kind_of, start, end in tokens:
        if kind_of == tokenize.NEWLINE:
            statement_start, importing, previous, decorating = True, "", "", False
            continue
        if start > at:
            runs.append(("", text[at:start]))
        at = end
        value = text[start:end]
        if kind_of == tokenize.COMMENT:
            runs.append(("c", value))
            continue
        if kind_of == tokenize.OP:
            if value == "@" and statement_start:
                decorating = True
            elif value == "(":
                decorating = False
            # A dotted decorator or module name is one name, as Pygments has it.
            dotted = value == "." and (decorating or importing in ("from", "import"))
            runs.append(("f" if dotted or (value == "@" and decorating) else "", value))
            previous = value
            statement_start = value == ";"
            if value == ";":
                importing = ""
            continue
        if kind_of == tokenize.STRING:
            runs += fstring_runs(value) if _is_fstring(value) else [("s", value)]
        elif kind_of == tokenize.NUMBER:
            runs.append(("m", value))
        elif kind_of == tokenize.NAME:
            if value == "from" and statement_start:
                importing = "from"
            elif value == "import":
                importing = "" if importing == "from" else "import"
            runs.append(("f" if decorating else name_kind(value, previous, importing), value))
            previous = value
        else:
            runs.append(("", value))
        statement_start = False
    if at < len(text):
        runs.append(("", text[at:]))
    return runs


_RESETS = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


def tokenized(text: str):
    """The standard library tokenizer's tokens of text as (type, start, end) offsets: a statement's
    end (NEWLINE, INDENT, DEDENT, ENDMARKER) as NEWLINE, a line break inside one (NL) left out."""
    starts = [0]
    for line in io.StringIO(text):
        starts.append(starts[-1] + len(line))
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in _RESETS:
            yield tokenize.NEWLINE, 0, 0
        elif token.type != tokenize.NL:
            yield token.type, starts[token.start[0] - 1] + token.start[1], starts[token.end[0] - 1] + token.end[1]


_QUOTED = (
    "'''" r"(?:[^'\\]|\\[\s\S]|'(?!''))*" "'''",  # triple-quoted, any line breaks inside
    '"""' r'(?:[^"\\]|\\[\s\S]|"(?!""))*' '"""',
    r"'(?:[^'\\\n]|\\[\s\S])*'",  # one line, unless a backslash continues it
    r'"(?:[^"\\\n]|\\[\s\S])*"',
)
_SCAN = re.compile(
    r"(?P<space>[ \f\t]+|\\\r?\n)"  # blanks, and a backslash that continues the line
    r"|(?P<comment>#[^\r\n]*)"
    # Strings as the tokenizer reads them: a prefix, then a triple-quoted or a one-line string.
    rf"|(?P<string>[rRbBuUfF]{{0,2}}(?:{'|'.join(_QUOTED)}))"
    rf"|(?P<number>{tokenize.Number})"
    r"|(?P<newline>\r?\n|\r)"
    rf"|(?P<op>{'|'.join(map(re.escape, sorted(tokenize.EXACT_TOKEN_TYPES, key=len, reverse=True)))})"
    r"|(?P<name>\w+)"
)
_OPENS, _CLOSES = frozenset("([{"), frozenset(")]}")
_END = (tokenize.NEWLINE, 0, 0)
_SCANNED = {"comment": tokenize.COMMENT, "string": tokenize.STRING, "number": tokenize.NUMBER, "op": tokenize.OP, "name": tokenize.NAME}


def scanned_tokens(text: str) -> list[tuple[int, int, int]] | None:
    """The tokens `tokenized` gives, for a file that parses, from one regular expression: the
    tokenizer's own number and operator patterns, its strings, and its rule for a statement's end
    (a line break outside brackets after a token that is not a comment). None if some text is
    none of these (the tokenizer then reads it). tests/text holds the two equal on every starter
    and on the standard library's own modules."""
    tokens: list[tuple[int, int, int]] = []
    depth = 0
    pending = False  # the logical line has a token: its line break ends a statement
    at = 0
    for found in _SCAN.finditer(text):
        start, end = found.span()
        if start != at:
            return None  # something between two matches is none of them
        at = end
        group = found.lastgroup
        if group == "space":
            continue
        if group == "newline":
            if pending and not depth:
                tokens.append(_END)
                pending = False
            continue
        kind = _SCANNED[group]  # type: ignore[index]
        if kind == tokenize.OP:
            char = text[start]
            if char in _OPENS:
                depth += 1
            elif char in _CLOSES:
                depth -= 1
        if kind != tokenize.COMMENT:
            pending = True
        tokens.append((kind, start, end))
    if at != len(text):
        return None
    return tokens


def name_kind(name: str, previous: str, importing: str) -> str:
    """Return the theme kind of a name, from the name and the token before it."""
    if keyword.iskeyword(name):
        return "k"
    if previous in ("def", "class") or importing:
        return "f"
    if previous == ".":
        return "f" if name in _MAGIC_METHODS else ""
    if name in _EXCEPTIONS:
        return "f"
    if name in _BUILTINS:
        return "b"
    return "f" if name in _MAGIC_METHODS else ""


def _is_fstring(token: str) -> bool:
    prefix = token[: len(token) - len(token.lstrip("rRbBuUfF"))]
    return "f" in prefix.lower()


def fstring_runs(token: str) -> list[tuple[str, str]]:
    """Split an f-string into string runs and its replacement fields' expressions, highlighted as
    Python, as Pygments does (Python 3.11's tokenizer gives an f-string as one token)."""
    runs: list[tuple[str, str]] = []
    at = i = 0
    while i < len(token):
        char = token[i]
        if char in "{}" and token[i : i + 2] in ("{{", "}}"):
            i += 2
            continue
        if char != "{":
            i += 1
            continue
        runs.append(("s", token[at : i + 1]))
        end = _field_end(token, i + 1)
        expression = token[i + 1 : end]
        runs += python_runs(expression, fragment=True) or [("", expression)]
        close = _matching_brace(token, end)
        runs.append(("s", token[end:close]))
        at = i = close
    runs.append(("s", token[at:]))
    return [run for run in runs if run[1]]


def _field_end(token: str, i: int) -> int:
    """Return where a replacement field's expression ends: at its top-level `!`, `:` or `}`."""
    depth = 0
    quote = ""
    while i < len(token):
        char = token[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "}" and depth:
            depth -= 1
        elif depth == 0 and (char in ":}" or (char == "!" and token[i + 1 : i + 2] != "=")):
            return i
        i += 1
    return i


def _matching_brace(token: str, i: int) -> int:
    """Return the index just past the `}` that closes the field whose conversion or spec starts at i."""
    depth = 1
    while i < len(token):
        if token[i] == "{":
            depth += 1
        elif token[i] == "}":
            depth -= 1
            if not depth:
                return i + 1
        i += 1
    return i


def highlight_lines(path: str, text: str) -> tuple[tuple[str, ...], str]:
    """Return the HTML of each line of `text`, and the language name."""
    runs = python_runs(text) if PurePosixPath(path).suffix.lower() == ".py" else None
    if runs is not None:
        language = "Python"
    else:
        lexer = lexer_for(path)
        runs = [(token_kind(token_type), value) for token_type, value in lexer.get_tokens(text)]
        language = lexer.name
    lines: list[str] = []
    current: list[str] = []
    for kind, value in merged(runs):
        pieces = value.split("\n")
        for index, piece in enumerate(pieces):
            if index:
                lines.append("".join(current))
                current = []
            if piece:
                # A kind is one or two letters: its attribute needs no quotes (2 bytes a token, a page
                # carries hundreds), and <b> is the shortest element that may hold it (its weight is
                # reset by the theme): 9 bytes a token fewer than a <span>, a tenth of a lab page's code.
                current.append(f"<b class={kind}>{text_of(piece)}</b>" if kind else text_of(piece))
    lines.append("".join(current))
    count = len(text.split("\n"))
    return tuple(lines[:count]), language


def highlight_key(path: str, text: str) -> str:
    """Name what highlighting depends on: the highlighter's version (Python's for .py files,
    Pygments' for the rest), the file's kind and the content."""
    suffix = PurePosixPath(path).suffix.lower()
    if suffix == ".py":
        highlighter = "tokenize " + ".".join(map(str, sys.version_info[:2]))
    else:
        from importlib.metadata import version

        highlighter = "pygments " + version("pygments")
    digest = hashlib.sha256(f"{FORMAT}\0{highlighter}\0{suffix}\0".encode())
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
        SourceLine(number, raw, html_lines[number - 1] if number - 1 < len(html_lines) else text_of(raw))
        for number, raw in enumerate(raw_lines, start=1)
    )
    return SourceFile(path, text, lines, language)
