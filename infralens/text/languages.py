"""The languages a starter may be written in, by file suffix: how its comments mark a region, how a
`symbol:` is found in it, how it is highlighted, and how `check` makes it run.

Pure: a path → its Language (or None: a file shown as it is, never run).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

Runner = Literal["python", "markdown", "compiled"]


@dataclass(frozen=True, kw_only=True)
class Language:
    """One language a starter may be written in."""

    name: str
    """What a reader calls it: 'Python', 'C++', 'CUDA'."""
    comment: str
    """How its line comment starts: a region marker is `<comment> region NAME`."""
    runner: Runner | None = None
    """How `check` runs a starter in it: as a Python script, a Markdown file's python blocks, or
    compiled first and its program run; None: never run."""
    compiler: str = ""
    """A compiled language's compiler (looked up on PATH) unless the run spec names another."""
    flags: tuple[str, ...] = ()
    """The compiler's flags unless the run spec gives its own: the file and `-o PROGRAM` follow them."""
    grammar: Literal["python", "cpp", "cuda"] | None = None
    """What finds a `symbol:` in it: Python's ast, or a tree-sitter grammar; None: no symbols."""
    device: Literal["cpu", "cuda"] = "cpu"
    """The device its program needs when it runs (a CUDA program needs a GPU)."""

    @property
    def compiled(self) -> bool:
        return self.runner == "compiled"

    @property
    def end_marker(self) -> str:
        return f"{self.comment} endregion" + (" -->" if self.comment == "<!--" else "")

    @property
    def start_marker(self) -> str:
        return f"{self.comment} region" + (" NAME -->" if self.comment == "<!--" else "")


CPP_FLAGS = ("-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror")
"""C++20, optimised as a program that is timed would be, every common warning an error: a
starter a reader copies should not teach code its compiler warns about."""

CUDA_ARCH = "sm_80"
"""The GPU architecture nvcc compiles for unless a run spec says otherwise: Ampere (A100), whose
code also carries PTX, so Hopper and later GPUs run it too (compiled for them when it loads)."""

CUDA_FLAGS = ("-std=c++20", "-O2", f"-arch={CUDA_ARCH}", "-Werror", "all-warnings")

PYTHON = Language(name="Python", comment="#", runner="python", grammar="python")
MARKDOWN = Language(name="Markdown", comment="<!--", runner="markdown")
CPP = Language(name="C++", comment="//", runner="compiled", compiler="g++", flags=CPP_FLAGS, grammar="cpp")
CPP_HEADER = Language(name="C++", comment="//", grammar="cpp")
CUDA = Language(name="CUDA", comment="//", runner="compiled", compiler="nvcc", flags=CUDA_FLAGS, grammar="cuda", device="cuda")
CUDA_HEADER = Language(name="CUDA", comment="//", grammar="cuda")
C_HEADER = Language(name="C", comment="//", grammar="cpp")

BY_SUFFIX: dict[str, Language] = {
    ".py": PYTHON,
    ".md": MARKDOWN,
    ".cpp": CPP,
    ".cc": CPP,
    ".cxx": CPP,
    ".hpp": CPP_HEADER,
    ".hh": CPP_HEADER,
    ".h": C_HEADER,
    ".cu": CUDA,
    ".cuh": CUDA_HEADER,
}

RUNNABLE_SUFFIXES: tuple[str, ...] = tuple(suffix for suffix, language in BY_SUFFIX.items() if language.runner)
"""The suffixes of starters `check` runs: .py and .md as they are, the rest compiled first."""

COMPILED_SUFFIXES: tuple[str, ...] = tuple(suffix for suffix, language in BY_SUFFIX.items() if language.compiled)


def language_of(path: str) -> Language | None:
    """The language of a starter by its suffix, as written (`notes.MD` is no Markdown starter: a
    run's meaning never hangs on a file system's case), or None for a file shown as it is."""
    return BY_SUFFIX.get(PurePosixPath(path).suffix)


def symbol_languages() -> str:
    """The languages whose starters a `symbol:` can select from, with their suffixes, for a message."""
    named: dict[str, list[str]] = {}
    for suffix, language in BY_SUFFIX.items():
        if language.grammar:
            named.setdefault(language.name, []).append(suffix)
    return ", ".join(f"{name} ({' '.join(suffixes)})" for name, suffixes in named.items())
