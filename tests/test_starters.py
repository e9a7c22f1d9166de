"""One test per runnable starter of the real site, through the same runner `infralens check` uses."""

from __future__ import annotations

import pytest

from conftest import REPO
from infralens.load import load_project
from infralens.runner import run_starter, runnable

PROJECT = load_project(REPO / "site.yml")
PAIRS = runnable(PROJECT.labs)


@pytest.mark.parametrize("lab, starter", PAIRS, ids=[starter.path for _, starter in PAIRS])
def test_starter_runs_and_says_what_its_page_claims(lab, starter) -> None:
    result = run_starter(lab, starter, PROJECT.root)
    assert result.passed, f"{result.mark}: {result.reason}\n{result.output_tail}"
