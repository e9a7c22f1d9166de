"""Render stage: resolved labs → HTML pages as (output path, text) pairs.

Pure: Jinja2 templates of the theme (the packaged one, overridden file by file by a site's own
templates/; autoescape on, StrictUndefined), markdown-it-py for prose
with raw HTML escaped, Pygments lines from the highlight stage. Nothing here touches output/.
"""

from __future__ import annotations

import html

import re
import traceback
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import jinja2
from markupsafe import Markup

from infralens.errors import InputError, Mark, Problem
from infralens.lab.calculators import (
    CalcView,
    chart_file,
)
from infralens.lab.features import published
from infralens.lab.notebooks import has_notebook, notebook_path
from infralens.lab.questions import Answered
from infralens.lab.state import (
    STATE_FILE,
    PageState,
    block_table,
)
from infralens.model.lab import KINDS, Lab
from infralens.model.resolved import KeyBlock, ResolvedLab
from infralens.model.run import RunResult, first_runs
from infralens.model.site import Site
from infralens.model.starter import Starter, command_line
from infralens.text.languages import language_of
from infralens.text.markdown import parser, render_block, render_inline
from infralens.text.source import SourceFile
from infralens.urls import artifact_url, href, lab_url, practice_url, source_url


@dataclass(frozen=True)
class Badge:
    """The numbered mark on the first line of a key block, linking to its note."""

    ordinal: int
    name: str
    href: str


@dataclass(kw_only=True, frozen=True)
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
    hint: str = ""
    """The value the checked run recorded this line holding (`→ 524,288`), if any."""
    indent: int = 0
    """The line's leading indentation in columns, when it is long enough to wrap (WRAPS): a wrapped
    line's later rows hang under its code, not under its number."""

    @property
    def classes(self) -> str:
        """The row's classes: `bound` (a note's line), `gap` (lines left out above) and `i8`, its
        indentation to a multiple of 4 (INDENTS), which a wrapped line's later rows hang under."""
        hang = min(self.indent // 4 * 4, INDENTS)
        if not (self.slugs or self.gap_before or hang):
            return ""  # most rows: asked once per row of every listing
        return " ".join(name for name, on in (("bound", self.slugs), ("gap", self.gap_before), (f"i{hang}", hang)) if on)


INDENTS = 16
"""Deepest indentation the theme hangs a wrapped line under (its .i4 … .i16 classes)."""


WRAPS = 78
"""Columns (code and value hint together) past which a line may wrap: the narrowest listing that
wraps (48rem wide) holds about 80, so shorter lines never do and carry no indentation to weigh."""


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





def text(value: str) -> Markup:
    """A value as the text of an element: &, < and > escaped, quotes left as they are (autoescape
    writes ' as &#39;, 5 bytes where 1 does, on every string a recorded value holds)."""
    return Markup(html.escape(str(value), quote=False))


def quoted(value: str) -> Markup:
    """A value inside a double-quoted attribute: as `text`, and " escaped."""
    return Markup(html.escape(str(value), quote=False).replace('"', "&quot;"))


def root_prefix(page_path: str) -> str:
    """Relative path from a page back to the site root, so pages also work from file://."""
    return "../" * (len(PurePosixPath(page_path).parts) - 1)


def code_rows(lines, bindings: tuple[tuple[KeyBlock, str], ...], state: PageState | None = None) -> tuple[CodeRow, ...]:
    """Pair each shown line with the key blocks bound to it (each binding is (block, note URL))
    and the value hint of its recorded state."""
    rows = []
    previous = None
    opened = ""
    for line in lines:
        bound = [(b, href) for b, href in bindings if b.first <= line.number <= b.last]
        badges = tuple(Badge(b.ordinal, b.name, href) for b, href in bound if b.first == line.number)
        gap = previous is not None and line.number != previous + 1
        recorded = state.lines.get(line.number) if state is not None else None
        hint = recorded.hint if recorded else ""
        if recorded and recorded.kind == "call":
            opened = hint
        elif recorded and recorded.kind == "return" and hint == opened:
            hint = ""  # its function's `def` line above already shows this return, with the same words
        text = line.text.expandtabs(4)
        indent = len(text) - len(text.lstrip(" ")) if len(text) + len(hint) + 2 > WRAPS else 0
        rows.append(CodeRow(number=line.number, html=Markup(line.html), slugs=tuple(b.slug for b, _ in bound), badges=badges, gap_before=gap, hint=hint, indent=indent))
        previous = line.number
    return tuple(rows)


SAMPLE_LINES = 30
SAMPLE_BYTES = 448
"""A lab page shows the end of its run's output: at most this many lines, and bytes, of it."""


def sample_lines(stdout: str, runs: int = 1) -> list[str]:
    """The last lines of a run's output a lab page shows: up to SAMPLE_LINES lines and SAMPLE_BYTES
    bytes (the last line always), so a report of wide tables does not crowd the page's budget. A
    starter's `runs` (one per device) share those bytes, so a GPU run adds no weight of samples."""
    lines = stdout.rstrip().split("\n")
    kept: list[str] = []
    size = 0
    for line in reversed(lines[-SAMPLE_LINES:]):
        size += len(line.encode()) + 1
        if kept and size > SAMPLE_BYTES // max(1, runs):
            break
        kept.append(line)
    return kept[::-1]


def identifier_like(name: str) -> bool:
    """Say whether a key-block name reads as code (`kv_cache_bytes`, `a / b`) rather than a role."""
    parts = [part.strip() for part in name.split("/")]
    return all(re.fullmatch(r"[A-Za-z_][\w.]*(\(\))?", part) for part in parts) and any(
        "_" in part or "." in part or part.endswith("()") for part in parts
    )


class KeptIfWritable(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept on disk while the cache folder can take them: a full or read-only
    cache costs a build the compiling again, never the build (as the workspace's own caches)."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


class Renderer:
    """Holds the template environment and the Markdown parser of one process."""

    def __init__(self, templates: tuple[Path, ...] | Path, compiled: Path | None = None) -> None:
        folders = (templates,) if isinstance(templates, Path) else templates
        self.folders = folders
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader([str(folder) for folder in folders]),
            # Compiled templates kept on disk, keyed by each template's source: a one-shot build
            # spends more time compiling the templates than rendering with them.
            bytecode_cache=KeptIfWritable(str(compiled)) if compiled else None,
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        # The one Markdown parser (markdown.py): raw HTML is shown as text, math becomes MathML here,
        # at build time, so pages need no script to show it.
        self.markdown = parser()
        self.env.filters["md"] = self.block_markdown
        self.env.filters["mdi"] = self.inline_markdown
        self.env.globals["lab_url"] = lab_url
        self.env.globals["kinds"] = KINDS
        self.env.filters["href"] = href
        self.env.filters["text"] = text
        self.env.filters["quoted"] = quoted
        self.env.globals["source_url"] = source_url
        self.env.globals["practice_url"] = practice_url
        self.env.globals["artifact_url"] = artifact_url
        self.env.globals["chart_file"] = chart_file
        self.env.globals["notebook_path"] = notebook_path
        self.env.globals["has_notebook"] = has_notebook
        self.env.globals["command_line"] = command_line
        self.env.globals["code_language"] = language_of
        self.env.tests["identifier_like"] = identifier_like
        self.env.filters["recorded_in"] = lambda path, runs: runs.get(path)
        self.env.filters["sample_lines"] = sample_lines

    def block_markdown(self, text: str) -> Markup:
        return Markup(render_block(text))

    def inline_markdown(self, text: str) -> Markup:
        return Markup(render_inline(text))

    def template(self, name: str, **context) -> str:
        """Render one template, turning template mistakes into errors that name the template line."""
        try:
            return self.env.get_template(name).render(**context)
        except jinja2.TemplateSyntaxError as exc:
            raise InputError([Problem(Mark(self.shown(exc.filename or exc.name or name), exc.lineno or 1), f"template syntax error: {exc.message}")]) from None
        except jinja2.TemplateNotFound as exc:
            raise InputError([Problem(Mark(self.shown(str(self.folders[0]))), f"template not found: {exc.name}")]) from None
        except jinja2.UndefinedError as exc:
            frame = next((f for f in reversed(traceback.extract_tb(exc.__traceback__)) if f.filename.endswith((".html", ".svg"))), None)
            mark = Mark(self.shown(frame.filename), frame.lineno or 1) if frame else Mark(self.shown(str(self.folders[0])))
            raise InputError([Problem(mark, f"template error: {exc.message}")]) from None

    def shown(self, filename: str) -> str:
        """Name a template file as errors should: relative to the folder above its templates folder."""
        path = Path(filename).resolve()
        for folder in self.folders:
            if path.is_relative_to(folder.resolve()):
                return f"{folder.name}/{path.relative_to(folder.resolve()).as_posix()}"
        return filename

    def render_index(self, site: Site, labs: list, runs: dict[str, RunResult]) -> str:
        """Render the index: every lab by track, with its run status, and the handbook map."""
        return self.template("index.html", site=site, labs=labs, runs=runs, root="")

    def render_lab_pages(self, site: Site, resolved: ResolvedLab, sources: dict[str, SourceFile], every_run: dict[tuple[str, str], RunResult], nav) -> list[Page]:
        """Render a lab's page and the source view of each of its starters, from the stored result
        of each run of its starters, by (path, device)."""
        lab = resolved.lab
        excerpt = resolved.excerpt
        runs = first_runs(lab.starters, every_run)
        shown = published(lab, runs, excerpt, sources)
        problems = [problem for one in shown.values() for problem in one.problems]
        if problems:  # a calculator that disagrees with its starter, an answer the run does not give: not published
            raise InputError(problems)
        state, calculators, answered = shown["state"].view, shown["calculators"].view, shown["questions"].view
        folder = PurePosixPath(lab_url(lab.id)).parent
        pages = [self.render_lab(site, resolved, every_run, nav, state, calculators, {name: one.view for name, one in shown.items()})]
        if answered:
            pages.append(self.render_practice(site, resolved, nav, answered))
        pages += [Page(path, text) for one in shown.values() for path, text in one.files]
        for view in calculators:
            if view.chart is not None:
                pages.append(Page(f"{folder}/{chart_file(view.calc.id)}", self.template("calc_chart.svg", chart=view.chart)))
        for starter in lab.starters:
            previewed = starter.path == excerpt.starter
            own = tuple(block for block in excerpt.key_blocks if block.starter == starter.path)
            pages.append(self.render_source(site, lab, starter, sources[starter.path], tuple(Binding(lab, block) for block in own), state if previewed else None))
        return pages

    def render_lab(
        self,
        site: Site,
        resolved: ResolvedLab,
        every_run: dict[tuple[str, str], RunResult],
        nav,
        state: PageState | None = None,
        calculators: tuple[CalcView, ...] = (),
        features: dict[str, Any] | None = None,
    ) -> Page:
        """Render one lab page with its sections in order, and each run's result by (path, device).
        `features` is each page feature's view by its NAME, for the partials that show it."""
        lab, excerpt = resolved.lab, resolved.excerpt
        path = lab_url(lab.id)
        sections = lab.sections()
        html = self.template(
            "lab.html",
            site=site,
            lab=lab,
            excerpt=excerpt,
            runs=first_runs(lab.starters, every_run),
            every_run=every_run,
            parts=tuple(
                (part, code_rows(part.lines, tuple((b, f"#kb-{b.slug}") for b in excerpt.key_blocks if b.part == at), state if part.starter == excerpt.starter else None))
                for at, part in enumerate(excerpt.parts)
            ),
            state=state,
            state_tables={b.slug: block_table(state, b) if b.starter == excerpt.starter else None for b in excerpt.key_blocks},
            state_file=STATE_FILE,
            calculators=calculators,
            features=features or {},
            sections=sections,
            nav=nav,
            previous_lab=nav.previous,
            next_lab=nav.next,
            root=root_prefix(path),
        )
        return Page(path, html)

    def render_practice(self, site: Site, resolved: ResolvedLab, nav, answered: tuple[Answered, ...]) -> Page:
        """Render a lab's practice page: its questions, each answer from the checked run."""
        lab = resolved.lab
        path = practice_url(lab.id)
        html = self.template(
            "practice.html",
            site=site,
            lab=lab,
            answered=answered,
            blocks_by_name={block.name: block for block in resolved.excerpt.key_blocks},
            nav=nav,
            root=root_prefix(path),
        )
        return Page(path, html)

    def render_source(self, site: Site, lab: Lab, starter: Starter, source: SourceFile, bindings: tuple[Binding, ...], state: PageState | None = None) -> Page:
        """Render a starter's whole file with addressable lines, its bound lines marked and the
        value hints of its recorded state."""
        path = source_url(source.path)
        root = root_prefix(path)
        notes = tuple((b.block, f"{root}{lab_url(b.lab.id)}#kb-{b.block.slug}") for b in bindings)
        html = self.template(
            "source.html",
            site=site,
            lab=lab,
            starter=starter,
            source=source,
            rows=code_rows(source.lines, notes, state),
            bindings=bindings,
            root=root,
            raw_name=PurePosixPath(source.path).name,
        )
        return Page(path, html)

    def render_serve_overlay(self, errors: list[str], state_path: str) -> tuple[str, str, str]:
        """Return what `serve` adds to pages as it serves them: (error banner, reload script, the
        page it answers with while no build has succeeded yet)."""
        banner = self.template("serve/banner.html", errors=errors) if errors else ""
        script = self.template("serve/reload.html", state_path=state_path)
        failed = self.template("serve/failed.html", banner=Markup(banner), script=Markup(script))
        return banner, script, failed
