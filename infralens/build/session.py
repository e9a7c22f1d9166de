"""Session: what one process keeps between builds: the build state, the theme's key, run keys.

A CLI build uses a fresh one; `serve` keeps one for its whole life. The state is pickled into the
cache, keyed by the model classes it holds, so a state written by another version is not read back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from infralens import __version__
from infralens.build.plan import BuildState
from infralens.build.workers import map_over
from infralens.check import results
from infralens.project.workspace import Workspace, digest, packaged_theme

STATE_FORMAT = "build-state-2"
"""Version of BuildState's layout, part of the key it is stored under: a new layout starts afresh."""


@dataclass(frozen=True)
class Theme:
    """The template folders of a build, the compiled-template cache, and a key of their contents."""

    dirs: tuple[Path, ...]
    compiled: Path | None
    key: str
    assets: tuple[tuple[str, Path], ...]
    """(name, file) of each static asset, the site's own overriding the packaged ones."""


PACKAGE = Path(__file__).resolve().parent.parent
MODEL_SOURCES = (*sorted((PACKAGE / "model").glob("*.py")), PACKAGE / "text" / "source.py", PACKAGE / "build" / "plan.py")
"""The modules whose classes a build state pickles: the records of the model family, the
highlighted source files, and the state itself."""


@lru_cache(maxsize=None)
def models_digest() -> str:
    """Identify the models a build state holds: a state pickled with other model classes (another
    release, or a working copy of this one) is not read back."""
    return digest(*(path.read_text(encoding="utf-8") for path in MODEL_SOURCES))


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
        stamp = (results.folder_stamp(ws.root, starter), results.run_environment())  # a new tracer or probe: a new key
        remembered = self.run_keys.get((starter.path, repr(run)))
        if remembered and remembered[0] == stamp:
            return remembered[1]
        key = results.run_key(ws.root, starter, run)
        self.run_keys[starter.path, repr(run)] = (stamp, key)
        return key

    def map(self, function, items: list) -> Iterator:
        """Apply function to every item, in up to `jobs` worker processes when there are enough items."""
        return map_over(function, items, jobs=self.jobs)
