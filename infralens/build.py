"""The build pipeline: read → parse → check → resolve → render → index → commit.

Work is per lab. Each lab's pages (its lab page and the source views of its starters) and its
search documents are keyed by a hash of everything they are made from: its manifest and starter
texts, site.yml, the theme, the tool's version, the recorded runs of its starters and the few
neighbours its navigation names. A lab whose key is unchanged, with its files still in output/ as
the last build left them, is not parsed, rendered or written again. Cold work is spread over the
cores. The workspace does every read and write; the stages between are pure.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path
from typing import Iterator

from infralens import __version__
from infralens.errors import InputError, Mark, Problem, Problems
from infralens.models import Lab, LabCard, ResolvedLab, RunResult, Site, SourceFile, card_of, first_runs
from infralens.workspace import Manifest, Stamp, Workspace, digest

PARALLEL_FROM = 24
"""Below this many labs to parse or render, a pool of processes costs more than it saves."""

SEARCH_INDEX = "search-index.js"
"""Where the search index goes under output/; templates/_search.html points the search box at it."""

SITE_MARKER = ".infralens-site"
"""A file every build writes into output/: a folder without it (and without a build on record) holds
someone else's files, which a build would remove as strays, so it is refused."""

MARKER_TEXT = "Written by `infralens build`, which removes any file in this folder that the site does not have.\n"

STATE_FORMAT = "build-state-1"
"""Version of BuildState's layout, part of the key it is stored under: a new layout starts afresh."""


@dataclass(frozen=True)
class BuildSummary:
    """What a successful build did."""

    labs: int
    """Labs in the site."""
    rendered: int
    """Labs whose pages were rendered again (all of them in a cold build)."""
    pages: int
    """HTML pages written."""
    files: int
    """Other files written: copied starters, theme assets, the search index."""
    removed: int
    """Files removed because the site no longer has them."""
    seconds: float
    out_dir: Path


@dataclass
class UnitRecord:
    """What the last build made for one lab: its key and the files it wrote."""

    key: str
    files: dict[str, Stamp]


@dataclass
class BuildState:
    """What the last build of one output folder left, kept in the cache between builds."""

    cards: dict[str, LabCard] = field(default_factory=dict)
    """Manifest digest → the card parsed from it: an unchanged manifest is not parsed again."""
    units: dict[str, UnitRecord] = field(default_factory=dict)
    """Lab id → what its pages were made from."""
    shared: dict[str, tuple[str, Stamp]] = field(default_factory=dict)
    """Output path → (key, stamp) of the files no single lab owns: index, search index, theme."""
    site: tuple[str, Site] | None = None
    """The digest of site.yml's text and the Site parsed from it."""
    run_keys: dict[tuple[str, str], tuple[tuple, str]] = field(default_factory=dict)
    """(starter, run spec) → ((folder stamp, run environment), run key): a key is hashed again only
    when the starter's folder or what every key depends on changed."""


@dataclass(frozen=True)
class Unit:
    """One lab's share of a build: what its pages are made from."""

    manifest: Manifest
    card: LabCard
    sources: tuple[tuple[str, str], ...]
    """(path, text) of each of the lab's starters."""
    source_digests: tuple[str, ...]
    """A hash of each starter's text, in the order of `sources`, computed once as it was read."""
    runs: tuple[tuple[tuple[str, str], RunResult], ...]
    """The stored result of each run of the lab's starters, by (starter path, device)."""
    nav: "Nav"
    key: str
    search_key: str


@dataclass(frozen=True)
class Nav:
    """What a lab page's navigation names: its neighbours and a window of its track, never the whole site."""

    track_title: str
    window: tuple[LabCard, ...]
    """Labs of the same track around this one, itself included, in order."""
    before: int
    """Labs of the track before the window."""
    after: int
    """Labs of the track after the window."""
    previous: LabCard | None
    next: LabCard | None
    other_tracks: tuple[tuple[str, str], ...]
    """(id, title) of the other tracks that have labs, which the index lists in full."""


NAV_WINDOW = 5
"""Labs of the track shown on each side of the current one in a lab page's navigation."""


@dataclass
class Outcome:
    """What rendering one lab produced: its files (path → content), or its problems."""

    lab_id: str
    files: dict[str, str]
    problems: list[Problem]


# ---------------------------------------------------------------------------------- the pipeline


def build(ws: Workspace, *, strict: bool = False, full: bool = False, session: "Session | None" = None) -> BuildSummary:
    """Build the site into ws.out, redoing only the labs whose inputs changed; raise InputError on any problem.

    With `strict`, a broken internal link or anchor, or a non-http(s) external link, fails the build.
    With `full`, every lab is rendered again. `session` keeps parsed state between builds of a
    long-running process (`serve`).
    """
    started = time.perf_counter()
    ws.check_out_dir()
    with ws.lock():
        try:
            return _build(ws, strict=strict, full=full, session=session or Session(), started=started)
        except OSError as exc:  # output/ or its parent cannot be written: a problem of the input, said as one
            where = exc.filename or str(ws.out)
            raise InputError([Problem(Mark(str(where)), f"cannot write the site: {exc.strerror or exc}")]) from None


def _build(ws: Workspace, *, strict: bool, full: bool, session: "Session", started: float) -> BuildSummary:
    state = session.state_for(ws)
    if full:  # nothing remembered: every starter's run key is hashed again too
        session.run_keys.clear()
    if not (state.units or state.shared):
        ws.check_not_foreign(SITE_MARKER)
    site_state = state.site
    site, manifests, cards, parsed, theme, units = prepare(ws, state, session)
    kept = {lab_id: record for lab_id, record in state.units.items() if not full and lab_id in units and record.key == units[lab_id].key}
    present = ws.present({path: stamp for record in kept.values() for path, stamp in record.files.items()})
    kept = {lab_id: record for lab_id, record in kept.items() if all(path in present for path in record.files)}
    dirty = [unit for lab_id, unit in units.items() if lab_id not in kept]
    staging = ws.staging()
    try:
        outcomes: dict[str, list[str]] = {}
        problems: list[Problem] = []
        for outcome in render_units(ws, site, theme, dirty, parsed, session):
            stop_if_asked()
            problems += outcome.problems
            if not problems:  # after the first problem, only more problems matter
                for path, content in outcome.files.items():
                    staging.write(path, content)
            outcomes[outcome.lab_id] = list(outcome.files)
        if problems:
            raise InputError(problems)
        shared = write_shared(ws, site, theme, units, state, staging, session, full)
        if strict:
            check_site_links(ws, staging, units, kept, shared)
        produced = {path for files in outcomes.values() for path in files} | set(shared)
        produced |= {path for record in kept.values() for path in record.files}
        removed = sorted(ws.strays(produced)) if ws.out.is_dir() else []
        written = list(staging.written)
        stop_if_asked()  # the last point where stopping leaves output/ untouched
        stamps = ws.commit(staging, removed)
    except BaseException:
        staging.discard()
        raise
    for lab_id, unit in units.items():
        if lab_id in outcomes:
            files = {path: stamps[path] for path in outcomes[lab_id]}
            state.units[lab_id] = UnitRecord(unit.key, files)
    for lab_id in list(state.units):
        if lab_id not in units:
            del state.units[lab_id]
    state.shared = {path: (key, stamps.get(path) or state.shared[path][1]) for path, key in shared.items()}
    cards_by_digest = {digest_manifest(m): cards[m.lab_id] for m in manifests}
    if written or removed or cards_by_digest != state.cards or session.run_keys != state.run_keys or state.site is not site_state:
        state.cards = cards_by_digest
        state.run_keys = session.run_keys
        session.save_state(ws, state)
    elif session.keep_state:
        session.save_state(ws, state)
    html = sum(path.endswith(".html") for path in written)
    return BuildSummary(len(units), len(outcomes), html, len(written) - html, len(removed), time.perf_counter() - started, ws.out)


def prepare(ws: Workspace, state: BuildState, session: "Session") -> tuple[Site, list[Manifest], dict[str, LabCard], dict[str, Lab], "Theme", dict[str, "Unit"]]:
    """Read and check the project and key every lab's share of the build: all a build does before rendering."""
    site, manifests, cards, parsed = read_and_parse(ws, state, session)
    starters = read_starters(ws, cards)
    runs = recorded_runs(ws, cards, session)
    theme = session.theme(ws)
    return site, manifests, cards, parsed, theme, plan(site, manifests, cards, starters, runs, theme.key)


def read_and_parse(ws: Workspace, state: BuildState, session: "Session") -> tuple[Site, list[Manifest], dict[str, LabCard], dict[str, Lab]]:
    """Read site.yml and every manifest; parse the manifests that changed since the last build.

    Returns the site, the manifests, a card per lab id, and the labs parsed in this build by id.
    """
    problems = Problems()
    site_shown, site_text = ws.read_site()
    site_key = digest(__version__, site_shown, site_text)
    site = state.site[1] if state.site and state.site[0] == site_key else None
    if site is None:
        from infralens.parse import parse_site

        try:
            site = parse_site(site_shown, site_text)
            state.site = (site_key, site)
        except InputError as exc:
            problems.extend(exc.problems)
    manifests = ws.read_manifests(problems)
    cards: dict[str, LabCard] = {}
    to_parse = []
    for manifest in manifests:
        card = state.cards.get(digest_manifest(manifest))
        if card is not None and card.path == manifest.path:
            cards[manifest.lab_id] = card
        else:
            to_parse.append(manifest)
    parsed: dict[str, Lab] = {}
    for result in session.map(parse_one, to_parse):
        if isinstance(result, InputError):
            problems.extend(result.problems)
        else:
            parsed[result.id] = result
            cards[result.id] = card_of(result)
    if site is not None:
        check_cards(site, sorted(cards.values(), key=lambda card: (card.number, card.id)), problems)
    problems.raise_if_any()
    assert site is not None
    return site, manifests, cards, parsed


def digest_manifest(manifest: Manifest) -> str:
    return digest(__version__, manifest.key)


def parse_one(manifest: Manifest) -> Lab | InputError:
    """Parse one manifest (in a worker process when there are many)."""
    from infralens.parse import parse_lab

    try:
        return parse_lab(manifest.path, manifest.lab_id, manifest.text)
    except InputError as exc:
        return exc


def check_cards(site: Site, cards: list[LabCard], problems: Problems) -> None:
    """Report tracks site.yml does not declare and lab numbers used twice."""
    from infralens.schema import did_you_mean

    tracks = [track.id for track in site.tracks]
    by_number: dict[int, LabCard] = {}
    for card in cards:
        if card.track not in tracks:
            problems.add(card.track_mark, f"unknown track {card.track!r}{did_you_mean(card.track, tracks)}; tracks in {site.path}: {', '.join(tracks)}")
        first = by_number.get(card.number)
        if first is not None:
            problems.add(card.number_mark, f"lab number {card.number} is already used by {first.path}:{first.number_mark.line}")
        else:
            by_number[card.number] = card


def read_starters(ws: Workspace, cards: dict[str, LabCard]) -> dict[str, tuple[str, str]]:
    """Read every starter the labs declare: path → (text, digest of the text)."""
    problems = Problems()
    texts: dict[str, tuple[str, str]] = {}
    owners: dict[str, LabCard] = {}
    for card in cards.values():
        for starter in card.starters:
            if starter.path in owners:
                if owners[starter.path].id != card.id:
                    other = owners[starter.path]
                    problems.add(starter.mark, f"starter {starter.path!r} is already a starter of {other.id}; a starter belongs to one lab")
                continue
            owners[starter.path] = card
            text = ws.read_starter(starter.path, starter.mark, problems)
            if text is not None:
                texts[starter.path] = (text, digest(text))
    problems.raise_if_any()
    return texts


@lru_cache(maxsize=None)
def models_digest() -> str:
    """Identify the models a build state holds: a state pickled with other model classes (another
    release, or a working copy of this one) is not read back."""
    from infralens import models

    return digest(Path(models.__file__).read_text(encoding="utf-8"))


def recorded_runs(ws: Workspace, cards: dict[str, LabCard], session: "Session") -> dict[tuple[str, str], RunResult]:
    """Return the stored result of each run of each starter's current version, by (path, device)."""
    from infralens.results import ResultStore

    store = ResultStore(ws.runs_folder())
    found = {}
    for card in cards.values():
        for starter in card.starters:
            for run in starter.runs:
                result = store.load(session.run_key(ws, starter, run))
                if result is not None:
                    found[starter.path, run.device] = result
    return found


def plan(
    site: Site, manifests: list[Manifest], cards: dict[str, LabCard], starters: dict[str, tuple[str, str]], runs: dict[tuple[str, str], RunResult], theme_key: str
) -> dict[str, Unit]:
    """Key each lab's share of the build by everything its pages and search documents are made from."""
    ordered = sorted(cards.values(), key=lambda card: card.number)
    site_key = digest(__version__, theme_key, repr(site))
    tracks_key = digest(repr(site.tracks))
    by_id = {m.lab_id: m for m in manifests}
    navs = navigation(site, ordered)
    units = {}
    for card in ordered:
        manifest = by_id[card.id]
        sources = tuple((s.path, starters[s.path][0]) for s in card.starters)
        lab_runs = tuple(((s.path, run.device), runs[s.path, run.device]) for s in card.starters for run in s.runs if (s.path, run.device) in runs)
        source_key = digest(*(f"{s.path}\0{starters[s.path][1]}" for s in card.starters))
        search_key = digest(__version__, "search", tracks_key, manifest.key, source_key)
        nav = navs[card.id]
        key = digest(site_key, manifest.key, source_key, repr(lab_runs), nav_key(nav))
        digests = tuple(starters[s.path][1] for s in card.starters)
        units[card.id] = Unit(manifest, card, sources, digests, lab_runs, nav, key, search_key)
    return units


def nav_key(nav: Nav) -> str:
    """Hash what a lab page shows of its neighbours: their ids, numbers, titles and question counts, and the track."""
    def named(card: LabCard | None) -> str:
        return f"{card.id}\0{card.number}\0{card.title}\0{card.questions}" if card else "-"

    return digest(nav.track_title, str(nav.before), str(nav.after), named(nav.previous), named(nav.next), repr(nav.other_tracks), *map(named, nav.window))


def navigation(site: Site, ordered: list[LabCard]) -> dict[str, Nav]:
    """Return each lab's navigation: its previous and next lab and a window of its own track."""
    titles = {track.id: track.title for track in site.tracks}
    by_track: dict[str, list[LabCard]] = {}
    for card in ordered:
        by_track.setdefault(card.track, []).append(card)
    navs = {}
    filled = [(track.id, track.title) for track in site.tracks if track.id in by_track]
    place = {card.id: at for track in by_track.values() for at, card in enumerate(track)}
    for index, card in enumerate(ordered):
        track = by_track[card.track]
        at = place[card.id]
        low, high = max(0, at - NAV_WINDOW), min(len(track), at + NAV_WINDOW + 1)
        navs[card.id] = Nav(
            titles.get(card.track, card.track),
            tuple(track[low:high]),
            low,
            len(track) - high,
            ordered[index - 1] if index > 0 else None,
            ordered[index + 1] if index + 1 < len(ordered) else None,
            tuple(pair for pair in filled if pair[0] != card.track),
        )
    return navs


# ---------------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class Theme:
    """The template folders of a build, the compiled-template cache, and a key of their contents."""

    dirs: tuple[Path, ...]
    compiled: Path | None
    key: str
    assets: tuple[tuple[str, Path], ...]
    """(name, file) of each static asset, the site's own overriding the packaged ones."""


def render_units(ws: Workspace, site: Site, theme: Theme, units: list[Unit], parsed: dict[str, Lab], session: "Session") -> Iterator[Outcome]:
    """Render the pages and search documents of these labs, in worker processes when there are many.

    Outcomes come back one by one, so the pages of a cold build are never all in memory at once.
    """
    tasks = [(unit, parsed.get(unit.card.id)) for unit in units]
    in_process = len(tasks) < PARALLEL_FROM or session.jobs < 2
    context = RenderContext(ws if in_process else replace(ws, memory={}, memory_limit=0), site, theme)
    return session.map(render_task, tasks, context=context)


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
        from infralens.render import Renderer

        _WORKER["renderer_of_theme"] = Renderer(theme.dirs, theme.compiled)
        _WORKER["made_for"] = made_for
    return _WORKER["renderer_of_theme"]


def render_task(task: tuple[Unit, Lab | None]) -> Outcome:
    """Parse (if needed), resolve and render one lab; its problems are returned, not raised."""
    from infralens.resolve import resolve_excerpt
    from infralens.search import lab_partial

    unit, lab = task
    context: RenderContext = _WORKER["context"]  # type: ignore[assignment]
    renderer = _WORKER["renderer"]
    if lab is None:
        lab = parse_one(unit.manifest)
        if isinstance(lab, InputError):
            return Outcome(unit.card.id, {}, lab.problems)
    sources = {path: highlighted(context.ws, path, text) for path, text in unit.sources}
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
        context.ws.store("search", unit.search_key, lab_partial(context.site, resolved, tuple(text for _, text in unit.sources)))
    return Outcome(lab.id, files, [])


def highlighted(ws: Workspace, path: str, text: str) -> SourceFile:
    """Highlight a starter, reusing the highlighted lines stored for the same content."""
    from infralens.highlight import highlight_key, highlight_lines, source_file

    key = highlight_key(path, text)
    lines = ws.recall("highlight", key)
    if lines is None:
        lines = highlight_lines(path, text)
        ws.store("highlight", key, lines)
    return source_file(path, text, lines)


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
    from infralens.results import ResultStore
    from infralens.urls import artifact_url

    present = ws.present({path: stamp for path, (_, stamp) in state.shared.items()})
    keys: dict[str, str] = {}

    def stage(path: str, key: str, make) -> None:
        keys[path] = key
        recorded = state.shared.get(path)
        if full or recorded is None or recorded[0] != key or path not in present:
            make(path)

    in_order = sorted(units.values(), key=lambda u: u.card.number)
    ordered = [unit.card for unit in in_order]
    runs = {path: result for unit in units.values() for path, result in first_runs(unit.card.starters, dict(unit.runs)).items()}
    # The index shows each lab's card (a function of its manifest) and each run's status and date.
    shown_runs = sorted((path, result.status, result.finished) for path, result in runs.items())
    index_key = digest(theme.key, repr(site), *(unit.manifest.key for unit in in_order), repr(shown_runs))

    def index_file(path: str) -> None:
        use_context(RenderContext(ws, site, theme))
        staging.write(path, _WORKER["renderer"].render_index(site, ordered, runs))

    stage("index.html", index_key, index_file)
    stage(SITE_MARKER, digest(MARKER_TEXT), lambda path: staging.write(path, MARKER_TEXT))
    def chunk_file(path: str, number: int, members: list[Unit]) -> None:
        from infralens.search import chunk_script

        def partials():
            for unit in members:
                partial = ws.recall("search", unit.search_key)
                if partial is None:  # lost from the cache: render the lab again for its documents
                    use_context(RenderContext(ws, site, theme))
                    render_task((unit, None))
                    partial = ws.recall("search", unit.search_key)
                yield partial

        staging.write(path, chunk_script(number, partials()))

    from infralens.search import CHUNK_LABS, chunk_path, index_script

    chunks = []
    for number, start in enumerate(range(0, len(in_order), CHUNK_LABS)):
        members = in_order[start : start + CHUNK_LABS]
        path = chunk_path(number)
        chunks.append(path)
        stage(path, digest(path, *(unit.search_key for unit in members)), lambda p, n=number, m=members: chunk_file(p, n, m))
    stage(SEARCH_INDEX, digest(*chunks), lambda path: staging.write(path, index_script(chunks)))
    def asset(path: str, file: Path) -> None:
        from infralens.assets import MINIFIED, minified

        if file.name.endswith(MINIFIED):
            staging.write(path, minified(file.name, file.read_text(encoding="utf-8")))
        else:
            staging.copy(file, path)

    for name, file in theme.assets:
        stage(f"static/{name}", digest(name, file.read_bytes()), lambda path, f=file: asset(path, f))
    store = ResultStore(ws.runs_folder())
    for unit in units.values():
        for (path, text), text_digest in zip(unit.sources, unit.source_digests):
            stage(path, text_digest, lambda p, t=text: staging.write(p, t))
        for (starter_path, device), result in unit.runs:
            starter = next(s for s in unit.card.starters if s.path == starter_path)
            folder = store.slot(session.run_key(ws, starter, next(run for run in starter.runs if run.device == device)))
            for name in result.artifacts:
                source = folder / name
                if source.is_file():
                    stage(artifact_url(unit.card.id, name), digest(source.read_bytes()), lambda p, f=source: staging.copy(f, p))
    return keys


def check_site_links(ws: Workspace, staging, units: dict[str, Unit], kept: dict[str, UnitRecord], shared: dict[str, str]) -> None:
    """Fail on a broken link or anchor anywhere in the site as it will be after this build."""
    from infralens.links import check_links
    from infralens.render import Page

    staged = set(staging.written)
    every = {path for record in kept.values() for path in record.files} | set(staged) | set(shared)

    def read(path: str) -> str:
        folder = staging.site if path in staged else ws.out
        return (folder / path).read_text(encoding="utf-8")

    pages = [Page(path, read(path)) for path in sorted(every) if path.endswith(".html")]
    broken = [link for link in check_links(pages, every) if link.problem]
    if broken:
        raise InputError([Problem(Mark(f"{ws.out.name}/{link.page}", link.line, link.col), link.problem) for link in broken])


# ---------------------------------------------------------------------------------- the session


class Session:
    """What one process keeps between builds: the build state, the theme's key, run keys, a worker pool.

    A CLI build uses a fresh one; `serve` keeps one for its whole life, so an edit re-reads the
    files but re-parses and re-renders only the labs it touched.
    """

    def __init__(self, *, jobs: int | None = None, keep_state: bool = False) -> None:
        self.jobs = jobs or os.cpu_count() or 1
        self.keep_state = keep_state
        self._state: BuildState | None = None
        self.run_keys: dict[tuple[str, str], tuple[tuple, str]] = {}

    def state_for(self, ws: Workspace) -> BuildState:
        if self._state is not None:
            return self._state
        state = ws.recall("state", self.state_key(ws))
        if not isinstance(state, BuildState) or not ws.out.is_dir():
            state = BuildState()
        self.run_keys = dict(state.run_keys)
        return state

    def save_state(self, ws: Workspace, state: BuildState) -> None:
        """Keep the state for the next build: in memory for a long-lived session (written to disk by
        `flush` when it ends), on disk otherwise. A state on disk older than output/ is safe: a lab
        whose files changed since is simply rendered again."""
        if self.keep_state:
            self._state = state
        else:
            ws.store("state", self.state_key(ws), state)

    def state_key(self, ws: Workspace) -> str:
        return digest(STATE_FORMAT, __version__, models_digest(), ws.output_state_key())

    def flush(self, ws: Workspace) -> None:
        """Write a long-lived session's state to disk, so the next `infralens build` starts from it."""
        if self._state is not None:
            ws.store("state", self.state_key(ws), self._state)

    def theme(self, ws: Workspace) -> Theme:
        from infralens.workspace import packaged_theme

        dirs = ws.theme_dirs(packaged_theme())
        ws.check_theme(dirs[0] if len(dirs) > 1 else None)
        assets: dict[str, Path] = {}
        parts = []
        for folder in reversed(dirs):  # the site's own files override the packaged ones
            for file in sorted(folder.rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts:
                    parts.append(f"{file.relative_to(folder)}\0{file.stat().st_mtime_ns}\0{file.stat().st_size}")
                    if file.parent == folder / "static":
                        assets[file.name] = file
        return Theme(dirs, ws.templates_cache(), digest(__version__, *parts), tuple(sorted(assets.items())))

    def run_key(self, ws: Workspace, starter, run) -> str:
        """Return the key of a run of a starter, hashing its folder again only when a file in it changed."""
        from infralens.results import folder_stamp, run_environment, run_key

        stamp = (folder_stamp(ws.root, starter), run_environment())  # a new tracer or probe: a new key
        remembered = self.run_keys.get((starter.path, repr(run)))
        if remembered and remembered[0] == stamp:
            return remembered[1]
        key = run_key(ws.root, starter, run)
        self.run_keys[starter.path, repr(run)] = (stamp, key)
        return key

    def map(self, function, items: list, *, context: RenderContext | None = None) -> Iterator:
        """Apply function to every item, in up to `jobs` worker processes when there are enough items."""
        if not items:
            return iter(())
        if context is not None:
            use_context(context)
        if len(items) < PARALLEL_FROM or self.jobs < 2:
            return map(function, items)
        return self._pool_map(function, items, context)

    def _pool_map(self, function, items: list, context: RenderContext | None) -> Iterator:
        """Spread the items over `jobs` forked workers, each sending its results back on a pipe of its own.

        No queue or lock is shared with a worker, so a worker killed at any moment (by Ctrl-C, SIGTERM
        to the group, the OOM killer) cannot leave the build waiting on a lock it held, as
        multiprocessing's Pool and ProcessPoolExecutor can; stopping kills the workers outright.
        """
        from multiprocessing.connection import wait

        fork = get_context("fork")
        # Workers are forked with Ctrl-C and SIGTERM held back, until start_worker has replaced the
        # build's own handlers (which would make a worker print a KeyboardInterrupt traceback).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        workers = {}
        try:
            for share in range(self.jobs):
                reader, writer = fork.Pipe(duplex=False)
                worker = fork.Process(target=work, args=(os.getpid(), context, function, items[share :: self.jobs], writer), daemon=True)
                worker.start()
                writer.close()
                workers[reader] = worker
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        try:
            pending = dict(workers)
            while pending:
                # Wake now and then: a stop whose KeyboardInterrupt was swallowed still stops.
                for reader in wait(list(pending), timeout=0.5):
                    try:
                        kind, payload = reader.recv()
                    except EOFError:
                        raise InputError([Problem(Mark("build"), f"a render worker died (exit status {pending[reader].exitcode}); build again")]) from None
                    if kind == "done":
                        del pending[reader]
                    elif kind == "raised":
                        raise payload
                    else:
                        yield payload
                stop_if_asked()
        finally:
            for reader, worker in workers.items():
                if worker.is_alive():
                    worker.kill()
                worker.join()
                reader.close()


def work(parent: int, context: RenderContext | None, function, items: list, results) -> None:
    """A render worker: apply function to each item, sending each result, or the exception, back."""
    start_worker(parent, context)
    try:
        for item in items:
            results.send(("result", function(item)))
        results.send(("done", None))
    except Exception as exc:  # noqa: BLE001 - handed to the build, which raises it as its own
        try:
            results.send(("raised", exc))
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            results.send(("raised", RuntimeError(repr(exc))))
    finally:
        results.close()


STOP = threading.Event()
"""Set when the user asked the build to stop (Ctrl-C, SIGTERM). The KeyboardInterrupt raised then can
land where Python swallows it (a finalizer, a pool's start-up), so the pipeline also looks here."""


def stop_if_asked() -> None:
    if STOP.is_set():
        raise KeyboardInterrupt


def start_worker(parent: int, context: RenderContext | None) -> None:
    """Set up a render worker: it dies with the build, leaves Ctrl-C to it, and knows the context.

    A worker shares the build's open lock file (fork): one that outlived a killed build would keep
    every later build waiting. Linux kills it when the build dies (PR_SET_PDEATHSIG); a build that
    stops kills its workers itself.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the build stops its workers itself, and says so once
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the build died before the line above took effect
        os._exit(1)
    if context is not None:
        use_context(context)


PR_SET_PDEATHSIG = 1


# ---------------------------------------------------------------------------------- for check, links and tests


@dataclass(frozen=True)
class Project:
    """Everything a build reads, parsed: the site, its labs in number order and their starters."""

    root: Path
    site: Site
    labs: tuple[Lab, ...]
    sources: dict[str, SourceFile]
    """Starter path → highlighted file."""


def load_project(site_path: Path, cache_dir: Path | None = None) -> Project:
    """Read and parse the whole project, every lab and starter, without building anything."""
    ws = Workspace.open(site_path, cache_dir=cache_dir)
    site, manifests, cards, parsed = read_and_parse(ws, BuildState(), Session(jobs=1))
    texts = read_starters(ws, cards)
    sources = {path: highlighted(ws, path, text) for path, (text, _) in texts.items()}
    labs = tuple(sorted(parsed.values(), key=lambda lab: lab.number))
    return Project(ws.root, site, labs, sources)


def resolve(project: Project) -> tuple[ResolvedLab, ...]:
    """Resolve every lab's excerpt, raising InputError with every problem."""
    from infralens.resolve import resolve_excerpt

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
    from infralens.render import Page

    ws = Workspace.open(site_path, cache_dir=cache_dir)
    with_memory = MemoryStaging()
    session = Session(jobs=1)
    site, _, _, parsed, theme, units = prepare(ws, BuildState(), session)
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

