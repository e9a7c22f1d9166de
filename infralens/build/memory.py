"""The site in memory: every lab resolved, or every page rendered, with nothing written.

For `infralens links` (which checks the pages a build would write) and for the tests.
"""

from __future__ import annotations

from pathlib import Path

from infralens.build.pages import render_units, write_shared
from infralens.build.pipeline import prepare
from infralens.build.plan import BuildState
from infralens.build.read import Project
from infralens.build.render import Page
from infralens.build.session import Session
from infralens.errors import InputError, Problems
from infralens.lab.resolve import resolve_excerpt
from infralens.model.resolved import ResolvedLab
from infralens.project.workspace import Workspace


def resolve(project: Project) -> tuple[ResolvedLab, ...]:
    """Resolve every lab's excerpt, raising InputError with every problem."""
    problems = Problems()
    resolved = []
    for lab in project.labs:
        excerpt = resolve_excerpt(lab, project.sources, problems)
        if excerpt is not None:
            resolved.append(ResolvedLab(lab, excerpt))
    problems.raise_if_any()
    return tuple(resolved)


def render_in_memory(site_path: Path, cache_dir: Path | None = None) -> tuple[list, set[str]]:
    """Render every page of the site in memory (for `infralens links`); nothing is written to output/.

    Returns the pages and the path of every file the site would have.
    """
    ws = Workspace.open(site_path, cache_dir=cache_dir)
    with_memory = MemoryStaging()
    session = Session(jobs=1)
    read, units = prepare(ws, BuildState(), session)
    site, theme, parsed = read.site, read.theme, read.parsed
    problems = []
    for outcome in render_units(ws, site, theme, list(units.values()), parsed, session):
        problems += outcome.problems
        for path, content in outcome.files.items():
            with_memory.write(path, content)
    if problems:
        raise InputError(problems)
    write_shared(ws, site, theme, units, BuildState(), with_memory, session, True)
    return [Page(path, content) for path, content in with_memory.pages.items()], set(with_memory.pages) | with_memory.copied


class MemoryStaging:
    """A staging area that keeps pages in memory and only notes copied files."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        self.copied: set[str] = set()
        self.written: list[str] = []

    def write(self, path: str, content: str | bytes) -> None:
        self.pages[path] = content if isinstance(content, str) else content.decode("utf-8", "replace")
        self.written.append(path)

    def copy(self, source: Path, path: str) -> None:
        self.copied.add(path)
        self.written.append(path)
