"""Run results kept between runs: a starter is re-run only when something it depends on changed.

A result is stored under `<cache>/runs/<key>/` (result.json plus the run's artifacts; the cache
folder is the workspace's), where the key hashes everything the run depends on: the files of the
starter's folder, its run spec (a starter has one per device), the Python and PyTorch releases,
and the tracer that records its execution state. `check` reads a stored result instead of running again; `build` reads
the result of each starter's current version to show on its page.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path

from infralens.child import RECORDERS
from infralens.errors import InputError, Mark, Problem
from infralens.model.record import MAX_ARTIFACT_BYTES, MAX_RECORD_BYTES, field_mark, parse_run
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
    from importlib import metadata  # deferred: ~20 ms of modules, and a build of labs without runs asks for no version

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
    run spec (device, and a compiled starter's compiler and flags, included), the recorders, Python
    and the torch and numpy releases.

    Not a compiler's version: a results folder from a GPU machine with nvcc must keep its key on a
    machine without one that merges and publishes it. The version is in the result (`built`), and
    `check` runs a compiled starter again when its compiler here is another version (see
    runner.run_or_recall): a new compiler, a new run."""
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

    Not the build tags or Python's patch level: a GPU runner's torch 2.13.0+cu128 and a CPU job's
    2.13.0+cpu compute a CPU run alike, and results must keep their keys on the machine that merges
    them (see merge_results). The exact versions are in each result's hardware line, and a compiled
    starter's compiler version in its `built` line (see run_key).
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


class StoreError(Exception):
    """The store's folder cannot be written (read-only, full): said once, naming the folder."""

    def __init__(self, folder: Path, exc: OSError) -> None:
        self.folder = folder
        self.reason = exc.strerror or str(exc)
        super().__init__(f"{folder}: cannot store run results: {self.reason}")


class ResultStore:
    """The folder of stored results of one project (the workspace's `runs_folder()`).

    A record is read back through the one validation every record gets (model/record.py) and its
    artifacts must be regular files within check's cap, whoever wrote the folder. A slot is replaced
    by a journaled swap: the new record is complete beside it before the old one moves aside, and
    an old one left aside by a replace that was killed is put back by the next `load`.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def slot(self, key: str) -> Path:
        return self.folder / key

    def staging(self, key: str) -> Path:
        """A fresh folder of this run's own for its artifacts (two checks may run one starter at
        once), moved into place by `save`. Its name holds the pid of the check that made it, so
        the next check can tell one a killed check left (`sweep`) from one still being filled."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if not self.swept:
                self.sweep()
            return Path(tempfile.mkdtemp(prefix=f".{key}{STAGING}{os.getpid()}-", dir=self.folder))
        except OSError as exc:
            raise StoreError(self.folder, exc) from None

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
        try:
            (staging / "result.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise StoreError(self.folder, exc) from None
        self.replace(key, staging)

    def replace(self, key: str, staging: Path) -> None:
        """Put a complete record folder in the key's slot, the old one moved aside first and removed
        last: a replace killed at any point leaves the old record or the new one, never neither."""
        target = self.slot(key)
        try:
            aside = Path(tempfile.mkdtemp(prefix=f".{key}.old-", dir=self.folder)) / "slot"
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise StoreError(self.folder, exc) from None
        try:
            if target.is_dir():
                target.rename(aside)
            staging.rename(target)
        except BaseException as exc:  # Ctrl-C, or another check stored this very run a moment ago: keep that one
            shutil.rmtree(staging, ignore_errors=True)
            if not target.exists() and aside.exists():
                aside.rename(target)
            if target.exists():
                shutil.rmtree(aside.parent, ignore_errors=True)
            if not isinstance(exc, OSError):
                raise
            return
        shutil.rmtree(aside.parent, ignore_errors=True)

    def recover(self, key: str) -> None:
        """Put back the old record a replace moved aside, when it was killed before the new one was in."""
        if self.slot(key).exists():
            return
        for aside in sorted(self.folder.glob(f".{key}.old-*/slot"), key=lambda p: p.stat().st_mtime_ns, reverse=True):
            try:
                aside.rename(self.slot(key))
                return
            except OSError:
                continue

    def update(self, key: str, result: RunResult) -> None:
        """Rewrite a stored result's record (its artifacts stay), as when the probe answered anew."""
        target = self.slot(key) / "result.json"
        if target.parent.is_dir():
            try:
                atomic_write(target, json.dumps(asdict(replace(result, cached=False)), indent=1).encode())
            except OSError as exc:
                raise StoreError(self.folder, exc) from None

    def load(self, key: str) -> RunResult | None:
        """Return the stored result for a key, None if there is none; raise InputError when the
        record, or a file it names, is not one a run could have left (see `read_record`)."""
        self.recover(key)
        return read_record(self.slot(key))

    def artifact(self, key: str, name: str) -> bytes:
        """Read an artifact of a stored result, as a regular file within the cap (never a link)."""
        try:
            return read_regular(self.slot(key) / name, MAX_ARTIFACT_BYTES)
        except OSError as exc:
            raise InputError([Problem(Mark(str(self.slot(key) / name)), f"cannot read the artifact: {exc.strerror or exc}")]) from None


def read_record(slot: Path) -> RunResult | None:
    """Read the record in a slot folder, None if there is none; raise InputError with every
    problem when it, or an artifact it names, is not one a run could have left: the one
    validation (model/record.py) of every record, stored here or merged from elsewhere, plus its
    files: regular files within check's cap."""
    path = slot / "result.json"
    if slot.is_symlink() or not slot.is_dir():
        if os.path.lexists(slot):
            raise InputError([Problem(Mark(str(slot)), "not a stored result: a record is a folder, not a file or a link")])
        return None
    try:
        data = read_regular(path, MAX_RECORD_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InputError([Problem(Mark(str(path)), f"cannot read the run record: {exc.strerror or exc}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError([Problem(Mark(str(path)), "not a run record: not UTF-8")]) from None
    result = parse_run(str(path), text)
    problems = [Problem(field_mark(str(path), text, "artifacts"), f"artifact {name!r} {why}") for name in result.artifacts if (why := file_problem(slot / name)) is not None]
    if problems:
        raise InputError(problems)
    return result


def read_regular(path: Path, limit: int) -> bytes:
    """Read a file that must be a regular file (a symlink is refused, not followed) of at most `limit` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"{info.st_size:,} bytes, more than {limit:,}")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"more than {limit:,} bytes")
    return data


def file_problem(path: Path) -> str | None:
    """Why a file a record names is not one a run could have left: a regular file within the cap."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_size > MAX_ARTIFACT_BYTES:
        return f"is {info.st_size:,} bytes; an artifact is at most {MAX_ARTIFACT_BYTES:,}"
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


@dataclass(frozen=True)
class Merged:
    """What `merge_results` did, one line (or problem) each."""

    merged: list[str]
    """Records taken into the store."""
    refused: list[str]
    """Valid records of another version of their starter (stale)."""
    invalid: list[Problem]
    """Records that are not what a run leaves: refused, with where and why."""
    conflicts: list[str]
    """Runs of one starter that disagree on the status."""


def merge_results(store: ResultStore, folders: list[Path], current: dict[str, str]) -> Merged:
    """Take the records of other checks' results folders into the store.

    A results folder is trusted for one thing: a record whose key is current is a run of that
    version of its starter. Each is read through the same validation as a stored record, so a
    record with a wrong field, a name that is not a plain file name, a link, an oversized or
    active (SVG) artifact is refused whole; only result.json and the artifacts it names are copied,
    each read as a regular file. The copy is complete beside the slot before it replaces the old
    record (see ResultStore.replace), so a merge that fails or is killed loses nothing stored.

    `current` maps each run key of the site now to its starter. A record whose key is not current
    is refused: it was run on another version of the starter (or another Python, torch, tracer).
    A run that was skipped or only compiled (its machine lacked the device) never replaces a run
    that happened, and a run that happened always replaces one of those: a CPU shard's "skipped"
    (or "compiled") and a GPU job's "passed" of one cuda run are not a conflict. Two runs of one key that disagree on the status
    are; the later one (by when it finished) is kept, as a single machine keeps its last run.
    """
    done = Merged([], [], [], [])
    for folder in folders:
        runs = folder / "runs"
        for slot in sorted(runs.iterdir()) if runs.is_dir() else []:
            try:
                result = read_record(slot)
                if result is None:
                    raise InputError([Problem(Mark(str(slot)), "not a stored result: it has no result.json")])
                files = {name: read_artifact(slot / name) for name in result.artifacts}
                record = read_regular(slot / "result.json", MAX_RECORD_BYTES)
            except InputError as exc:
                done.invalid.extend(exc.problems)
                continue
            except OSError as exc:  # changed under us since it was checked
                done.invalid.append(Problem(Mark(str(slot)), f"cannot read the record: {exc.strerror or exc}"))
                continue
            if current.get(slot.name) != result.starter:
                why = "no such starter in this site" if result.starter not in current.values() else "its starter, or what the run depends on, changed since"
                done.refused.append(f"{slot}: {result.name}: stale ({why}; it ran with {result.hardware or 'an unknown machine'})")
                continue
            try:
                there = store.load(slot.name)
            except InputError:
                there = None  # a broken stored record: the valid one replaces it
            if there is not None and there.ran and result.ran and there.status != result.status:
                done.conflicts.append(f"{result.name}: {there.status} in the store ({there.finished}), {result.status} in {folder} ({result.finished})")
            if there is not None and (not result.ran, there.finished) >= (not there.ran, result.finished):
                continue  # what is stored happened (and the record was skipped), or is as new
            staging = store.staging(slot.name)
            try:
                for name, data in {"result.json": record, **files}.items():
                    (staging / name).write_bytes(data)
            except OSError as exc:
                shutil.rmtree(staging, ignore_errors=True)
                raise StoreError(store.folder, exc) from None
            store.replace(slot.name, staging)
            done.merged.append(f"{result.name}: {result.status} ({result.finished})")
    return done


def read_artifact(path: Path) -> bytes:
    """An artifact of a record from elsewhere, held to what check lets a run keep (see verdicts.py)."""
    # deferred: only a merge reads what an artifact holds, and verdicts loads the lab checks
    from infralens.check.verdicts import svg_problem

    try:
        data = read_regular(path, MAX_ARTIFACT_BYTES)
    except OSError as exc:
        raise InputError([Problem(Mark(str(path)), f"not an artifact a run could leave: {exc.strerror or exc}")]) from None
    why = svg_problem(data) if path.suffix.lower() == ".svg" else None
    if why is not None:
        raise InputError([Problem(Mark(str(path)), f"artifact {why}")])
    return data
