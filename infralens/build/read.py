"""Read stage: the project on disk → the site, every lab's card, the labs that changed, their starters.

The workspace does the reading (with its size and symlink guards); this stage parses what changed
since the last build (a manifest's card is kept by its digest) and reports every problem at once.
`load_project` is the same reading for `check`, `links`, `new` and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from infralens import __version__
from infralens.build.plan import BuildState
from infralens.build.session import Session, Theme
from infralens.check.results import ResultStore
from infralens.errors import InputError, Note, Problems, did_you_mean
from infralens.model.lab import Lab, LabCard, card_of
from infralens.model.parse import parse_lab, parse_site
from infralens.model.run import RunResult
from infralens.model.site import Site
from infralens.project.workspace import Manifest, Seen, Workspace, digest
from infralens.text.source import SourceFile


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """Everything a build reads, read once through the workspace: the stages after it plan and
    render from these values; only the caches and the result store's artifacts are read again."""

    site: Site
    manifests: tuple[Manifest, ...]
    cards: dict[str, LabCard]
    """A card per lab id: parsed in this build, or kept from the last by its manifest's digest."""
    parsed: dict[str, Lab]
    """The labs parsed in this build, by id (the others are parsed where they are rendered)."""
    starters: dict[str, tuple[str | None, str]]
    """Starter path → (text, digest of the text); the text is None for a starter as the last build
    read it (`Workspace.starter_text` reads it when its lab is rendered again)."""
    runs: dict[tuple[str, str], RunResult]
    """The stored result of each run of each starter's current version, by (path, device)."""
    theme: Theme


def read_snapshot(ws: Workspace, state: BuildState, session: Session, seen: Seen | None = None) -> Snapshot:
    """Read and check the project: site.yml, the manifests (parsing those that changed), the
    starters, their recorded runs and the theme; raise InputError with every problem. With `seen`,
    a manifest or starter whose stamp is what the last build read is not read again."""
    site, manifests, cards, parsed = read_and_parse(ws, state, session, seen)
    starters = read_starters(ws, cards, seen)
    return Snapshot(
        site=site, manifests=tuple(manifests), cards=cards, parsed=parsed, starters=starters,
        runs=recorded_runs(ws, cards, session), theme=session.theme(ws),
    )


def read_and_parse(ws: Workspace, state: BuildState, session: "Session", seen: Seen | None = None) -> tuple[Site, list[Manifest], dict[str, LabCard], dict[str, Lab]]:
    """Read site.yml and every manifest; parse the manifests that changed since the last build.

    Returns the site, the manifests, a card per lab id, and the labs parsed in this build by id.
    """
    problems = Problems()
    site_shown, site_text = ws.read_site()
    site_key = digest(__version__, site_shown, site_text)
    site = state.site[1] if state.site and state.site[0] == site_key else None
    if site is None:
        try:
            site = parse_site(site_shown, site_text)
            state.site = (site_key, site)
        except InputError as exc:
            problems.extend(exc.problems)
    manifests = ws.read_manifests(problems, seen)
    cards: dict[str, LabCard] = {}
    to_parse = []
    for manifest in manifests:
        card = state.cards.get(digest_manifest(manifest))
        if card is not None and card.path == manifest.path:
            cards[manifest.lab_id] = card
            continue
        try:
            to_parse.append(replace(manifest, text=ws.manifest_text(manifest)))
        except InputError as exc:
            problems.extend(exc.problems)
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
    """The key a manifest's card is kept under in the build state."""
    return card_key(manifest.key)


@lru_cache(maxsize=16384)  # asked twice per manifest in a build
def card_key(manifest_key: str) -> str:
    return digest(__version__, manifest_key)


def parse_one(manifest: Manifest) -> Lab | InputError:
    """Parse one manifest, its text read (in a worker process when there are many)."""
    assert manifest.text is not None
    try:
        return parse_lab(manifest.path, manifest.lab_id, manifest.text)
    except InputError as exc:
        return exc


def check_cards(site: Site, cards: list[LabCard], problems: Problems) -> None:
    """Report tracks site.yml does not declare and lab numbers used twice."""
    tracks = [track.id for track in site.tracks]
    by_number: dict[int, LabCard] = {}
    for card in cards:
        if card.track not in tracks:
            problems.add(card.track_mark, f"unknown track {card.track!r}{did_you_mean(card.track, tracks)}; tracks in {site.path}: {', '.join(tracks)}")
        first = by_number.get(card.number)
        if first is not None:
            problems.add(card.number_mark, f"lab number {card.number} is already used by {first.path}", Note(first.number_mark, f"{first.id} has lab number {card.number}"))
        else:
            by_number[card.number] = card


def read_starters(ws: Workspace, cards: dict[str, LabCard], seen: Seen | None = None) -> dict[str, tuple[str | None, str]]:
    """Read every starter the labs declare: path → (text, digest of the text); with `seen`, the
    text of a starter as the last build read it is None."""
    problems = Problems()
    texts: dict[str, tuple[str | None, str]] = {}
    owners: dict[str, LabCard] = {}
    for card in cards.values():
        for starter in card.starters:
            if starter.path in owners:
                if owners[starter.path].id != card.id:
                    other = owners[starter.path]
                    problems.add(starter.mark, f"starter {starter.path!r} is already a starter of {other.id}; a starter belongs to one lab")
                continue
            owners[starter.path] = card
            found = ws.read_starter(starter.path, starter.mark, problems, seen)
            if found is not None:
                texts[starter.path] = found
    problems.raise_if_any()
    return texts


def recorded_runs(ws: Workspace, cards: dict[str, LabCard], session: "Session") -> dict[tuple[str, str], RunResult]:
    """Return the stored result of each run of each starter's current version, by (path, device)."""
    store = ResultStore(ws.runs_folder())
    found = {}
    problems = Problems()
    for card in cards.values():
        for starter in card.starters:
            for run in starter.runs:
                try:
                    result = store.load(session.run_key(ws, starter, run))
                except InputError as exc:  # said with how to mend it; a build publishes no record it cannot trust
                    problems.extend([replace(p, notes=(*p.notes, Note(starter.mark, f"`infralens check {card.id}` records this run again"))) for p in exc.problems])
                    continue
                if result is not None:
                    found[starter.path, run.device] = result
    problems.raise_if_any()
    return found


def highlighted(ws: Workspace, path: str, text: str) -> SourceFile:
    """Highlight a starter, reusing the highlighted lines stored for the same content."""
    # deferred: a build with nothing to render highlights nothing, and the highlighter loads html's entities
    from infralens.text.highlight import highlight_key, highlight_lines, source_file

    key = highlight_key(path, text)
    lines = ws.recall("highlight", key)
    if lines is None:
        lines = highlight_lines(path, text)
        ws.store("highlight", key, lines)
    return source_file(path, text, lines)


@dataclass(kw_only=True, frozen=True)
class Project:
    """Everything a build reads, parsed: the site, its labs in number order and their starters."""

    root: Path
    site: Site
    labs: tuple[Lab, ...]
    sources: dict[str, SourceFile]
    """Starter path → highlighted file."""
    manifests: dict[str, str]
    """Lab id → its manifest's text, as read."""

    @property
    def texts(self) -> dict[str, str]:
        """Starter path → its text, as read."""
        return {path: source.text for path, source in self.sources.items()}


def load_project(site_path: Path, cache_dir: Path | None = None) -> Project:
    """Read and parse the whole project, every lab and starter, without building anything."""
    ws = Workspace.open(site_path, cache_dir=cache_dir)
    site, manifests, cards, parsed = read_and_parse(ws, BuildState(), Session(jobs=1))
    texts = read_starters(ws, cards)
    sources = {path: highlighted(ws, path, text) for path, (text, _) in texts.items() if text is not None}
    labs = tuple(sorted(parsed.values(), key=lambda lab: lab.number))
    return Project(root=ws.root, site=site, labs=labs, sources=sources, manifests={manifest.lab_id: ws.manifest_text(manifest) for manifest in manifests})
