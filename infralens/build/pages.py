"""Render stage: each lab that changed → its pages and search documents; the files no lab owns.

Loads the heavy part of a build (Jinja2, Pygments' output, Markdown, notebooks), which a build
with nothing to render never imports. A lab is parsed (if the read stage did not), resolved and
rendered in a worker; its search documents go to the cache, from which the index is merged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Iterator

from infralens.build.plan import BuildState, Unit, UnitRecord
from infralens.build.read import highlighted, parse_one
from infralens.build.search import (
    CHUNK_LABS,
    chunk_path,
    chunk_script,
    index_script,
    lab_partial,
)
from infralens.build.session import Session, Theme
from infralens.build.workers import PARALLEL_FROM, map_over
from infralens.check.results import ResultStore
from infralens.errors import InputError, Mark, Problem, Problems
from infralens.model.lab import Lab
from infralens.model.resolved import ResolvedLab
from infralens.model.run import first_runs
from infralens.model.site import Site
from infralens.project.workspace import MARKER_TEXT, SITE_MARKER, Workspace, digest
from infralens.urls import artifact_url

SEARCH_INDEX = "search-index.js"
"""Where the search index goes under output/; templates/_search.html points the search box at it."""


@dataclass
class Outcome:
    """What rendering one lab produced: its files (path → content), or its problems."""

    lab_id: str
    files: dict[str, str]
    problems: list[Problem]


def render_units(ws: Workspace, site: Site, theme: Theme, units: list[Unit], parsed: dict[str, Lab], session: "Session") -> Iterator[Outcome]:
    """Render the pages and search documents of these labs, in worker processes when there are many.

    Outcomes come back one by one, so the pages of a cold build are never all in memory at once.
    """
    tasks = [(unit, parsed.get(unit.card.id)) for unit in units]
    in_process = len(tasks) < PARALLEL_FROM or session.jobs < 2
    context = RenderContext(ws if in_process else replace(ws, memory={}, memory_limit=0), site, theme)
    return map_over(render_task, tasks, jobs=session.jobs, setup=partial(use_context, context))


@dataclass(frozen=True)
class RenderContext:
    """What every lab's rendering shares; handed once to each worker process."""

    ws: Workspace
    site: Site
    theme: Theme


_WORKER: dict[str, object] = {}
"""The render context and renderer of this process: set by `use_context` (in a worker, once for the
pool's life); the renderer is made once per theme, not once per build."""


def use_context(context: RenderContext) -> None:
    _WORKER["context"] = context
    _WORKER["renderer"] = renderer_for(context.theme)


def renderer_for(theme: "Theme"):
    """Return this process's renderer of a theme, made once: Jinja re-reads a template whose file changed."""
    made_for = (theme.dirs, theme.compiled)
    if _WORKER.get("made_for") != made_for:
        # deferred: the page stack (Jinja2, Markdown, notebooks) takes ~0.2 s to load, and a build with nothing to render never needs it
        from infralens.build.render import Renderer

        _WORKER["renderer_of_theme"] = Renderer(theme.dirs, theme.compiled)
        _WORKER["made_for"] = made_for
    return _WORKER["renderer_of_theme"]


def render_task(task: tuple[Unit, Lab | None]) -> Outcome:
    """Parse (if needed), resolve and render one lab; its problems are returned, not raised."""
    # deferred: the page stack (Jinja2, Markdown, notebooks) takes ~0.2 s to load, and a build with nothing to render never needs it
    from infralens.lab.resolve import resolve_excerpt

    unit, lab = task
    context: RenderContext = _WORKER["context"]  # type: ignore[assignment]
    renderer = _WORKER["renderer"]
    try:
        texts = texts_of(context.ws, unit)
        if lab is None:
            lab = parse_one(replace(unit.manifest, text=context.ws.manifest_text(unit.manifest)))
    except InputError as exc:
        return Outcome(unit.card.id, {}, exc.problems)
    if isinstance(lab, InputError):
        return Outcome(unit.card.id, {}, lab.problems)
    sources = {path: highlighted(context.ws, path, text) for path, text in texts}
    problems = Problems()
    excerpt = resolve_excerpt(lab, sources, problems)
    if excerpt is None or problems:
        return Outcome(lab.id, {}, list(problems))
    resolved = ResolvedLab(lab, excerpt)
    try:
        pages = renderer.render_lab_pages(context.site, resolved, sources, dict(unit.runs), unit.nav)
    except InputError as exc:
        return Outcome(lab.id, {}, exc.problems)
    files = {page.path: page.html for page in pages}
    if context.ws.recall("search", unit.search_key) is None:
        # The search documents go to the cache, not back to the caller: the index is merged from there.
        context.ws.store("search", unit.search_key, lab_partial(context.site, resolved, tuple(text for _, text in texts)))
    return Outcome(lab.id, files, [])


def texts_of(ws: Workspace, unit: Unit) -> tuple[tuple[str, str], ...]:
    """(path, text) of each of a lab's starters, reading those the build took as the last one read them."""
    return tuple((path, text if text is not None else ws.starter_text(path)) for path, text in unit.sources)


class SharedFiles:
    """The files no single lab owns, as this build stages them: each under the key of what it is
    made from, made again only when that key changed or its file is gone (or in a full build)."""

    def __init__(self, state: BuildState, present: dict, full: bool) -> None:
        self.state, self.present, self.full = state, present, full
        self.keys: dict[str, str] = {}
        """Output path → key of every such file the site has."""

    def stage(self, path: str, key: str, make) -> None:
        if self.due(path, key):
            make(path)

    def due(self, path: str, key: str) -> bool:
        """Take the file's key; say whether it must be made (again)."""
        self.keys[path] = key
        recorded = self.state.shared.get(path)
        return self.full or recorded is None or recorded[0] != key or path not in self.present


def write_shared(
    ws: Workspace,
    site: Site,
    theme: Theme,
    units: dict[str, Unit],
    state: BuildState,
    staging,
    session: "Session",
    full: bool,
) -> dict[str, str]:
    """Stage the files no single lab owns when they changed: the index, the search index, theme assets, raw starters and run artifacts.

    Returns output path → key of every such file the site has.
    """
    shared = SharedFiles(state, ws.present({path: stamp for path, (_, stamp) in state.shared.items()}), full)
    in_order = sorted(units.values(), key=lambda u: u.card.number)
    stage_index(shared, ws, site, theme, in_order, staging)
    shared.stage(SITE_MARKER, digest(MARKER_TEXT), lambda path: staging.write(path, MARKER_TEXT))
    stage_search_index(shared, ws, site, theme, in_order, staging, session)
    stage_assets(shared, theme, staging)
    stage_lab_files(shared, ws, units, staging, session)
    return shared.keys


def stage_index(shared: SharedFiles, ws: Workspace, site: Site, theme: Theme, in_order: list[Unit], staging) -> None:
    """The index: each lab's card (all of it but its marks) and each run's status and date."""
    runs = {path: result for unit in in_order for path, result in first_runs(unit.card.starters, dict(unit.runs)).items()}
    shown_runs = sorted((path, result.status, result.finished) for path, result in runs.items())
    index_key = digest(theme.key, repr(site), *(unit.card.shown for unit in in_order), repr(shown_runs))

    def index_file(path: str) -> None:
        use_context(RenderContext(ws, site, theme))
        staging.write(path, _WORKER["renderer"].render_index(site, [unit.card for unit in in_order], runs))

    shared.stage("index.html", index_key, index_file)


def stage_search_index(shared: SharedFiles, ws: Workspace, site: Site, theme: Theme, in_order: list[Unit], staging, session: "Session") -> None:
    """The search index: chunks of CHUNK_LABS labs' documents (from the cache), and the script that
    lists them. The chunks to make are made in the workers when there are enough of them (each
    merges its labs' documents: a cold build's last stretch of work on one core otherwise)."""
    chunks, due = [], []
    for number, start in enumerate(range(0, len(in_order), CHUNK_LABS)):
        members = in_order[start : start + CHUNK_LABS]
        path = chunk_path(number)
        chunks.append(path)
        if shared.due(path, digest(path, *(unit.search_key for unit in members))):
            due.append((path, number, tuple(members)))
    context = RenderContext(ws, site, theme)
    for path, text in map_over(chunk_task, due, jobs=session.jobs, setup=partial(_WORKER.__setitem__, "context", context), least=CHUNKS_PARALLEL_FROM):
        staging.write(path, text)
    shared.stage(SEARCH_INDEX, digest(*chunks), lambda path: staging.write(path, index_script(chunks)))


CHUNKS_PARALLEL_FROM = 4
"""Chunks of the search index to make before they are spread over the workers."""


def chunk_task(task: tuple[str, int, tuple[Unit, ...]]) -> tuple[str, str]:
    """Make one chunk of the search index from its labs' documents in the cache (rendering a lab
    again for its documents if they were lost from it)."""
    path, number, members = task
    context: RenderContext = _WORKER["context"]  # type: ignore[assignment]

    def partials():
        for unit in members:
            partial = context.ws.recall("search", unit.search_key)
            if partial is None:  # lost from the cache: render the lab again for its documents
                use_context(context)
                render_task((unit, None))
                partial = context.ws.recall("search", unit.search_key)
            yield partial

    return path, chunk_script(number, partials())


def stage_assets(shared: SharedFiles, theme: Theme, staging) -> None:
    """The theme's static files, stylesheets and scripts minified."""

    def asset(path: str, file: Path) -> None:
        # deferred: only a changed theme file is minified, and a no-change build loads no minifier
        from infralens.build.assets import MINIFIED, minified

        if file.name.endswith(MINIFIED):
            staging.write(path, minified(file.name, file.read_text(encoding="utf-8")))
        else:
            staging.copy(file, path)

    for name, file in theme.assets:
        shared.stage(f"static/{name}", digest(name, file.read_bytes()), lambda path, f=file: asset(path, f))


def stage_lab_files(shared: SharedFiles, ws: Workspace, units: dict[str, Unit], staging, session: "Session") -> None:
    """Each lab's raw starters, and the artifacts its recorded runs wrote (from the result store)."""
    store = ResultStore(ws.runs_folder())
    for unit in units.values():
        for (path, text), text_digest in zip(unit.sources, unit.source_digests):
            shared.stage(path, text_digest, lambda p, t=text: staging.write(p, t if t is not None else ws.starter_text(p)))
        for (starter_path, device), result in unit.runs:
            starter = next(s for s in unit.card.starters if s.path == starter_path)
            key = session.run_key(ws, starter, next(run for run in starter.runs if run.device == device))
            for name in result.artifacts:  # plain names of regular files, checked when the record was read
                data = store.artifact(key, name)
                shared.stage(artifact_url(unit.card.id, name), digest(data), lambda p, d=data: staging.write(p, d))


def check_site_links(ws: Workspace, staging, units: dict[str, Unit], kept: dict[str, UnitRecord], shared: dict[str, str]) -> None:
    """Fail on a broken link or anchor anywhere in the site as it will be after this build."""
    # deferred: only `build --strict` checks links, and the checker loads the page stack
    from infralens.build.links import check_links
    from infralens.build.render import Page

    staged = set(staging.written)
    every = {path for record in kept.values() for path in record.files} | set(staged) | set(shared)

    def read(path: str) -> str:
        folder = staging.site if path in staged else ws.out
        return (folder / path).read_text(encoding="utf-8")

    pages = [Page(path, read(path)) for path in sorted(every) if path.endswith(".html")]
    broken = [link for link in check_links(pages, every) if link.problem]
    if broken:
        raise InputError([Problem(Mark(f"{ws.out.name}/{link.page}", link.line, link.col), link.problem) for link in broken])
