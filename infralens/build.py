"""The build pipeline: load → validate → resolve excerpts → render → write."""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import jinja2

from infralens.assets import MINIFIED, minified
from infralens.errors import InputError, Mark, Problem
from infralens.links import Link, check_links
from infralens.load import Project, display_path, load_project
from infralens.models import ResolvedLab, RunResult
from infralens.render import Page, artifact_url, renderer_for
from infralens.results import recorded_runs
from infralens.search import search_index
from infralens.validate import resolve
from infralens.write import Copy, write_in_place, write_site


@dataclass(frozen=True)
class BuildSummary:
    """What a successful build made."""

    labs: int
    pages: int
    """HTML pages rendered."""
    files: int
    """Everything else written: copied files and generated ones such as the search index."""
    seconds: float
    out_dir: Path


@dataclass(frozen=True)
class Site:
    """A site rendered in memory: the pages and the files to copy beside them."""

    project: Project
    labs: tuple[ResolvedLab, ...]
    pages: list[Page]
    copies: list[Copy]

    def links(self) -> list[Link]:
        """Every link of every page, with its problem if it is broken."""
        return check_links(self.pages, {copy.dest for copy in self.copies})


def render(site_path: Path, only: frozenset[str] | None = None) -> Site:
    """Load, validate, resolve and render the site without writing anything.

    With `only` (lab ids), render just the pages a change to those labs' starters affects.
    """
    project = load_project(site_path)
    labs = resolve(project)
    runs = recorded_runs(project.root, [starter for lab in project.labs for starter in lab.starters])
    templates = theme_dir(project.root)
    pages = render_pages(templates, project, labs, {path: result for path, (result, _) in runs.items()}, only)
    # Every page's search box reads the index, so even a partial render writes it again.
    pages.append(Page(SEARCH_INDEX, search_index(project.site, labs, project.sources)))
    if only is not None:
        owned = {starter.path for lab in project.labs if lab.id in only for starter in lab.starters}
        return Site(project, labs, pages, [Copy(project.root / path, path) for path in sorted(owned)])
    copies = [Copy(project.root / path, path) for path in project.sources]
    copies += [
        Copy(folder / name, artifact_url(result.lab, name))
        for result, folder in runs.values()
        for name in result.artifacts
    ]
    for asset in sorted((templates / "static").glob("*")):
        if asset.is_file() and asset.name.endswith(MINIFIED):
            pages.append(Page(f"static/{asset.name}", minified(asset.name, asset.read_text(encoding="utf-8"))))
        elif asset.is_file():
            copies.append(Copy(asset, f"static/{asset.name}"))
    return Site(project, labs, pages, copies)


def build(site_path: Path, out_dir: Path, *, strict: bool = False) -> BuildSummary:
    """Build the site described by site_path into out_dir, or raise InputError and touch nothing.

    With `strict`, a broken internal link or anchor, or a non-http(s) external link, fails the build.
    """
    started = time.perf_counter()
    check_out_dir(site_path.parent, out_dir)
    site = render(site_path)
    if strict:
        broken = [link for link in site.links() if link.problem]
        if broken:
            raise InputError([Problem(Mark(f"{out_dir.name}/{link.page}", link.line, link.col), link.problem) for link in broken])
    write_site(out_dir, site.pages, site.copies)
    return summary(len(site.labs), site, started, out_dir)


def update(site_path: Path, out_dir: Path, lab_ids: frozenset[str]) -> BuildSummary:
    """Re-render only what a change to these labs' starters affects, writing the pages in place.

    For `serve`: the full site must already be in out_dir. Validation still covers the whole site,
    so an error anywhere is reported as in a full build.
    """
    started = time.perf_counter()
    site = render(site_path, only=lab_ids)
    write_in_place(out_dir, site.pages, site.copies)
    return summary(len(lab_ids), site, started, out_dir)


def summary(labs: int, site: Site, started: float, out_dir: Path) -> BuildSummary:
    """Count what was written: HTML pages, and the other files."""
    html = sum(page.path.endswith(".html") for page in site.pages)
    return BuildSummary(labs, html, len(site.pages) - html + len(site.copies), time.perf_counter() - started, out_dir)


COMPILED_TEMPLATES = Path(".infralens") / "templates"
"""Where Jinja keeps compiled templates between builds (git-ignored with the rest of .infralens/)."""

SEARCH_INDEX = "search-index.js"
"""Where the search index goes under output/; templates/_search.html points the search box at it."""

DEFAULT_THEME = Path(__file__).resolve().parent.parent / "templates"
"""The repository's own templates/, used by a site that has no templates/ of its own."""


def theme_dir(root: Path) -> Path:
    """Return the site's templates/ folder, or the default theme when it has none."""
    own = root / "templates"
    return own if own.is_dir() else DEFAULT_THEME


def check_out_dir(root: Path, out_dir: Path) -> None:
    """Refuse an output folder whose replacement would delete the project itself."""
    out, project = out_dir.resolve(), root.resolve()
    if project == out or project.is_relative_to(out) or any((out / name).exists() for name in ("site.yml", ".git", "pyproject.toml")):
        raise InputError([Problem(Mark(str(out_dir)), "refusing to replace this folder: it holds the project or a repository, not a built site")])


def render_pages(
    templates: Path, project: Project, labs: tuple[ResolvedLab, ...], runs: dict[str, RunResult], only: frozenset[str] | None = None
) -> list[Page]:
    """Render the pages, turning template mistakes into errors that name the template line."""
    try:
        compiled: Path | None = project.root / COMPILED_TEMPLATES
        try:
            compiled.mkdir(parents=True, exist_ok=True)
        except OSError:  # a read-only checkout still builds, compiling every time
            compiled = None
        return renderer_for(templates, compiled).render_site(project.site, labs, project.sources, runs, only)
    except jinja2.TemplateSyntaxError as exc:
        shown = display_path(Path(exc.filename or exc.name or "templates"), project.root)
        raise InputError([Problem(Mark(shown, exc.lineno or 1), f"template syntax error: {exc.message}")]) from None
    except jinja2.TemplateNotFound as exc:
        raise InputError([Problem(Mark(display_path(templates, project.root)), f"template not found: {exc.name}")]) from None
    except jinja2.UndefinedError as exc:
        frame = next(
            (f for f in reversed(traceback.extract_tb(exc.__traceback__)) if f.filename.endswith(".html")),
            None,
        )
        mark = Mark(display_path(Path(frame.filename), project.root), frame.lineno or 1) if frame else Mark(display_path(templates, project.root))
        raise InputError([Problem(mark, f"template error: {exc.message}")]) from None
