"""Notebooks: each Python starter as a Jupyter notebook, cut at its top-level statements, its
notes as Markdown cells; valid by nbformat's own validator, and for two labs run top to bottom in
a real kernel (nbclient, ipykernel)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from conftest import REPO, TESTS

from infralens.build.memory import resolve
from infralens.lab.notebooks import notebook, notebook_path, pieces


def book_of(resolved, root: Path):
    lab, excerpt = resolved.lab, resolved.excerpt
    starter = next(s for s in lab.starters if s.path == excerpt.starter)
    text = (root / starter.path).read_text()
    return nbformat.reads(notebook(lab, starter, text, excerpt.key_blocks), as_version=4), starter


@pytest.mark.unit
def test_a_starter_becomes_a_valid_notebook_cut_at_its_statements_with_its_notes(sample_project) -> None:
    sample = {r.lab.id: r for r in resolve(sample_project)}
    book, starter = book_of(sample["lab-01-sample"], TESTS / "sites" / "sample")
    nbformat.validate(book)  # raises if not a valid nbformat 4 notebook
    kinds = [(cell.cell_type, cell.source.split("\n")[0]) for cell in book.cells]
    assert kinds == [
        ("markdown", "# Lab 01: Sample KV bytes"),
        ("code", "import argparse"),
        ("markdown", "**Note 1: per_layer** (line 9)"),
        ("markdown", "**Note 2: Main transition** (line 10)"),
        ("code", "def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:"),
        ("code", "@staticmethod"),
        ("code", "import sys"),
    ]
    assert "Tiny starter for the golden site" in book.cells[0].source  # the module docstring
    assert "K and V, so the **factor 2**." in book.cells[2].source
    assert "# region" not in book.cells[4].source and "per_layer = 2 * kv_heads" in book.cells[4].source
    main = book.cells[-1].source
    assert "sys.argv = ['kv.py']" in main and main.endswith('print(f"kv bytes per token: {kv_bytes_per_token(args.layers, 32, 128, 2):,}")')
    assert "    parser" not in main  # dedented out of the __main__ guard
    assert notebook_path(starter.path) == "code/lab-01-sample/kv.ipynb"


@pytest.mark.unit
def test_comments_above_a_function_go_with_it_and_a_module_without_a_docstring_starts_at_line_1() -> None:
    cut = pieces("import os\nX = 1\n\n# how we count\n@decorate\ndef f():\n    return X\n\nY = f()\n")
    assert [(p.first, p.last, p.main) for p in cut] == [(1, 2, False), (3, 7, False), (8, 9, False)]
    assert pieces("def broken(:\n") is None


def run_notebook(resolved, tmp_path: Path) -> tuple[str, tuple[str, ...]]:
    """Build the lab's notebook from the repository, run every cell in a fresh kernel; return what
    it printed and the `expect` patterns `check` demands of the starter's own run."""
    from nbclient import NotebookClient

    lab_id = resolved.lab.id
    book, starter = book_of(resolved, REPO)
    NotebookClient(book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(output.get("text", "") for cell in book.cells if cell.cell_type == "code" for output in cell.get("outputs", []))
    if lab_id == "lab-05-flash-attention-cpu":  # it measures peaks in child processes started by its file
        assert book.cells[-2].source.startswith("%%writefile flash_attention_cpu.py\n")
    return printed, starter.run.expect


@pytest.mark.starters
@pytest.mark.parametrize("lab_id", ["lab-01-transformer-memory", "lab-04-online-softmax", "lab-05-flash-attention-cpu"])
def test_a_labs_notebook_runs_top_to_bottom_and_prints_what_check_expects(lab_id: str, resolved, tmp_path: Path) -> None:
    printed, expect = run_notebook(resolved[lab_id], tmp_path)
    assert expect, "a lab whose run expects nothing proves nothing here"
    missing = [pattern for pattern in expect if not re.search(pattern, printed, re.MULTILINE)]
    assert missing == []


GUARDED = '''"""Doc."""
import sys


def f():
    return 1


if __name__ == "__main__":
    text = """first
second line at column 0
"""
    if len(sys.argv) > 5:
        print("many")
    else:
        print(text, f())
'''


def code_cells(text: str, path: str = "code/x/probe.py") -> list[str]:
    lab, starter = SimpleNamespace(number=1, title="T"), SimpleNamespace(path=path, role="r")  # all a notebook reads of them
    book = nbformat.reads(notebook(lab, starter, text), as_version=4)
    return [cell.source for cell in book.cells if cell.cell_type == "code"]


@pytest.mark.unit
def test_the_main_cell_loses_exactly_the_guards_indentation_and_compiles() -> None:
    main = code_cells(GUARDED)[-1]
    compile(main, "main-cell", "exec")  # an IndentationError before: a column-0 string line kept the body indented
    assert '\ntext = """first\nsecond line at column 0\n"""\n' in main  # the string's own lines as they were
    assert "\nelse:\n    print(text, f())" in main


@pytest.mark.unit
def test_a_region_marker_inside_a_string_stays_and_a_real_marker_goes() -> None:
    text = 'def f():\n    # region core\n    s = """\n# region not-a-marker\n# endregion\n"""\n    # endregion\n    return s\n'
    cell = code_cells(text)[-1]
    compile(cell, "cell", "exec")
    assert "# region core" not in cell and "    # endregion\n" not in cell
    assert '"""\n# region not-a-marker\n# endregion\n"""' in cell


@pytest.mark.unit
def test_every_labs_notebooks_are_valid_and_the_bytes_nbformat_itself_writes(project, resolved) -> None:
    # The build writes notebooks without nbformat (its per-cell schema validation was a third of a
    # cold build): each must still pass nbformat's validator, and nbformat, reading it and writing
    # it again, must give the same bytes.
    from infralens.lab.notebooks import has_notebook

    written = 0
    for lab in project.labs:
        blocks = resolved[lab.id].excerpt.key_blocks
        for starter in filter(has_notebook, lab.starters):
            text = notebook(lab, starter, project.sources[starter.path].text, tuple(b for b in blocks if b.starter == starter.path))
            assert text is not None, starter.path
            book = nbformat.reads(text, as_version=4)
            nbformat.validate(book)
            assert nbformat.writes(book) == text, starter.path
            assert [cell.id for cell in book.cells] == [f"cell-{n}" for n in range(1, len(book.cells) + 1)]
            written += 1
    assert written  # the site has Python starters, every one compared
