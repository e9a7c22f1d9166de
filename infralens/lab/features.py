"""The page features, listed once: execution state, calculators, questions and notebooks.

Each is a module of this family with the same three functions and a NAME, and nothing registers
them but the tuple below:

    manifest_problems(lab, excerpt, source) -> list[Problem]
        what the manifest must satisfy once the excerpt is cut (the previewed starter's `source`),
        beyond what the model checks as the manifest is read
    run_problems(lab, runs, excerpt) -> {starter path: [Problem]}
        what the starters' checked runs (each starter's first run, by path) must satisfy; `check`
        fails the first run of the starter each problem names
    published(lab, runs, excerpt, sources) -> Published
        what the lab's pages show: the view its templates read under NAME, the data files it
        writes beside the page, and the problems that keep the lab from being published

A new feature is its records in model/, a module here with these functions (added to FEATURES),
and its template partial.
"""

from __future__ import annotations

from infralens.errors import Problem
from infralens.lab import calculators, notebooks, questions, state
from infralens.model.lab import Lab
from infralens.model.resolved import Excerpt, Published
from infralens.model.run import RunResult
from infralens.text.source import SourceFile

FEATURES = (state, calculators, questions, notebooks)
"""In the order their problems are reported and their files written."""


def manifest_problems(lab: Lab, excerpt: Excerpt, source: SourceFile) -> list[Problem]:
    """Every feature's problems with the manifest, given the cut excerpt."""
    return [problem for feature in FEATURES for problem in feature.manifest_problems(lab, excerpt, source)]


def run_problems(lab: Lab, runs: dict[str, RunResult], excerpt: Excerpt | None) -> list[dict[str, list[Problem]]]:
    """Each feature's problems with the checked runs, by starter, feature by feature."""
    return [feature.run_problems(lab, runs, excerpt) for feature in FEATURES]


def published(lab: Lab, runs: dict[str, RunResult], excerpt: Excerpt, sources: dict[str, SourceFile]) -> dict[str, Published]:
    """What each feature publishes for the lab, by its NAME."""
    return {feature.NAME: feature.published(lab, runs, excerpt, sources) for feature in FEATURES}
