"""Verdicts: whether a run's output, artifacts and recorded values still say what the lab page claims.

Pure apart from reading the artifacts a run left. Each check turns a passed run into a failed one
with the reason, at the manifest line that makes the claim.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import replace
from pathlib import Path

from infralens.errors import Mark, Problem
from infralens.lab.claims import figure_line, unbacked_figures
from infralens.lab.features import run_problems
from infralens.lab.state import recorded_text
from infralens.model.lab import Lab
from infralens.model.resolved import Excerpt
from infralens.model.record import MAX_ARTIFACT_BYTES
from infralens.model.run import RunResult, Status, first_runs
from infralens.model.starter import RunSpec
from infralens.text.patterns import MATCH_SECONDS, PatternTimeout, search_output



def artifact_problem(path: Path) -> str | None:
    """Say why a file a run left cannot be kept as an artifact, or None (also when there is no file).

    Only a regular file is copied: a symlink could publish a file from anywhere on the machine, or
    point at /dev/zero and never end.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink; write the file itself"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_size > MAX_ARTIFACT_BYTES:
        return f"is {info.st_size:,} bytes; an artifact is published with the page, at most {MAX_ARTIFACT_BYTES:,}"
    if path.suffix.lower() == ".svg":
        return svg_problem(path.read_bytes())
    return None


ACTIVE_SVG = frozenset("script foreignobject iframe embed object handler listener animate set animatemotion animatetransform".split())
"""SVG elements that run script, embed other documents, or change attributes (such as a link's target) later."""


def svg_problem(data: bytes) -> str | None:
    """Say why an SVG artifact is not a plain drawing, or None.

    The site publishes it at its own URL, where a browser opening it runs any script it holds, so
    only static drawing is let through: no script or embedding elements, no `on…` handlers, no
    references but to the drawing's own `#ids`, no entity declarations.
    """
    import xml.etree.ElementTree as ET

    if b"<!ENTITY" in data:
        return "is an SVG that declares entities; an artifact is a plain drawing"
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        return f"is not well-formed SVG ({exc})"
    for element in root.iter():
        tag = str(element.tag).rsplit("}", 1)[-1].lower()
        if tag in ACTIVE_SVG:
            return f"is an SVG with a <{tag}> element, which runs or changes when the file is opened; an artifact is a plain drawing"
        texts = [element.text or ""] if tag == "style" else []
        for name, value in element.attrib.items():
            local = name.rsplit("}", 1)[-1].lower()
            if local.startswith("on"):
                return f"is an SVG with an {local} handler, which runs when the file is opened; an artifact is a plain drawing"
            if local == "href" and not value.strip().startswith("#"):
                return f"is an SVG linking to {value.strip()[:60]!r}; an artifact may refer only to its own #ids"
            if local == "style":
                texts.append(value)
        for text in texts:
            if "@import" in text or re.search(r"url\(\s*['\"]?\s*(?!#)", text):
                return "is an SVG whose style fetches a file; an artifact may refer only to its own #ids"
    return None


EXPECT_SECONDS = MATCH_SECONDS
"""How long one `expect` pattern may take to match a run's output."""


def expect_found(pattern: str, output: str, seconds: float = EXPECT_SECONDS) -> bool | None:
    """Say whether an expect pattern occurs in the output, or None when matching it ran out of time
    (the one bounded matcher, text.patterns)."""
    try:
        return search_output(pattern, output, seconds) is not None
    except PatternTimeout:
        return None


CLAIMS_SHOWN = 20
"""Unbacked figures of one lab given a line each; the rest are counted on the last of them."""


def check_claims(lab: Lab, results: list[RunResult], manifest_text: str) -> list[RunResult]:
    """Fail the lab's last run when its page states a figure that none of its runs printed and no
    line of its excerpt was recorded holding: the first such figure is its reason, each other one
    a failure of its own place in `also`."""

    made = [index for index, result in enumerate(results) if result.ran]
    if not made:
        return results
    output = "\n".join([*(result.stdout for result in results), *(recorded_text(result.state) for result in results)])
    missing = unbacked_figures(lab, output)
    last = made[-1]
    if not missing or not results[last].passed:
        return results
    shown, more = missing[:CLAIMS_SHOWN], missing[CLAIMS_SHOWN:]
    found = [(Mark(lab.path, *figure_line(manifest_text, figure)), f"the page states {figure} but no starter of the lab prints it or records it on a line") for figure in shown]
    if more:  # a line each for thousands of figures would take as long to find as to read
        listed = ", ".join(more[:5]) + (", …" if len(more) > 5 else "")
        mark, reason = found[-1]
        found[-1] = (mark, f"{reason} (and {len(more):,} more figures no run backs: {listed})")
    (mark, reason), *also = found
    failed = replace(results[last], status="failed", reason=reason, mark=mark, also=tuple(also))
    return [*results[:last], failed, *results[last + 1 :]]


def check_features(lab: Lab, results: list[RunResult], excerpt: Excerpt | None) -> list[RunResult]:
    """Fail a starter's passed first run when a page feature says its run falls short: a calculator
    that disagrees with the probe's answers, a question whose figure it did not print or record."""
    runs = first_runs(lab.starters, {(r.starter, r.device): r for r in results})
    for by_starter in run_problems(lab, runs, excerpt):
        results = failed_by(results, by_starter, lab)
    return results


def failed_by(results: list[RunResult], by_starter: dict[str, list[Problem]], lab: Lab) -> list[RunResult]:
    """Fail each starter's first run that passed and has problems, at the first of them, saying how
    many more there are."""
    checked = []
    first = set(map(id, first_runs(lab.starters, {(r.starter, r.device): r for r in results}).values()))
    for result in results:
        problems = sorted(by_starter.get(result.starter, []), key=lambda p: p.mark)
        if problems and result.passed and id(result) in first:
            more = f"; and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''} (infralens build lists them)" if len(problems) > 1 else ""
            result = replace(result, status="failed", reason=problems[0].message + more, mark=problems[0].mark)
        checked.append(result)
    return checked


def run_verdict(spec: RunSpec, returncode: int | None, text: str, written: tuple[str, ...], refused: dict[str, str]) -> tuple[Status, str]:
    """Say whether a run passed, and if not why in one line: it exited 0 within its timeout (a
    returncode of None: killed at it), every expect pattern was found in `text` (its stdout), and
    every declared artifact was written (`written`) and could be kept (`refused`: name → why not)."""
    if returncode is None:
        return "timeout", f"killed after {spec.timeout:g} s timeout"
    if returncode != 0:
        return "failed", f"exited with status {returncode}"
    missing, slow = [], []
    for pattern in spec.expect:
        found = expect_found(pattern, text)
        (slow if found is None else missing if not found else []).append(pattern)
    unwritten = [name for name in spec.artifacts if name not in written and name not in refused]
    if refused:
        name, why = next(iter(refused.items()))
        return "failed", f"artifact {name!r} {why}"
    if slow:
        return "failed", f"expect {slow[0]!r} did not finish matching in {EXPECT_SECONDS:g} s (a pattern that backtracks without end?)"
    if missing:
        return "failed", f"output does not match expect {missing[0]!r}"
    if unwritten:
        return "failed", f"did not write artifact {unwritten[0]!r} into its working folder"
    return "passed", ""
