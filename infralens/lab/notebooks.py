"""Notebooks: a Python starter as a Jupyter notebook a reader can open or upload to Colab.

Pure. Input: a lab, one of its starters' text and, for the previewed starter, its bound key blocks.
Output: the notebook (nbformat 4.5 JSON). The starter is cut into cells at its top-level statements:
the module docstring becomes the title cell, imports and constants stay together, each function or
class (with the comments and decorators above it) is a cell of its own, and the part under
`if __name__ == "__main__":` is the last cell, run as `python starter.py` runs it (with no
arguments); a starter whose processes import it by its file (multiprocessing's spawn) ends with a
cell that writes the file and one that runs it. Each key block's note becomes a Markdown cell
before the cell holding its first line.
The starter file stays the source of truth: a notebook is generated with every build.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import PurePosixPath

from infralens.errors import Note, Problem
from infralens.model.lab import Lab
from infralens.model.resolved import Excerpt, KeyBlock, Published
from infralens.model.run import RunResult
from infralens.model.starter import Starter
from infralens.text.python import string_lines, syntax_facts, syntax_tree
from infralens.text.regions import region_markers
from infralens.text.source import SourceFile


def notebook_path(starter_path: str) -> str:
    """Where a starter's notebook is published: beside its raw file (`code/lab/x.py` → `x.ipynb`)."""
    return str(PurePosixPath(starter_path).with_suffix(".ipynb"))


def has_notebook(starter: Starter) -> bool:
    return starter.path.endswith(".py")


@dataclass(frozen=True)
class Piece:
    """A run of whole lines of the starter that becomes one code cell (1-based, inclusive)."""

    first: int
    last: int
    main: bool = False
    """The body of `if __name__ == "__main__":`, run as the script runs it."""


def pieces(text: str) -> list[Piece] | None:
    """Cut a module into cells at its top-level statements; None if it does not parse."""
    tree = syntax_tree(text)
    return None if tree is None else cut_at_statements(tree)


def cut_at_statements(tree: ast.Module) -> list[Piece]:
    """Cut a parsed module into cells at its top-level statements. A cell starts right after the
    statement before it, so the comments above a function go with it."""
    body = tree.body
    previous_end = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        previous_end = body[0].end_lineno or body[0].lineno  # the docstring is the title cell
        body = body[1:]
    cut: list[Piece] = []
    group_start: int | None = None
    for statement in body:
        start, end = previous_end + 1, statement.end_lineno or statement.lineno
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or _is_main_guard(statement):
            if group_start is not None:
                cut.append(Piece(group_start, previous_end))
                group_start = None
            main = _is_main_guard(statement)
            cut.append(Piece(statement.body[0].lineno if main else start, end, main=main))
        elif group_start is None:
            group_start = start
        previous_end = end
    if group_start is not None:
        cut.append(Piece(group_start, previous_end))
    return cut


def _is_main_guard(statement: ast.stmt) -> bool:
    test = getattr(statement, "test", None)
    return (
        isinstance(statement, ast.If)
        and isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def needs_its_file(text: str) -> bool:
    """Whether the starter starts processes that import it by its file (multiprocessing's spawn,
    or its own `__file__`), which a notebook's cells are not."""
    facts = syntax_facts(text)
    return facts is not None and facts.names_its_file


def _code(lines: list[str], piece: Piece, script: str, hidden: set[int], inside_strings: frozenset[int]) -> str:
    """The cell's source: the piece's lines without region markers (for editors and the page, not
    the notebook); the `__main__` body loses exactly the guard's indentation, except on the lines
    inside a string, whose text is the string's own."""
    numbers = [n for n in range(piece.first, piece.last + 1) if n not in hidden]
    if not piece.main:
        return "\n".join(lines[n - 1] for n in numbers).strip("\n")
    first = lines[piece.first - 1]
    indent = first[: len(first) - len(first.lstrip())]
    body = "\n".join(
        lines[n - 1] if n in inside_strings or not lines[n - 1].startswith(indent) else lines[n - 1][len(indent):]
        for n in numbers
    )
    # A notebook's kernel has arguments of its own: run with none, as `python script` does.
    return f"import sys\nsys.argv = [{script!r}]  # the defaults, as `python {script}` runs\n\n" + body.strip("\n")


NBFORMAT = (4, 5)
"""The notebook format written (major, minor): 4.5 is the first with cell ids."""


def markdown_cell(number: int, source: str) -> dict:
    return {"cell_type": "markdown", "id": f"cell-{number}", "metadata": {}, "source": source.splitlines(True)}


def code_cell(number: int, source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": f"cell-{number}", "metadata": {}, "outputs": [], "source": source.splitlines(True)}


def notebook(lab: Lab, starter: Starter, text: str, blocks: tuple[KeyBlock, ...] = ()) -> str | None:
    """The notebook of a Python starter, as JSON text; None when the starter does not parse.

    Written as nbformat writes a notebook (its JSON layout, sources split into lines, the cells'
    ids fixed, as a build must write the same bytes twice), without its per-cell schema validation:
    the tests hold every lab's notebook to nbformat's validator and to nbformat's own bytes.
    """
    tree = syntax_tree(text)
    inside_strings = string_lines(text)
    if tree is None or inside_strings is None:
        return None
    cut = cut_at_statements(tree)
    lines = text.split("\n")
    script = PurePosixPath(starter.path).name
    docstring = ast.get_docstring(tree) or ""
    title = f"# Lab {lab.number:02d}: {lab.title}\n\n`{starter.path}`: {starter.role}"
    intro = f"{title}\n\n{docstring}\n\n*Generated from the starter by `infralens build`; the starter file is the source of truth. Run the cells in order.*"
    cells = [markdown_cell(1, intro.replace("\n\n\n", "\n\n"))]
    by_file = needs_its_file(text)
    hidden = {marker.line for marker in region_markers(starter.path, text)}
    for piece in cut:
        for block in sorted((b for b in blocks if piece.first <= b.first <= piece.last), key=lambda b: b.first):
            where = f"line {block.first}" if block.first == block.last else f"lines {block.first}–{block.last}"
            cells.append(markdown_cell(len(cells) + 1, f"**Note {block.ordinal}: {block.name}** ({where})\n\n{block.note}"))
        if piece.main and by_file:
            # Its processes import the starter by its file: write the file, then run it as a script.
            cells.append(markdown_cell(len(cells) + 1,
                f"This starter starts processes that import it by its file ({'multiprocessing' if 'spawn' in text else 'its own path'}), "
                f"which the cells above are not: the next cells write `{script}` and run it as `python {script}` does."))
            cells.append(code_cell(len(cells) + 1, f"%%writefile {script}\n{text.rstrip()}"))
            cells.append(code_cell(len(cells) + 1,
                f"import subprocess, sys\n\ndone = subprocess.run([sys.executable, {script!r}], capture_output=True, text=True)\n"
                "print(done.stdout, end=\"\")\nprint(done.stderr, end=\"\", file=sys.stderr)\ndone.check_returncode()"))
            continue
        code = _code(lines, piece, script, hidden, inside_strings)
        if code:
            cells.append(code_cell(len(cells) + 1, code))
    book = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
        "nbformat": NBFORMAT[0],
        "nbformat_minor": NBFORMAT[1],
    }
    return json.dumps(book, indent=1, sort_keys=True, separators=(",", ": "), ensure_ascii=False)


# ---------------------------------------------------------------- the page feature (see features.py)

NAME = "notebooks"


def manifest_problems(lab: Lab, excerpt: Excerpt, source: SourceFile) -> list[Problem]:
    """A starter listed where another starter's notebook is published: one file would replace the other."""
    by_path = {starter.path: starter for starter in lab.starters}
    return [
        Problem(
            by_path[notebook_path(starter.path)].mark,
            f"starter {notebook_path(starter.path)!r} has the path of the notebook generated from {starter.path!r}; rename one of them",
            (Note(starter.mark, f"{starter.path!r} is listed here; its notebook is published beside it"),),
        )
        for starter in lab.starters
        if has_notebook(starter) and notebook_path(starter.path) in by_path
    ]


def run_problems(lab: Lab, runs: dict[str, RunResult], excerpt: Excerpt | None) -> dict[str, list[Problem]]:
    """None: a notebook is made from the starter's text, not from its run."""
    return {}


def published(lab: Lab, runs: dict[str, RunResult], excerpt: Excerpt, sources: dict[str, SourceFile]) -> Published:
    """A notebook beside each Python starter's raw file, the notes of the page as Markdown cells."""
    files = []
    for starter in lab.starters:
        own = tuple(block for block in excerpt.key_blocks if block.starter == starter.path)
        book = notebook(lab, starter, sources[starter.path].text, own) if has_notebook(starter) else None
        if book is not None:
            files.append((notebook_path(starter.path), book))
    return Published(None, tuple(files))
