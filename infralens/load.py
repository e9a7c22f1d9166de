"""Load stage: the disk → site.yml, lab manifests and starter files as models.

The only module of the build that reads files. Every problem is collected; `load_project` raises
one InputError with all of them.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from infralens.errors import InputError, Mark, Problems
from infralens.highlight import highlight_key, source_file
from infralens.manifest import ID_PATTERN, parse_lab, parse_site
from infralens.models import Lab, Site, SourceFile, Starter


@dataclass(frozen=True)
class Project:
    """Everything the build reads: the site, its labs in number order and their starters."""

    root: Path
    site: Site
    labs: tuple[Lab, ...]
    sources: dict[str, SourceFile]
    """Starter path → highlighted file."""


def display_path(path: Path, root: Path) -> str:
    """Show a path relative to the project root when it is inside it, as errors should."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def read_text(path: Path, shown: str, problems: Problems, mark: Mark | None = None) -> str | None:
    """Read a UTF-8 file, recording a problem instead of raising."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        problems.add(mark or Mark(shown), f"file not found: {shown}")
    except UnicodeDecodeError as exc:
        problems.add(mark or Mark(shown), f"{shown} is not UTF-8 text ({exc.reason} at byte {exc.start})")
    except OSError as exc:
        problems.add(mark or Mark(shown), f"cannot read {shown}: {exc.strerror}")
    return None


HIGHLIGHT_CACHE = Path(".infralens") / "highlight"


def highlighted_source(root: Path, path: str, text: str) -> SourceFile:
    """Highlight a starter, reusing the highlighted lines stored for the same content."""
    cached = root / HIGHLIGHT_CACHE / f"{highlight_key(path, text)}.json"
    try:
        lines, language = json.loads(cached.read_text(encoding="utf-8"))
        return source_file(path, text, (tuple(lines), language))
    except (OSError, ValueError):
        pass
    source = source_file(path, text)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps([[line.html for line in source.lines], source.language]), encoding="utf-8")
        partial.replace(cached)
    except OSError:
        pass  # a read-only checkout still builds, just without the cache
    return source


def starter_file(root: Path, starter: Starter) -> Path | str:
    """Return the starter's real path, or why it is not an allowed starter path."""
    pure = PurePosixPath(starter.path)
    if pure.is_absolute() or "\\" in starter.path:
        return f"starter path {starter.path!r} must be relative to the repository, under code/"
    if ".." in pure.parts:
        return f"starter path {starter.path!r} must not contain '..'; starters live under code/"
    if pure.parts[0] != "code" or len(pure.parts) < 2:
        return f"starter path {starter.path!r} must be under code/"
    code = (root / "code").resolve()
    real = (root / pure).resolve()
    if not real.is_relative_to(code):
        return f"starter path {starter.path!r} leaves code/ through a symlink (to {display_path(real, root)})"
    if not real.exists():
        return f"starter not found: {starter.path}"
    if not real.is_file():
        return f"starter {starter.path!r} is not a file"
    return real


def load_project(site_path: Path) -> Project:
    """Read site.yml, every labs/*.yml and every starter they declare."""
    problems = Problems()
    root = site_path.parent
    shown_site = display_path(site_path, root)
    text = read_text(site_path, shown_site, problems)
    if text is None:
        problems.raise_if_any()  # without site.yml there is no project to look further into
    site = None
    if text is not None:
        try:
            site = parse_site(shown_site, text)
        except InputError as exc:
            problems.extend(exc.problems)
    labs: list[Lab] = []
    labs_dir = root / "labs"
    manifests = sorted(labs_dir.glob("*.yml")) + sorted(labs_dir.glob("*.yaml"))
    if not manifests:
        problems.add(Mark(display_path(labs_dir, root)), "no lab manifests (labs/*.yml) found")
    stems: dict[str, str] = {}
    for manifest in manifests:
        shown = display_path(manifest, root)
        if manifest.stem in stems:
            problems.add(Mark(shown), f"lab id {manifest.stem!r} is already used by {stems[manifest.stem]}")
            continue
        stems[manifest.stem] = shown
        if not re.fullmatch(ID_PATTERN, manifest.stem):
            problems.add(Mark(shown), f"lab id {manifest.stem!r} (the file name) must be lowercase letters, digits and '-'")
            continue
        text = read_text(manifest, shown, problems)
        if text is None:
            continue
        try:
            labs.append(parse_lab(shown, manifest.stem, text))
        except InputError as exc:
            problems.extend(exc.problems)
    sources: dict[str, SourceFile] = {}
    for lab in labs:
        for starter in lab.starters:
            if starter.path in sources:
                continue
            real = starter_file(root, starter)
            if isinstance(real, str):
                problems.add(starter.mark, real)
                continue
            text = read_text(real, starter.path, problems, starter.mark)
            if text is not None:
                sources[starter.path] = highlighted_source(root, starter.path, text)
    problems.raise_if_any()
    assert site is not None
    return Project(root, site, tuple(sorted(labs, key=lambda lab: lab.number)), sources)
