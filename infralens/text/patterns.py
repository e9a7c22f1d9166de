"""Patterns over a run's output: the one matcher every manifest pattern goes through, with a time limit.

Pure: a pattern and the text a run printed → the first match, or `PatternTimeout`. The `regex`
module matches with a time limit and without the exponential backtracking of `re`, where
`(a+)+$` against a long line spins in C code, deaf to SIGTERM and Ctrl-C. `expect`, a question's
`printed:` and a calculator preset's `printed:` all match here, so `check` and `build` read a
run's output alike. Patterns are checked with `re` syntax when the manifest is parsed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import regex

MATCH_SECONDS = 2.0
"""How long one pattern may take to match a run's output."""


class PatternTimeout(Exception):
    """A pattern did not finish matching a run's output within its time limit."""

    def __init__(self, pattern: str, seconds: float) -> None:
        super().__init__(pattern, seconds)
        self.pattern = pattern
        self.seconds = seconds

    @property
    def reason(self) -> str:
        """Why, in words for a manifest error."""
        return f"'{self.pattern}' did not finish matching the run's output in {self.seconds:g} s (a pattern that backtracks without end?)"


def search_output(pattern: str, output: str, seconds: float = MATCH_SECONDS) -> regex.Match | None:
    """Return the first match of `pattern` in `output` (`^` and `$` at every line), or None.

    Raise PatternTimeout when matching takes longer than `seconds`.
    """
    import regex  # deferred: ~17 ms to load, and a build whose pages match no pattern needs none

    try:
        return regex.search(pattern, output, regex.MULTILINE, timeout=seconds)
    except TimeoutError:
        raise PatternTimeout(pattern, seconds) from None
