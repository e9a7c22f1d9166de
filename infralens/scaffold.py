"""Scaffold: `infralens new` → a manifest and a starter that build and check pass at once.

The skeleton files (infralens/skeleton/*.tmpl, shipped with the package) are a contributor's
starting point, so they say what to replace and how each part is used; every number the page
states is one the starter prints.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from infralens.build import load_project
from infralens.errors import InputError, Mark, Problem
from infralens.schema import did_you_mean

LAB_ID = re.compile(r"lab-(?P<number>\d{2,3})-(?P<slug>[a-z0-9]+(?:-[a-z0-9]+)*)")


def skeleton(name: str) -> str:
    """Return the text of one of the packaged skeleton files."""
    from importlib.resources import files

    return (files("infralens") / "skeleton" / name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Scaffold:
    """The two files `new` wrote."""

    manifest: Path
    starter: Path


def new_lab(site_path: Path, lab_id: str, track: str, title: str) -> Scaffold:
    """Write a manifest and a starter for a new lab, refusing to overwrite anything."""
    root = site_path.parent
    match = LAB_ID.fullmatch(lab_id)
    if not match:
        raise InputError([Problem(Mark(lab_id), "lab id must look like lab-NN-slug, e.g. lab-15-speculative-decoding")])
    project = load_project(site_path)
    tracks = [t.id for t in project.site.tracks]
    problems = []
    if track not in tracks:
        problems.append(Problem(Mark(project.site.path), f"unknown track {track!r}{did_you_mean(track, tracks)}; tracks: {', '.join(tracks)}"))
    if not title.strip() or any(unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") for char in title):
        problems.append(Problem(Mark("--title"), f"title {title!r} must be one line of visible text, without control characters"))
    number = int(match.group("number"))
    taken = next((lab for lab in project.labs if lab.number == number), None)
    if taken:
        problems.append(Problem(taken.number_mark, f"lab number {number} is already used by {taken.id}"))
    manifest = root / "labs" / f"{lab_id}.yml"
    module = match.group("slug").replace("-", "_")
    starter = root / "code" / lab_id / f"{module}.py"
    for path in (manifest, starter.parent):
        if path.exists():
            problems.append(Problem(Mark(str(path.relative_to(root))), "already exists; infralens new never overwrites"))
    if problems:
        raise InputError(problems)
    starter.parent.mkdir(parents=True)
    # The title goes into a Python docstring and a YAML string: escaped for each, so any title
    # that passed the check above writes files that build and run.
    in_docstring = title.replace("\\", "\\\\").replace('"', '\\"')
    starter.write_text(skeleton("starter.py.tmpl").format(title=in_docstring), encoding="utf-8")
    manifest.write_text(
        skeleton("lab.yml.tmpl").format(number=number, title=json.dumps(title, ensure_ascii=False), track=track, lab_id=lab_id, module=module),
        encoding="utf-8",
    )
    return Scaffold(manifest, starter)
