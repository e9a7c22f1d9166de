"""The model of site.yml: the site's title, tagline and tracks."""

from __future__ import annotations

from dataclasses import dataclass

from infralens.errors import Mark
from infralens.model.declare import declared, derived, record
from infralens.model.schema import MARKDOWN, ListOf, Prose, Text, Url

ID_PATTERN = r"[a-z0-9][a-z0-9-]*"
"""What a track id and a lab id (a manifest's file stem) may look like."""


@dataclass(frozen=True)
class Track:
    """A group of labs on the index."""

    id: str = declared(Text("Identifier that lab manifests name in `track:`.", ID_PATTERN, "a lowercase id like 'foundations'"), required=True)
    title: str = declared(Text("Heading of the track on the index, e.g. 'Foundations / Calculators'."), required=True)
    mark: Mark = derived("Where site.yml declares the track.")
    summary: str | None = declared(Prose("One or two sentences under the track's heading on the index: what it teaches and what it builds on. " + MARKDOWN))


@dataclass(frozen=True, kw_only=True)
class Site:
    """InfraLens site configuration."""

    title: str = declared(Text("Site name shown on every page."), required=True)
    tagline: str = declared(Text("One line under the title on the index."), required=True)
    base_url: str | None = declared(Url("Public address of the built site (used for canonical links; pages link relatively)."))
    tracks: tuple[Track, ...] = declared(ListOf(record(Track, "track", finish=lambda f, ctx: {"mark": f.mark}), "Tracks in the order the index lists them.", min_items=1), required=True)
    path: str = derived("site.yml, as given on the command line.")
