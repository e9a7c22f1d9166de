"""Markdown: the one parser of prose and of Markdown starters (markdown-it-py).

CommonMark with tables and `$…$` / `$$…$$` math, raw HTML shown as text. Pages render prose with
it (render.py), the schema finds every formula with it (`formulas`) to check it converts, and a Markdown starter's
headings, fenced blocks and code spans come from it: the excerpt a `heading:` selects, the python
blocks `check` runs and the names search indexes all follow the same rules as the page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.token import Token

from infralens.text.mathml import MATH_TOKENS, add_math


@lru_cache(maxsize=1)
def parser() -> MarkdownIt:
    """Return the configured parser (made once per process: it is pure, and costs a millisecond to make)."""

    # html=False: raw HTML in a manifest is shown as text, never passed through.
    md = add_math(MarkdownIt("commonmark", {"html": False, "typographer": False}).enable("table"))
    image = md.renderer.rules["image"]

    def offline_image(renderer, tokens, index, options, env) -> str:
        # A page fetches nothing from the network: an image from elsewhere becomes a link to it.
        # (The manifest check refuses one in prose; this covers every other field.)
        token = tokens[index]
        src = token.attrGet("src") or ""
        if not fetched(src):
            return image(tokens, index, options, env)
        alt = md.renderer.renderInlineAsText(token.children or [], options, env) or src
        return f'<a href="{escapeHtml(src)}">{escapeHtml(alt)}</a>'

    md.add_render_rule("image", offline_image)
    return md


@lru_cache(maxsize=512)
def block_tokens(text: str) -> tuple[tuple[Token, ...], dict]:
    """Return Markdown text parsed as a block, with the environment its parse filled (link
    references), once per text: a page renders a field and its search document reads the same
    tokens. Shared: read them, never change them (rendering only sets an image's alt again)."""
    env: dict = {}
    return tuple(parser().parse(text, env)), env


def render_block(text: str) -> str:
    """Return Markdown text rendered as a block (paragraphs, lists, tables, math)."""
    return _rendered(*block_tokens(text))


@lru_cache(maxsize=512)
def inline_tokens(text: str) -> tuple[tuple[Token, ...], dict]:
    """Return Markdown text parsed inline (no block rules), with its environment, once per text:
    a page renders a field inline and its search document reads the same tokens (see
    `one_paragraph`). Shared: read them, never change them."""
    env: dict = {}
    return tuple(parser().parseInline(text, env)), env


def render_inline(text: str) -> str:
    """Return Markdown text rendered inline, as markdown-it's renderInline does."""
    return _rendered(*inline_tokens(text))


def _rendered(tokens: tuple[Token, ...], env: dict) -> str:
    """Render shared tokens: a copy of the list and of the environment, never the cached ones."""
    md = parser()
    return md.renderer.render(list(tokens), md.options, dict(env))


_BLOCK_START = re.compile(r"^ {0,3}(?:[#>*+=_:|\[<$`~\s-]|\d+[.)])", re.MULTILINE)
"""A line that could open or end a block other than a paragraph (a heading, quote, list, rule,
setext underline, table, fence, math block, link definition, HTML, indented code): with none, and
no blank line, the text is one paragraph."""


def one_paragraph(text: str) -> bool:
    """Whether block parsing makes the text one paragraph whose inline tokens are those inline
    parsing gives (the words a search document takes are then the same either way). Conservative:
    any line that might start another block, a blank line or a tab says no."""
    return "\t" not in text and "\r" not in text and not _BLOCK_START.search(text) and not _BLANK_LINE.search(text.strip())


_BLANK_LINE = re.compile(r"\n[ ]*\n")


def fetched(src: str) -> bool:
    """Say whether an image source would be fetched from the network (a scheme or `//host`), not
    from the site itself or a data: URL."""
    return src.startswith("//") or (bool(URL_SCHEME.match(src)) and not src.lower().startswith("data:"))


URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def images(text: str) -> tuple[str, ...]:
    """Return the source of every image of Markdown text, as block or inline rendering would find it."""
    if "![" not in text:
        return ()
    md = parser()
    found: dict[str, None] = {}
    for token in [*md.parse(text), *md.parseInline(text)]:
        for child in token.children or ():
            if child.type == "image":
                found.setdefault(child.attrGet("src") or "", None)
    return tuple(found)


@dataclass(frozen=True)
class Heading:
    """A heading of a Markdown file."""

    line: int
    """1-based line of the heading."""
    level: int
    title: str


@dataclass(frozen=True)
class Fence:
    """A fenced code block of a Markdown file."""

    line: int
    """1-based line of its first line of code."""
    language: str
    """The first word of its info string, lowercased ('python', 'text', '')."""
    code: str


@dataclass(frozen=True)
class Outline:
    """What a Markdown starter holds besides prose."""

    headings: tuple[Heading, ...]
    fences: tuple[Fence, ...]
    code_spans: tuple[str, ...]
    """The text of every inline code span, in order."""


def outline(text: str) -> Outline:
    """Return the headings, fenced blocks and code spans of a Markdown file, as the page would parse it."""
    tokens = parser().parse(text)
    headings, fences, spans = [], [], []
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and token.map:
            headings.append(Heading(token.map[0] + 1, int(token.tag[1]), tokens[index + 1].content.strip()))
        elif token.type == "fence" and token.map:
            language = token.info.split()[0].lower() if token.info.strip() else ""
            fences.append(Fence(token.map[0] + 2, language, token.content))
        elif token.type == "inline":
            spans += [child.content for child in token.children or () if child.type == "code_inline"]
    return Outline(tuple(headings), tuple(fences), tuple(spans))


@dataclass(frozen=True)
class Formula:
    """A formula as the prose writes it."""

    latex: str
    """The TeX between the dollars, without surrounding whitespace."""
    display: bool
    """True for `$$…$$`, set on a line of its own; False for `$…$`, set within the line."""

    @property
    def markup(self) -> str:
        return "$$" if self.display else "$"

    def __str__(self) -> str:
        # One line, as an error message quotes it, even when a `$$` block spans several.
        return f"{self.markup}{' '.join(self.latex.split())}{self.markup}"


def formulas(text: str) -> tuple[Formula, ...]:
    """Return the formulas of Markdown text, each once, as block or inline rendering would find them."""
    if "$" not in text:
        return ()
    md = parser()
    found: dict[Formula, None] = {}
    # A field may be rendered either way (`md` or `mdi`), and they differ: an indented line is a
    # code block only to block rendering. Checking both covers whichever the templates choose.
    for token in [*md.parse(text), *md.parseInline(text)]:
        for child in [token, *(token.children or ())]:
            if child.type in MATH_TOKENS:
                found.setdefault(Formula(child.content.strip(), MATH_TOKENS[child.type]), None)
    return tuple(found)


PYTHON = ("python", "py", "python3")
"""Info strings of the fenced blocks `check` runs."""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """Return (first line number, code) of each fenced python block of a Markdown file."""
    return [(fence.line, fence.code) for fence in outline(text).fences if fence.language in PYTHON]
