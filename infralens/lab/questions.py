"""Questions: what the reader answers before the page tells, graded by the checked run.

Pure: a Lab, its runs and its bound key blocks → each question with its answer, or the problems
that keep it from one. A numeric answer is never typed into the manifest: it is the figure the
starter's last passing run printed where the question's pattern matches, or the value that run
recorded for a name on a key block's lines. One that run does not give is a problem at the pattern
(or the name), for `check` (which fails the run) and for `build` (which refuses to publish a page
whose answer it cannot show).

`reading` turns what a run printed, or what a reader typed, into a number in the question's unit;
templates/static/questions.js reads a reader's answer the same way (a browser test holds them to
the same table of inputs).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from infralens.errors import Problem, Problems
from infralens.lab.state import bound_names
from infralens.model.lab import Lab, answering_starter, question_id
from infralens.model.question import Option, Question
from infralens.model.resolved import Excerpt, KeyBlock, Published
from infralens.model.run import RunResult
from infralens.text.patterns import PatternTimeout, search_output
from infralens.text.source import SourceFile

PREFIXES: dict[str, float] = {
    "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50,
    "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9,
}
"""What a prefix before the unit multiplies by. Binary ones are for bytes, as runs print them."""

_NUMBER = re.compile(r"([+-]?)(\d{1,3}(?:,\d{3})+|\d+)?(?:\.(\d*))?(?:[eE]([+-]?\d+))?", re.ASCII)
"""A number as questions.js reads one: ASCII digits only, as a browser's Number() takes them
(float() would read '٤٢' or '４２' as 42, which the page calls not a number)."""
_GROUPING = re.compile(r"[_\u2009\u202f]")
"""Digit grouping a reader may type and that is dropped: 1_000, and thin spaces."""
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Figure:
    """A number as written, in the question's unit: its value and how finely it was written."""

    value: float
    half_step: float
    """Half the step of its last written digit, in the unit: 0.0005 for '0.083', 0.05 GiB for
    '1.5 GiB'. A reader's answer this close is the same figure to the precision printed."""


def reading(text: str, unit: str | None) -> Figure | None:
    """Read '2 GiB', '2.15e9', '2,147,483,648', '37.5%' or '3.2x' as a number in `unit`, or None.

    After the number may come a prefix, then the unit itself (either may be left out). 'bytes' and
    'byte' are read as 'B'; for unit 'x' also '×'.
    """
    text = _SPACES.sub(" ", _GROUPING.sub("", text).strip())
    match = _NUMBER.match(text)
    if match is None or not (match.group(2) or match.group(3)):
        return None
    sign, whole, fraction, exponent = match.groups()
    digits = (whole or "0").replace(",", "") + "." + (fraction or "")
    value = float(sign + digits + (f"e{exponent}" if exponent else ""))
    try:
        step = 10.0 ** (int(exponent or 0) - len(fraction or ""))
    except OverflowError:  # JS says Infinity: not a number a reader means either
        return None
    multiplier = _multiplier(text[match.end():].strip(), unit)
    if multiplier is None or not math.isfinite(value * multiplier) or not math.isfinite(step):
        return None
    return Figure(value * multiplier, step * multiplier / 2)


def _multiplier(rest: str, unit: str | None) -> float | None:
    """What the words after a number multiply it by, in `unit`; None if they are not a unit."""
    if unit == "B":
        rest = re.sub(r"bytes?$", "B", rest)
    if unit == "x":
        rest = rest.replace("×", "x")
    if not rest:
        return 1.0
    if unit and rest.endswith(unit):
        rest = rest[: len(rest) - len(unit)].strip()
        if not rest:
            return 1.0
    return PREFIXES.get(rest)


@dataclass(kw_only=True, frozen=True)
class Answered:
    """A question as its page shows it: its id, and its answer when a checked run gave one."""

    id: str
    question: Question
    figure: Figure | None = None
    printed: str = ""
    """What the run printed where the pattern matched: the figure as the page shows it."""
    line: str = ""
    """The whole output line it was printed on."""
    finished: str = ""
    """When that run ended (ISO 8601), for the page to say which run answered."""
    recorded_on: int = 0
    """For a recorded value, the line it was recorded on (0: the run printed it)."""

    @property
    def shown(self) -> str:
        """The answer as the page states it: as printed, with the unit when the run printed none."""
        unit = self.question.answer.unit if self.question.answer else None
        if not unit or not self.printed[-1:].isdigit():
            return self.printed
        return self.printed + ("" if unit in ("%", "x") else " ") + unit

    @property
    def right(self) -> int | None:
        """The position of the right choice (a choice question), else None."""
        return next((i for i, option in enumerate(self.question.choices) if option.correct), None)

    @property
    def choices(self) -> tuple[Option, ...]:
        return self.question.choices


def answer(lab: Lab, position: int, question: Question, runs: dict[str, RunResult], blocks: dict[str, KeyBlock]) -> tuple[Answered, Problem | None]:
    """Answer one question from the lab's runs; a passing run that does not give it is a problem."""
    qid = question_id(question, position)
    spec = question.answer
    if spec is None:
        return Answered(id=qid, question=question), None
    result = runs.get(answering_starter(lab, spec))
    if result is None or not result.passed:
        return Answered(id=qid, question=question), None
    if spec.recorded is not None:
        return recorded_answer(qid, question, result, blocks)
    pattern = spec.printed
    try:
        match = search_output(pattern, result.stdout)
    except PatternTimeout as slow:
        return Answered(id=qid, question=question), Problem(spec.printed_mark, f"question {qid!r}: {slow.reason}")
    if match is None or match.group(1) is None:
        return Answered(id=qid, question=question), Problem(spec.printed_mark, f"question {qid!r}: the checked run of {result.starter} printed nothing that matches '{pattern}'")
    printed = match.group(1).strip()
    figure = reading(printed, spec.unit)
    if figure is None:
        unit = f" in {spec.unit!r}" if spec.unit else ""
        return Answered(id=qid, question=question), Problem(spec.printed_mark, f"question {qid!r}: the run printed {printed!r} where '{pattern}' matches, which is not a number{unit}")
    start = result.stdout.rfind("\n", 0, match.start(1)) + 1
    end = result.stdout.find("\n", match.end(1))
    line = " ".join(result.stdout[start : end if end >= 0 else len(result.stdout)].split())
    return Answered(id=qid, question=question, figure=figure, printed=printed, line=line, finished=result.finished), None


def recorded_answer(qid: str, question: Question, result: RunResult, blocks: dict[str, KeyBlock]) -> tuple[Answered, Problem | None]:
    """The value a run recorded for a name on a key block's lines: the last sample of the last line
    that binds it (what the block's table shows), or a function's return there, when that sample is
    the line's final value (`not_final`). A run that recorded no state at all (`check --no-state`)
    answers nothing and is no problem."""
    recorded, unit = question.answer.recorded, question.answer.unit
    block = blocks.get(recorded.block)
    state = json.loads(result.state) if result.state else None
    if block is None or not state:
        return Answered(id=qid, question=question), None
    if state.get("printed") is False:
        return Answered(id=qid, question=question), Problem(recorded.mark, f"question {qid!r}: the checked run's state backs no answer: {result.note or 'its traced run printed otherwise'}")
    kind, key = ("calls", "return") if recorded.name == "return" else ("lines", None)
    found = None
    for number, entry in sorted(((int(n), e) for n, e in state.get(kind, {}).items()), key=lambda item: item[0]):
        samples = [s for s in entry.get("samples", ()) if isinstance(s, dict)] if block.first <= number <= block.last else []
        value = (samples[-1].get(key) if key else samples[-1].get("values", {}).get(recorded.name)) if samples else None
        if isinstance(value, str):
            found = (number, value, entry, samples[-1])
    if found is None:
        return Answered(id=qid, question=question), Problem(recorded.mark, f"question {qid!r}: the checked run recorded no value of {recorded.name!r} on lines {block.first}-{block.last}")
    number, value, entry, sample = found
    early = not_final(entry, sample, calls=kind == "calls")
    if early:
        return Answered(id=qid, question=question), Problem(
            recorded.mark,
            f"question {qid!r}: the checked run recorded {recorded.name!r} on line {number} {early}, so its final value is unknown; "
            "ask about a line that runs once after the loop, or take the answer from what the run printed",
        )
    figure = reading(value, unit)
    if figure is None:
        return Answered(id=qid, question=question), Problem(recorded.mark, f"question {qid!r}: the run recorded {recorded.name} = {value!r} on line {number}, which is not a number{f' in {unit!r}' if unit else ''}")
    return Answered(id=qid, question=question, figure=figure, printed=value, line=f"{recorded.name} = {value}", finished=result.finished, recorded_on=number), None


def not_final(entry: dict, sample: dict, *, calls: bool) -> str:
    """Say when a recorded sample is not the value its line (or function) ended the run with, or ''.

    Final is the last run of the last call, all of it traced, or the value a name held when its
    call returned ("at": "return"). A sample taken before tracing stopped in a hot loop is not:
    published as the answer, it grades readers against a number the run never ended with.
    """
    count = int(entry.get("count", 1) or 1)
    if calls:  # a function's return: its count is every call, traced or not
        call = int(sample.get("call", sample.get("n", count)) or 0)
        return "" if call == count else f"only in call {call:,} of {count:,}"
    last_call = int(entry.get("calls", 0) or 0)
    call = int(sample.get("call", last_call) or 0)
    if last_call > 1 and call != last_call:
        return f"only in call {call:,} of {last_call:,}"
    if sample.get("at") == "return":
        return ""
    if not entry.get("exact", True):
        return f"only before tracing stopped (its line ran ≥ {count:,} times)"
    run = int(sample.get("n", count) or 0)
    return "" if run == count else f"only on run {run:,} of {count:,}"


def _answers(lab: Lab, runs: dict[str, RunResult], blocks: tuple[KeyBlock, ...]):
    """Each question with its answer and its problem (or None), in order."""
    named = {block.name: block for block in blocks}
    for position, question in enumerate(lab.questions, start=1):
        yield (question, *answer(lab, position, question, runs, named))


def answered_questions(lab: Lab, runs: dict[str, RunResult], blocks: tuple[KeyBlock, ...]) -> tuple[tuple[Answered, ...], list[Problem]]:
    """Every question of the lab with its answer where a checked run gave one, and the problems."""
    found = list(_answers(lab, runs, blocks))
    return tuple(one for _, one, _ in found), [problem for _, _, problem in found if problem is not None]


def question_problems(lab: Lab, runs: dict[str, RunResult], blocks: tuple[KeyBlock, ...]) -> dict[str, list[Problem]]:
    """The problems of the lab's questions, by the starter whose run should have answered them."""
    found: dict[str, list[Problem]] = {}
    for question, _, problem in _answers(lab, runs, blocks):
        if problem is not None:
            found.setdefault(answering_starter(lab, question.answer), []).append(problem)
    return found


def check_recorded_answers(lab: Lab, excerpt: Excerpt, source: SourceFile, problems: Problems) -> None:
    """A question's recorded value must be one its block's lines record: a name they bind (or
    `return`), on the previewed starter's lines, which are traced."""
    blocks = {b.name: b for b in excerpt.key_blocks}
    for question in lab.questions:
        recorded = question.answer.recorded if question.answer is not None else None
        block = blocks.get(recorded.block) if recorded is not None else None
        if block is None:  # no recorded value, or a block parse.py already refused
            continue
        if block.starter != excerpt.starter:
            problems.add(recorded.mark, f"recorded: key block {block.name!r} is bound to {block.starter}; only the previewed starter ({excerpt.starter}) records values")
        elif block.state is not None and not block.state.shown:
            problems.add(recorded.mark, f"recorded: key block {block.name!r} says `state: false`, so its lines record nothing")
        elif recorded.name != "return":
            known = bound_names(source, block.first, block.last)
            if recorded.name not in known:
                problems.add(recorded.mark, f"recorded: {recorded.name!r} is not bound by any line of key block {block.name!r} (lines {block.first}-{block.last}); names bound there: {', '.join(known[:12]) or 'none'}")


# ---------------------------------------------------------------- the page feature (see features.py)

NAME = "questions"


def manifest_problems(lab: Lab, excerpt: Excerpt, source: SourceFile) -> list[Problem]:
    """A recorded answer names a value its block's lines record."""
    problems = Problems()
    check_recorded_answers(lab, excerpt, source, problems)
    return list(problems)


def run_problems(lab: Lab, runs: dict[str, RunResult], excerpt: Excerpt | None) -> dict[str, list[Problem]]:
    """Each numeric answer is printed (or recorded) by its starter's checked run."""
    return question_problems(lab, runs, excerpt.key_blocks if excerpt else ())


def published(lab: Lab, runs: dict[str, RunResult], excerpt: Excerpt, sources: dict[str, SourceFile]) -> Published:
    """Every question with its answer from the checked run: the practice page's content."""
    answered, problems = answered_questions(lab, runs, excerpt.key_blocks)
    return Published(answered, (), tuple(problems))
