"""Workspace: the one module of the build that touches the disk.

It reads the project (site.yml, labs/*.yml, starters under code/), keeps the caches in one folder
(`--cache-dir`, else `$INFRALENS_CACHE_DIR`, else `<site root>/.infralens`), and commits a build to
output/: every new or changed file is first written into a staging folder beside output/, then moved
into place one file at a time with an atomic rename, and files the site no longer has are removed.

The commit is journaled, so output/ is always the old site or the new one, never a mix that lasts:
- before the first rename, the staging folder gets a journal naming every file to move and remove;
- each file a rename displaces is first hard-linked into the staging folder's `old/`, so a commit
  that fails half-way (a folder it cannot write, Ctrl-C) is rolled back to the old site;
- a build killed outright (SIGKILL, power to the process) leaves its journal, and the next build
  finishes that commit, from what is still staged, before it starts.
A build that fails before the commit leaves output/ exactly as it was; a build that changes nothing
writes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pickle
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from infralens.errors import InputError, Mark, Problem, Problems
from infralens.model.site import ID_PATTERN
from infralens.project.commit import Staging, Stamp, atomic_write
from infralens.project.unchanged import CACHE_ENV, RACY_NS, cache_folder

SITE_MARKER = ".infralens-site"
"""A file every build writes into output/: a folder without it (and without a build on record) holds
someone else's files, which a build would remove as strays, so it is refused."""

MARKER_TEXT = "Written by `infralens build`, which removes any file in this folder that the site does not have.\n"

def digest(*parts: str | bytes) -> str:
    """Hash some texts into a short hex key; the parts are separated so ('ab', 'c') != ('a', 'bc').

    Each part is followed by a NUL byte; texts alone are joined and hashed in one call (the same
    bytes, so the same key: a build hashes some thousands of keys)."""
    try:
        joined = "\0".join(parts) + "\0" if parts else ""  # type: ignore[arg-type]
        return hashlib.blake2b(joined.encode(), digest_size=16).hexdigest()
    except TypeError:  # bytes among the parts
        hasher = hashlib.blake2b(digest_size=16)
        for part in parts:
            hasher.update(part.encode() if isinstance(part, str) else part)
            hasher.update(b"\0")
        return hasher.hexdigest()


MAX_STARTER_BYTES = 1 << 20
"""Largest starter a lab may show: every page, source view and search chunk carries its text."""

MAX_PROJECT_FILE_BYTES = 1 << 20
"""Largest manifest or site.yml read: a lab's manifest is a few kilobytes."""

STARTER_SUFFIXES = frozenset(
    ".py .pyi .md .txt .rst .json .ipynb .yaml .yml .toml .cfg .ini .csv .tsv .sh .bash .c .h .cc .cpp .cxx .hpp "
    ".cu .cuh .rs .go .java .kt .scala .jl .r .lua .sql .proto .cmake .mk .patch .diff .js .ts".split()
)
"""What a starter may be. The site publishes each starter as it is, at its own path: an .html, .svg
or .xml file there would be a page of the site that runs whatever script it holds."""

SAFE_PATH = re.compile(r"[A-Za-z0-9._/-]")
"""The characters a starter path may use: the site serves it at that path and links to it by name."""

LAB_ID = re.compile(ID_PATTERN)
"""What a manifest's file name (its lab id) must be."""


def packaged_theme() -> Path:
    """Return the folder of the theme shipped inside the package (templates/ of the repository)."""
    from importlib.resources import files

    return Path(str(files("infralens.theme")))


def display_path(path: Path, root: Path) -> str:
    """Show a path relative to the project root when it is inside it, as errors should."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
    except (RuntimeError, OSError):  # a symlink loop: name the link itself
        try:
            return path.absolute().relative_to(root.absolute()).as_posix()
        except ValueError:
            return str(path)


@dataclass(frozen=True)
class Manifest:
    """One labs/*.yml as read: where it is shown in errors, its lab id and its text."""

    path: str
    lab_id: str
    text: str | None
    """None when the file is as the last build read it (see Seen): `Workspace.manifest_text` reads it."""
    key: str
    """A hash of the path and text, computed once."""
    file: str = ""
    """Where the file is read from."""


FileStamp = tuple[int, int, int, int, int]
"""(size, mtime_ns, ctime_ns, inode, device) of a file read."""


@dataclass
class Seen:
    """What the last build read, by file stamp, as git's index keeps it: a manifest or starter whose
    stamp is what it was then has the same text, so its digest comes from here and the file is read
    only when its lab is rendered again. A build at N labs reads what changed, not N files.

    A file younger than RACY_NS when it was read is not kept: a change within the same clock tick
    could keep its stamp (as in project/unchanged.py). The ctime catches a change that kept the
    mtime; no tool sets a ctime back.
    """

    before: dict[tuple[str, str], tuple[FileStamp, str]]
    """(kind, path) → (stamp, digest) from the last build."""
    started_ns: int
    """When this build started, by the clock file stamps are read against."""
    now: dict[tuple[str, str], tuple[FileStamp, str]] = field(default_factory=dict)
    """What this build read, for the next."""
    young: bool = False
    """Whether a file read was too young to keep: no record of this build can be trusted either."""

    @staticmethod
    def stamp(info: os.stat_result) -> FileStamp:
        return (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev)

    def known(self, kind: str, path: str, info: os.stat_result) -> str | None:
        """The digest of a file the last build read with the same stamp, or None."""
        entry = self.before.get((kind, path))
        if entry is None or entry[0] != self.stamp(info):
            return None
        self.now[kind, path] = entry
        return entry[1]

    def learn(self, kind: str, path: str, info: os.stat_result, value: str) -> None:
        """Keep what a file read now hashed to, unless it is too young to trust its stamp."""
        recent = self.started_ns - RACY_NS
        if info.st_mtime_ns < recent and info.st_ctime_ns < recent:
            self.now[kind, path] = (self.stamp(info), value)
        else:
            self.young = True


@dataclass(kw_only=True)
class Workspace:
    """A project on disk: its root, its cache folder and its output folder."""

    root: Path
    cache: Path
    out: Path
    site_file: Path
    memory: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)
    """Values kept in memory by kind and key, for a long-lived process such as `serve`."""
    memory_limit: int = 0
    """How many values `memory` may hold; 0 keeps nothing in memory."""
    real_root: str | None = field(default=None, repr=False)
    code_real: str | None = field(default=None, repr=False)
    """code/ with symlinks resolved, once: every starter is checked to stay inside it."""
    made: set[Path] = field(default_factory=set, repr=False)
    """Cache folders known to exist: creating a folder is a system call worth saving a thousand times."""

    @classmethod
    def open(cls, site_path: Path, out_dir: Path | None = None, cache_dir: Path | None = None) -> "Workspace":
        """Return the workspace of site_path: cache from the option, the environment or the default."""
        root = site_path.parent
        return cls(root=root, cache=cache_folder(site_path, cache_dir), out=out_dir if out_dir is not None else root / "output", site_file=site_path)

    # ------------------------------------------------------------------ reading the project

    def shown(self, path: Path) -> str:
        return display_path(path, self.root)

    def read_text(self, path: Path, shown: str, problems: Problems, mark: Mark | None = None, *, info: os.stat_result | None = None, inside: bool = False) -> str | None:
        """Read a UTF-8 file, recording a problem instead of raising.

        A long-lived process keeps each file's text by its size and modification time, so an edit
        costs one read, not a read of the whole site. `info` is the file's stat when the caller has
        it; `inside` says the caller has seen that no link takes the path out of the project.
        """
        try:
            info = info or os.stat(path)
            refused = self.unsafe_file(path, info, shown, inside=inside)
            if refused:
                problems.add(mark or Mark(shown), refused)
                return None
            if not self.memory_limit:
                return path.read_text(encoding="utf-8")
            stamp = (info.st_size, info.st_mtime_ns, info.st_ino)
            kept = self.memory.get(("file", str(path)))
            if kept is not None and kept[0] == stamp:
                return kept[1]
            text = path.read_text(encoding="utf-8")
            self._remember("file", str(path), (stamp, text))
            return text
        except FileNotFoundError:
            problems.add(mark or Mark(shown), f"file not found: {shown}")
        except UnicodeDecodeError as exc:
            problems.add(mark or Mark(shown), f"{shown} is not UTF-8 text ({exc.reason} at byte {exc.start})")
        except OSError as exc:
            problems.add(mark or Mark(shown), f"cannot read {shown}: {exc.strerror}")
        return None

    def unsafe_file(self, path: Path, info: os.stat_result, shown: str, *, inside: bool = False) -> str | None:
        """Say why a project file must not be read, or None.

        A symlink (which git stores) could point at /dev/zero, a FIFO or a secret outside the
        project; a file of many megabytes is no manifest.
        """
        if not stat.S_ISREG(info.st_mode):
            return f"{shown} is not a regular file"
        if info.st_size > MAX_PROJECT_FILE_BYTES:
            return f"{shown} is {info.st_size:,} bytes; a manifest or site file is at most {MAX_PROJECT_FILE_BYTES:,}"
        if path != self.site_file and not inside:
            return self.outside_project(path, shown)
        return None

    def outside_project(self, path: Path, shown: str) -> str | None:
        """Say so when a path leads, through a symlink, to a file outside the project."""
        real = os.path.realpath(path)
        if not real.startswith(self.root_real() + os.sep):
            return f"{shown} is a symlink to a file outside the project ({real})"
        return None

    def root_real(self) -> str:
        """The project root with symlinks resolved, once per workspace."""
        if self.real_root is None:
            self.real_root = os.path.realpath(self.root)
        return self.real_root

    def read_site(self) -> tuple[str, str]:
        """Return (shown path, text) of site.yml, or raise InputError: without it there is no project."""
        problems = Problems()
        shown = self.shown(self.site_file)
        text = self.read_text(self.site_file, shown, problems)
        problems.raise_if_any()
        assert text is not None
        return shown, text

    def read_manifests(self, problems: Problems, seen: Seen | None = None) -> list[Manifest]:
        """Return every labs/*.yml (and *.yaml) with a valid, unique lab id, in file-name order;
        with `seen`, a manifest as the last build read it is not read again (its text is None)."""
        labs_dir = self.root / "labs"
        try:
            names = os.listdir(labs_dir)
        except OSError:
            names = []
        # what labs_dir.glob("*.yml") and then "*.yaml" find, each sorted, as (name, stem): a build
        # at a thousand labs makes no Path per manifest
        found = [
            (name, name[: -len(suffix)] if len(name) > len(suffix) else name)
            for suffix in (".yml", ".yaml")
            for name in sorted(n for n in names if n.endswith(suffix))
        ]
        if not found:
            problems.add(Mark(self.shown(labs_dir)), "no lab manifests (labs/*.yml) found")
        manifests: list[Manifest] = []
        stems: dict[str, str] = {}
        labs_shown = self.shown(labs_dir)
        labs_path = str(labs_dir)
        # A manifest that is no link, in a labs/ inside the project, needs no path resolved.
        labs_inside = os.path.realpath(labs_dir).startswith(self.root_real() + os.sep)
        for name, stem in found:
            shown = f"{labs_shown}/{name}"
            if stem in stems:
                problems.add(Mark(shown), f"lab id {stem!r} is already used by {stems[stem]}")
                continue
            stems[stem] = shown
            if not LAB_ID.fullmatch(stem):
                problems.add(Mark(shown), f"lab id {stem!r} (the file name) must be lowercase letters, digits and '-'")
                continue
            file = os.path.join(labs_path, name)
            try:
                info = os.lstat(file)
            except OSError:
                info = None  # read_text says why
            plain = labs_inside and info is not None and not stat.S_ISLNK(info.st_mode)
            if plain and seen is not None and stat.S_ISREG(info.st_mode) and info.st_size <= MAX_PROJECT_FILE_BYTES:
                key = seen.known("manifest", file, info)
                if key is not None:
                    manifests.append(Manifest(shown, stem, None, key, file))
                    continue
            text = self.read_text(Path(file), shown, problems, info=info if plain else None, inside=plain)
            if text is not None:
                manifests.append(Manifest(shown, stem, text, digest(shown, text), file))
                if plain and seen is not None:
                    seen.learn("manifest", file, info, manifests[-1].key)
        return manifests

    def manifest_text(self, manifest: Manifest) -> str:
        """A manifest's text: as read, or read now when the build took it as the last one read it."""
        if manifest.text is not None:
            return manifest.text
        problems = Problems()
        text = self.read_text(Path(manifest.file), manifest.path, problems)
        problems.raise_if_any()
        assert text is not None
        return text

    def starter_file(self, starter_path: str) -> tuple[str, os.stat_result] | str:
        """Return a starter's real path and its stat, or why it is not an allowed starter path."""
        pure = PurePosixPath(starter_path)
        if pure.is_absolute() or "\\" in starter_path:
            return f"starter path {starter_path!r} must be relative to the repository, under code/"
        if ".." in pure.parts:
            return f"starter path {starter_path!r} must not contain '..'; starters live under code/"
        if pure.parts[0] != "code" or len(pure.parts) < 2:
            return f"starter path {starter_path!r} must be under code/"
        suffix = pure.suffix.lower()
        if suffix and suffix not in STARTER_SUFFIXES:
            return (
                f"starter {starter_path!r} is a {suffix} file, which the site would publish as it is and a browser might run; "
                f"starters are code or text ({', '.join(sorted(STARTER_SUFFIXES))}, or no suffix)"
            )
        unsafe = SAFE_PATH.sub("", starter_path)
        if unsafe:
            return (
                f"starter path {starter_path!r} has {unsafe[0]!r}, which a link to the file cannot carry safely; "
                "name starters with letters, digits, '.', '-' and '_'"
            )
        # Every starter is checked on every build: walk the parts below code/ with lstat, and resolve
        # the whole path (slower) only when one of them is a symlink.
        code = self.code_folder()
        real = code
        info: os.stat_result | None = None
        for part in pure.parts[1:]:
            real = os.path.join(real, part)
            try:
                info = os.lstat(real)
            except OSError:
                return f"starter not found: {starter_path}"
            if stat.S_ISLNK(info.st_mode):
                real = os.path.realpath(os.path.join(self.root, starter_path))
                info = None
                break
        if not real.startswith(code + os.sep):
            return f"starter path {starter_path!r} leaves code/ through a symlink (to {self.shown(Path(real))})"
        try:
            info = info or os.stat(real)  # no link on the way: what lstat said of the file is what stat says
        except OSError:
            return f"starter not found: {starter_path}"
        if not stat.S_ISREG(info.st_mode):
            return f"starter {starter_path!r} is not a file"
        return real, info

    def code_inside(self) -> bool:
        """Whether code/, links resolved, is inside the project (a link may take it elsewhere)."""
        return self.code_folder().startswith(self.root_real() + os.sep)

    def code_folder(self) -> str:
        """Return the real path of code/, resolved once per workspace."""
        if self.code_real is None:
            self.code_real = os.path.realpath(os.path.join(self.root, "code"))
        return self.code_real

    def read_starter(self, starter_path: str, mark: Mark, problems: Problems, seen: Seen | None = None) -> tuple[str | None, str] | None:
        """Read one starter declared at `mark`: (its text, the digest of its text), recording why not
        if it can't be. With `seen`, a starter as the last build read it is not read again: its
        text is None (`starter_text` reads it)."""
        found = self.starter_file(starter_path)
        if isinstance(found, str):
            problems.add(mark, found)
            return None
        real, info = found
        if info.st_size > MAX_STARTER_BYTES:
            problems.add(mark, f"starter {starter_path!r} is {info.st_size:,} bytes; a starter is code to read, at most {MAX_STARTER_BYTES:,}")
            return None
        inside = self.code_inside()
        if seen is not None and inside:
            known = seen.known("starter", real, info)
            if known is not None:
                return None, known
        # Its path is real, and inside code/: inside the project when code/ is.
        text = self.read_text(Path(real), starter_path, problems, mark, info=info, inside=inside)
        if text is None:
            return None
        # A UTF-8 byte-order mark is valid Python but not text ast.parse takes; it holds no line.
        text = text.removeprefix("\ufeff")
        text_digest = digest(text)
        if seen is not None and inside:
            seen.learn("starter", real, info, text_digest)
        return text, text_digest

    def starter_text(self, starter_path: str) -> str:
        """A starter's text, read now (for a starter the build took as the last one read it)."""
        problems = Problems()
        found = self.read_starter(starter_path, Mark(starter_path), problems)
        problems.raise_if_any()
        assert found is not None and found[0] is not None
        return found[0]

    def theme_dirs(self, packaged: Path) -> tuple[Path, ...]:
        """Return the template folders, most specific first: the site's own templates/, then the packaged theme."""
        own = self.root / "templates"
        if own.is_dir() and own.resolve() != packaged.resolve():
            return (own, packaged)
        return (packaged,)

    def check_theme(self, own: Path | None) -> None:
        """Refuse a site's own theme folder holding a file that is not a regular file inside the project.

        Its templates are rendered and its static files published: a symlink there could publish
        any file of the machine.
        """
        if own is None:
            return
        problems = Problems()
        for folder, dirs, names in os.walk(own):
            for name in sorted(names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]):
                path = Path(folder, name)
                shown = f"{display_path(path.parent, self.root)}/{name}"  # the link itself, not what it names
                try:
                    info = os.stat(path)
                except OSError:
                    problems.add(Mark(shown), f"{shown} is a broken symlink")
                    continue
                outside = self.outside_project(path, shown)
                if outside:
                    problems.add(Mark(shown), outside)
                elif not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
                    problems.add(Mark(shown), f"{shown} is not a regular file")
        problems.raise_if_any()

    # ------------------------------------------------------------------ caches

    def cache_path(self, kind: str, key: str) -> Path:
        return self.cache / kind / key[:2] / f"{key}.pickle"

    def recall(self, kind: str, key: str) -> Any:
        """Return the value stored under (kind, key), or None."""
        if (kind, key) in self.memory:
            return self.memory[kind, key]
        try:
            with open(self.cache_path(kind, key), "rb") as file:
                value = pickle.load(file)
        except Exception:  # noqa: BLE001 - a damaged entry (truncated, garbage: pickle then raises
            return None  # any of a dozen errors, OverflowError and IndexError among them) is a miss
        self._remember(kind, key, value)
        return value

    def store(self, kind: str, key: str, value: Any) -> None:
        """Keep a value under (kind, key), on disk and, in a long-lived process, in memory."""
        self._remember(kind, key, value)
        target = self.cache_path(kind, key)
        try:
            if target.parent not in self.made:
                target.parent.mkdir(parents=True, exist_ok=True)
                self.made.add(target.parent)
            atomic_write(target, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            # A read-only cache: the build still works, keeping in memory what it cannot store.
            self.memory[kind, key] = value

    def _remember(self, kind: str, key: str, value: Any) -> None:
        if not self.memory_limit:
            return
        while len(self.memory) >= self.memory_limit:
            self.memory.pop(next(iter(self.memory)))  # the oldest entry: dicts keep insertion order
        self.memory[kind, key] = value

    def templates_cache(self) -> Path | None:
        """Where Jinja keeps compiled templates between builds, or None if it cannot be created."""
        folder = self.cache / "templates"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        return folder

    def runs_folder(self) -> Path:
        """Where run results of `infralens check` are kept (see results.py)."""
        return self.cache / "runs"

    # ------------------------------------------------------------------ output

    def check_out_dir(self) -> None:
        """Refuse an output folder whose replacement would delete the project itself."""
        out, project = self.out.resolve(), self.root.resolve()
        if project == out or project.is_relative_to(out) or any((out / name).exists() for name in ("site.yml", ".git", "pyproject.toml")):
            raise InputError([Problem(Mark(str(self.out)), "refusing to replace this folder: it holds the project or a repository, not a built site")])

    def check_not_foreign(self, marker: str) -> None:
        """Refuse to build into a folder of someone else's files: a build removes every file the site
        does not have, so `--out docs` would delete a docs/ folder's contents.

        A folder is the site's when it is missing, empty, or holds the marker every build writes.
        """
        try:
            if not self.out.is_dir() or (self.out / marker).exists() or next(os.scandir(self.out), None) is None:
                return
        except OSError:
            return  # unreadable: the commit says so in its own words
        raise InputError([Problem(
            Mark(str(self.out)),
            f"refusing to build into {self.out}: it holds files `infralens build` did not write, and a build removes every "
            f"file its site does not have; choose a new or empty folder (or delete this one if it is an old build)",
        )])

    def output_state_key(self) -> str:
        return digest("output", str(self.out.resolve()))

    @contextlib.contextmanager
    def lock(self):
        """Hold the output folder's lock (kept in the cache): builds of one output/ run one at a time.

        Under the lock, any staging folder beside output/ was left by a build that was killed: one
        killed during its commit is finished (see `Staging.recover`), any other is removed.
        """
        parent = self.out.absolute().parent
        blocking = next((folder for folder in (parent, *parent.parents) if folder.exists() and not folder.is_dir()), None)
        if blocking is not None:
            raise InputError([Problem(Mark(str(self.out)), f"cannot write the output folder: {blocking} is a file, not a folder")])
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError([Problem(Mark(str(self.out)), f"cannot write the output folder: {exc.strerror}")]) from None
        try:
            locks = self.cache / "locks"
            locks.mkdir(parents=True, exist_ok=True)
            # In the cache, not beside output/: the folder that holds output/ keeps nothing of ours.
            handle = open(locks / f"{self.output_state_key()}.lock", "a+b")
        except OSError as exc:
            raise InputError([Problem(Mark(str(self.cache)), f"cannot write the cache, where builds of one output folder take turns: {exc.strerror}")]) from None
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                try:
                    for leftover in sorted(parent.glob(f".{self.out.name}.new-*")):
                        Staging(leftover).recover(self.out.absolute())
                    # InfraLens 1 swapped whole folders and, killed between its two renames, left
                    # the old site only in .output.old-*: put it back, or drop it if output/ is there.
                    for leftover in sorted(parent.glob(f".{self.out.name}.old-*")):
                        if self.out.exists():
                            shutil.rmtree(leftover)
                        else:
                            os.rename(leftover, self.out)
                except OSError as exc:
                    raise InputError([Problem(Mark(str(self.out)), f"cannot finish the commit of a build that was killed: {exc.strerror or exc}")]) from None
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def staging(self) -> "Staging":
        """Return a fresh staging folder beside output/ for a build's new and changed files."""
        self.out.absolute().parent.mkdir(parents=True, exist_ok=True)
        staging = Staging(Path(tempfile.mkdtemp(prefix=f".{self.out.name}.new-", dir=self.out.absolute().parent)))
        staging.site.mkdir(mode=0o755)  # it may become output/ itself, which is meant to be served
        return staging

    def present(self, files: dict[str, "Stamp"]) -> dict[str, "Stamp"]:
        """Return the recorded files that are still in output/ exactly as the last build left them."""
        kept = {}
        out = str(self.out)
        for path, stamp in files.items():
            try:
                info = os.stat(os.path.join(out, path))
            except OSError:
                continue
            if info.st_size == stamp.size and info.st_mtime_ns == stamp.mtime_ns:
                kept[path] = stamp
        return kept

    def strays(self, keep: set[str]) -> list[str]:
        """Return the files in output/ that the site does not have (left by an older build or by hand).

        As os.walk lists them (a link to a folder is neither a file nor followed), without working
        out each folder's relative path again: a rebuild at 1,000 labs walks 2,000 folders.
        """
        found = []
        folders = [("", str(self.out))]
        while folders:
            relative, folder = folders.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue  # as os.walk: a folder that cannot be listed is passed over
            for entry in entries:
                path = f"{relative}/{entry.name}" if relative else entry.name
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if not is_dir:
                    if path not in keep:
                        found.append(path)
                elif not entry.is_symlink():
                    folders.append((path, entry.path))
        return found

    def commit(self, staging: "Staging", remove: Iterable[str]) -> dict[str, "Stamp"]:
        """Move the staged files into output/ and remove the ones the site no longer has.

        Returns the stamp of every file moved in, to recognise it unchanged next time. When there is
        no output/ yet, the staged site becomes it with one rename. Any exception during the moves
        (an OSError, KeyboardInterrupt) puts the old site back before it propagates.
        """
        out = self.out.absolute()
        if not out.exists():
            os.rename(staging.site, out)
        else:
            try:
                staging.begin(sorted(remove))
                staging.roll_forward(out)
            except BaseException:
                # Undo what was moved. If the undo itself is cut short, the journal stays and the
                # next build finishes the commit instead.
                staging.roll_back(out)
                staging.discard()
                raise
        staging.discard()
        stamps = {}
        for path in staging.written:
            info = os.stat(out / path)
            stamps[path] = Stamp(info.st_size, info.st_mtime_ns)
        return stamps


