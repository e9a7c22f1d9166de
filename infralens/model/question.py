"""The model of a practice question: a numeric answer the run prints or records, or a choice."""

from __future__ import annotations

import re
from dataclasses import dataclass

from infralens.errors import Mark
from infralens.model.declare import declared, derived, record
from infralens.model.schema import (
    MARKDOWN,
    Constant,
    Context,
    Fields,
    ListOf,
    Number,
    Prose,
    Regex,
    Source,
    Text,
    Written,
)
from infralens.model.site import ID_PATTERN

UNIT_DOC = (
    "The unit of the answer without a prefix: `B`, `FLOP/s`, `s`, `x`, `%`, `tokens`... A reader may "
    "type a prefix (k, M, G, T, P; Ki, Mi, Gi, Ti for bytes and the like; m, u, µ, n), an exponent "
    "(2.15e9) or thousands separators (2,147,483,648); what the run printed is read the same way."
)


@dataclass(frozen=True, kw_only=True)
class RecordedValue:
    """A value the checked run recorded on a line of a key block (what the block's state table shows)."""

    block: str = declared(Text("The key block (its name) whose lines bind it; it must be the previewed starter's."), required=True)
    name: str = declared(Text("The name as a line of the block binds it (`kv_bytes`, `self.total`), or `return` for what a function defined there returned."), required=True)
    mark: Mark = derived("Where the recorded value is named.")
    block_mark: Mark = derived("Where its key block is named.")


@dataclass(frozen=True, kw_only=True)
class NumericAnswer:
    """A numeric answer from the starter's checked run, never typed into the manifest: a figure it
    printed, or a value it recorded on a line. Exactly one of printed, recorded."""

    printed: str | None = declared(
        Regex("A regex whose first group matches the figure in the run's output, with its prefixed unit "
              "when the run prints one: `per token: ([\\d,.]+ KiB)`."),
    )
    recorded: RecordedValue | None = declared(record(RecordedValue, "recorded value", finish=lambda f, ctx: {"mark": f.marks["name"], "block_mark": f.marks["block"]}))
    starter: str | None = declared(Text("The starter whose run prints it (default: the previewed one; a recorded value is always the previewed one's)."))
    unit: str | None = declared(Text(UNIT_DOC))
    tolerance: float = declared(Number("Relative error still graded close (default 0.05: within 5%)."), default=0.05)
    mark: Mark = derived("Where the answer is declared.")
    printed_mark: Mark | None = derived("Where the pattern is written.")
    starter_mark: Mark | None = derived("Where the answer names its starter, if it does.")


def _numeric_answer(f: Fields, ctx: Context) -> dict:
    """The pattern needs a group (the figure); the tolerance is a fraction below 1."""
    pattern = f.values["printed"]
    if pattern is not None and re.compile(pattern).groups < 1:
        return ctx.error(f.nodes["printed"], f"printed: '{pattern}' has no group; its first group is the figure")
    if f.values["tolerance"] >= 1:
        return ctx.error(f.nodes["tolerance"], f"tolerance is a fraction of the answer (0.05 for 5%), got {f.values['tolerance']}")
    unit = f.values["unit"]
    if unit is not None and not re.fullmatch(r"[^\s\d.,+-][^\s\d]*", unit):
        return ctx.error(f.nodes["unit"], f"unit {unit!r} is one word with no digits, like 'B' or 'FLOP/s'")
    return {"mark": f.mark, "printed_mark": f.marks.get("printed"), "starter_mark": f.marks.get("starter")}


@dataclass(frozen=True, kw_only=True)
class Option:
    """One choice of a question, with why it is right or not."""

    text: str = declared(Prose("The choice as the reader sees it. " + MARKDOWN), required=True)
    correct: bool = declared(Constant(True, "`true` on the one right choice."), default=False)
    why: str = declared(Prose("Why it is right, or why not: shown when the reader picks it and in the answer. " + MARKDOWN), required=True)
    mark: Mark = derived("Where the choice is declared.")


def _question(f: Fields, ctx: Context) -> dict:
    """A choice question has one right choice among at least two."""
    choices = f.values["choices"]
    if choices:
        right = [option for option in choices if option.correct]
        if len(right) != 1:
            return ctx.error(f.nodes["choices"], f"choices: exactly one is `correct: true`, got {len(right)}")
    return {"mark": f.mark}


@dataclass(frozen=True, kw_only=True)
class Question:
    """A question the reader answers before the page tells: a number the run printed, or a choice."""

    id: str | None = declared(Text("Identifier in the page's address (`#q-ID`) and in the reader's progress (default: q1, q2... by position).", ID_PATTERN, "a lowercase id like 'ridge'"))
    prompt: str = declared(Prose("The question. " + MARKDOWN), required=True)
    answer: NumericAnswer | None = declared(record(NumericAnswer, "answer", finish=_numeric_answer, exclusive=(("printed", "recorded"),)))
    choices: tuple[Option, ...] = declared(
        ListOf(record(Option, "choice", finish=lambda f, ctx: {"mark": f.mark}), "The choices, one of them `correct: true`.", min_items=2),
        default=(),
    )
    explanation: str = declared(Prose("Why the answer is what it is, shown with it. " + MARKDOWN), required=True)
    blocks: tuple[Written, ...] = declared(
        ListOf(Source("A key block's name."), "The key blocks the explanation relies on, linked beside it.", min_items=1),
        required=True,
    )
    mark: Mark = derived("Where the question is declared.")


QUESTION = record(Question, "question", finish=_question, exclusive=(("answer", "choices"),))
"""How a manifest's `questions:` item is read."""
