"""The build pipeline: read (one Snapshot) → plan → render → shared files → links → commit.

Work is per lab. Each lab's pages (its lab page and the source views of its starters) and its
search documents are keyed by a hash of everything they are made from: its manifest and starter
texts, site.yml, the theme, the tool's version, the recorded runs of its starters and the few
neighbours its navigation names. A lab whose key is unchanged, with its files still in output/ as
the last build left them, is not parsed, rendered or written again. Cold work is spread over the
cores. The read stage takes the project from the workspace once (build.read.Snapshot); planning
works on that snapshot alone; the commit into output/ happens once, at the end.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from infralens.build.pages import check_site_links, render_units, write_shared
from infralens.build.plan import BuildState, Unit, UnitRecord, plan
from infralens.build.read import Snapshot, digest_manifest, read_snapshot
from infralens.build.session import Session
from infralens.build.workers import stop_if_asked
from infralens.errors import InputError, Mark, Problem
from infralens.project import unchanged
from infralens.project.workspace import SITE_MARKER, Seen, Workspace
from infralens.text import mathml


@dataclass(kw_only=True, frozen=True)
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


def build(ws: Workspace, *, strict: bool = False, full: bool = False, session: "Session | None" = None) -> BuildSummary:
    """Build the site into ws.out, redoing only the labs whose inputs changed; raise InputError on any problem.

    With `strict`, a broken internal link or anchor, or a non-http(s) external link, fails the build.
    With `full`, every lab is rendered again. `session` keeps parsed state between builds of a
    long-running process (`serve`).
    """
    started = time.perf_counter()
    started_ns = time.time_ns()  # the clock file stamps are read against (see project/unchanged.py)
    ws.check_out_dir()
    mathml.keep_in(ws.cache / "mathml")
    with ws.lock():
        try:
            session = session or Session()
            summary, stamped = _build(ws, strict=strict, full=full, session=session, started=started, started_ns=started_ns)
            if not session.keep_state:  # a long-lived `serve` keeps its state in memory, not on disk
                if stamped is None:  # a file it read was too young to trust: so is a record
                    unchanged.forget(ws.site_file, ws.out, ws.cache, strict)
                else:
                    inputs, outputs = stamped()
                    unchanged.remember(ws.site_file, ws.out, ws.cache, strict, summary.labs, inputs, outputs, started_ns)
            return summary
        except OSError as exc:  # output/ or its parent cannot be written: a problem of the input, said as one
            where = exc.filename or str(ws.out)
            raise InputError([Problem(Mark(str(where)), f"cannot write the site: {exc.strerror or exc}")]) from None


def _build(ws: Workspace, *, strict: bool, full: bool, session: "Session", started: float, started_ns: int) -> tuple[BuildSummary, Callable[[], tuple[Iterator[str], Iterator[str]]] | None]:
    """Build; return the summary, and how to list the paths the build was made from and those it
    left (for `unchanged`: the next build that finds them all as they were has nothing to do), or
    None when a file it read was too young to trust its stamp."""
    state = session.state_for(ws)
    if full:  # nothing remembered: every starter's run key is hashed again too
        session.run_keys.clear()
    if not (state.units or state.shared):
        ws.check_not_foreign(SITE_MARKER)
    site_state = state.site
    seen = Seen({} if full else state.seen, started_ns)
    read, units = prepare(ws, state, session, seen)
    site, theme = read.site, read.theme
    kept = {lab_id: record for lab_id, record in state.units.items() if not full and lab_id in units and record.key == units[lab_id].key}
    present = ws.present({path: stamp for record in kept.values() for path, stamp in record.files.items()})
    kept = {lab_id: record for lab_id, record in kept.items() if all(path in present for path in record.files)}
    dirty = [unit for lab_id, unit in units.items() if lab_id not in kept]
    staging = ws.staging()
    try:
        outcomes: dict[str, list[str]] = {}
        problems: list[Problem] = []
        for outcome in render_units(ws, site, theme, dirty, read.parsed, session):
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
    cards_by_digest = {digest_manifest(m): read.cards[m.lab_id] for m in read.manifests}
    if written or removed or cards_by_digest != state.cards or session.run_keys != state.run_keys or state.site is not site_state or seen.now != state.seen:
        state.cards = cards_by_digest
        state.run_keys = session.run_keys
        state.seen = seen.now
        session.save_state(ws, state)
    elif session.keep_state:
        session.save_state(ws, state)
    html = sum(path.endswith(".html") for path in written)
    summary = BuildSummary(labs=len(units), rendered=len(outcomes), pages=html, files=len(written) - html, removed=len(removed), seconds=time.perf_counter() - started, out_dir=ws.out)
    if seen.young:
        return summary, None
    return summary, lambda: (made_from(ws, read, units, session), left(ws, produced, session))


def made_from(ws: Workspace, read: Snapshot, units: dict[str, Unit], session: "Session") -> Iterator[str]:
    """Every path a build read: site.yml, labs/, each starter's folder and the folders above it,
    the stored runs and their artifacts, the theme, and the tool itself; listed as they are asked
    for (the record stops at the first input too young to trust)."""
    root, code = str(ws.root), os.path.join(str(ws.root), "code")
    # templates/ is named even when there is none: a site's own theme, once added, is read
    yield from (str(ws.site_file), os.path.join(root, "templates"))
    yield from unchanged.tree(os.path.join(root, "labs"))
    yield code
    folders = {os.path.dirname(os.path.join(root, starter.path)) for unit in units.values() for starter in unit.card.starters}
    for folder in sorted(folders):
        above = os.path.dirname(folder)
        while len(above) > len(code):  # the folders between code/ and the starter's: a link there moves it
            yield above
            above = os.path.dirname(above)
        yield from unchanged.tree(folder)
    runs = str(ws.runs_folder())
    yield runs
    for _, key in session.run_keys.values():
        yield from unchanged.tree(os.path.join(runs, key))
    for folder in read.theme.dirs:
        yield from unchanged.tree(str(folder))
    yield from unchanged.tool_paths()


def left(ws: Workspace, produced: set[str], session: "Session") -> Iterator[str]:
    """Every path a build left: output/ with each folder and file, and the build state (listed
    when asked for: a record that ends at a young input needs none)."""
    out = str(ws.out)
    folders: set[str] = set()
    for path in produced:
        parent = os.path.dirname(path)
        while parent and parent not in folders:
            folders.add(parent)
            parent = os.path.dirname(parent)
    yield out
    yield from (os.path.join(out, path) for path in (*sorted(folders), *sorted(produced)))
    yield str(ws.cache_path("state", session.state_key(ws)))


def prepare(ws: Workspace, state: BuildState, session: "Session", seen: Seen | None = None) -> tuple[Snapshot, dict[str, Unit]]:
    """Read the project once and key every lab's share of the build: all a build does before
    rendering. With `seen`, a file as the last build read it is not read again."""
    read = read_snapshot(ws, state, session, seen)
    return read, plan(read.site, list(read.manifests), read.cards, read.starters, read.runs, read.theme.key)
