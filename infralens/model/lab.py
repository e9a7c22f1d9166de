"""The model of a lab manifest: the Lab record, its sections and kinds, and the card the index and navigation show."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Literal, get_args

from infralens.errors import Mark
from infralens.model.calculator import CALCULATOR, Calculator
from infralens.model.declare import declared, derived, record
from infralens.model.question import QUESTION, NumericAnswer, Question
from infralens.model.schema import (
    MARKDOWN,
    Choice,
    Either,
    Field,
    Integer,
    ListOf,
    Prose,
    Record,
    Text,
    Url,
)
from infralens.model.starter import (
    PREVIEW,
    STARTER,
    STEP,
    KeyBlockSpec,
    Preview,
    Starter,
)

DEFAULT_KIND_LINE = "Annotated code reading lab. Running code is optional."


TRACE_KIND_LINE = "Failure trace: what broke, how it was found, what fixed it. Every step runs and is checked."


Kind = Literal["runnable", "reading", "trace"]
KINDS: dict[Kind, str] = {"runnable": "Runnable", "reading": "Reading", "trace": "Failure trace"}
"""Lab kinds and their badges. A trace tells one failure in order: what broke, how it was found, what fixed it."""

ReferenceKind = Literal["official", "paper", "blog", "code"]
"""What sort of source a further-reading link is."""


SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("concept_goal", "Concept Goal", "Read code to understand the concept"),
    ("mechanism", "Mental Model", "Core mechanism"),
    ("starters", "Starter files", "Annotated starter links"),
    ("preview", "Annotated Code Preview", "Starter Preview"),
    ("key_blocks", "Line-by-line Explanation", "Key code blocks"),
    ("checkpoints", "What to Notice", "How to read this code"),
    ("misunderstandings", "Common Misunderstandings", "What this code does not mean"),
    ("interview", "Interview Explanation", "How to say it out loud"),
    ("intuition", "External intuition notes", "Additional intuition"),
    ("further_reading", "Further Reading", "Official, paper and practical references"),
)
"""The lab page's sections after the header, in order: (id, eyebrow label, default title)."""


TRACE_SECTIONS: dict[str, tuple[str, str]] = {
    "concept_goal": ("What broke", "The failure, as it first showed"),
    "mechanism": ("Root cause", "Why it broke"),
    "key_blocks": ("How it was found", "The investigation, step by step"),
    "checkpoints": ("What fixed it", "The fix and how it was verified"),
    "misunderstandings": ("What this trace prevents", "Wrong turns to avoid"),
}
"""A failure trace's own eyebrows and default titles, over SECTIONS."""


def sections_of(kind: Kind) -> tuple[tuple[str, str, str], ...]:
    """Return a kind's page sections in order: (id, eyebrow label, default title)."""
    if kind != "trace":
        return SECTIONS
    return tuple((sid, *TRACE_SECTIONS.get(sid, (eyebrow, title))) for sid, eyebrow, title in SECTIONS)


@dataclass(frozen=True)
class Link:
    """A labelled external link."""

    label: str = declared(Text("Short label before the title, e.g. 'Official' or 'Blog'."), required=True)
    title: str = declared(Text("Link text."), required=True)
    url: str = declared(Url("http(s) address."), required=True)


@dataclass(frozen=True)
class Handbook:
    """The related handbook section, shown in the page header."""

    title: str = declared(Text("Title of the related handbook section."), required=True)
    url: str = declared(Url("http(s) address of the section."), required=True)
    label: str = "Handbook"


@dataclass(frozen=True)
class Intuition:
    """An intuition bullet with a labelled link."""

    text: str = declared(Prose(MARKDOWN), required=True)
    link: Link | None = declared(record(Link, "link"))


@dataclass(frozen=True)
class Reference:
    """A further-reading entry."""

    kind: ReferenceKind = declared(Choice(get_args(ReferenceKind), "What sort of source this is."), required=True)
    title: str = declared(Text("Title of the source."), required=True)
    url: str = declared(Url("http(s) address."), required=True)


TITLES = Record(
    "titles",
    {
        sid: Field(Text(f"Title of the '{eyebrow}' section (default: {title!r}"
                        + (f"; in a failure trace: {TRACE_SECTIONS[sid][1]!r}" if sid in TRACE_SECTIONS else "") + ")."))
        for sid, eyebrow, title in SECTIONS
    },
    lambda f, ctx: tuple((k, v) for k, v in f.values.items() if v is not None),
    doc="Per-lab section titles.",
)


def bullets(doc: str) -> ListOf:
    return ListOf(Prose(MARKDOWN), doc, min_items=1)


@dataclass(frozen=True, kw_only=True)
class Lab:
    """An InfraLens lab manifest (labs/<lab-id>.yml)."""

    number: int = declared(Integer("Lab number, unique in the site; shown as 'Lab 01'.", minimum=1), required=True)
    title: str = declared(Text("Page title."), required=True)
    track: str = declared(Text("A track id from site.yml."), required=True)
    summary: str = declared(Prose("One line for the index. " + MARKDOWN), required=True)
    topic: str = declared(Prose("Handbook topic in the index's map, e.g. 'KV cache' (default: the title). " + MARKDOWN))
    concrete: str = declared(Prose("One line in the index's map: what this lab makes concrete (default: the summary). " + MARKDOWN))
    kind: Kind = declared(Choice(
        get_args(Kind),
        "Index badge and page shape; default: runnable when a starter runs. A 'trace' tells one failure in order "
        "(what broke, how it was found, what fixed it) under its own section titles.",
    ))
    kind_line: str = declared(Prose(
        f"Line under the title (default: {DEFAULT_KIND_LINE!r}; for a trace: {TRACE_KIND_LINE!r}). " + MARKDOWN
    ))
    handbook: Handbook | None = declared(record(Handbook, "handbook"))
    concept_goal: str = declared(Prose("One paragraph: the concept the code makes concrete. " + MARKDOWN), required=True, section="concept_goal")
    mechanism: tuple[str, ...] = declared(bullets("Bullets: the mechanism to keep in mind."), required=True, section="mechanism")
    starters: tuple[Starter, ...] = declared(ListOf(STARTER, "The lab's files under code/.", min_items=1), required=True, section="starters")
    preview: Preview | tuple[Preview, ...] = declared(
        Either(
            mapping=PREVIEW,
            sequence=ListOf(STEP, min_items=1),
            expected="a {starter, region|symbol|lines|heading} mapping, or a list of them (a walkthrough)",
            doc="The code the page shows: one excerpt, or a walkthrough, several excerpts (regions, symbols, "
                "ranges, headings of one or several starters) shown in order, each under a header naming its "
                "file and lines. The first step's starter is the previewed one: its run records execution state.",
        ),
        required=True,
    )
    key_blocks: tuple[KeyBlockSpec, ...] = declared(ListOf(record(KeyBlockSpec, "key block", finish=lambda f, ctx: {"mark": f.marks["lines"], "starter_mark": f.marks.get("starter")}), "Notes bound to lines of the excerpt (any step of a walkthrough).", min_items=1), required=True)
    checkpoints: tuple[str, ...] = declared(bullets("Bullets: how to read this code."), required=True, section="checkpoints")
    misunderstandings: tuple[str, ...] = declared(bullets("Bullets: what this code does not mean."), required=True, section="misunderstandings")
    interview: str = declared(Prose("A paragraph: how to say it out loud. " + MARKDOWN), required=True, section="interview")
    intuition: tuple[Intuition, ...] = declared(
        ListOf(
            Either(
                scalar=Prose(MARKDOWN),
                mapping=record(Intuition, "intuition"),
                expected="text or a {text, link} mapping",
                doc="A bullet of additional intuition, optionally with a labelled link.",
            ),
            "Bullets of additional intuition.",
            min_items=1,
        ),
        required=True,
        section="intuition",
    )
    further_reading: tuple[Reference, ...] = declared(
        ListOf(record(Reference, "reference"), "Official, paper and practical references.", min_items=1), required=True, section="further_reading"
    )
    titles: tuple[tuple[str, str], ...] = declared(TITLES, default=())
    """Section id → title overrides."""
    calculators: tuple[Calculator, ...] = declared(
        ListOf(CALCULATOR, "\"Try it\" blocks whose results the starter's own functions confirm (see `infralens check`)."),
        default=(), indexed=False,
    )
    questions: tuple[Question, ...] = declared(
        ListOf(QUESTION,
               "Questions the reader answers before the page tells: numeric ones graded by the checked run, or choices."),
        default=(), indexed=False,
    )
    id: str = derived("The lab id: the manifest's file stem.")
    path: str = derived("The manifest, relative to the site root.")
    number_mark: Mark = derived("Where the manifest writes its number.")
    track_mark: Mark = derived("Where the manifest names its track.")

    @property
    def steps(self) -> tuple[Preview, ...]:
        """The excerpts the page shows, in order: one, or a walkthrough's steps."""
        return self.preview if isinstance(self.preview, tuple) else (self.preview,)

    @property
    def previewed(self) -> str:
        """The previewed starter: the first step's. Its run records execution state, and calculators and
        questions take their values from it unless they name another."""
        return self.steps[0].starter

    def sections(self) -> tuple[tuple[str, str, str], ...]:
        """Return the page's sections in order: (id, eyebrow label, title), with this lab's titles."""
        titles = dict(self.titles)
        return tuple((sid, eyebrow, titles.get(sid, title)) for sid, eyebrow, title in sections_of(self.kind))

    def section_title(self, section: str) -> str:
        return next(title for sid, _, title in self.sections() if sid == section)


def question_id(question: Question, position: int) -> str:
    """A question's id: its own, or q1, q2... by its 1-based position in the lab."""
    return question.id or f"q{position}"


def answering_starter(lab: Lab, answer: NumericAnswer) -> str:
    """The starter whose checked run prints a numeric answer: its own, or the previewed one."""
    return answer.starter or lab.previewed


def mirrored_starter(lab: Lab, calc: Calculator) -> str:
    """The starter a calculator's outputs must agree with: its own, or the previewed one."""
    return calc.starter or lab.previewed


@dataclass(kw_only=True, frozen=True)
class LabCard:
    """What other pages need of a lab: the index, the navigation of its neighbours, checks across labs.

    Small, so a build can keep the card of every lab between runs and parse only what changed.
    """

    id: str
    path: str
    number: int
    title: str
    track: str
    summary: str
    topic: str
    concrete: str
    kind: Kind
    starters: tuple[Starter, ...]
    number_mark: Mark
    track_mark: Mark
    questions: int = 0
    """How many questions the lab asks: the index and the navigation show the reader's score of them."""
    shown: str = ""
    """A hash of everything on the card but where in its manifest each part was written (the
    marks): what the index is keyed by, so an edit of a lab's other prose, which moves the marks
    below it, leaves the index as it is. A hash, not the text: the build state keeps every card."""


def card_of(lab: Lab) -> LabCard:
    """Return the card of a parsed lab."""
    card = LabCard(
        id=lab.id, path=lab.path, number=lab.number, title=lab.title, track=lab.track, summary=lab.summary, topic=lab.topic, concrete=lab.concrete, kind=lab.kind,
        starters=lab.starters, number_mark=lab.number_mark, track_mark=lab.track_mark, questions=len(lab.questions),
    )
    return replace(card, shown=hashlib.blake2b(repr(unmarked(card)).encode(), digest_size=16).hexdigest())


def unmarked(value: object) -> object:
    """A record as nested tuples of its fields and values, every Mark left out."""
    if isinstance(value, Mark):
        return None
    if is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *((item.name, unmarked(getattr(value, item.name))) for item in fields(value)))
    if isinstance(value, (tuple, list)):
        return tuple(unmarked(item) for item in value)
    if isinstance(value, dict):
        return tuple((key, unmarked(item)) for key, item in value.items())
    return value
