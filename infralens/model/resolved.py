"""What the build resolves from a lab: its excerpt's parts and key blocks bound to real lines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infralens.errors import Mark, Problem
from infralens.model.lab import Lab
from infralens.model.starter import DerivedSpec, StateChoice
from infralens.text.source import SourceLine


@dataclass(kw_only=True, frozen=True)
class KeyBlock:
    """A key block bound to real file lines first..last."""

    name: str
    slug: str
    note: str
    first: int
    last: int
    ordinal: int
    """1-based position in the lab's list of key blocks, shown as the line's badge."""
    state: StateChoice | None = None
    """What the block shows of the recorded execution state (None: everything its lines bind)."""
    starter: str = ""
    """The starter whose lines it is bound to (in a walkthrough, any step's)."""
    part: int = 0
    """The position (0-based) of the step whose lines it is bound to."""
    meaning: tuple[tuple[str, str, Mark], ...] = ()
    """What its lines' values mean: (name, words, where the manifest says it)."""
    derived: tuple[DerivedSpec, ...] = ()
    """Figures computed from its lines' recorded values."""


@dataclass(frozen=True)
class Part:
    """One excerpt of a page: a step of a walkthrough, or the whole preview."""

    starter: str
    lines: tuple[SourceLine, ...]
    title: str | None = None
    prefix: str = ""
    """What its lines' ids start with before 'L12': '' for the previewed starter, 's2-' for the
    lab's second starter, so two files' line 12 keep apart on one page."""

    @property
    def first(self) -> int:
        return self.lines[0].number

    @property
    def last(self) -> int:
        return self.lines[-1].number


@dataclass(frozen=True)
class Excerpt:
    """The lines a lab page previews, with real numbers, step by step (one step unless it is a
    walkthrough); marker lines are left out."""

    parts: tuple[Part, ...]
    key_blocks: tuple[KeyBlock, ...]

    @property
    def starter(self) -> str:
        """The previewed starter: the first step's, whose run records state."""
        return self.parts[0].starter

    @property
    def lines(self) -> tuple[SourceLine, ...]:
        """The previewed starter's lines, of every step that shows it: what its run records state for."""
        return tuple(line for part in self.parts if part.starter == self.starter for line in part.lines)

    @property
    def first(self) -> int:
        return self.lines[0].number

    @property
    def last(self) -> int:
        return self.lines[-1].number

    @property
    def walkthrough(self) -> bool:
        return len(self.parts) > 1


@dataclass(frozen=True)
class ResolvedLab:
    """A lab with its excerpt cut and its notes bound: everything its page needs."""

    lab: Lab
    excerpt: Excerpt


@dataclass(frozen=True)
class Published:
    """What a page feature publishes for one lab: the view its templates read, the data files it
    writes beside the page, and the problems that keep the lab from being published."""

    view: Any = None
    """Handed to the lab page's templates under the feature's NAME (None: the feature has nothing to show)."""
    files: tuple[tuple[str, str], ...] = ()
    """(path under output/, text) of each file it writes: a data script, a notebook."""
    problems: tuple[Problem, ...] = ()
