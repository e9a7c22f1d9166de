r"""Claims: the figures a lab page states, and whether its starters' output backs each one.

Pure: a Lab and the text its starters printed → the figures no run printed. A figure is a number
written with a thousands separator or a decimal point (6,738,415,616; 13.48; 2.45), the kind that
a run produces and a hand can paste wrong. Small integers, years and URLs are left alone.
Numbers inside `$…$` math count like any other, with TeX's `{,}` separator read as a comma
(`6{,}738` states 6,738); exponents, subscripts and commands (`10^{9}`, `\sqrt{d_k}`) state none.
A number in inline code (`` `NCCL 2.4` ``, `` `--lr 0.001` ``) is a name or a command, not a
result: it states no figure. Further-reading titles and URLs are not prose, so none of theirs.
"""

from __future__ import annotations

import re

from infralens.model.declare import texts
from infralens.model.lab import Lab
from infralens.model.schema import Prose

_TEX_COMMA = "{,}"
"""How TeX math writes a thousands separator: `6{,}738`."""
_CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
"""Markdown inline code: a run of backticks, text, the same run."""
_URL = re.compile(r"\]\([^)]*\)|https?://\S+")
_FIGURE = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w]|[.,]\d)|(?<![\w.,])\d+\.\d+(?![\w]|[.,]\d)")


def prose(lab: Lab) -> list[str]:
    """Every piece of prose the lab page shows from the manifest: each field declared as Prose."""
    return [text for text, _ in texts(lab, lambda spec, meta: isinstance(spec, Prose))]


def stated_figures(lab: Lab) -> list[str]:
    """Return the figures the page states, each once, in order of appearance."""
    seen: dict[str, None] = {}
    for text in prose(lab):
        for figure in _FIGURE.findall(_URL.sub(" ", _CODE_SPAN.sub(" ", text).replace(_TEX_COMMA, ","))):
            seen.setdefault(figure, None)
    return list(seen)


_NUMBER = re.compile(r"(?<![\d.,])\d(?:\d|[.,](?=\d))*")
"""A whole number as output prints it: digits, with '.' or ',' only between digits."""


def printed_numbers(output: str) -> set[str]:
    """Every whole number of the output, once: a figure is printed when it is one of them (not a
    part of a longer number). One pass, however many figures the page states."""
    return set(_NUMBER.findall(output))


def printed(figure: str, output: str) -> bool:
    """Say whether output contains the figure as a whole number, not as part of a longer one."""
    return figure in printed_numbers(output)


def unbacked_figures(lab: Lab, output: str) -> list[str]:
    """Return the figures the page states that the output does not contain."""
    numbers = printed_numbers(output)
    return [figure for figure in stated_figures(lab) if figure not in numbers]


def figure_line(manifest_text: str, figure: str) -> tuple[int, int]:
    """Return the 1-based (line, column) where the manifest first writes the figure."""
    for number, line in enumerate(manifest_text.split("\n"), start=1):
        written = re.escape(figure).replace(",", f"(?:,|{re.escape(_TEX_COMMA)})")
        match = re.search(rf"(?<![\d.,]){written}(?![\d]|[.,]\d)", line)
        if match:
            return number, match.start() + 1
    return 1, 1
