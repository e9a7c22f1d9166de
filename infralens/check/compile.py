"""Compiled starters (C++, CUDA): the compiler a run uses, its identity, its command, and the first
error it printed, read back to a line of the starter.

`compiler_identity` is the one function here that starts a process (`COMPILER --version`, once per
compiler and process); the rest is pure.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from infralens.model.starter import CompileStep

INSTALL_HINT = {
    "g++": "Debian's package g++ (scripts/install-compilers installs it)",
    "clang++": "Debian's package clang",
    "nvcc": "NVIDIA's CUDA toolkit (its nvcc on PATH)",
}


@dataclass(frozen=True)
class Compiler:
    """A compiler as this machine has it."""

    name: str
    """As the run spec (or the language's default) names it: g++, nvcc."""
    path: str | None
    """Where PATH finds it; None when it is not installed."""
    identity: str
    """Its name and version as `--version` says it ('g++ 12.2.0', 'nvcc 13.0.88'), or 'missing'."""


def compiler_of(step: CompileStep) -> Compiler:
    """The compiler a compiled run uses (model.starter.compile_step says which), found on PATH."""
    path = shutil.which(step.compiler)
    return Compiler(step.compiler, path, compiler_identity(path, step.compiler) if path else "missing")


@functools.lru_cache(maxsize=None)
def compiler_identity(path: str, name: str) -> str:
    """The compiler's name and version, read once per process from `PATH --version`."""
    try:
        said = subprocess.run([path, "--version"], capture_output=True, timeout=30, env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired):
        return f"{name} (its --version did not answer)"
    return f"{name} {version_in(said.stdout.decode('utf-8', 'replace'))}"


def version_in(text: str) -> str:
    """The version a compiler's `--version` states: nvcc's on its 'release' line (V13.0.88 → 13.0.88),
    else the last version-shaped word of its first line (g++ and clang name theirs there)."""
    lines = text.strip().splitlines() or [""]
    line = next((line for line in lines if "release" in line), lines[0])
    found = re.findall(r"\bV?(\d+\.\d+(?:\.\d+)*)\b", line)
    return found[-1] if found else "(unknown version)"


def built_with(compiler: Compiler, flags: tuple[str, ...]) -> str:
    """What a run's page says it was built with: 'g++ 12.2.0 -std=c++20 -O2 -Wall -Wextra -Werror'."""
    return " ".join((compiler.identity, *flags))


def missing_compiler(compiler: Compiler, starter: str) -> str:
    """Why a starter cannot be compiled on this machine, in one line."""
    hint = INSTALL_HINT.get(compiler.name)
    return f"cannot compile {starter}: its compiler {compiler.name!r} is not on PATH" + (f"; install {hint}" if hint else "")


@dataclass(frozen=True)
class CompileError:
    """The first error a compiler printed: where (a file of the starter's folder, by its path in the
    project, with line and column when the compiler gave them) and what."""

    path: str
    line: int
    column: int
    message: str


# g++ and clang: `file:12:5: error: message`; nvcc's front end: `file(12): error #177-D: message`.
_GCC = re.compile(r"^(?P<file>[^\s:][^:\n]*?):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<message>.+)$", re.MULTILINE)
_NVCC = re.compile(r"^(?P<file>[^\s(][^(\n]*?)\((?P<line>\d+)\): (?:catastrophic )?error(?: #[\w-]+)?: (?P<message>.+)$", re.MULTILINE)
_ANY = re.compile(r"^.*\berror\b.*$", re.MULTILINE | re.IGNORECASE)


def first_error(output: str, folder: str, project_folder: str, texts: dict[str, str]) -> CompileError | None:
    """The first error in a compiler's output that names a file in the starter's `folder` (the
    real folder the compiler was given), with that file named by its path in the project
    (`project_folder`, such as code/lab-26-x); None when no error names a line there (a linker's
    undefined reference, a missing system header: `first_problem_line` says those). `texts` holds
    the files as written (by project path), where nvcc's columns are read (see nvcc_column)."""
    found = []
    base = os.path.normpath(folder)
    for pattern in (_GCC, _NVCC):
        for match in pattern.finditer(output):
            real = os.path.normpath(os.path.join(folder, match.group("file").strip()))
            if not real.startswith(base + os.sep):
                continue
            path, line = f"{project_folder}/{os.path.relpath(real, base)}", int(match.group("line"))
            if pattern is _GCC:
                column = int(match.group("col") or 1)
            else:
                written = texts.get(path, "").split("\n")
                column = nvcc_column(output[match.end():], written[line - 1] if 0 < line <= len(written) else "")
            found.append((match.start(), CompileError(path, line, column, match.group("message").strip())))
    return min(found, key=lambda pair: pair[0])[1] if found else None


def nvcc_column(after: str, written: str) -> int:
    """The column of an nvcc error, from what follows its message (`after`: nvcc's echo of the line,
    then a caret under the place) and the line as written. nvcc echoes the line as its front end
    rewrote it (`__global__` as `__attribute__((global))`), so the column is where the echo's text
    from the caret on occurs in the written line, when it occurs there once; else 1."""
    rest = after.lstrip("\n").split("\n")
    if len(rest) < 2 or rest[1].strip() != "^":
        return 1
    echo, caret = rest[0], rest[1].index("^")
    tail = echo[caret:].rstrip()
    if not tail or written.count(tail) != 1:
        return 1
    return written.index(tail) + 1


def first_problem_line(output: str) -> str:
    """The first line of a compiler's output that says `error` (a linker's, a driver's), else its last line."""
    found = _ANY.search(output)
    lines = output.strip().splitlines()
    return (found.group(0) if found else lines[-1] if lines else "no output").strip()[:300]
