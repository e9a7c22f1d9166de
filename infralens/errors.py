"""The one error family: every problem carries the `path:line:col` it points at.

A problem that involves a second place (the first use of a taken name, the line of a file a
selector could not read) says so in a note with its own position, printed under the error as
`path:line:col: note: message`, the way compilers print them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class Mark:
    """A place in an input file; line and column are 1-based, as editors show them."""

    path: str
    line: int = 1
    col: int = 1

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass(frozen=True, order=True)
class Note:
    """A second place a problem involves, and what it is."""

    mark: Mark
    message: str

    def __str__(self) -> str:
        return one_line(f"{self.mark}: note: {self.message}")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input, and where; notes name the other places it involves."""

    mark: Mark
    message: str
    notes: tuple[Note, ...] = ()

    def __str__(self) -> str:
        return "\n".join([one_line(f"{self.mark}: error: {self.message}"), *map(str, self.notes)])


def one_line(text: str) -> str:
    """Escape what would break or hijack a line of a terminal: line breaks, other control
    characters (an ESC starts terminal commands), in a file name or a message alike."""
    return "".join(char if char.isprintable() or char == "\t" else repr(char)[1:-1] for char in text)


class InputError(Exception):
    """The input cannot be built; carries every problem found, in file order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(set(problems), key=lambda p: (p.mark, p.message))
        super().__init__("\n".join(str(p) for p in self.problems))


class Problems:
    """Collects problems so a stage can report all of them at once instead of the first."""

    def __init__(self) -> None:
        self._items: list[Problem] = []

    def add(self, mark: Mark, message: str, *notes: Note) -> None:
        self._items.append(Problem(mark, message, notes))

    def extend(self, problems: list[Problem]) -> None:
        self._items.extend(problems)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def raise_if_any(self) -> None:
        if self._items:
            raise InputError(self._items)


def closest(word: str, choices: Any) -> str | None:
    """Return the choice closest to `word`, if any is close enough to be a likely typo."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, choices: Any) -> str:
    """Return a ` (did you mean 'x'?)` suffix when a choice is close to `word`."""
    close = closest(word, choices)
    return f" (did you mean {close!r}?)" if close else ""
