"""Questions: reading numbers with units, answers taken from the checked run, the manifest's errors,
and `check` and `build` on tests/sites/questions (the real commands)."""

from __future__ import annotations

import json
from dataclasses import replace
import shutil
from pathlib import Path

import pytest
from conftest import TESTS, run_infralens
from readings import READINGS

from infralens.errors import InputError, Mark
from infralens.lab.questions import (
    Figure,
    answered_questions,
    question_problems,
    reading,
)
from infralens.lab.resolve import plain_excerpt
from infralens.model.parse import parse_lab
from infralens.model.run import RunResult

SITE = TESTS / "sites" / "questions"
MANIFEST = "labs/lab-01-q.yml"


@pytest.mark.unit
@pytest.mark.parametrize(("text", "unit", "value"), READINGS)
def test_reading_numbers_with_units_and_prefixes(text: str, unit: str | None, value: float | None) -> None:
    figure = reading(text, unit)
    assert (figure.value if figure else None) == (value if value is None else pytest.approx(value, rel=1e-12))


@pytest.mark.unit
def test_a_figure_knows_how_finely_it_was_written() -> None:
    assert reading("0.083", None) == Figure(0.083, 0.0005)
    assert reading("1,024", "B") == Figure(1024.0, 0.5)
    assert reading("4.00 MiB", "B").half_step == pytest.approx(0.005 * 2**20)
    assert reading("2.15e9", None).half_step == pytest.approx(5e6)


def lab(extra: str = ""):
    return parse_lab(MANIFEST, "lab-01-q", (SITE / MANIFEST).read_text() + extra)


def run(stdout: str, status: str = "passed", state: str = "") -> dict[str, RunResult]:
    result = RunResult(lab="lab-01-q", starter="code/lab-01-q/kv.py", status=status, seconds=0.1, returncode=0, stdout=stdout, stderr="", reason="", mark=Mark("x"), finished="2026-11-24T08:00:00Z", state=state)
    return {result.starter: result}


BLOCKS = plain_excerpt(parse_lab(MANIFEST, "lab-01-q", (SITE / MANIFEST).read_text()), {"code/lab-01-q/kv.py": (SITE / "code/lab-01-q/kv.py").read_text()}).key_blocks
STATE = json.dumps({"version": 1, "lines": {"6": {"count": 1, "samples": [{"n": 1, "values": {"per_layer": "32"}}]}}, "calls": {}})

OUTPUT = "kv  bytes per token: 1,024\nkv cache of 4096 tokens: 4.00 MiB   \n"


@pytest.mark.unit
def test_answers_come_from_what_the_run_printed() -> None:
    answered, problems = answered_questions(lab(), run(OUTPUT), BLOCKS)
    assert problems == []
    assert [q.id for q in answered] == ["per-token", "q2", "why-two", "per-layer"]
    first, second, third, fourth = answered
    assert (first.figure.value, first.shown, first.line) == (1024.0, "1,024 B", "kv bytes per token: 1,024")
    assert (second.figure.value, second.shown, second.line) == (4194304.0, "4.00 MiB", "kv cache of 4096 tokens: 4.00 MiB")
    assert third.figure is None and third.right == 0
    assert fourth.figure is None  # this run recorded no state (check --no-state): no answer, no problem


@pytest.mark.unit
def test_a_recorded_answer_is_the_value_the_run_recorded_on_the_blocks_line() -> None:
    answered, problems = answered_questions(lab(), run(OUTPUT, state=STATE), BLOCKS)
    assert problems == []
    fourth = answered[3]
    assert (fourth.figure.value, fourth.shown, fourth.line, fourth.recorded_on) == (32.0, "32 B", "per_layer = 32", 6)
    other = json.dumps({"version": 1, "lines": {"7": {"count": 1, "samples": [{"n": 1, "values": {"total": "1,024"}}]}}, "calls": {}})
    _, problems = answered_questions(lab(), run(OUTPUT, state=other), BLOCKS)
    assert [str(p) for p in problems] == [f"{MANIFEST}:57:42: error: question 'per-layer': the checked run recorded no value of 'per_layer' on lines 6-6"]


@pytest.mark.unit
@pytest.mark.parametrize("runs", [{}, run(OUTPUT, status="failed")], ids=["no run", "failed run"])
def test_without_a_passing_run_a_question_has_no_answer_and_no_problem(runs) -> None:
    answered, problems = answered_questions(lab(), runs, BLOCKS)
    assert problems == [] and all(q.figure is None for q in answered)


@pytest.mark.unit
def test_a_pattern_the_run_does_not_match_is_a_problem_at_the_pattern() -> None:
    answered, problems = answered_questions(lab(), run("kv bytes per token: 1,024\n"), BLOCKS)
    assert [str(p) for p in problems] == [
        f"{MANIFEST}:37:16: error: question 'q2': the checked run of code/lab-01-q/kv.py printed nothing that matches 'tokens: ([\\d.]+ MiB)'"
    ]
    assert answered[1].figure is None and answered[0].figure is not None
    assert list(question_problems(lab(), run("kv bytes per token: 1,024\n"), BLOCKS)) == ["code/lab-01-q/kv.py"]


@pytest.mark.unit
def test_a_match_that_is_not_a_number_in_the_unit_is_a_problem() -> None:
    _, problems = answered_questions(lab(), run("kv bytes per token: 1,024\nkv cache of 4096 tokens: 4.00.1 MiB\n"), BLOCKS)
    assert [p.message for p in problems] == ["question 'q2': the run printed '4.00.1 MiB' where 'tokens: ([\\d.]+ MiB)' matches, which is not a number in 'B'"]


def errors_of(extra: str, base: str | None = None) -> list[str]:
    text = base if base is not None else (SITE / MANIFEST).read_text().split("questions:")[0]
    with pytest.raises(InputError) as caught:
        parse_lab(MANIFEST, "lab-01-q", text + extra)
    return [str(problem) for problem in caught.value.problems]


NUMERIC = """questions:
  - prompt: How many?
    answer: {answer}
    explanation: Because.
    blocks: [total]
"""


@pytest.mark.unit
@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("{printed: 'x', unit: B}", "29:23: error: printed: 'x' has no group; its first group is the figure"),
        ("{printed: '(x', unit: B}", "29:23: error: invalid regular expression '(x': missing ), unterminated subpattern at position 0"),
        ("{printed: '(x)', tolerance: 1.5}", "29:41: error: tolerance is a fraction of the answer (0.05 for 5%), got 1.5"),
        ("{printed: '(x)', unit: 2 B}", "29:36: error: unit '2 B' is one word with no digits, like 'B' or 'FLOP/s'"),
        ("{printed: '(x)', starter: code/lab-01-q/nope.py}", "29:39: error: question 'q1': starter 'code/lab-01-q/nope.py' is not one of the lab's starters; the answer is a figure its checked run prints"),
    ],
)
def test_a_numeric_answer_is_checked_as_the_manifest_is_read(answer: str, message: str) -> None:
    assert errors_of(NUMERIC.format(answer=answer)) == [f"{MANIFEST}:{message}"]


@pytest.mark.unit
def test_a_question_has_an_answer_or_choices_and_known_blocks() -> None:
    both = NUMERIC.format(answer="{printed: '(x)'}") + "    choices: [{text: A, correct: true, why: W}, {text: B, why: V}]\n"
    assert errors_of(both) == [f"{MANIFEST}:32:14: error: question needs exactly one of 'answer', 'choices', got 2"]
    neither = "questions:\n  - prompt: How many?\n    explanation: Because.\n    blocks: [total]\n"
    assert errors_of(neither) == [f"{MANIFEST}:28:5: error: question needs exactly one of 'answer', 'choices', got 0"]
    unknown = NUMERIC.format(answer="{printed: '(x)'}").replace("[total]", "[totl, per_layer]")
    assert errors_of(unknown) == [f"{MANIFEST}:31:14: error: question 'q1': blocks: 'totl' is not a key block's name (did you mean 'total'?)"]
    twice = NUMERIC.format(answer="{printed: '(x)'}").replace("  - prompt", "  - id: q2\n    prompt") + NUMERIC.format(answer="{printed: '(y)'}").removeprefix("questions:\n")
    assert errors_of(twice) == [f"{MANIFEST}:33:5: error: question id 'q2' is taken by another question; give this one its own `id`\n{MANIFEST}:28:5: note: the question whose id is 'q2'"]


@pytest.mark.unit
def test_a_recorded_value_must_be_bound_by_its_block_and_recorded() -> None:
    from infralens.errors import Problems
    from infralens.lab.resolve import resolve_excerpt
    from infralens.text.highlight import source_file

    text = (SITE / MANIFEST).read_text().replace("recorded: {block: per_layer, name: per_layer}", "recorded: {block: per_layer, name: total}")
    problems = Problems()
    resolve_excerpt(parse_lab(MANIFEST, "lab-01-q", text), {"code/lab-01-q/kv.py": source_file("code/lab-01-q/kv.py", (SITE / "code/lab-01-q/kv.py").read_text())}, problems)
    assert [str(p) for p in problems] == [f"{MANIFEST}:57:42: error: recorded: 'total' is not bound by any line of key block 'per_layer' (lines 6-6); names bound there: per_layer"]
    assert errors_of(NUMERIC.format(answer="{recorded: {block: totl, name: total}}")) == [
        f"{MANIFEST}:29:32: error: question 'q1': recorded: block 'totl' is not a key block's name (did you mean 'total'?)"
    ]
    assert errors_of(NUMERIC.format(answer="{printed: '(x)', recorded: {block: total, name: total}}")) == [
        f"{MANIFEST}:29:40: error: answer needs exactly one of 'printed', 'recorded', got 2"
    ]


@pytest.mark.unit
def test_every_lab_of_the_site_asks_three_questions_or_more_with_a_choice_and_a_number(project) -> None:
    for one in project.labs:
        kinds = {"choice" if q.choices else "number" for q in one.questions}
        assert len(one.questions) >= 3 and kinds == {"choice", "number"}, one.id


# ------------------------------------------------------------------ the real commands


@pytest.fixture
def site(tmp_path: Path) -> Path:
    copy = tmp_path / "site"
    shutil.copytree(SITE, copy, ignore=shutil.ignore_patterns(".infralens", "output"))
    return copy


def env_of(site: Path) -> dict[str, str]:
    return {"INFRALENS_CACHE_DIR": str(site / ".infralens")}


@pytest.mark.cli
def test_check_then_build_shows_each_answer_the_run_printed(site: Path) -> None:
    assert run_infralens("check", cwd=site, env=env_of(site)).returncode == 0
    built = run_infralens("build", "--out", "out", cwd=site, env=env_of(site))
    assert built.returncode == 0, built.stderr
    lab_page = (site / "out" / "labs" / "lab-01-q" / "index.html").read_text()
    assert '<a class="practice-link" href="../../labs/lab-01-q/practice.html" data-questions="4">4 questions</a>' in lab_page
    page = (site / "out" / "labs" / "lab-01-q" / "practice.html").read_text()
    assert '<details class="q-reveal"><summary>Answer</summary>' in page
    assert "<strong>1,024 B</strong>" in page and "<strong>4.00 MiB</strong>" in page
    assert 'data-a="4194304.0"' in page
    index = (site / "out" / "index.html").read_text()
    assert '<a class="lab-card-link" href="labs/lab-01-q/index.html" data-questions="4">' in index
    assert "<strong>32 B</strong>, as the checked run of" in page and "recorded it on line 6: <code>per_layer = 32</code>" in page


@pytest.mark.cli
def test_without_a_checked_run_a_numeric_question_has_no_reveal(site: Path) -> None:
    built = run_infralens("build", "--out", "out", cwd=site, env=env_of(site))
    assert built.returncode == 0, built.stderr
    page = (site / "out" / "labs" / "lab-01-q" / "practice.html").read_text()
    assert page.count('class="q-reveal"') == 1  # the choice question's only
    assert page.count("no run has given it yet") == 3


@pytest.mark.cli
def test_a_pattern_the_run_no_longer_matches_fails_check_and_build_at_its_line(site: Path) -> None:
    assert run_infralens("check", cwd=site, env=env_of(site)).returncode == 0
    manifest = site / MANIFEST
    manifest.write_text(manifest.read_text().replace("'tokens: ([\\d.]+ MiB)'", "'tokens: ([\\d.]+ GiB)'"))
    built = run_infralens("build", "--out", "out", cwd=site, env=env_of(site))
    assert built.returncode == 1
    line = f"{MANIFEST}:37:16: error: question 'q2': the checked run of code/lab-01-q/kv.py printed nothing that matches 'tokens: ([\\d.]+ GiB)'"
    assert line in built.stderr and "Traceback" not in built.stderr
    checked = run_infralens("check", cwd=site, env=env_of(site))
    assert checked.returncode == 1
    assert "code/lab-01-q/kv.py  failed" in checked.stdout and "(stored result)" in checked.stdout  # not run again
    assert line.replace("error: ", "error: code/lab-01-q/kv.py: ") in checked.stderr


def recorded_state(entry: dict) -> str:
    return json.dumps({"version": 1, "lines": {"6": entry}, "calls": {}})


@pytest.mark.unit
@pytest.mark.parametrize(
    ("entry", "value"),
    [
        ({"count": 3, "exact": True, "samples": [{"n": 1, "values": {"per_layer": "8"}}, {"n": 3, "values": {"per_layer": "32"}}]}, 32.0),
        ({"count": 9728, "exact": False, "samples": [{"n": 1, "values": {"per_layer": "8"}}, {"n": 9728, "at": "return", "values": {"per_layer": "32"}}]}, 32.0),
        ({"count": 1, "calls": 2, "samples": [{"n": 1, "call": 2, "values": {"per_layer": "32"}}]}, 32.0),
    ],
)
def test_a_recorded_answer_is_the_lines_final_value(entry: dict, value: float) -> None:
    answered, problems = answered_questions(lab(), run(OUTPUT, state=recorded_state(entry)), BLOCKS)
    assert problems == [] and answered[3].figure.value == value


@pytest.mark.unit
@pytest.mark.parametrize(
    ("entry", "why"),
    [
        # The tracer stopped inside a long loop: its last sample is where it stopped, not the run's end.
        ({"count": 9728, "exact": False, "samples": [{"n": 1, "values": {"per_layer": "1"}}, {"n": 9728, "values": {"per_layer": "49,985,001"}}]}, "only before tracing stopped (its line ran ≥ 9,728 times)"),
        ({"count": 40, "exact": True, "samples": [{"n": 1, "values": {"per_layer": "1"}}, {"n": 39, "values": {"per_layer": "8"}}]}, "only on run 39 of 40"),
        ({"count": 1, "calls": 3, "samples": [{"n": 1, "call": 2, "values": {"per_layer": "8"}}]}, "only in call 2 of 3"),
    ],
)
def test_a_recorded_answer_taken_before_the_lines_last_run_is_an_error(entry: dict, why: str) -> None:
    answered, problems = answered_questions(lab(), run(OUTPUT, state=recorded_state(entry)), BLOCKS)
    assert answered[3].figure is None
    assert [str(p) for p in problems] == [
        (
            f"{MANIFEST}:57:42: error: question 'per-layer': the checked run recorded 'per_layer' on line 6 {why}, so its final value is unknown; "
            "ask about a line that runs once after the loop, or take the answer from what the run printed"
        )
    ]


@pytest.mark.unit
def test_a_state_whose_traced_run_printed_otherwise_answers_no_recorded_question() -> None:
    state = json.dumps({**json.loads(STATE), "printed": False})
    result = run(OUTPUT, state=state)["code/lab-01-q/kv.py"]
    answered, problems = answered_questions(lab(), {result.starter: replace(result, note="under the tracer it printed 'a' where it printed 'b'")}, BLOCKS)
    assert answered[3].figure is None
    assert [str(p) for p in problems] == [f"{MANIFEST}:57:42: error: question 'per-layer': the checked run's state backs no answer: under the tracer it printed 'a' where it printed 'b'"]
