"""Scaffold: `infralens new` → a manifest and its starters (Python, C++, CUDA or Triton) that build and check pass at once.

The skeleton files (infralens/skeleton/*.tmpl, shipped with the package) are a contributor's
starting point, so they say what to replace and how each part is used; every number the page
states is one the starter prints. Whatever `new` accepts builds and checks; whatever it refuses
it refuses before writing anything, and a write that fails is undone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import keyword
import os
import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from infralens.build import load_project
from infralens.errors import InputError, Mark, Problem, Problems, did_you_mean
from infralens.project.workspace import MAX_PROJECT_FILE_BYTES, Workspace, digest

LAB_ID = re.compile(r"lab-(?P<number>[0-9]{2,3})-(?P<slug>[a-z0-9]+(?:-[a-z0-9]+)*)")
"""A new lab's id. ASCII only (`\\d` would take ٠٥ or 𝟗𝟗), so every match is also a lab id the
build accepts as a manifest's file stem (models.ID_PATTERN)."""

LAB_ID_HINT = "two or three digits 0-9, then lowercase letters a-z, digits and single '-', e.g. lab-15-speculative-decoding"

MAX_ID_LENGTH = 64
"""Longest lab id: it names a folder, a manifest and a URL, and file names stop at 255 bytes."""

IMPORTED_MODULES = frozenset({
    "torch", "torchvision", "torchaudio", "functorch", "triton", "numpy", "scipy", "sympy", "mpmath", "networkx",
    "pandas", "matplotlib", "sklearn", "jax", "jaxlib", "flax", "optax", "tensorflow", "keras", "numba", "cupy",
    "transformers", "tokenizers", "safetensors", "datasets", "accelerate", "peft", "bitsandbytes", "einops",
    "xformers", "flash_attn", "deepspeed", "vllm", "onnx", "onnxruntime", "tiktoken", "sentencepiece",
    "huggingface_hub", "pil", "tqdm", "yaml", "jinja2", "requests", "pytest", "hypothesis", "typing_extensions",
    "filelock", "fsspec", "infralens", "conftest",
})
"""Modules a starter commonly imports besides the standard library, installed here or not.

Python puts the starter's folder first on sys.path, so a starter named argparse.py or torch.py is
what its own `import argparse` (or the standard library's own imports) would find.
"""


LANGUAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "python": ((".py", "starter.py.tmpl"),),
    "cpp": ((".cpp", "starter.cpp.tmpl"),),
    "cuda": ((".py", "starter.py.tmpl"), (".cu", "starter.cu.tmpl")),
    "triton": ((".py", "starter_triton.py.tmpl"),),
}
"""What `new --lang` writes: each starter's suffix and skeleton, in the manifest's order. A CUDA
lab gets a CPU reference beside its kernel, so its figures come from a run every machine makes;
the manifest's starters and preview are skeleton/starters.LANG.tmpl."""


@dataclass(frozen=True)
class Scaffold:
    """The files `new` wrote."""

    manifest: Path
    starters: tuple[Path, ...]


@dataclass(frozen=True)
class Plan:
    """What `new` is about to write: new files, and their text."""

    manifest: Path
    manifest_text: str
    starters: tuple[tuple[Path, str], ...]
    """Each starter's path and text."""


def new_lab(site_path: Path, lab_id: str, track: str, title: str, lang: str = "python") -> Scaffold:
    """Write a manifest and its starters (in `lang`: python, cpp, cuda or triton) for a new lab,
    refusing to overwrite anything."""
    with one_new_at_a_time(site_path):
        # Under the lock: a `new` running beside this one cannot take the number in between.
        plan = plan_lab(site_path, lab_id, track, title, lang)
        write_lab(plan, site_path.parent)
    return Scaffold(plan.manifest, tuple(path for path, _ in plan.starters))


def plan_lab(site_path: Path, lab_id: str, track: str, title: str, lang: str = "python") -> Plan:
    """Return what `new` would write, or raise InputError with every reason to refuse."""
    root = site_path.parent
    problems = Problems()
    match = check_lab_id(lab_id, problems)
    if (why := title_problem(title)) is not None:
        problems.add(Mark("--title"), why)
    if match is None:
        problems.raise_if_any()  # without an id there is nothing more to say about the project
    try:
        project = load_project(site_path)
    except InputError as exc:
        raise InputError([*problems, *exc.problems]) from None
    tracks = [t.id for t in project.site.tracks]
    if track not in tracks:
        problems.add(Mark(project.site.path), f"unknown track {track!r}{did_you_mean(track, tracks)}; tracks: {', '.join(tracks)}")
    number = int(match.group("number"))
    taken = next((lab for lab in project.labs if lab.number == number), None)
    if taken:
        problems.add(taken.number_mark, f"lab number {number} is already used by {taken.id}")
    manifest = root / "labs" / f"{lab_id}.yml"
    module = starter_module(match.group("slug"))
    folder = root / "code" / lab_id
    # The build reads labs/*.yaml too; lexists, as a link to nowhere is in the way as well.
    for path in (manifest, manifest.with_suffix(".yaml"), folder):
        if os.path.lexists(path):
            problems.add(Mark(str(path.relative_to(root))), "already exists; infralens new never overwrites")
    problems.raise_if_any()
    # The title goes into a Python docstring and a YAML string: escaped for each, so any title
    # that passed title_problem writes files that build and run.
    in_docstring = title.replace("\\", "\\\\").replace('"', '\\"')
    in_yaml = json.dumps(title, ensure_ascii=False)
    starters = skeleton(f"starters.{lang}.tmpl").format(lab_id=lab_id, module=module)
    manifest_text = skeleton("lab.yml.tmpl").format(number=number, title=in_yaml, track=track, lab_id=lab_id, module=module, starters=starters)
    if len(manifest_text.encode("utf-8")) > MAX_PROJECT_FILE_BYTES:
        raise InputError([Problem(Mark("--title"), f"title is {len(title):,} characters long; the build reads no manifest over {MAX_PROJECT_FILE_BYTES:,} bytes")])
    # A C++ comment ends at the line's end, and the title is one line: it needs no escaping there.
    texts = tuple((folder / f"{module}{suffix}", skeleton(name).format(title=in_docstring if suffix == ".py" else title, module=module)) for suffix, name in LANGUAGES[lang])
    return Plan(manifest, manifest_text, texts)


def check_lab_id(lab_id: str, problems: Problems) -> re.Match[str] | None:
    """Return the parts of a well-formed lab id, or None, adding a problem if it is not one."""
    # repr escapes what would break the one-line error (newlines, bidi marks, undecodable bytes).
    mark = Mark(lab_id if lab_id.isprintable() else repr(lab_id)[1:-1])
    match = LAB_ID.fullmatch(lab_id)
    if len(lab_id) > MAX_ID_LENGTH:
        problems.add(mark, f"lab id is {len(lab_id)} characters long; at most {MAX_ID_LENGTH}")
    elif match is None:
        problems.add(mark, f"lab id {lab_id!r} must look like lab-NN-slug: {LAB_ID_HINT}")
    elif int(match.group("number")) == 0:
        problems.add(mark, "lab number 0 is not allowed: lab numbers start at 01")
    else:
        return match
    return None


def title_problem(title: str) -> str | None:
    """Say why a title cannot be a lab's one-line title, or None."""
    if not title.strip() or any(unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") for char in title):
        return f"title {title!r} must be one line of visible text, without control characters"
    # What is left: lone surrogates (how Python hands over bytes of a command line that is not
    # UTF-8) and U+FFFE, U+FFFF, which no YAML file may contain and no UTF-8 file can hold.
    bad = next((char for char in title if not yaml_printable(char)), None)
    if bad is not None:
        return f"title {title!r} has {bad!r} (U+{ord(bad):04X}), which a YAML manifest cannot hold"
    return None


def yaml_printable(char: str) -> bool:
    """Whether YAML 1.1's printable set (what PyYAML reads) holds char."""
    code = ord(char)
    return char in "\t\n\r\x85" or 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or code >= 0x10000


def starter_module(slug: str) -> str:
    """Return the starter's module name: the slug, unless that would not be a module of its own.

    A starter named like a module it imports would import itself; one that is a keyword or
    starts with a digit could not be imported by a test.
    """
    module = slug.replace("-", "_")
    if not module.isidentifier():
        return f"lab_{module}"
    if keyword.iskeyword(module) or module.casefold() in imported_modules():
        return f"{module}_lab"
    return module


def imported_modules() -> frozenset[str]:
    """Top-level modules a starter's `import` may mean, casefolded (macOS file names ignore case).

    A fixed list, not what happens to be installed: the same `new` names a starter the same on
    every machine."""
    return frozenset(name.casefold() for name in (*sys.stdlib_module_names, *IMPORTED_MODULES))


def write_lab(plan: Plan, root: Path) -> None:
    """Write the starter, then the manifest (so a watching `serve` never sees one without the other).

    Nothing is overwritten, nor written through a symlink; if a write fails, what this call made
    is removed again and the error names the path.
    """
    codes = plan.starters[0][0].parent.parent
    made: list[Path] = []
    try:
        if not os.path.lexists(codes):
            codes.mkdir()
            made.append(codes)
        folder = plan.starters[0][0].parent
        folder.mkdir()
        made.append(folder)
        for path, text in plan.starters:
            create(path, text, made)
        create(plan.manifest, plan.manifest_text, made)
    except OSError as exc:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                if path.is_dir():
                    path.rmdir()
                else:
                    path.unlink()
        failed = Path(exc.filename) if exc.filename else made[-1]
        shown = str(failed.relative_to(root)) if failed.is_relative_to(root) else str(failed)
        message = "already exists; infralens new never overwrites" if isinstance(exc, FileExistsError) else f"cannot write {shown}: {exc.strerror or exc}"
        raise InputError([Problem(Mark(shown), message)]) from None


def create(path: Path, text: str, made: list[Path]) -> None:
    """Write a new file; "x" refuses an existing path, a symlink to nowhere included."""
    with open(path, "x", encoding="utf-8") as handle:
        made.append(path)
        handle.write(text)


@contextlib.contextmanager
def one_new_at_a_time(site_path: Path):
    """Hold the site's `new` lock, a file in the cache folder, so two runs cannot take one number.

    A cache that cannot be written only loses the lock: it orders two `new` runs at once, and a
    lone run must not fail for it.
    """
    locks = Workspace.open(site_path).cache / "locks"
    with contextlib.ExitStack() as stack:
        try:
            locks.mkdir(parents=True, exist_ok=True)
            handle = stack.enter_context(open(locks / f"new-{digest(os.fsencode(os.path.realpath(site_path.parent)))}.lock", "a+b"))
        except OSError:
            handle = None
        if handle is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def skeleton(name: str) -> str:
    """Return the text of one of the packaged skeleton files."""
    from importlib.resources import files

    return (files("infralens") / "skeleton" / name).read_text(encoding="utf-8")
