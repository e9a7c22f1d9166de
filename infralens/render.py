"""Render stage: resolved labs → HTML pages as (output path, text) pairs.

Pure: Jinja2 templates from templates/ (autoescape on, StrictUndefined), markdown-it-py for prose
with raw HTML escaped, Pygments lines from the highlight stage. Nothing here touches output/.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

import jinja2
from markdown_it import MarkdownIt
from markupsafe import Markup

from infralens.mathml import add_math
from infralens.models import SECTIONS, KeyBlock, Lab, ResolvedLab, RunResult, Site, SourceFile, Starter


@dataclass(frozen=True)
class Badge:
    """The numbered mark on the first line of a key block, linking to its note."""

    ordinal: int
    name: str
    href: str


@dataclass(frozen=True)
class CodeRow:
    """A line as a page shows it: number, highlighted HTML, the key blocks bound to it."""

    number: int
    html: Markup
    slugs: tuple[str, ...]
    """Slugs of the key blocks whose lines include this one."""
    badges: tuple[Badge, ...]
    """Badges of the key blocks that start on this line."""
    gap_before: bool
    """True when lines were left out just above (a hidden marker), so the numbers jump."""


@dataclass(frozen=True)
class Binding:
    """A key block of some lab bound to lines of a starter, for the source view."""

    lab: Lab
    block: KeyBlock


@dataclass(frozen=True)
class Page:
    """A rendered page and where it goes under output/."""

    path: str
    html: str


def lab_url(lab_id: str) -> str:
    """Path of a lab page under output/."""
    return f"labs/{lab_id}/index.html"


def source_url(starter_path: str) -> str:
    """Path of a starter's source view under output/."""
    return f"{starter_path}.html"


def artifact_url(lab_id: str, name: str) -> str:
    """Path under output/ of a file a lab's last run wrote."""
    return f"runs/{lab_id}/{name}"


def root_prefix(page_path: str) -> str:
    """Relative path from a page back to the site root, so pages also work from file://."""
    return "../" * (len(PurePosixPath(page_path).parts) - 1)


def code_rows(lines, bindings: tuple[tuple[KeyBlock, str], ...]) -> tuple[CodeRow, ...]:
    """Pair each shown line with the key blocks bound to it; each binding is (block, note URL)."""
    rows = []
    previous = None
    for line in lines:
        bound = [(b, href) for b, href in bindings if b.first <= line.number <= b.last]
        badges = tuple(Badge(b.ordinal, b.name, href) for b, href in bound if b.first == line.number)
        gap = previous is not None and line.number != previous + 1
        rows.append(CodeRow(line.number, Markup(line.html), tuple(b.slug for b, _ in bound), badges, gap))
        previous = line.number
    return tuple(rows)


def identifier_like(name: str) -> bool:
    """Say whether a key-block name reads as code (`kv_cache_bytes`, `a / b`) rather than a role."""
    parts = [part.strip() for part in name.split("/")]
    return all(re.fullmatch(r"[A-Za-z_][\w.]*(\(\))?", part) for part in parts) and any(
        "_" in part or "." in part or part.endswith("()") for part in parts
    )


class Renderer:
    """Holds the template environment and the Markdown parser for one build."""

    def __init__(self, templates: Path, compiled: Path | None = None) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(templates),
            # Compiled templates kept on disk, keyed by each template's source: a one-shot build
            # spends more time compiling the templates than rendering with them.
            bytecode_cache=jinja2.FileSystemBytecodeCache(str(compiled)) if compiled else None,
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        # html=False: raw HTML in a manifest is shown as text, never passed through. Math becomes
        # MathML here, at build time: pages need no script to show it.
        self.markdown = add_math(MarkdownIt("commonmark", {"html": False, "typographer": False}).enable("table"))
        self.env.filters["md"] = self.block_markdown
        self.env.filters["mdi"] = self.inline_markdown
        self.env.globals["lab_url"] = lab_url
        self.env.globals["source_url"] = source_url
        self.env.globals["artifact_url"] = artifact_url
        self.env.tests["identifier_like"] = identifier_like
        self.env.filters["recorded_in"] = lambda path, runs: runs.get(path)

    def block_markdown(self, text: str) -> Markup:
        return Markup(self.markdown.render(text))

    def inline_markdown(self, text: str) -> Markup:
        return Markup(self.markdown.renderInline(text))

    def render_site(
        self,
        site: Site,
        labs: tuple[ResolvedLab, ...],
        sources: dict[str, SourceFile],
        runs: dict[str, RunResult],
        only: frozenset[str] | None = None,
    ) -> list[Page]:
        """Render the site's pages; `runs` holds the recorded run of each starter's current version.

        With `only`, render just the index and the pages of those labs (their lab pages and source
        views): what a change to their starters can affect.
        """
        ordered = [r.lab for r in labs]
        # The navigation is the same on every lab page except for which entry is current, so it is
        # rendered once and the current entry marked by a string replacement: rendering it inside
        # each page's template grows as N² with the number of labs.
        nav = self.env.get_template("nav.html").render(site=site, labs=ordered, root="../../")
        pages = [Page("index.html", self.env.get_template("index.html").render(site=site, labs=ordered, runs=runs, root=""))]
        bindings: dict[str, list[Binding]] = {path: [] for path in sources}
        for index, resolved in enumerate(labs):
            lab = resolved.lab
            for block in resolved.excerpt.key_blocks:
                bindings[resolved.excerpt.starter].append(Binding(lab, block))
            if only is not None and lab.id not in only:
                continue
            page_nav = nav.replace(f'href="../../{lab_url(lab.id)}"', f'href="../../{lab_url(lab.id)}" aria-current="page"', 1)
            previous_lab = ordered[index - 1] if index > 0 else None
            next_lab = ordered[index + 1] if index + 1 < len(ordered) else None
            pages.append(self.render_lab(site, resolved, runs, Markup(page_nav), previous_lab, next_lab))
        owners = {starter.path: (lab, starter) for lab in ordered for starter in lab.starters}
        for path, source in sources.items():
            lab, starter = owners[path]
            if only is not None and lab.id not in only:
                continue
            pages.append(self.render_source(site, lab, starter, source, tuple(bindings[path])))
        return pages

    def render_lab(
        self, site: Site, resolved: ResolvedLab, runs: dict[str, RunResult], nav: Markup, previous_lab: Lab | None, next_lab: Lab | None
    ) -> Page:
        """Render one lab page with its eleven sections in order."""
        lab, excerpt = resolved.lab, resolved.excerpt
        path = lab_url(lab.id)
        sections = [(sid, eyebrow, lab.section_title(sid)) for sid, eyebrow, _ in SECTIONS]
        html = self.env.get_template("lab.html").render(
            site=site,
            lab=lab,
            excerpt=excerpt,
            runs=runs,
            rows=code_rows(excerpt.lines, tuple((b, f"#kb-{b.slug}") for b in excerpt.key_blocks)),
            sections=sections,
            nav=nav,
            previous_lab=previous_lab,
            next_lab=next_lab,
            root=root_prefix(path),
        )
        return Page(path, html)

    def render_source(self, site: Site, lab: Lab, starter: Starter, source: SourceFile, bindings: tuple[Binding, ...]) -> Page:
        """Render a starter's whole file with addressable lines and its bound lines marked."""
        path = source_url(source.path)
        root = root_prefix(path)
        notes = tuple((b.block, f"{root}{lab_url(b.lab.id)}#kb-{b.block.slug}") for b in bindings)
        html = self.env.get_template("source.html").render(
            site=site,
            lab=lab,
            starter=starter,
            source=source,
            rows=code_rows(source.lines, notes),
            bindings=bindings,
            root=root,
            raw_name=PurePosixPath(source.path).name,
        )
        return Page(path, html)


@lru_cache(maxsize=4)
def renderer_for(templates: Path, compiled: Path | None = None) -> Renderer:
    """Return the Renderer of a templates folder, kept for the life of the process.

    Compiling the templates is a third of a small site's build; `serve` rebuilds in one process, so
    it compiles them once, and `compiled` keeps them on disk for the next process. Jinja re-reads
    a template whose file changed, so edits still show.
    """
    return Renderer(templates, compiled)
