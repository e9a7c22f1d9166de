"""Fuzzing the loaders: whatever text a manifest or site.yml holds, the only failure is InputError."""

from __future__ import annotations

import pytest
from conftest import TESTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infralens.errors import InputError
from infralens.model.parse import parse_lab, parse_site

pytestmark = pytest.mark.unit

SAMPLE = (TESTS / "sites/sample/labs/lab-01-sample.yml").read_text()
SITE = (TESTS / "sites/sample/site.yml").read_text()

# Pieces of YAML that have broken loaders: tags, anchors and aliases, merge keys, odd scalars,
# flow collections, control and non-BMP characters, document markers.
PIECES = st.sampled_from([
    "!!python/object:os.system", "!foo", "!!int", "!!bool", "!!timestamp", "!!binary", "!!set", "!!omap", "!",
    "&a", "*a", "*missing", "<<:", "<<: *a", "? ", "---", "...", "%YAML 1.1", "%TAG ! tag:x,2000:",
    ".nan", ".inf", "-.inf", "1e999", "0x", "0o7", "1_000", "2020-13-45", "2024-02-30", "~", "null", "yes",
    "9" * 5000, "[", "]", "{", "}", ",", ": ", "- ", "|", ">-", "#", '"', "'", "\\", "\t", "\n", "\r", "\x00",
    "\x07", "\u2028", "\ufeff", "\U0001f600", "$", "$$", "$\\frac{a}$", "key:", "title:", "number:", "run:",
])
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=12)), max_size=30).map("".join)


def only_input_errors(parse, text: str) -> None:
    try:
        parse(text)
    except InputError as exc:
        for problem in exc.problems:
            assert str(problem).count("\n") == len(problem.notes), str(problem)  # one line per problem and per note, always
            assert problem.mark.line >= 1 and problem.mark.col >= 1


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=TEXT, at=st.integers(min_value=0, max_value=len(SAMPLE)), suffix=TEXT)
def test_a_manifest_with_anything_spliced_in_fails_only_with_input_errors(prefix: str, at: int, suffix: str) -> None:
    text = SAMPLE[:at] + prefix + SAMPLE[at:] + suffix
    only_input_errors(lambda t: parse_lab("labs/lab-01-sample.yml", "lab-01-sample", t), text)


@settings(max_examples=300, deadline=None)
@given(text=TEXT)
def test_any_site_yml_fails_only_with_input_errors(text: str) -> None:
    only_input_errors(lambda t: parse_site("site.yml", t), SITE + text)
    only_input_errors(lambda t: parse_site("site.yml", t), text)


@settings(max_examples=200, deadline=None)
@given(depth=st.integers(min_value=1, max_value=3000), kind=st.sampled_from(["[", "{a: ", "- "]))
def test_deep_nesting_is_an_error_not_a_crash(depth: int, kind: str) -> None:
    closing = {"[": "]", "{a: ": "}", "- ": ""}[kind]
    body = kind * depth + "x" + closing * depth if kind != "- " else "".join("  " * i + "- \n" for i in range(depth)) + "x"
    only_input_errors(lambda t: parse_lab("labs/x.yml", "x", t), "mechanism: " + body + "\n")
