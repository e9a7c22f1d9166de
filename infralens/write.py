"""Write stage: rendered pages and copied files → output/, replaced as a whole.

Everything is written into a fresh sibling folder first; only when that has fully succeeded is the
old output/ swapped out by two renames on the same filesystem. A failed build leaves output/ exactly
as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from infralens.render import Page


@dataclass(frozen=True)
class Copy:
    """A file copied verbatim into the site (a raw starter, a static asset)."""

    source: Path
    dest: str


def write_files(folder: Path, pages: list[Page], copies: list[Copy]) -> None:
    """Write pages and copies under folder."""
    for page in pages:
        target = folder / page.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page.html, encoding="utf-8")
    for copy in copies:
        target = folder / copy.dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(copy.source, target)


def write_in_place(out_dir: Path, pages: list[Page], copies: list[Copy]) -> None:
    """Overwrite some files of an existing site, each file replaced whole (for `serve`)."""
    for page in pages:
        target = out_dir / page.path
        partial = target.with_name(f".{target.name}.new")
        partial.write_text(page.html, encoding="utf-8")
        partial.replace(target)
    for copy in copies:
        target = out_dir / copy.dest
        partial = target.with_name(f".{target.name}.new")
        shutil.copyfile(copy.source, partial)
        partial.replace(target)


def write_site(out_dir: Path, pages: list[Page], copies: list[Copy]) -> None:
    """Write pages and copies into a new folder and swap it in for out_dir."""
    out_dir = out_dir.absolute()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.new-", dir=out_dir.parent))
    try:
        write_files(staging, pages, copies)
        os.chmod(staging, 0o755)  # mkdtemp makes it private; a site is meant to be served
        swap_in(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def swap_in(staging: Path, out_dir: Path) -> None:
    """Replace out_dir by staging; on failure put the old folder back."""
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
    os.rmdir(retired)
    os.rename(out_dir, retired)
    try:
        os.rename(staging, out_dir)
    except BaseException:
        os.rename(retired, out_dir)
        raise
    shutil.rmtree(retired, ignore_errors=True)
