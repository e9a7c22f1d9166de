"""Unchanged: say, from file stamps alone, that a build would find nothing to do.

A build that finishes records the stamp (what `lstat` says: kind, size, inode, mtime and ctime) of
everything it was made from and everything it left: site.yml, labs/ and each manifest, each
starter's folder (every file a run key hashes) and the folders above it, the stored runs it read
and their artifacts, the theme, the tool's own code and the folders packages are installed in,
output/ with each of its folders and files, and the build state in the cache. The next
`infralens build` stats those paths before it imports anything else; when every stamp is the same,
the site is already what a build would make, and it says so without reading a file.

Stamps are only as good as the clock: a file changed within the same clock tick as its stamp could
keep it. As git does with its index, a record is not written while any input is younger than
RACY_NS (its mtime or ctime, which no tool can set back): the next build is then a full one. The
ctime catches a change that kept the mtime (`cp -p`, `touch -d`).

Standard library only: this module is imported on every build, before the build itself is.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from pathlib import Path
from typing import Iterable, Iterator

FORMAT = "unchanged-1"
"""Version of the record's layout, part of its key."""

RACY_NS = 2_000_000_000
"""How much younger than the build an input must not be for its stamp to be trusted (2 s: a
coarse file-system clock, or one with 2 s steps, still changes within it)."""

CACHE_ENV = "INFRALENS_CACHE_DIR"
"""Environment variable that moves the cache folder (the `--cache-dir` option wins over it)."""

DEFAULT_CACHE = ".infralens"
"""The cache folder's name in the site root when nothing else is said (git-ignored)."""

Stamp = tuple[int, int, int, int, int] | None
"""(mode, size, inode, mtime_ns, ctime_ns) of a path as lstat sees it; None when there is none."""


def cache_folder(site_path: Path, cache_dir: Path | None) -> Path:
    """The cache folder of a site: the option's, else the environment's, else .infralens beside site.yml."""
    return cache_dir or (Path(os.environ[CACHE_ENV]) if os.environ.get(CACHE_ENV) else site_path.parent / DEFAULT_CACHE)


def stamp(path: str) -> Stamp:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_mode, info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def record_path(site_path: Path, out_dir: Path, cache: Path, strict: bool) -> Path:
    """Where the record of the last build of this site into this folder is kept."""
    key = "\0".join((FORMAT, sys.version, os.path.abspath(site_path), os.path.abspath(out_dir), str(strict)))
    return cache / "unchanged" / f"{hashlib.blake2b(key.encode(), digest_size=16).hexdigest()}.pickle"


def unchanged_labs(site_path: Path, out_dir: Path, cache: Path, strict: bool) -> int | None:
    """The number of labs of the site when the last build's record holds, every stamp the same;
    None when something changed (or there is no record, or a killed build left its staging folder)."""
    try:
        with open(record_path(site_path, out_dir, cache, strict), "rb") as file:
            labs, paths, stamps = pickle.load(file)
    except Exception:  # noqa: BLE001 - a damaged record (pickle raises any of a dozen errors on garbage) is no record
        return None
    parent = os.path.dirname(os.path.abspath(out_dir))
    leftover = f".{os.path.basename(os.path.abspath(out_dir))}.new-"
    try:
        if any(name.startswith(leftover) for name in os.listdir(parent)):
            return None  # the build finishes or removes what a killed one left
    except OSError:
        return None
    for path, was in zip(paths, stamps):
        if stamp(path) != was:
            return None
    return labs if len(paths) == len(stamps) else None


def forget(site_path: Path, out_dir: Path, cache: Path, strict: bool) -> None:
    """Drop the record (a build that failed, or is about to change output/, leaves none)."""
    try:
        os.unlink(record_path(site_path, out_dir, cache, strict))
    except OSError:
        pass


def remember(site_path: Path, out_dir: Path, cache: Path, strict: bool, labs: int, inputs: Iterable[str], outputs: Iterable[str], started_ns: int) -> bool:
    """Record the stamps of a finished build's inputs and outputs; False (and no record) when an
    input is too young to trust (see RACY_NS) or the record cannot be written.

    The inputs and outputs are taken one at a time: the first young input ends it (a build just
    after an edit lists and stats nothing more)."""
    paths: list[str] = []
    stamps: list[Stamp] = []
    recent = started_ns - RACY_NS
    for path in distinct(inputs):
        found = stamp(path)
        if found is not None and (found[3] >= recent or found[4] >= recent):
            forget(site_path, out_dir, cache, strict)
            return False
        paths.append(path)
        stamps.append(found)
    for path in dict.fromkeys(outputs):
        paths.append(path)
        stamps.append(stamp(path))
    target = record_path(site_path, out_dir, cache, strict)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        partial.write_bytes(pickle.dumps((labs, paths, stamps), protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(partial, target)
    except OSError:
        return False
    return True


def distinct(paths: Iterable[str]) -> Iterator[str]:
    """Each path once, in order, as they come."""
    seen: set[str] = set()
    for path in paths:
        if path not in seen:
            seen.add(path)
            yield path


def tree(folder: str) -> list[str]:
    """A folder and everything under it, folders included, never following a link."""
    found = [folder]
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            found += tree(entry.path)
        else:
            found.append(entry.path)
    return found


def tool_paths() -> list[str]:
    """The tool's own code and the folders packages are installed in: a new release of the tool,
    an edited module, or a package installed or removed (torch's release is in every run key)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = [path for path in tree(package) if "__pycache__" not in path]
    found += [folder for folder in sys.path if folder.endswith(("site-packages", "dist-packages")) and os.path.isdir(folder)]
    return found
