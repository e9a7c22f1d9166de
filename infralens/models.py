"""Frozen models of the site, its labs and what the build resolves from them."""

from __future__ import annotations

from dataclasses import dataclass

from infralens.errors import Mark


@dataclass(frozen=True)
class Track:
    """A group of labs on the index, in site.yml order."""

    id: str
    title: str
    mark: Mark


@dataclass(frozen=True)
class Site:
    """site.yml: what every page shares."""

    title: str
    """Site name, shown in every page header."""
    tagline: str
    """One line under the title on the index."""
    tracks: tuple[Track, ...]
    """Tracks in the order the index lists them."""
    base_url: str | None
    """Public address of the built site, used for canonical links; pages link relatively."""
    path: str
    """site.yml, as given on the command line."""


@dataclass(frozen=True)
class Link:
    """A labelled external link such as "Official: PyTorch CUDA memory management"."""

    label: str
    title: str
    url: str


@dataclass(frozen=True)
class RunSpec:
    """How `infralens check` runs a starter."""

    args: tuple[str, ...]
    """Command-line arguments after the script."""
    timeout: float
    """Seconds before the whole process group is killed."""
    expect: tuple[str, ...]
    """Regexes that must each be found in stdout."""
    artifacts: tuple[str, ...] = ()
    """Files the run writes into its working folder (an SVG plot, say) that the lab page shows."""


@dataclass(frozen=True)
class Starter:
    """One file of a lab under code/."""

    path: str
    """Repository-relative POSIX path, e.g. code/lab-01-x/memory.py."""
    role: str
    """One line: what the file is for."""
    run: RunSpec | None
    """None when the starter is reading material only."""
    mark: Mark
    """Where the manifest declares it."""


@dataclass(frozen=True)
class Selector:
    """Which part of a starter the preview shows: a region, symbol, line range or heading."""

    kind: str
    value: str
    mark: Mark


@dataclass(frozen=True)
class Preview:
    """The excerpt a lab page shows."""

    starter: str
    selector: Selector
    starter_mark: Mark


@dataclass(frozen=True)
class LineBinding:
    """How a key block names its lines: one literal text, a from/to span, or file line numbers."""

    kind: str
    """'text', 'span' or 'range'."""
    text: str = ""
    until: str = ""
    first: int = 0
    last: int = 0


@dataclass(frozen=True)
class KeyBlockSpec:
    """A note the manifest binds to lines of the excerpt."""

    name: str
    lines: LineBinding
    note: str
    mark: Mark
    """Where the `lines:` value is, so a binding error points at it."""


@dataclass(frozen=True)
class Intuition:
    """An "Additional intuition" bullet, optionally with a labelled link."""

    text: str
    link: Link | None


@dataclass(frozen=True)
class Reference:
    """A further-reading entry."""

    kind: str
    title: str
    url: str


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

DEFAULT_KIND_LINE = "Annotated code reading lab. Running code is optional."


@dataclass(frozen=True)
class Lab:
    """One lab manifest, validated."""

    id: str
    path: str
    number: int
    title: str
    track: str
    summary: str
    topic: str
    """Handbook topic the index's map files the lab under."""
    concrete: str
    """What the lab makes concrete, one line for the index's map."""
    kind: str
    kind_line: str
    handbook: Link | None
    concept_goal: str
    mechanism: tuple[str, ...]
    starters: tuple[Starter, ...]
    preview: Preview
    key_blocks: tuple[KeyBlockSpec, ...]
    checkpoints: tuple[str, ...]
    misunderstandings: tuple[str, ...]
    interview: str
    intuition: tuple[Intuition, ...]
    further_reading: tuple[Reference, ...]
    titles: tuple[tuple[str, str], ...]
    """Section id → title overrides."""
    number_mark: Mark
    track_mark: Mark

    def section_title(self, section: str) -> str:
        default = next(title for sid, _, title in SECTIONS if sid == section)
        return dict(self.titles).get(section, default)


@dataclass(frozen=True)
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
    kind: str
    starters: tuple[Starter, ...]
    number_mark: Mark
    track_mark: Mark


def card_of(lab: Lab) -> LabCard:
    """Return the card of a parsed lab."""
    return LabCard(
        lab.id, lab.path, lab.number, lab.title, lab.track, lab.summary, lab.topic, lab.concrete, lab.kind,
        lab.starters, lab.number_mark, lab.track_mark,
    )


@dataclass(frozen=True)
class SourceLine:
    """One line of a starter: its real number, its text and its highlighted HTML."""

    number: int
    text: str
    html: str


@dataclass(frozen=True)
class SourceFile:
    """A starter file read from disk, highlighted once."""

    path: str
    text: str
    lines: tuple[SourceLine, ...]
    language: str


@dataclass(frozen=True)
class KeyBlock:
    """A key block bound to real file lines first..last."""

    name: str
    slug: str
    note: str
    first: int
    last: int
    ordinal: int
    """1-based position in the lab's list of key blocks, shown as the line's badge."""


@dataclass(frozen=True)
class Excerpt:
    """The lines a lab page previews, with real numbers; marker lines are left out."""

    starter: str
    lines: tuple[SourceLine, ...]
    key_blocks: tuple[KeyBlock, ...]

    @property
    def first(self) -> int:
        return self.lines[0].number

    @property
    def last(self) -> int:
        return self.lines[-1].number


@dataclass(frozen=True)
class ResolvedLab:
    """A lab with its excerpt cut and its notes bound: everything its page needs."""

    lab: Lab
    excerpt: Excerpt


@dataclass(frozen=True)
class RunResult:
    """What running one starter showed."""

    lab: str
    starter: str
    status: str
    """'passed', 'failed' or 'timeout'."""
    seconds: float
    returncode: int | None
    stdout: str
    stderr: str
    reason: str
    """Why it failed, in one line; empty when it passed."""
    mark: Mark
    finished: str = ""
    """When the run ended, UTC, ISO 8601 to the second."""
    artifacts: tuple[str, ...] = ()
    """Names of the artifacts the run wrote, kept beside its stored result."""
    cached: bool = False
    """True when this result was read from the store instead of running again."""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def tail(self, lines: int = 20) -> str:
        """The last lines of stdout, then of stderr: what usually says why a run failed."""
        parts = [text.rstrip("\n").split("\n")[-lines:] for text in (self.stdout, self.stderr) if text.strip()]
        return "\n".join(line for part in parts for line in part)
