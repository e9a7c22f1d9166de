"""One test per run of a starter of the real site (one per device it declares), through the same
runner `infralens check` uses; a run on a device this machine lacks is skipped, as check skips it.

The starters run once per session, two at a time, always afresh (no stored result is reused); each
test then reports its own starter, including the check that every figure the lab page states is
printed by the lab's runs. Nothing is stored: a test writes nothing into the repository, so
`infralens check` is what records the runs a build shows.
"""

from __future__ import annotations

import pytest
from conftest import REPO

from infralens.build import load_project
from infralens.check.runner import run_labs, runs_of
from infralens.model.run import run_name

pytestmark = pytest.mark.starters

PROJECT = load_project(REPO / "site.yml")
RUNS = [(starter.path, run.device) for _, starter, run in runs_of(PROJECT.labs)]


@pytest.fixture(scope="session")
def results() -> dict[tuple[str, str], object]:
    runs = run_labs(PROJECT.labs, PROJECT.root, jobs=2, texts=PROJECT.texts, manifests=PROJECT.manifests)  # no store: every starter runs, nothing is kept
    return {(result.starter, result.device): result for result in runs}


@pytest.mark.parametrize(("starter", "device"), RUNS, ids=[run_name(path, device) for path, device in RUNS])
def test_starter_runs_and_says_what_its_page_claims(starter: str, device: str, results) -> None:
    result = results[starter, device]
    if result.skipped:  # a run on a device this machine lacks: reported, as check reports it, never passed
        pytest.skip(f"{result.name}: {result.reason}")
    assert result.passed, f"{result.mark}: error: {result.reason}\n{result.tail()}"
