"""One test per runnable starter of the real site, through the same runner `infralens check` uses.

The starters run once per session, two at a time, always afresh (no stored result is reused); each
test then reports its own starter, including the check that every figure the lab page states is
printed by the lab's runs. Nothing is stored: a test writes nothing into the repository, so
`infralens check` is what records the runs a build shows.
"""

from __future__ import annotations

import pytest

from conftest import REPO
from infralens.build import load_project
from infralens.runner import run_labs, runnable

pytestmark = pytest.mark.starters

PROJECT = load_project(REPO / "site.yml")
PAIRS = runnable(PROJECT.labs)


@pytest.fixture(scope="session")
def results() -> dict[str, object]:
    runs = run_labs(PROJECT.labs, PROJECT.root, jobs=2)  # no store: every starter runs, nothing is kept
    return {result.starter: result for result in runs}


@pytest.mark.parametrize("starter", [s.path for _, s in PAIRS])
def test_starter_runs_and_says_what_its_page_claims(starter: str, results) -> None:
    result = results[starter]
    assert result.passed, f"{result.mark}: error: {result.reason}\n{result.tail()}"
