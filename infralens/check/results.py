"""Run results kept between runs: a starter is re-run only when something it depends on changed.

A result is stored under `<cache>/runs/<key>/` (result.json plus the run's artifacts; the cache
folder is the workspace's), where the key hashes everything the run depends on: the files of the
starter's folder, its run spec (a starter has one per device), the Python and PyTorch releases,
and the tracer that records its execution state. `check` reads a stored result instead of running again; `build` reads
the result of each starter's current version to show on its page.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import asdict, replace
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from infralens.child import RECORDERS
from infralens.errors import Mark
from infralens.model.run import RunResult
from infralens.model.starter import RunSpec, Starter
from infralens.project.commit import atomic_write

_FORMAT = "infralens-run-3"


@lru_cache(maxsize=None)
def installed_version(package: str) -> str:
    """Return an installed package's version without importing it ('none' if absent).

    Kept for the life of the process: reading package metadata costs milliseconds a call, and
    `serve` asks for every starter on every rebuild.
    """
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def starter_files(root: Path, starter: Starter) -> list[Path]:
    """Every file of a starter's folder: starters may import or read any file beside them."""
    folder = (root / starter.path).parent
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def folder_stamp(root: Path, starter: Starter) -> tuple:
    """Return what changes when any file of the starter's folder changes: names, sizes, mtimes."""
    stamps = []
    for path in starter_files(root, starter):
        stat = path.stat()
        stamps.append((path.as_posix(), stat.st_size, stat.st_mtime_ns))
    return tuple(stamps)


def run_key(root: Path, starter: Starter, run: RunSpec | None = None) -> str:
    """Hash what one run of a starter (its first, by default) depends on: its folder's files, its
    run spec (device included), the recorders, Python and the torch and numpy releases."""
    digest = hashlib.sha256()
    folder = (root / starter.path).parent
    parts = [run_environment(), starter.path, repr(run or starter.run)]
    for part in parts:
        digest.update(part.encode() + b"\0")
    for path in starter_files(root, starter):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(file_digest(path))
    return digest.hexdigest()[:24]


def release(version: str) -> str:
    """A version without its local build tag: '2.13.0+cpu' and '2.13.0+cu128' are one release."""
    return version.split("+", 1)[0]


@lru_cache(maxsize=None)
def run_environment() -> str:
    """Hash what every run key depends on besides the starter (see run_key): the store's format, the
    recorders, Python's major.minor and the torch and numpy releases.

    Not the build tags, compilers or Python's patch level: a GPU runner's torch 2.13.0+cu128 and a
    CPU job's 2.13.0+cpu compute a CPU run alike, and results must keep their keys on the machine
    that merges them (see merge_results). The exact versions are in each result's hardware line.
    """
    parts = [_FORMAT, recorders_digest(), "Python %d.%d" % sys.version_info[:2], release(installed_version("torch")), release(installed_version("numpy"))]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@lru_cache(maxsize=None)
def recorders_digest() -> str:
    """Identify the programs that record what a result holds besides its run: the tracer
    (trace_state.py) and the calculators' parity probe (probe.py). A changed one records anew."""
    digest = hashlib.sha256()
    for program in RECORDERS:
        digest.update(program.read_bytes())
    return digest.hexdigest()


HASHED_BYTES = 64 << 20
"""Files beside a starter up to this size are hashed; a bigger one (weights, a dataset) is known by
its size and modification time, so a 3 GB file costs no 3 GB read on every check."""


def file_digest(path: Path) -> bytes:
    """Return what identifies one file of a starter's folder, reading it in pieces."""
    try:
        info = path.stat()
        if info.st_size > HASHED_BYTES:
            return f"{info.st_size}:{info.st_mtime_ns}".encode()
        with open(path, "rb") as file:
            return hashlib.file_digest(file, "sha256").digest()
    except OSError as exc:  # unreadable: the run will meet the same error, and say so
        return f"unreadable:{exc.errno}".encode()


STAGING = ".new-"
"""What a staging folder's name holds between its key and the pid of the check filling it."""


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


class ResultStore:
    """The folder of stored results of one project (the workspace's `runs_folder()`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def slot(self, key: str) -> Path:
        return self.folder / key

    def staging(self, key: str) -> Path:
        """A fresh folder of this run's own for its artifacts (two checks may run one starter at
        once), moved into place by `save`. Its name holds the pid of the check that made it, so
        the next check can tell one a killed check left (`sweep`) from one still being filled."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.swept:
            self.sweep()
        return Path(tempfile.mkdtemp(prefix=f".{key}{STAGING}{os.getpid()}-", dir=self.folder))

    swept = False

    def sweep(self) -> None:
        """Remove the staging folders of checks that are no longer running (killed outright: a
        SIGKILL runs no cleanup)."""
        self.swept = True
        try:
            entries = list(self.folder.iterdir())
        except OSError:
            return
        for entry in entries:
            found = re.fullmatch(rf"\.[0-9a-f]+{re.escape(STAGING)}(\d+)-\w+", entry.name)
            if found and not alive(int(found[1])):
                shutil.rmtree(entry, ignore_errors=True)

    def save(self, key: str, result: RunResult, staging: Path) -> None:
        """Store a fresh result with the artifacts already in `staging`, replacing any older one."""
        record = asdict(replace(result, cached=False))
        (staging / "result.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
        target = self.slot(key)
        shutil.rmtree(target, ignore_errors=True)
        try:
            staging.rename(target)
        except OSError:  # another check stored this very run a moment ago: keep that one
            shutil.rmtree(staging, ignore_errors=True)

    def update(self, key: str, result: RunResult) -> None:
        """Rewrite a stored result's record (its artifacts stay), as when the probe answered anew."""
        target = self.slot(key) / "result.json"
        if target.parent.is_dir():
            atomic_write(target, json.dumps(asdict(replace(result, cached=False)), indent=1).encode())

    def load(self, key: str) -> RunResult | None:
        """Return the stored result for a key, or None if there is none or it cannot be read."""
        try:
            record = json.loads((self.slot(key) / "result.json").read_text(encoding="utf-8"))
            record["mark"] = Mark(**record["mark"])
            record["artifacts"] = tuple(record["artifacts"])
            record["sizes"] = tuple((str(name), int(width), int(height)) for name, width, height in record.get("sizes", ()))
            record["traced"] = tuple(tuple(span) for span in record.get("traced", ()))
            return RunResult(**record)
        except (OSError, ValueError, TypeError, KeyError):
            return None


def export_results(store: ResultStore, keys: list[str], folder: Path) -> int:
    """Copy the stored records of these keys (result.json and artifacts) into `folder`/runs/, a
    store of its own that `merge_results` can take in elsewhere; return how many were copied."""
    copied = 0
    for key in dict.fromkeys(keys):
        source = store.slot(key)
        if (source / "result.json").is_file():
            target = folder / "runs" / key
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target)
            copied += 1
    return copied


def merge_results(store: ResultStore, folders: list[Path], current: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """Take the records of other checks' results folders into the store: (merged, refused,
    conflicts), one line each.

    `current` maps each run key of the site now to its starter. A record whose key is not current
    is refused: it was run on another version of the starter (or another Python, torch, tracer).
    A run that was skipped (its machine lacked the device) never replaces a run that happened, and
    a run that happened always replaces a skipped one: a CPU shard's "skipped" and a GPU job's
    "passed" of one cuda run are not a conflict. Two runs of one key that disagree on the status
    are; the later one (by when it finished) is kept, as a single machine keeps its last run.
    """
    merged, refused, conflicts = [], [], []
    for folder in folders:
        runs = folder / "runs"
        for slot in sorted(runs.iterdir()) if runs.is_dir() else []:
            result = ResultStore(runs).load(slot.name)
            if result is None:
                refused.append(f"{slot}: not a stored result")
                continue
            if current.get(slot.name) != result.starter:
                why = "no such starter in this site" if result.starter not in current.values() else "its starter, or what the run depends on, changed since"
                refused.append(f"{slot}: {result.name}: stale ({why}; it ran with {result.hardware or 'an unknown machine'})")
                continue
            there = store.load(slot.name)
            if there is not None and not there.skipped and not result.skipped and there.status != result.status:
                conflicts.append(f"{result.name}: {there.status} in the store ({there.finished}), {result.status} in {folder} ({result.finished})")
            if there is not None and (result.skipped, there.finished) >= (there.skipped, result.finished):
                continue  # what is stored happened (and the record was skipped), or is as new
            target = store.slot(slot.name)
            store.folder.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(slot, target)
            merged.append(f"{result.name}: {result.status} ({result.finished})")
    return merged, refused, conflicts
