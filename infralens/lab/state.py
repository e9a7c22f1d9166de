"""Execution state for the pages: what a starter's checked run recorded its excerpt's lines holding.

Pure: a RunResult (whose `state` trace_state.py wrote while `check` ran the starter), the lab and
its resolved excerpt → what each line shows (a short hint at its end, a table per key block, the
data the page's state panel steps through), and the text of every recorded value for the claims
check. A run's state is shown only when it passed and recorded exactly the lines the excerpt has
now; any other state is stale, and nothing of it is shown.

One wording says which run a value is from and how often its line ran, at a line's end (`hint`),
in a note's table (no JS) and in the panel (state.js, which also says it in a sentence):
- `→ 524,288`: the line ran once. `↩ 6,738` a `return` line or a function's return, `→ true` a
  condition (true when the body ran next), `⬇ n = 4` a procedure's inputs.
- `(last of 32 runs)`: the value after the last of 32 runs, all traced (`(last of 3 calls)` for
  a `def` line); `(run 3 of 39)`: a kept run that is not the last, named.
- `≥ 9,728`: a count that is a lower bound, the runs traced before tracing stopped or while calls
  went untraced; never a bare "+".
- `(at return; ≥ 9,728 runs)`: the line's frame stopped being traced (a hot loop), and the value
  is what the name held when the call returned (`at the end` for module code), not a stale one.
- `call 2 of 2; …` first when the line's function ran more than once: which call it is from.
- `3 true, 1 false` last for a condition run more than once: how often each way, in the runs traced.
A line's end says only what sets its value apart (`glance`): nothing when it is what the line held
after its last run in the last call; else which call or run it is from, or `(at return)`. The
panel says all of it, counts included.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from infralens.child.trace_state import python_of, statement_names, statement_shapes
from infralens.errors import Problem, Problems
from infralens.lab.shown import arithmetic, exact
from infralens.model.expr import Expr, ExprError, evaluate, parse_expr
from infralens.model.lab import Lab
from infralens.model.resolved import Excerpt, KeyBlock, Published
from infralens.model.run import RunResult
from infralens.model.starter import IDENTIFIER, StateChoice
from infralens.text.markdown import python_blocks
from infralens.text.source import SourceFile
from infralens.urls import lab_url

STATE_FILE = "state.js"
"""The file beside a lab page that holds its recorded state, loaded on a reader's first selection."""

HINT = 30
"""Longest value hint at the end of a line, in characters."""


@dataclass(frozen=True)
class Shown:
    """One recorded value: the name it was bound to, and its summary."""

    name: str
    value: str


@dataclass(kw_only=True, frozen=True)
class LineState:
    """What one line's last recorded run bound, or, for a `def` line, its last call's inputs and return."""

    number: int
    results: tuple[Shown, ...]
    inputs: tuple[Shown, ...]
    returned: str | None
    """A `def` line: what its call returned; a `return EXPR` line: the value it returned."""
    count: int
    """How many times the line ran (or the function was called)."""
    exact: bool
    """False when part of the runs were not traced, so `count` is a lower bound."""
    run: int = 1
    """Which run (or call) the values are from: the last one kept, not always the last one made."""
    process: str = ""
    """The process that recorded them, when not the starter's own (a spawned rank: 'rank 0')."""
    kind: Literal["bound", "call", "return", "branch"] = "bound"
    """What the line is: a statement that binds (or a call that changes) names, a `def` line, a
    `return EXPR`, a condition (`if`, `elif`, `while`)."""
    at_return: bool = False
    """The values were taken when the call returned (the script ended), after its lines stopped being traced."""
    call: int = 0
    """Which call of the line's function the values are from (0: module code)."""
    calls: int = 0
    """How many calls the line's function had, traced or not (0: module code)."""
    branch: bool | None = None
    """A condition: whether it was true on the run shown."""
    taken: tuple[int, int] | None = None
    """A condition: how often it was true and false, in the runs traced."""

    @property
    def value(self) -> str:
        """The value part of the hint: `→ 524,288`, `→ a = 1, b = 2`, `↩ 6,738,415,616`, `→ true`."""
        shown_inputs = [s for s in self.inputs if s.name not in RECEIVERS]
        if self.kind == "branch":
            return "→ " + ("true" if self.branch else "false")
        if self.kind == "return":
            return "↩ " + brief(self.returned or "")
        if self.kind == "call" and self.returned == "None":  # a procedure: what it was called with says more
            if not shown_inputs:
                return ""
            return "⬇ " + ", ".join(f"{s.name} = {brief(s.value)}" for s in shown_inputs)
        if self.kind == "call":
            return "↩ " + brief(self.returned or "")
        if len(self.results) == 1:
            return "→ " + brief(self.results[0].value)
        return "→ " + ", ".join(f"{s.name} = {brief(s.value)}" for s in self.results)

    @property
    def when(self) -> str:
        """Which run the value is from and how often the line ran, in the site's one wording (see
        the module docstring), or '' for a line run once."""
        total = f"{'≥ ' if not self.exact else ''}{self.count:,}"
        parts = []
        runs = f"{total} run{'s' if self.count != 1 else ''}"
        if self.kind == "call":
            if self.count > 1:
                parts.append(f"last of {total} calls" if self.run == self.count else f"call {self.run:,} of {total}")
        elif self.kind == "return" and self.calls > 1:  # once per call: which call is the count that matters
            parts.append(f"last of {self.calls:,} calls" if self.call == self.calls else f"call {self.call:,} of {self.calls:,}")
        else:
            if self.calls > 1 and self.call:
                parts.append(f"call {self.call:,} of {self.calls:,}")
            if self.at_return:
                parts.append("at return" if self.call else "at the end")
                if self.count > 1 or not self.exact:
                    parts.append(runs)
            elif self.count > 1:
                parts.append(f"last of {total} runs" if self.run == self.count and self.exact else f"run {self.run:,} of {total}")
            if self.taken and self.count > 1:
                parts.append(f"{self.taken[0]:,} true, {self.taken[1]:,} false")
        return f"({'; '.join(parts)})" if parts else ""

    @property
    def glance(self) -> str:
        """What a line's end adds to its value: nothing when the value is the one the line held after
        its last run in the last call (most lines); else which call or run it is from, or that it
        was taken at return. How often the line ran is the panel's to say (`when`)."""
        total = f"{'≥ ' if not self.exact else ''}{self.count:,}"
        if self.kind == "call":
            return f"(call {self.run:,} of {total})" if self.count > 1 and self.run != self.count else ""
        if self.calls > 1 and self.call and self.call != self.calls:
            return f"(call {self.call:,} of {self.calls:,})"
        if self.kind == "return":
            return ""
        if self.at_return:
            return "(at return)" if self.call else "(at the end)"
        if self.count > 1 and (self.run != self.count or not self.exact):
            return f"(run {self.run:,} of {total})"
        return ""

    @property
    def hint(self) -> str:
        """The text at the end of the line: the value cut to HINT characters, then `glance`."""
        text = self.value
        if not text:
            return ""
        if len(text) > HINT:
            text = text[: HINT - 1] + "…"
        when = self.glance
        return f"{text} {when}" if when else text


_ARRAY = re.compile(r"\b(Tensor|ndarray) (\([^)]*\)) (\S+) \S+ [\d,]+ B(?: \[[^\]]*\])?(?: min \S+ max \S+?(?=, |[)\]}]|$))?")


def brief(value: str) -> str:
    """A value as a line-end hint shows it: a tensor or array as its shape and dtype only (the
    panel and the note's table give its device, bytes and values)."""
    return _ARRAY.sub(lambda m: f"{m[1]} {m[2]} {m[3]}", value)


@dataclass(frozen=True)
class PageState:
    """The state a lab page shows: per line, and the data its panel loads."""

    lines: dict[int, LineState]
    data: dict
    """Every kept run of every shown line, for the panel (written as the lab's state.js)."""
    finished: str
    truncated: bool
    printed: bool = True
    """False when the traced run printed otherwise than the plain one (a timer, most often): its
    values are shown, and back no figure of the prose (check's claims, `recorded:` answers)."""


def recorded(result: RunResult | None, spans: tuple[tuple[int, int], ...]) -> dict | None:
    """Return a run's recorded state if it may be shown next to lines traced as `spans`, else None."""
    if result is None or not result.passed or not result.state or not spans or result.traced != spans:
        return None
    try:
        state = json.loads(result.state)
    except ValueError:
        return None
    return state if isinstance(state, dict) and state.get("version") == 1 else None


def recorded_text(state_json: str) -> str:
    """Every value a run recorded, one per line: what the claims check may find a figure in.

    None of a state whose traced run printed otherwise than the checked run ("printed": false):
    the tracer changed what the starter computed, or the starter behaves otherwise when traced.
    """
    if not state_json:
        return ""
    try:
        state = json.loads(state_json)
    except ValueError:
        return ""
    if state.get("printed") is False:
        return ""
    values: list[str] = []
    for entry in state.get("lines", {}).values():
        for sample in entry.get("samples", ()):
            values.extend(str(v) for v in sample.get("values", {}).values())
            if "return" in sample:
                values.append(str(sample["return"]))
    for entry in state.get("calls", {}).values():
        for sample in entry.get("samples", ()):
            values.extend(str(v) for v in sample.get("inputs", {}).values())
            if "return" in sample:
                values.append(str(sample["return"]))
    return "\n".join(values)


def choice_for(line: int, starter_choice: StateChoice | None, blocks: tuple[KeyBlock, ...]) -> list[StateChoice]:
    """The state choices that apply to a line: the starter's, and those of the key blocks bound to it."""
    choices = [starter_choice] if starter_choice is not None else []
    return choices + [b.state for b in blocks if b.state is not None and b.first <= line <= b.last]


def allowed(name: str, choices: list[StateChoice]) -> bool:
    return all(choice.allows(name) for choice in choices)


def moment(sample: dict, kept: dict) -> dict:
    """Add to a kept run when it started (t) and its iteration of each loop around it (l), as the
    tracer recorded them: the panel shows the lines of one moment together."""
    if isinstance(sample.get("t"), int):
        kept["t"] = sample["t"]
    if isinstance(sample.get("l"), list) and sample["l"]:
        kept["l"] = [int(n) for n in sample["l"]]
    return kept


def line_sample(sample: dict, choices: list[StateChoice]) -> dict:
    """One kept run of a line as the panel reads it: run number, call, values, and where they
    apply, taken at return (at), the branch taken (b), the value returned (r), when it ran (t, l)."""
    kept = {"n": sample.get("n", 1), "k": sample.get("call", 0), "v": [[name, str(value)] for name, value in sample.get("values", {}).items() if allowed(name, choices)]}
    moment(sample, kept)
    if sample.get("at") == "return":
        kept["at"] = 1
    if isinstance(sample.get("branch"), bool):
        kept["b"] = sample["branch"]
    if "return" in sample:
        kept["r"] = str(sample["return"])
    return kept


INDEX = 16
"""Longest loop index the panel's step bar names ("i = 1"); a longer value (a tensor, a dict) is no index."""


def index_value(value: str) -> bool:
    """Whether a loop target's summary reads as an index in the step bar: short and one word."""
    return len(value) <= INDEX and " " not in value


def loop_data(state: dict, shown: set[int], starter_choice: StateChoice | None, blocks: tuple[KeyBlock, ...]) -> dict[str, dict]:
    """The loops the panel steps through, by header: the body's last line (e), the iterations
    counted (c, x: exact), the calls of their function (a), and each kept iteration's call (k),
    start (t), iterations (l) and indices (v), or that it is what the call held at return (at).
    Only loops around or among the excerpt's shown lines, with more than one iteration kept."""
    loops = {}
    for key, entry in state.get("loops", {}).items():
        samples = [s for s in entry.get("samples", ()) if isinstance(s, dict)]
        header, end = int(key), int(entry.get("end", 0))
        if len(samples) < 2 or not any(header <= n <= end for n in shown):
            continue
        choices = choice_for(header, starter_choice, blocks)
        kept = []
        for sample in samples:
            one = moment(sample, {"k": sample.get("call", 0), "v": [[name, str(value)] for name, value in sample.get("values", {}).items() if allowed(name, choices) and index_value(str(value))]})
            if sample.get("at") == "return":
                one["at"] = 1
            kept.append(one)
        loops[key] = {"e": end, "c": entry.get("count", len(samples)), "x": bool(entry.get("exact", True)), "a": int(entry.get("calls", 0) or 0), "s": kept}
    return loops


def recordable(source: SourceFile, spans: tuple[tuple[int, int], ...]) -> tuple[list[int], dict[str, list[int]]]:
    """The lines in the spans where a statement starts that the tracer records something for: what
    the panel needs to tell a line that did not run from one that has nothing to record; and each
    condition's body (first and last line) among them, by the condition's line, so a line left out
    of a step can say that its condition was false."""
    text = python_of(source.text, python_blocks(source.text)) if source.path.endswith(".md") else source.text
    try:
        names, functions = statement_names(text)
        branches, returns, effects = statement_shapes(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return [], {}
    inside = lambda line: any(first <= line <= last for first, last in spans)
    found = {line for line, bound in names.items() if bound} | set(branches) | returns | set(functions.values())
    found |= {line for line, (receiver, handed) in effects.items() if receiver or handed}
    bodies = {str(line): [first, last] for line, (_, first, last) in sorted(branches.items()) if inside(line)}
    return sorted(line for line in found if inside(line)), bodies


def page_state(lab: Lab, excerpt: Excerpt, result: RunResult | None, spans: tuple[tuple[int, int], ...], source: SourceFile | None = None) -> PageState | None:
    """Return what the page shows of a run's state, or None when there is nothing (fresh) to show."""
    state = recorded(result, spans)
    if state is None:
        return None
    starter = next(s for s in lab.starters if s.path == excerpt.starter)
    shown_lines = {line.number for line in excerpt.lines}
    own = tuple(b for b in excerpt.key_blocks if b.starter == excerpt.starter)  # a walkthrough's other files record none
    lines: dict[int, LineState] = {}
    data_lines: dict[str, dict] = {}
    data_calls: dict[str, dict] = {}

    def pairs(values: dict, choices: list[StateChoice]) -> list[list[str]]:
        return [[name, str(value)] for name, value in values.items() if allowed(name, choices)]

    for key, entry in state.get("lines", {}).items():
        number = int(key)
        choices = choice_for(number, starter.state, own)
        samples = [s for s in entry.get("samples", ()) if isinstance(s, dict)]
        if number not in shown_lines or not samples or any(not c.shown for c in choices):
            continue
        kept = [line_sample(s, choices) for s in samples]
        last = kept[-1]
        kind = "branch" if "b" in last else "return" if "r" in last else "bound"
        if kind == "bound" and not any(sample["v"] for sample in kept):
            continue
        process = str(entry.get("process") or "")
        taken = entry.get("taken")
        taken = (int(taken[0]), int(taken[1])) if isinstance(taken, list) and len(taken) == 2 else None
        data_lines[key] = {"c": entry.get("count", len(samples)), "x": bool(entry.get("exact", True)), "a": int(entry.get("calls", 0) or 0), "s": kept, "p": process}
        if taken:
            data_lines[key]["t"] = list(taken)
        lines[number] = LineState(
            number=number, results=tuple(Shown(*pair) for pair in last["v"]), inputs=(), returned=last.get("r"), count=data_lines[key]["c"],
            exact=data_lines[key]["x"], run=last["n"], process=process, kind=kind, at_return=bool(last.get("at")), call=last["k"],
            calls=data_lines[key]["a"], branch=last.get("b"), taken=taken,
        )
    for key, entry in state.get("calls", {}).items():
        number = int(key)
        choices = choice_for(number, starter.state, own)
        samples = [s for s in entry.get("samples", ()) if isinstance(s, dict)]
        if number not in shown_lines or not samples or any(not c.shown for c in choices):
            continue
        kept = [{"k": s.get("call", 1), "i": pairs(s.get("inputs", {}), choices), "r": returned(s)} for s in samples]
        process = str(entry.get("process") or "")
        data_calls[key] = {"c": entry.get("count", len(samples)), "x": bool(entry.get("exact", True)), "s": kept, "p": process}
        last = kept[-1]
        lines[number] = LineState(
            number=number, results=(), inputs=tuple(Shown(*pair) for pair in last["i"]), returned=last["r"] if last["r"] is not None else "None",
            count=data_calls[key]["c"], exact=data_calls[key]["x"], run=last["k"], process=process, kind="call",
        )
    if not lines:
        return None
    finished = result.finished if result else ""
    data = {"run": finished, "truncated": bool(state.get("truncated")), "lines": data_lines, "calls": data_calls}
    loops = loop_data(state, shown_lines, starter.state, own)
    if loops:
        data["o"] = loops
    if source is not None:
        data["w"], bodies = recordable(source, spans)
        if bodies:
            data["g"] = bodies
    page = PageState(dict(sorted(lines.items())), data, finished, bool(state.get("truncated")), state.get("printed") is not False)
    # What the manifest says values mean, and the figures derived from them, by the lines they cover.
    meanings = [[b.first, b.last, {name: words for name, words, _ in b.meaning}] for b in own if b.meaning]
    figures = [[b.first, b.last, [[f.name, f.formula, f.value, f.meaning] for f in block_figures(page, b) if f.value]] for b in own if b.derived]
    if meanings:
        data["m"] = meanings
    if any(shown for _, _, shown in figures):
        data["d"] = [entry for entry in figures if entry[2]]
    return page


def returned(sample: dict) -> str | None:
    """What a recorded call gave back: its return value, that it raised, or None when it never
    returned (the process ended inside it)."""
    if "return" in sample:
        return str(sample["return"])
    return "(raised an exception)" if sample.get("raised") else None


RECEIVERS = ("self", "cls")
"""Parameters whose value says little next to their method's line; the panel still lists them."""


@dataclass(frozen=True)
class Figure:
    """A key block's derived figure as its page shows it: `flops = 2 × N^3 = 33,554,432`."""

    name: str
    formula: str
    """The expression as a reader writes it: `2 × N^3`."""
    value: str
    """The figure, exact (shown.exact), or '' when it cannot be computed (`why` says why)."""
    meaning: str = ""
    why: str = ""


@dataclass(frozen=True)
class BlockTable:
    """A key block's no-JS state table."""

    rows: tuple[tuple[int, str, str, str], ...]
    """(line, kind, name, value), kind being 'in' (a parameter at entry), 'out' (a value bound) or 'return'."""
    process: str
    """The spawned process every value comes from ('rank 0'), or '' for the starter's own."""
    means: dict[str, str] = field(default_factory=dict)
    """What the block's manifest says a name's value means."""
    figures: tuple[Figure, ...] = ()

    @property
    def worded(self) -> bool:
        """Whether the table needs its Meaning column."""
        return bool(self.means) or any(f.meaning or f.why for f in self.figures)


def block_table(page: PageState | None, block: KeyBlock) -> BlockTable | None:
    """Return a key block's table of recorded values, or None when its lines recorded none. A
    value reads as its line's hint does (a tensor as its shape and dtype: the panel has the rest)
    and says nothing of which run it is from: the line's end says that, with or without JS. A
    `return` line that gives back what the block's `def` line already shows is left out, and so is
    a table whose every line holds one value short enough to stand whole at its end (and in the
    starter's own process: a spawned rank's name is the table's to say)."""
    if page is None:
        return None
    rows: list[tuple[int, str, str, str]] = []
    processes = set()
    for number in range(block.first, block.last + 1):
        line = page.lines.get(number)
        if line is None:
            continue
        where = f" (in {line.process})" if line.process else ""
        processes.add(line.process)
        rows += [(number, "in", s.name, brief(s.value) + where) for s in line.inputs if s.name not in RECEIVERS]
        rows += [(number, "out", s.name, brief(s.value) + where) for s in line.results]
        if line.kind == "branch":
            rows.append((number, "out", "condition", ("true" if line.branch else "false") + where))
        if line.returned is not None and line.returned != "None" or line.kind == "return":
            value = f"{brief(str(line.returned))}{where}"
            if not any(kind == "return" and shown == value for _, kind, _, shown in rows):  # a `return` line of the function the block opens
                rows.append((number, "return", "return", value))
    numbers = [n for n, _, _, _ in rows]
    means = {name: words for name, words, _ in block.meaning}
    figures = block_figures(page, block)
    if not rows or (len(set(numbers)) == len(numbers) and processes == {""} and all(len(value) <= HINT for _, _, _, value in rows) and not means and not figures):
        return None  # each line holds one value, whole at its end already: a table would say it twice
    if len(processes) == 1:  # one process recorded them all: say so once
        process = processes.pop()
        suffix = f" (in {process})"
        return BlockTable(tuple((n, k, name, value.removesuffix(suffix) if process else value) for n, k, name, value in rows), process, means, figures)
    return BlockTable(tuple(rows), "", means, figures)


def numeric(value: str) -> int | float | None:
    """A recorded value read back as the number it was (`6,738,415,616`, `0.125`, `-3`), or None
    for anything else (a tensor, a string, True, nan)."""
    text = value.replace(",", "")
    for kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            continue
        return number if math.isfinite(number) else None
    return None


def block_values(page: PageState, block: KeyBlock) -> dict[str, str]:
    """What each name a derived figure may read last held, as recorded: bound (or taken as a
    parameter) by a line of the block, else by another line of the excerpt; the later line's value
    where two lines bind a name."""
    values: dict[str, str] = {}
    for _, line in sorted(page.lines.items(), key=lambda item: block.first <= item[0] <= block.last):
        values.update((s.name, s.value) for s in (*line.inputs, *line.results))
    return values


def reader_formula(expr: Expr) -> str:
    """An expression as a reader writes it: `2 × N^3`."""
    return "".join(piece if isinstance(piece, str) else piece[0] for piece in arithmetic(expr))


def block_figures(page: PageState | None, block: KeyBlock) -> tuple[Figure, ...]:
    """Compute a key block's derived figures from the values its lines were recorded holding, in
    order (a figure may read an earlier one). One that cannot be computed says why."""
    if page is None or not block.derived:
        return ()
    values = block_values(page, block)
    known: dict[str, int | float] = {}
    figures = []
    for spec in block.derived:
        text = spec.expr.text
        try:
            expr = parse_expr(text, set(re.findall(IDENTIFIER, text)))
        except ExprError as error:
            figures.append(Figure(spec.name, text, "", spec.meaning or "", error.message))
            continue
        formula, why = reader_formula(expr), ""
        for name in sorted(expr.names - set(known)):
            if name not in values:
                why = f"`{name}` was not recorded by the checked run"
            elif numeric(values[name]) is None:
                why = f"`{name}` was recorded as {brief(values[name])!r}, not a number"
            else:
                known[name] = numeric(values[name])  # type: ignore[assignment]
            if why:
                break
        if not why:
            try:
                known[spec.name] = evaluate(expr, known)
            except ExprError as error:
                why = error.message
        figures.append(Figure(spec.name, formula, "" if why else exact(known[spec.name]), spec.meaning or "", why))
    return tuple(figures)


def state_script(page: PageState) -> str:
    """The lab's state.js: its recorded state, handed to the page's state panel when it loads."""
    text = json.dumps(page.data, separators=(",", ":"), ensure_ascii=False)
    # Inside a script, `</` could end it early: JSON allows the escaped form.
    return "InfraLensState(" + text.replace("</", "<\\/") + ");\n"


def bound_names(source: SourceFile, first: int, last: int) -> list[str]:
    """The names the statements starting on lines first..last bind, and the parameters of a
    function defined there: what a state list may name."""

    text = source.text
    if source.path.endswith(".md"):

        text = python_of(text, python_blocks(text))
    try:
        tree = ast.parse(text)
        names, _ = statement_names(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    found = [name for line, bound in names.items() if first <= line <= last for name in bound]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and first <= node.lineno <= last:
            args = node.args
            found += [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a is not None]
    return list(dict.fromkeys(found))


def check_state_names(lab: Lab, excerpt: Excerpt, source: SourceFile, problems: Problems) -> None:
    """Every variable a state list names must be bound by a line it covers."""
    wanted = []
    for starter in lab.starters:
        if starter.state is None or not starter.state.names:
            continue
        if starter.path != excerpt.starter:
            problems.add(starter.state.mark, f"state: only the previewed starter ({excerpt.starter}) records execution state, not {starter.path}")
        else:
            wanted.append((starter.state, excerpt.first, excerpt.last, f"the excerpt of {starter.path}"))
    for b in excerpt.key_blocks:
        if b.state is None or not b.state.names:
            continue
        if b.starter != excerpt.starter:
            problems.add(b.state.names[0][1], f"state: key block {b.name!r} is bound to {b.starter}, and only the previewed starter ({excerpt.starter}) records execution state")
        else:
            wanted.append((b.state, b.first, b.last, f"key block {b.name!r} (lines {b.first}-{b.last})"))
    for choice, first, last, where in wanted:
        known = bound_names(source, first, last)
        for name, mark in choice.names:
            if name not in known and not any(name.startswith(k + ".") for k in known):
                listed = ", ".join(known[:12]) or "none"
                problems.add(mark, f"state: {name!r} is not bound by any line of {where}; names bound there: {listed}")


def check_meanings(lab: Lab, excerpt: Excerpt, source: SourceFile, problems: Problems) -> None:
    """A key block's `meaning:` names values its lines bind and shows, and its `derived:` figures
    read only those names and its earlier figures, each in an expression a page can compute."""
    traced = traced_spans(lab, excerpt)
    for block in excerpt.key_blocks:
        if not block.meaning and not block.derived:
            continue
        first_mark = block.meaning[0][2] if block.meaning else block.derived[0].mark
        field_name = "meaning" if block.meaning else "derived"
        if block.starter != excerpt.starter:
            problems.add(first_mark, f"{field_name}: key block {block.name!r} is bound to {block.starter}, and only the previewed starter ({excerpt.starter}) records execution state")
            continue
        if not any(first <= line <= last for first, last in traced for line in (block.first, block.last)):
            problems.add(first_mark, f"{field_name}: key block {block.name!r} shows no execution state (its starter does not run, or a `state: false` hides these lines)")
            continue
        starter = next(s for s in lab.starters if s.path == excerpt.starter)
        choices = choice_for(block.first, starter.state, (block,))
        known = bound_names(source, block.first, block.last)
        elsewhere = [name for part in excerpt.parts if part.starter == excerpt.starter and part.lines for name in bound_names(source, part.lines[0].number, part.lines[-1].number)]
        shown = [name for name in dict.fromkeys(known + elsewhere) if allowed(name, choices)]
        for name, _, mark in block.meaning:
            if name not in known and not any(name.startswith(k + ".") for k in known):
                problems.add(mark, f"meaning: {name!r} is not bound by any line of key block {block.name!r} (lines {block.first}-{block.last}); names bound there: {', '.join(known[:12]) or 'none'}")
            elif not allowed(name, choices):
                problems.add(mark, f"meaning: {name!r} is not among the values key block {block.name!r} shows (its `state:` list)")
        readable = {name for name in shown if re.fullmatch(IDENTIFIER, name)}
        figures: set[str] = set()
        for spec in block.derived:
            if spec.name in readable:
                said = "a second figure of the block is named" if spec.name in figures else "the block's lines already bind"
                problems.add(spec.mark, f"derived: {said} {spec.name!r}; give the figure its own name")
                continue
            try:
                parse_expr(spec.expr.text, readable)
            except ExprError as error:
                problems.add(spec.expr.at(error.offset), f"derived {spec.name!r}: {error.message}")
            readable.add(spec.name)
            figures.add(spec.name)


def traced_spans(lab: Lab, excerpt: Excerpt) -> tuple[tuple[int, int], ...]:
    """Return the line spans whose execution state `check` records: the excerpt's lines, less
    those of key blocks that say `state: false`; none when the previewed starter says so."""
    starter = next((s for s in lab.starters if s.path == excerpt.starter), None)
    if starter is None or starter.run is None or (starter.state is not None and not starter.state.shown):
        return ()
    hidden = {n for b in excerpt.key_blocks if b.starter == excerpt.starter and b.state is not None and not b.state.shown for n in range(b.first, b.last + 1)}
    numbers = [line.number for line in excerpt.lines if line.number not in hidden]
    spans: list[tuple[int, int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], number)
        else:
            spans.append((number, number))
    return tuple(spans)


# ---------------------------------------------------------------- the page feature (see features.py)

NAME = "state"


def manifest_problems(lab: Lab, excerpt: Excerpt, source: SourceFile) -> list[Problem]:
    """Every variable a state list names is bound by a line it covers."""
    problems = Problems()
    check_state_names(lab, excerpt, source, problems)
    check_meanings(lab, excerpt, source, problems)
    return list(problems)


def run_problems(lab: Lab, runs: dict[str, RunResult], excerpt: Excerpt | None) -> dict[str, list[Problem]]:
    """A key block's derived figure its recorded values cannot compute (a name not recorded, or
    not a number). A run that recorded no state still passes: the page then shows none."""
    if excerpt is None:
        return {}
    page = page_state(lab, excerpt, runs.get(excerpt.starter), traced_spans(lab, excerpt))
    problems = [
        Problem(spec.mark, f"derived {spec.name!r}: {figure.why}")
        for block in excerpt.key_blocks if block.starter == excerpt.starter
        for spec, figure in zip(block.derived, block_figures(page, block)) if figure.why
    ]
    return {excerpt.starter: problems} if problems else {}


def published(lab: Lab, runs: dict[str, RunResult], excerpt: Excerpt, sources: dict[str, SourceFile]) -> Published:
    """The values the previewed starter's checked run recorded, and the script the reader's panel loads."""
    state = page_state(lab, excerpt, runs.get(excerpt.starter), traced_spans(lab, excerpt), sources.get(excerpt.starter))
    if state is None:
        return Published()
    return Published(state, ((f"{PurePosixPath(lab_url(lab.id)).parent}/{STATE_FILE}", state_script(state)),))
