"""Math in prose: one `$…$` or `$$…$$` formula → MathML, and the markdown-it rules that find them.

Pure: one formula → a MathML `<math>` element as text, or `MalformedMath` saying why not
(markdown.formulas finds a text's formulas with the same parser the pages use). The manifest schema
converts every formula once so a bad one is reported at its line; the render stage converts them
again into the page, so no formula that reaches a page can fail there.

A build keeps each converted formula in its cache folder (`keep_in`), keyed by this module's code
and the converter's installed files: an edit of a lab whose formulas the last build converted loads
no converter (latex2mathml and the modules it loads are a tenth of a second).
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element

    from markdown_it import MarkdownIt


class MalformedMath(ValueError):
    """A formula that cannot be set as MathML; the message says why."""


MATH_TOKENS = {"math_inline": False, "math_inline_double": True, "math_block": True}
"""markdown-it token types the dollarmath rules produce, and whether each is display math."""


@lru_cache(maxsize=1)
def reasons() -> dict[type[Exception], str]:
    """What each of latex2mathml's exceptions means to a writer (they carry no message).

    Loaded on the first formula: the package loads importlib.metadata as it is imported."""
    from latex2mathml import exceptions as latex_errors

    return {
        latex_errors.NoAvailableTokensError: "it ends too early (a command is missing an argument, or \\left its \\right)",
        latex_errors.MissingSuperScriptOrSubscriptError: "^ or _ has nothing after it",
        latex_errors.ExtraLeftOrMissingRightError: "\\left and \\right do not pair up",
        latex_errors.MissingEndError: "\\begin has no matching \\end",
        latex_errors.DoubleSuperscriptsError: "double superscript",
        latex_errors.DoubleSubscriptsError: "double subscript",
        latex_errors.NumeratorNotFoundError: "a fraction has no numerator",
        latex_errors.DenominatorNotFoundError: "a fraction has no denominator",
        latex_errors.InvalidAlignmentError: "invalid column alignment",
        latex_errors.InvalidStyleForGenfracError: "invalid \\genfrac style",
        latex_errors.InvalidWidthError: "invalid width",
        latex_errors.LimitsMustFollowMathOperatorError: "\\limits must follow an operator such as \\sum",
    }


REFUSED = frozenset({r"\href", r"\class", r"\style"})
"""Commands that copy their argument into an HTML attribute (a link, a class, inline CSS)."""

ARGUMENTS = {"mfrac": 2, "mroot": 2, "msub": 2, "msup": 2, "msubsup": 3, "munder": 2, "mover": 2, "munderover": 3}
"""MathML elements with a fixed number of children; fewer means latex2mathml let a missing argument through."""

_CHARACTER_REFERENCE = re.compile(r"&amp;#x([0-9A-Fa-f]+);")
_ESCAPED = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_COMMAND = re.compile(r"\\(?:[A-Za-z]+|.?)")
_TEXT_ESCAPE = re.compile(r"\\([%_$&#])")


def add_math(md: MarkdownIt) -> MarkdownIt:
    """Teach a markdown-it parser `$…$` and `$$…$$`, rendered as MathML; return the parser."""
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    md.use(
        dollarmath_plugin,
        # Pandoc's rule, so prose about money stays prose: no space just inside the dollars, and
        # no digit just outside them ("$5 and $6" is not math; "$x$5" is not either).
        allow_space=False,
        allow_digits=False,
        allow_labels=False,
        allow_blank_lines=False,
        double_inline=True,  # `$$…$$` inside a paragraph is display math, not `$` + `$…$` + `$`
    )
    for token_type, display in MATH_TOKENS.items():
        md.add_render_rule(token_type, _math_rule(display))
    return md


def _math_rule(display: bool):
    def render(self, tokens, idx, options, env) -> str:
        mathml = to_mathml(tokens[idx].content.strip(), display=display)
        return mathml + "\n" if tokens[idx].type == "math_block" else mathml

    return render


KEPT: list[Path] = []
"""The folder converted formulas are kept in between builds, when a build named one (`keep_in`)."""

FORMAT = "mathml-1"
"""Version of how a kept formula is stored, part of its key."""


def keep_in(folder: Path | None) -> None:
    """Keep converted formulas in `folder` (None: keep none), for this process and the workers it starts."""
    KEPT[:] = [folder] if folder is not None else []


@lru_cache(maxsize=1)
def converter_key() -> str:
    """Identify how a formula is converted: this module's code and the converter's installed files
    (name, size and mtime of each), found without importing it."""
    from importlib.util import find_spec

    parts = [FORMAT.encode(), Path(__file__).read_bytes()]
    spec = find_spec("latex2mathml")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda entry: entry.name):
                if entry.is_file():
                    info = entry.stat()
                    parts.append(f"{entry.name}\0{info.st_size}\0{info.st_mtime_ns}".encode())
    return hashlib.blake2b(b"\0".join(parts), digest_size=16).hexdigest()


@lru_cache(maxsize=4096)  # validation converts every formula, then rendering asks for it again
def to_mathml(latex: str, *, display: bool) -> str:
    """Convert one formula to a MathML `<math>` element; raise MalformedMath if it is not sound TeX."""
    if problem := brace_problem(latex):
        raise MalformedMath(problem)
    if not KEPT:
        return converted(latex, display)
    key = hashlib.blake2b(f"{converter_key()}\0{display}\0{latex}".encode(), digest_size=16).hexdigest()
    path = KEPT[0] / key[:2] / f"{key}.html"
    try:
        kept = path.read_text(encoding="utf-8")
        if kept.startswith("<math") and kept.endswith("</math>"):  # a damaged file (truncated, say) is a miss
            return kept
    except (OSError, UnicodeDecodeError):
        pass
    mathml = converted(latex, display)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_text(mathml, encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        pass  # a cache that cannot be written only costs the next build a conversion
    return mathml


def converted(latex: str, display: bool) -> str:
    """Convert one formula whose braces pair up (see to_mathml)."""
    # deferred: the converter loads ~0.1 s of modules (its symbol table, xml.sax, importlib.metadata), and prose with no formula needs none
    from xml.etree.ElementTree import tostring

    from latex2mathml.converter import convert_to_element
    from latex2mathml.tokenizer import tokenize

    try:
        refused = sorted(REFUSED.intersection(tokenize(latex)))
        if refused:
            raise MalformedMath(f"{refused[0]} is not allowed: it writes its argument into the page's HTML")
        element = convert_to_element(latex, display="block" if display else "inline")
    except MalformedMath:
        raise
    except Exception as exc:  # latex2mathml also fails with IndexError, StopIteration… on odd input
        raise MalformedMath(reasons().get(type(exc), f"latex2mathml cannot convert it ({type(exc).__name__})")) from exc
    for node in element.iter("mtext"):
        # latex2mathml copies \text{…} verbatim, escapes included: "50\%" would show its backslash.
        node.text = node.text and _TEXT_ESCAPE.sub(r"\1", node.text)
    check_tree(element)
    # latex2mathml stores symbols as character references ("&#x02211;") in element text; the
    # serializer escapes them with everything else, so only those are turned back, into the
    # characters themselves (a page is UTF-8; "∑" is 3 bytes, its reference 10). `<`, `>` and `&`
    # stay escaped, as does any the writer typed (in \text{…}, say). The namespace is left out:
    # an HTML parser puts <math> in MathML's by itself, and a page carries many formulas.
    element.attrib.pop("xmlns", None)
    return _CHARACTER_REFERENCE.sub(_character, tostring(element, encoding="unicode"))


def _character(match: re.Match[str]) -> str:
    character = chr(int(match.group(1), 16))
    return _ESCAPED.get(character, character)


def brace_problem(latex: str) -> str | None:
    """Say what is wrong with the formula's `{` `}` pairing, or None when they pair up."""
    depth = 0
    escaped = False
    for char in latex:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                return "unbalanced braces (a } closes nothing)"
    return "unbalanced braces (a { is never closed)" if depth else None


def check_tree(element: Element) -> None:
    """Raise MalformedMath for what latex2mathml converts without complaint but TeX rejects."""
    for node in element.iter():
        if node.text and (command := _COMMAND.search(node.text)):
            # latex2mathml writes a command it does not know as its own name.
            name = command.group()
            if node.tag == "mtext":
                raise MalformedMath(f"{name} inside \\text{{…}} is not supported; write it outside the text")
            raise MalformedMath(f"unknown command {name}" if len(name) > 1 else "a lone \\ starts no command")
        if node.tag in ARGUMENTS and len(node) < ARGUMENTS[node.tag]:
            raise MalformedMath("a command is missing an argument")
