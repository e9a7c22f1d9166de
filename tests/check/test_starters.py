"""One test per run of a starter of the real site (one per device it declares), through the same
runner `infralens check` uses; a run on a device this machine lacks is skipped, as check skips it.

The starters run once per session, two at a time, always afresh (no stored result is reused); each
test then reports its own starter, including the check that every figure the lab page states is
printed by the lab's runs. Nothing is stored: a test writes nothing into the repository, so
`infralens check` is what records the runs a build shows.
"""

from __future__ import annotations

import pytest
from conftest import manifest_data

from infralens.check.runner import run_labs, runs_of
from infralens.model.run import run_name
from infralens.model.starter import RUNNABLE_SUFFIXES
from infralens.text.languages import language_of

pytestmark = pytest.mark.starters


def declared_runs() -> list[tuple[str, str]]:
    """(starter, device) of every run the manifests declare, in lab order, read from their YAML so
    the tests are known at collection: a starter in a language that runs runs on its language's
    device (cpu; cuda for a .cu program) unless it says `run: false`, a list of runs runs it once
    per device. The `results` fixture holds this to the parsed runs."""
    runs = []
    for manifest in manifest_data().values():
        for starter in manifest.get("starters") or []:
            run = starter.get("run")
            if run is False or ("run" not in starter and not starter["path"].endswith(RUNNABLE_SUFFIXES)):
                continue
            device = language_of(starter["path"]).device  # a CUDA program's run is on cuda unless it says otherwise
            runs += [(starter["path"], (spec or {}).get("device", device)) for spec in (run if isinstance(run, list) else [run])]
    return runs


RUNS = declared_runs()


@pytest.fixture(scope="session")
def results(project) -> dict[tuple[str, str], object]:
    parsed = [(starter.path, run.device) for _, starter, run in runs_of(project.labs)]
    assert parsed == RUNS, "the runs read from labs/*.yml to name these tests are not the runs the manifests parse to"
    runs = run_labs(project.labs, project.root, jobs=2, texts=project.texts, manifests=project.manifests)  # no store: every starter runs, nothing is kept
    return {(result.starter, result.device): result for result in runs}


@pytest.mark.parametrize(("starter", "device"), RUNS, ids=[run_name(path, device) for path, device in RUNS])
def test_starter_runs_and_says_what_its_page_claims(starter: str, device: str, results) -> None:
    result = results[starter, device]
    if result.skipped:  # a run on a device this machine lacks: reported, as check reports it, never passed
        pytest.skip(f"{result.name}: {result.reason}")
    if result.compiled:  # a CUDA program where nvcc is and no GPU: it compiled, and was not run
        pytest.skip(f"{result.name}: compiled, not run: {result.reason}")
    assert result.passed, f"{result.mark}: error: {result.reason}\n{result.tail()}"
