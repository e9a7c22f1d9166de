"""Plan: the labs' cards, starters and recorded runs → each lab's share of the build, keyed.

Pure. A lab's key hashes everything its pages are made from: its manifest and starter texts,
site.yml, the theme, the tool's version, its starters' recorded runs and the few neighbours its
navigation names. A lab whose key did not change, and whose files are still in output/, is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infralens import __version__
from infralens.model.lab import LabCard
from infralens.model.run import RunResult
from infralens.model.site import Site
from infralens.project.commit import Stamp
from infralens.project.workspace import FileStamp, Manifest, digest


@dataclass
class UnitRecord:
    """What the last build made for one lab: its key and the files it wrote."""

    key: str
    files: dict[str, Stamp]


@dataclass(kw_only=True)
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
    seen: dict[tuple[str, str], tuple[FileStamp, str]] = field(default_factory=dict)
    """What the last build read: (kind, path) → (file stamp, digest); see `workspace.Seen`."""


@dataclass(kw_only=True, frozen=True)
class Unit:
    """One lab's share of a build: what its pages are made from."""

    manifest: Manifest
    card: LabCard
    sources: tuple[tuple[str, str | None], ...]
    """(path, text) of each of the lab's starters; the text is None for a starter as the last build
    read it (`Workspace.starter_text` reads it, see `pages.texts_of`)."""
    source_digests: tuple[str, ...]
    """A hash of each starter's text, in the order of `sources`, computed once as it was read."""
    runs: tuple[tuple[tuple[str, str], RunResult], ...]
    """The stored result of each run of the lab's starters, by (starter path, device)."""
    nav: "Nav"
    key: str
    search_key: str


@dataclass(kw_only=True, frozen=True)
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


def plan(
    site: Site, manifests: list[Manifest], cards: dict[str, LabCard], starters: dict[str, tuple[str | None, str]], runs: dict[tuple[str, str], RunResult], theme_key: str
) -> dict[str, Unit]:
    """Key each lab's share of the build by everything its pages and search documents are made from."""
    ordered = sorted(cards.values(), key=lambda card: card.number)
    site_key = digest(__version__, theme_key, repr(site))
    tracks_key = digest(repr(site.tracks))
    by_id = {m.lab_id: m for m in manifests}
    navs = navigation(site, ordered)
    names = {card.id: named(card) for card in ordered}
    units = {}
    for card in ordered:
        manifest = by_id[card.id]
        sources = tuple((s.path, starters[s.path][0]) for s in card.starters)
        lab_runs = tuple(((s.path, run.device), runs[s.path, run.device]) for s in card.starters for run in s.runs if (s.path, run.device) in runs)
        source_key = digest(*(f"{s.path}\0{starters[s.path][1]}" for s in card.starters))
        search_key = digest(__version__, "search", tracks_key, manifest.key, source_key)
        nav = navs[card.id]
        key = digest(site_key, manifest.key, source_key, repr(lab_runs), nav_key(nav, names))
        digests = tuple(starters[s.path][1] for s in card.starters)
        units[card.id] = Unit(manifest=manifest, card=card, sources=sources, source_digests=digests, runs=lab_runs, nav=nav, key=key, search_key=search_key)
    return units


def named(card: LabCard) -> str:
    """What a lab page shows of a neighbour: its id, number, title and question count."""
    return f"{card.id}\0{card.number}\0{card.title}\0{card.questions}"


def nav_key(nav: Nav, names: dict[str, str]) -> str:
    """Hash what a lab page shows of its neighbours (`names`: each card's `named`, made once) and the track."""
    def name(card: LabCard | None) -> str:
        return names[card.id] if card else "-"

    return digest(nav.track_title, str(nav.before), str(nav.after), name(nav.previous), name(nav.next), repr(nav.other_tracks), *(names[card.id] for card in nav.window))


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
            track_title=titles.get(card.track, card.track),
            window=tuple(track[low:high]),
            before=low,
            after=len(track) - high,
            previous=ordered[index - 1] if index > 0 else None,
            next=ordered[index + 1] if index + 1 < len(ordered) else None,
            other_tracks=tuple(pair for pair in filled if pair[0] != card.track),
        )
    return navs
