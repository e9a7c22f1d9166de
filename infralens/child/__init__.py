"""The programs `check` starts by path, each in the starter's own interpreter.

They import nothing of InfraLens (a test holds them to it): they run where the package may not be
importable, under the starter's Python and, with `--sandbox`, inside bubblewrap. The package names
them here by path and never imports them to run them; `lab.resolve` borrows two pure helpers of the
tracer, so the page and the tracer read a starter's statements the same way.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).parent

SUPERVISE = _HERE / "supervise.py"
"""The program every starter runs under: it kills whatever the starter leaves behind."""

RUN_MARKDOWN = _HERE / "run_markdown.py"
"""The program that runs a Markdown starter's python blocks in order, in one namespace."""

TRACE_STATE = _HERE / "trace_state.py"
"""The program that runs a starter while recording the execution state of its excerpt's lines."""

PROBE = _HERE / "probe.py"
"""The program that imports a starter as a module and asks it for the calculators' values."""

RECORDERS = (TRACE_STATE, PROBE)
"""The programs whose output a stored result keeps besides its run: a changed one records anew."""
