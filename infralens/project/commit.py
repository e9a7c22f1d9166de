"""Commit: the one way a build writes output/: staged beside it, then journaled into place.

A build writes every file into a staging folder next to output/, then moves them in under a
journal: a commit cut short is rolled back, one killed outright is finished by the next build, and
no reader ever sees a half-written file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Stamp:
    """How a file in output/ looked when a build wrote it."""

    size: int
    mtime_ns: int


@dataclass
class Staging:
    """A folder beside output/ holding one build's new and changed files until the commit.

    Its `site/` holds the files at their site paths; `journal` (written when the commit starts) names
    the files to move in and to remove; `old/` keeps each file of output/ the commit displaced, by
    hard link, until the commit is done. Both directions of a commit are worked out from what is on
    disk, so either can be resumed after the process was killed.
    """

    folder: Path
    written: list[str] = field(default_factory=list)
    made: set[str] = field(default_factory=set)
    remove: list[str] = field(default_factory=list)

    @property
    def site(self) -> Path:
        return self.folder / "site"

    def target(self, path: str) -> str:
        parent = os.path.dirname(path)
        if parent and parent not in self.made:
            os.makedirs(os.path.join(self.site, parent), exist_ok=True)
            self.made.add(parent)
        self.written.append(path)
        return os.path.join(self.site, path)

    def write(self, path: str, content: str | bytes) -> None:
        with open(self.target(path), "wb") as file:
            file.write(content.encode("utf-8") if isinstance(content, str) else content)

    def copy(self, source: Path, path: str) -> None:
        shutil.copyfile(source, self.target(path))

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------------ the journaled commit

    def begin(self, remove: list[str]) -> None:
        """Write the journal: from here on, a killed build's commit is finished by the next one."""
        self.remove = remove
        atomic_write(self.folder / "journal", json.dumps({"written": self.written, "remove": remove}).encode())

    def roll_forward(self, out: Path) -> None:
        """Move every file still staged into output/ and remove the files the new site does not have."""
        made: set[Path] = set()
        for path in self.written:
            staged, target = self.site / path, out / path
            if not staged.exists():
                continue  # moved in before the process was killed
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            self._keep_old(target, path)
            os.replace(staged, target)
        for path in self.remove:
            target = out / path
            if target.exists() or target.is_symlink():
                self._keep_old(target, path)
                target.unlink()
            prune_empty(out, target.parent)

    def roll_back(self, out: Path) -> None:
        """Put output/ back as it was before `roll_forward` began, however far that got."""
        for path in self.written:
            target, old = out / path, self.folder / "old" / path
            if (self.site / path).exists():
                continue  # never moved in
            if old.exists():
                os.replace(old, target)
            else:
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()
                prune_empty(out, target.parent)
        for path in self.remove:
            old = self.folder / "old" / path
            if old.exists():
                (out / path).parent.mkdir(parents=True, exist_ok=True)
                os.replace(old, out / path)

    def _keep_old(self, target: Path, path: str) -> None:
        """Hard-link the file a move will displace into old/, for `roll_back`; a second link is kept."""
        keep = self.folder / "old" / path
        if keep.exists() or not (target.exists() or target.is_symlink()):
            return
        keep.parent.mkdir(parents=True, exist_ok=True)
        os.link(target, keep, follow_symlinks=False)

    def recover(self, out: Path) -> None:
        """Deal with a staging folder a killed build left: finish its commit if it began one, then remove it."""
        try:
            journal = json.loads((self.folder / "journal").read_text(encoding="utf-8"))
            self.written, self.remove = list(journal["written"]), list(journal["remove"])
        except (OSError, ValueError, KeyError, TypeError):
            journal = None  # killed before its commit began: output/ was never touched
        if journal is not None and out.is_dir():
            self.roll_forward(out)
        self.discard()


def atomic_write(target: Path, content: bytes) -> None:
    """Write a file whole: to a temporary name first, then renamed over the target."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    partial.write_bytes(content)
    os.replace(partial, target)


def prune_empty(top: Path, folder: Path) -> None:
    """Remove folder and its parents up to (not including) top while they are empty."""
    while folder != top and top in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
