"""One test per runnable starter of the real site, through the same runner `infralens check` uses.

The starters run once per session, two at a time, always afresh (no stored result is reused); each
test then reports its own starter, including the check that every figure the lab page states is
printed by the lab's runs. The fresh results are stored, so a build afterwards shows them.
"""

from __future__ import annotations

import pytest

from conftest import REPO
from infralens.load import load_project
from infralens.results import ResultStore
from infralens.runner import run_labs, runnable

PROJECT = load_project(REPO / "site.yml")
PAIRS = runnable(PROJECT.labs)


@pytest.fixture(scope="session")
def results() -> dict[str, object]:
    runs = run_labs(PROJECT.labs, PROJECT.root, jobs=2, store=ResultStore(PROJECT.root), use_cache=False)
    return {result.starter: result for result in runs}


@pytest.mark.parametrize("starter", [s.path for _, s in PAIRS])
def test_starter_runs_and_says_what_its_page_claims(starter: str, results) -> None:
    result = results[starter]
    assert result.passed, f"{result.mark}: error: {result.reason}\n{result.tail()}"
