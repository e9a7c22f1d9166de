"""Execution state from check to page: what is shown, when it is withheld, and the claims it backs."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO, TESTS, run_infralens

from infralens.build import load_project
from infralens.build.memory import resolve
from infralens.errors import Mark
from infralens.lab import state
from infralens.lab.resolve import plain_excerpt
from infralens.lab.state import (
    HINT,
    LineState,
    Shown,
    block_table,
    page_state,
    recorded_text,
    state_script,
    traced_spans,
)
from infralens.model.run import RunResult
from infralens.model.schema import Written
from infralens.model.starter import DerivedSpec, StateChoice

SAMPLE = TESTS / "sites" / "sample"
LAB_PAGE = "output/labs/lab-01-sample/index.html"


@pytest.fixture(scope="module")
def sample():
    """The sample site's lab 01, resolved: its excerpt is lines 9-10 of kv.py."""
    project = load_project(SAMPLE / "site.yml", cache_dir=None)
    return next(r for r in resolve(project) if r.lab.id == "lab-01-sample")


def run_with(state: dict, spans, status: str = "passed") -> RunResult:
    return RunResult(
        lab="lab-01-sample", starter="code/lab-01-sample/kv.py", status=status, seconds=0.1, returncode=0, stdout="",
        stderr="", reason="", mark=Mark("labs/lab-01-sample.yml", 1, 1), finished="2026-11-24T00:00:00Z",
        traced=tuple(spans), state=json.dumps(state),
    )


STATE = {
    "version": 1,
    "truncated": False,
    "lines": {
        "9": {"count": 32, "exact": True, "samples": [{"values": {"per_layer": "8,192"}, "n": n, "call": n} for n in (1, 2, 3, 32)]},
        "10": {"count": 1, "exact": True, "samples": [{"values": {"total": "524,288"}, "n": 1, "call": 1}]},
    },
    "calls": {},
}


@pytest.mark.unit
def test_the_sample_excerpt_is_traced_as_one_span(sample) -> None:
    assert traced_spans(sample.lab, sample.excerpt) == ((9, 10),)
    assert traced_spans(sample.lab, plain_excerpt(sample.lab, {"code/lab-01-sample/kv.py": (SAMPLE / "code/lab-01-sample/kv.py").read_text()})) == ((9, 10),)


@pytest.mark.unit
def test_a_key_block_that_opts_out_is_not_traced_and_a_starter_that_opts_out_traces_nothing(sample) -> None:
    lab, excerpt = sample.lab, sample.excerpt
    first = replace(excerpt.key_blocks[0], state=StateChoice(False))
    assert traced_spans(lab, replace(excerpt, key_blocks=(first, *excerpt.key_blocks[1:]))) == ((10, 10),)
    starters = (replace(lab.starters[0], state=StateChoice(False)), *lab.starters[1:])
    assert traced_spans(replace(lab, starters=starters), excerpt) == ()


@pytest.mark.unit
def test_each_line_shows_its_last_value_with_how_often_it_ran(sample) -> None:
    spans = traced_spans(sample.lab, sample.excerpt)
    page = page_state(sample.lab, sample.excerpt, run_with(STATE, spans), spans)
    assert page.lines[9].hint == "→ 8,192" and page.lines[9].when == "(last of 32 runs)"  # final: its end says no more
    assert page.lines[10].hint == "→ 524,288"
    # The panel's data keeps every kept run, in order, for stepping.
    assert [s["n"] for s in page.data["lines"]["9"]["s"]] == [1, 2, 3, 32]
    assert state_script(page).startswith("InfraLensState({") and state_script(page).endswith(");\n")


@pytest.mark.unit
@pytest.mark.parametrize(
    "why, result, spans",
    [
        ("a failed run", lambda spans: run_with(STATE, spans, status="failed"), None),
        ("a run that recorded other lines", lambda spans: run_with(STATE, ((9, 9),)), None),
        ("a run that recorded nothing", lambda spans: replace(run_with(STATE, spans), state=""), None),
        ("no run", lambda spans: None, None),
        ("a page that no longer traces", lambda spans: run_with(STATE, spans), ()),
    ],
)
def test_stale_or_missing_state_is_never_shown(sample, why: str, result, spans) -> None:
    current = traced_spans(sample.lab, sample.excerpt)
    assert page_state(sample.lab, sample.excerpt, result(current), current if spans is None else spans) is None, why


@pytest.mark.unit
def test_state_lists_filter_names_for_the_starter_and_for_a_key_block(sample) -> None:
    lab, excerpt = sample.lab, sample.excerpt
    spans = traced_spans(lab, excerpt)
    state = {**STATE, "lines": {"9": {"count": 1, "exact": True, "samples": [{"values": {"per_layer": "8,192", "kv_heads": "32"}, "n": 1}]}}}
    full = page_state(lab, excerpt, run_with(state, spans), spans)
    assert full.lines[9].hint == "→ per_layer = 8,192, kv_heads…"  # cut at HINT characters
    only = StateChoice(True, (("kv_heads", Mark("x", 1, 1)),))
    block = replace(excerpt.key_blocks[0], state=only)
    narrowed = page_state(lab, replace(excerpt, key_blocks=(block, *excerpt.key_blocks[1:])), run_with(state, spans), spans)
    assert narrowed.lines[9].hint == "→ 32"
    assert narrowed.lines[9].results == (Shown("kv_heads", "32"),)
    assert block_table(full, block).rows == ((9, "out", "per_layer", "8,192"), (9, "out", "kv_heads", "32"))
    assert block_table(narrowed, block) is None  # one short value, whole at its line's end already
    assert block_table(narrowed, excerpt.key_blocks[1]) is None  # line 10 recorded nothing here


@pytest.mark.unit
def test_a_call_shows_its_inputs_and_return_and_long_hints_are_cut() -> None:
    line = LineState(number=5, results=(), inputs=(Shown("config", "Config(…)"),), returned="6,738,415,616", count=3, exact=True, run=3)
    line = replace(line, kind="call")
    assert line.hint == "↩ 6,738,415,616" and line.when == "(last of 3 calls)"
    # Calls are kept 1-3 and at powers of two (and the last, while RETURNS lasts): the one shown is
    # named when it is not the last.
    assert replace(line, count=60, run=32).hint == "↩ 6,738,415,616 (call 32 of 60)"
    # A procedure's return says nothing: its inputs are shown instead, or no hint at all.
    procedure = LineState(number=7, results=(), inputs=(Shown("self", "<Block>"), Shown("n", "4")), returned="None", count=1, exact=True, kind="call")
    assert procedure.hint == "⬇ n = 4"
    assert replace(procedure, inputs=(Shown("self", "<Block>"),)).hint == ""
    # A tensor at a line's end is its shape and dtype; its bytes and values are in the table and panel.
    tensor = "Tensor (16, 2, 32) float64 cpu 8,192 B [0.5383, 0.07494, 5.924, 1.046, …] min -5.805 max 5.924"
    assert LineState(number=8, results=(Shown("h", tensor),), inputs=(), returned=None, count=1, exact=True).hint == "→ Tensor (16, 2, 32) float64"
    assert LineState(number=8, results=(Shown("out", f"({tensor}, 1)"),), inputs=(), returned=None, count=1, exact=True).hint == "→ (Tensor (16, 2, 32) float64…"
    long = LineState(number=6, results=(Shown("x", "y" * 100),), inputs=(), returned=None, count=1, exact=True)
    assert len(long.hint) == HINT and long.hint.endswith("…")


@pytest.mark.unit
def test_the_claims_check_reads_every_recorded_value() -> None:
    state = {"version": 1, "lines": {"3": {"samples": [{"values": {"a": "524,288"}}]}}, "calls": {"1": {"samples": [{"inputs": {"n": "7"}, "return": "6,738,415,616"}]}}}
    assert recorded_text(json.dumps(state)).split("\n") == ["524,288", "7", "6,738,415,616"]
    assert recorded_text("") == "" and recorded_text("not json") == ""


def hints(page: Path) -> list[str]:
    return re.findall(r'<i data-v="([^"]*)"></i>', page.read_text())


@pytest.mark.cli
def test_check_records_state_and_build_shows_it_until_the_starter_changes(sample_site: Path) -> None:
    assert run_infralens("check", "lab-01-sample", cwd=sample_site).returncode == 0
    assert run_infralens("build", cwd=sample_site).returncode == 0
    page = sample_site / LAB_PAGE
    assert hints(page) == ["→ 8,192", "→ 524,288"]
    assert "<caption>Values</caption>" not in page.read_text()  # each value whole at its line's end
    assert (sample_site / "output/labs/lab-01-sample/state.js").read_text().startswith("InfraLensState(")
    assert hints(sample_site / "output/code/lab-01-sample/kv.py.html") == ["→ 8,192", "→ 524,288"]

    # The starter changes and check has not run it since: its state goes with its run.
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text().replace("default=32", "default=16"))
    assert run_infralens("build", cwd=sample_site).returncode == 0
    assert hints(page) == [] and "<caption>Values</caption>" not in page.read_text()
    assert not (sample_site / "output/labs/lab-01-sample/state.js").exists()
    assert hints(sample_site / "output/code/lab-01-sample/kv.py.html") == []


@pytest.mark.cli
def test_a_changed_excerpt_runs_again_and_an_opt_out_records_nothing(sample_site: Path) -> None:
    assert run_infralens("check", "lab-01-sample", cwd=sample_site).returncode == 0
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("    role: Prints the KV bytes per token.\n", "    role: Prints the KV bytes per token.\n    state: false\n"))
    again = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert again.returncode == 0 and "(stored result)" not in again.stdout  # other lines to trace: a new run
    assert run_infralens("build", cwd=sample_site).returncode == 0
    assert hints(sample_site / LAB_PAGE) == []


@pytest.mark.cli
def test_a_figure_only_a_line_holds_backs_the_prose_and_stops_when_that_line_is_not_traced(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    text = manifest.read_text().replace("note: K and V, so the **factor 2**.", "note: K and V, so the **factor 2**; this line yields 8,192.")
    manifest.write_text(text)
    backed = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert backed.returncode == 0, backed.stdout + backed.stderr  # the run never prints 8,192: the line's value backs it
    manifest.write_text(text.replace("    lines: per_layer =\n", "    lines: per_layer =\n    state: false\n"))
    unbacked = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert unbacked.returncode == 1
    assert "the page states 8,192 but no starter of the lab prints it or records it on a line" in unbacked.stderr + unbacked.stdout


@pytest.mark.unit
def test_values_a_spawned_rank_recorded_say_which_rank_once_per_table(sample) -> None:
    spans = traced_spans(sample.lab, sample.excerpt)
    ranked = {**STATE, "lines": {line: {**entry, "process": "rank 0"} for line, entry in STATE["lines"].items()}}
    page = page_state(sample.lab, sample.excerpt, run_with(ranked, spans), spans)
    assert page.data["lines"]["9"]["p"] == "rank 0"
    table = block_table(page, sample.excerpt.key_blocks[0])
    assert table.process == "rank 0" and table.rows == ((9, "out", "per_layer", "8,192"),)
    mixed = {**ranked, "lines": {**ranked["lines"], "10": STATE["lines"]["10"]}}
    both = replace(sample.excerpt.key_blocks[0], last=10)
    table = block_table(page_state(sample.lab, sample.excerpt, run_with(mixed, spans), spans), both)
    assert table.process == "" and table.rows == ((9, "out", "per_layer", "8,192 (in rank 0)"), (10, "out", "total", "524,288"))


@pytest.mark.cli
def test_the_run_the_page_shows_is_never_the_traced_one(sample_site: Path) -> None:
    """A starter that times a loop or measures a peak would print other figures under the tracer;
    check records state in a run of its own and keeps the plain run's output."""
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text().replace('    print(f"kv bytes', '    import sys\n    print(f"traced: {sys.gettrace() is not None}")\n    print(f"kv bytes'))
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("expect: ['kv bytes per token: 524,288']", "expect: ['kv bytes per token: 524,288', '^traced: False$']"))
    checked = run_infralens("check", "lab-01-sample", "--json", str(sample_site / "report.json"), cwd=sample_site)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert run_infralens("build", cwd=sample_site).returncode == 0
    page = (sample_site / LAB_PAGE).read_text()
    assert "traced: False" in page and "traced: True" not in page
    assert hints(sample_site / LAB_PAGE) == ["→ 8,192", "→ 524,288"]  # and the traced run recorded the state
    assert "note: its recorded state backs no figure: under the tracer it printed 'traced: True' where it printed 'traced: False'" in checked.stdout


@pytest.mark.cli
def test_no_state_skips_the_traced_run_and_a_later_check_records_it(sample_site: Path) -> None:
    assert run_infralens("check", "lab-01-sample", "--no-state", cwd=sample_site).returncode == 0
    assert run_infralens("build", cwd=sample_site).returncode == 0
    assert hints(sample_site / LAB_PAGE) == []
    again = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert again.returncode == 0 and "(stored result)" not in again.stdout  # its state was never recorded
    assert run_infralens("build", cwd=sample_site).returncode == 0
    assert hints(sample_site / LAB_PAGE) == ["→ 8,192", "→ 524,288"]


@pytest.mark.unit
@pytest.mark.parametrize(
    "fields, when, hint",
    [
        # A hot loop whose frame stopped being traced: its value as the call returned, the count a lower bound.
        ({"results": (Shown("steps", "16,777,216"),), "count": 38, "exact": False, "at_return": True, "call": 1, "calls": 1}, "(at return; ≥ 38 runs)", "→ 16,777,216 (at return)"),
        # The same in a function called twice, from its last call: which call it is from comes first.
        ({"results": (Shown("skipped", "496"),), "count": 460, "exact": False, "at_return": True, "call": 2, "calls": 2}, "(call 2 of 2; at return; ≥ 460 runs)", "→ 496 (at return)"),
        # ... and from an earlier call: the line's end says which.
        ({"results": (Shown("skipped", "31"),), "count": 460, "exact": False, "at_return": True, "call": 1, "calls": 2}, "(call 1 of 2; at return; ≥ 460 runs)", "→ 31 (call 1 of 2)"),
        # Module code: "at the end" of the script.
        ({"results": (Shown("total", "90"),), "count": 9, "exact": False, "at_return": True}, "(at the end; ≥ 9 runs)", "→ 90 (at the end)"),
        # A kept run that is not the last, of a lower-bound count.
        ({"results": (Shown("total", "0"),), "count": 39, "exact": False, "run": 3, "call": 1, "calls": 1}, "(run 3 of ≥ 39)", "→ 0 (run 3 of ≥ 39)"),
        # The last of every run: the value is final, and the line's end says nothing more.
        ({"results": (Shown("x", "1"),), "count": 5, "exact": True, "run": 5}, "(last of 5 runs)", "→ 1"),
        # A condition: the branch taken on the run shown, and how often each way.
        ({"kind": "branch", "branch": False, "count": 4, "exact": True, "run": 4, "taken": (1, 3)}, "(last of 4 runs; 1 true, 3 false)", "→ false"),
        ({"kind": "branch", "branch": True}, "", "→ true"),
        # A return line: the value returned, by call.
        ({"kind": "return", "returned": "18", "count": 10, "exact": False, "run": 10, "call": 10, "calls": 10}, "(last of 10 calls)", "↩ 18"),
        ({"kind": "return", "returned": "-1", "count": 1, "exact": True, "call": 3, "calls": 4}, "(call 3 of 4)", "↩ -1 (call 3 of 4)"),
    ],
)
def test_one_wording_says_which_run_a_value_is_from_and_never_a_bare_plus(fields: dict, when: str, hint: str) -> None:
    """`when` is the whole of it (the panel's); a line's end keeps only what sets its value apart."""
    line = LineState(number=1, **{"results": (), "inputs": (), "returned": None, "count": 1, "exact": True, **fields})
    assert line.when == when
    assert line.hint == hint
    assert "+" not in line.hint and "+" not in line.when


@pytest.mark.unit
def test_the_table_and_the_panel_data_carry_the_same_wording(sample) -> None:
    spans = traced_spans(sample.lab, sample.excerpt)
    state = {**STATE, "lines": {
        "9": {"count": 38, "exact": False, "calls": 1, "samples": [{"values": {"per_layer": "1"}, "n": 1, "call": 1}, {"values": {"per_layer": "8,192"}, "n": 38, "call": 1, "at": "return"}]},
        "10": {"count": 2, "exact": True, "calls": 1, "taken": [1, 1], "samples": [{"values": {}, "branch": True, "n": 1, "call": 1}, {"values": {}, "branch": False, "n": 2, "call": 1}]},
    }}
    page = page_state(sample.lab, sample.excerpt, run_with(state, spans), spans)
    assert page.lines[9].hint == "→ 8,192 (at return)" and page.lines[9].when == "(at return; ≥ 38 runs)"
    assert page.lines[10].hint == "→ false" and page.lines[10].when == "(last of 2 runs; 1 true, 1 false)"
    both = replace(sample.excerpt.key_blocks[0], last=10)
    assert block_table(page, both) is None  # one short value a line, each whole at its end already
    assert block_table(replace(page, lines={**page.lines, 9: replace(page.lines[9], results=(Shown("per_layer", "x" * 40),))}), both).rows == (
        (9, "out", "per_layer", "x" * 40), (10, "out", "condition", "false"))
    assert page.data["lines"]["9"]["s"][-1] == {"n": 38, "k": 1, "v": [["per_layer", "8,192"]], "at": 1}
    assert page.data["lines"]["10"]["t"] == [1, 1] and page.data["lines"]["10"]["s"][-1]["b"] is False
    assert recorded_text(json.dumps({"lines": {"3": {"samples": [{"values": {}, "return": "46"}]}}})) == "46"


def numbered(starter: Path, start: str) -> int:
    """The one line of a starter that starts (after its indent) with `start`."""
    found = [n for n, text in enumerate(starter.read_text().splitlines(), 1) if text.lstrip().startswith(start)]
    assert len(found) == 1, f"{starter}: {len(found)} lines start with {start!r}"
    return found[0]


def hint_of(page: Path, line: int) -> str:
    import html

    found = re.search(rf'id="?L{line}"?[ >].*?<i data-v="([^"]*)"></i>\n', page.read_text())
    assert found, f"line {line} of {page} shows no value"
    return html.unescape(found[1])


@pytest.mark.starters
def test_real_labs_show_the_final_values_of_their_hot_loops(tmp_path: Path) -> None:
    """Issue 27: lab 03's counter and lab 05's tile counts once read 9,728, 460 and 293, the values
    when tracing stopped; the page shows what they held when the call returned."""
    labs = ("lab-03-vectorization", "lab-05-flash-attention-cpu")
    checked = run_infralens("check", *labs, "--cache-dir", str(tmp_path), cwd=REPO)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    built = run_infralens("build", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path), cwd=REPO)
    assert built.returncode == 0, built.stderr
    vectorization = tmp_path / "out/labs/lab-03-vectorization/index.html"
    steps = hint_of(vectorization, numbered(REPO / "code/lab-03-vectorization/vectorization.py", "steps += inner"))
    assert steps == "→ 16,777,216 (at return)"
    flash = tmp_path / "out/labs/lab-05-flash-attention-cpu/index.html"
    starter = REPO / "code/lab-05-flash-attention-cpu/flash_attention_cpu.py"
    for start, value in (("skipped += 1", "496"), ("computed += 1", "528")):
        shown = hint_of(flash, numbered(starter, start))
        assert shown == f"→ {value} (at return)", shown  # from the last of its 2 calls
    assert not re.search(r'<i data-v="[^"]*[\d,]\+[ )]', vectorization.read_text() + flash.read_text())  # no bare "+" count


def with_figures(excerpt, *figures: tuple[str, str], meaning: tuple = ()):
    """The sample excerpt with its second key block (line 10, `total = ...`) given figures (name, expr) and meanings."""
    mark = Mark("labs/lab-01-sample.yml", 20, 5)
    specs = tuple(DerivedSpec(name=name, expr=Written(text, mark, True), meaning=f"{name} in words", mark=mark) for name, text in figures)
    block = replace(excerpt.key_blocks[1], derived=specs, meaning=tuple((name, words, mark) for name, words in meaning))
    return replace(excerpt, key_blocks=(excerpt.key_blocks[0], block))


@pytest.mark.unit
def test_derived_figures_are_computed_from_the_recorded_values_of_the_block_and_the_excerpt(sample) -> None:
    excerpt = with_figures(sample.excerpt, ("kib", "total / 1024"), ("layers", "kib * 1024 // per_layer"), meaning=(("total", "bytes a token adds"),))
    spans = traced_spans(sample.lab, excerpt)
    page = page_state(sample.lab, excerpt, run_with(STATE, spans), spans)
    table = block_table(page, excerpt.key_blocks[1])
    # 524,288 / 1024 from the block's own line; per_layer (8,192) from the excerpt's other line; kib from the figure before.
    assert [(f.name, f.formula) for f in table.figures] == [("kib", "total ÷ 1,024"), ("layers", "⌊kib × 1,024 ÷ per_layer⌋")]
    assert [f.value for f in table.figures] == ["512", "64"]
    assert table.means == {"total": "bytes a token adds"} and table.worded
    assert table.rows == ((10, "out", "total", "524,288"),)  # one short value, kept: the table carries its meaning
    assert page.data["m"] == [[10, 10, {"total": "bytes a token adds"}]]
    assert page.data["d"] == [[10, 10, [[f.name, f.formula, f.value, f.meaning] for f in table.figures]]]
    assert state.run_problems(sample.lab, {excerpt.starter: run_with(STATE, spans)}, excerpt) == {}


@pytest.mark.unit
@pytest.mark.parametrize(("expr", "why"), [
    ("total / (per_layer - per_layer)", "division by zero"),
    ("total * tokens", "`tokens` was not recorded by the checked run"),
    ("total * label", "`label` was recorded as \"'kv'\", not a number"),
])
def test_a_figure_the_run_cannot_compute_fails_check_and_says_why(sample, expr: str, why: str) -> None:
    excerpt = with_figures(sample.excerpt, ("bad", expr))
    spans = traced_spans(sample.lab, excerpt)
    labelled = {**STATE, "lines": {**STATE["lines"], "10": {"count": 1, "exact": True, "samples": [{"values": {"total": "524,288", "label": "'kv'"}, "n": 1}]}}}
    run = run_with(labelled, spans)
    figure, = block_table(page_state(sample.lab, excerpt, run, spans), excerpt.key_blocks[1]).figures
    assert (figure.value, figure.why) == ("", why)
    problems = state.run_problems(sample.lab, {excerpt.starter: run}, excerpt)[excerpt.starter]
    assert [str(p) for p in problems] == [f"labs/lab-01-sample.yml:20:5: error: derived 'bad': {why}"]
    # A run that recorded no state cannot be held to its figures: the page then shows none.
    assert state.run_problems(sample.lab, {excerpt.starter: replace(run, state="")}, excerpt) == {}


@pytest.mark.cli
def test_check_fails_a_derived_figure_its_run_cannot_compute_and_build_shows_the_figure_it_can(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    text = manifest.read_text()
    figure = "    meaning: {total: bytes a token adds}\n    derived:\n      - {name: kib, expr: total / 1024, meaning: the same in KiB}\n"
    manifest.write_text(text.replace("    note: Multiply by layers and the dtype width.\n", "    note: Multiply by layers and the dtype width.\n" + figure))
    assert run_infralens("check", "lab-01-sample", cwd=sample_site).returncode == 0
    assert run_infralens("build", cwd=sample_site).returncode == 0
    page = (sample_site / LAB_PAGE).read_text()
    assert '<tr class="kb-derived"><td><td>kib = total ÷ 1,024<td>512<td>the same in KiB' in page
    assert "<td>524,288<td>bytes a token adds" in page
    broken = figure.replace("total / 1024", "total / (total - total)")
    manifest.write_text(text.replace("    note: Multiply by layers and the dtype width.\n", "    note: Multiply by layers and the dtype width.\n" + broken))
    failed = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert failed.returncode == 1
    line = next(n for n, row in enumerate(manifest.read_text().splitlines(), 1) if "name: kib" in row)
    assert f"labs/lab-01-sample.yml:{line}:16: error: code/lab-01-sample/kv.py: derived 'kib': division by zero" in failed.stdout + failed.stderr


LOOPED = {
    "version": 1,
    "truncated": False,
    "lines": {
        "9": {"count": 6, "exact": True, "samples": [
            {"values": {"per_layer": str(n)}, "n": n, "call": 1, "t": 10 * n, "l": [n]} for n in (1, 2, 3)
        ] + [{"values": {"per_layer": "6"}, "n": 6, "call": 1, "t": 60, "at": "return"}]},
        "10": {"count": 1, "exact": True, "samples": [{"values": {"total": "524,288"}, "n": 1, "call": 1, "t": 70}]},
    },
    "calls": {},
    "loops": {
        "8": {"count": 6, "exact": False, "end": 9, "calls": 1, "samples": [
            {"values": {"layer": str(n - 1), "w": "dict of 6"}, "n": n, "call": 1, "t": 10 * n - 1, "l": [n]} for n in (1, 2, 3)
        ] + [{"values": {"layer": "5", "w": "Tensor (2,) float32 cpu 8 B"}, "n": 6, "call": 1, "t": 60, "at": "return"}]},
        "40": {"count": 9, "exact": True, "end": 42, "calls": 1, "samples": [{"values": {"i": "0"}, "n": 1, "t": 5, "l": [1]}]},
    },
}


@pytest.mark.unit
def test_the_panel_data_carries_when_each_run_started_and_the_loops_with_their_indices(sample) -> None:
    spans = traced_spans(sample.lab, sample.excerpt)
    page = page_state(sample.lab, sample.excerpt, run_with(LOOPED, spans), spans)
    runs = page.data["lines"]["9"]["s"]
    assert [(s["t"], s.get("l")) for s in runs] == [(10, [1]), (20, [2]), (30, [3]), (60, None)]
    assert runs[-1]["at"] == 1
    assert "l" not in page.data["lines"]["10"]["s"][0]  # outside the loop
    # The loop around the excerpt, with its body's last line, its count and each kept iteration;
    # only short, one-word indices (not a dict's or a tensor's summary), and the last one at return.
    assert [s["v"] for s in page.data["o"]["8"]["s"]] == [[["layer", "0"]], [["layer", "1"]], [["layer", "2"]], [["layer", "5"]]]
    assert page.data["o"]["8"]["s"][-1] == {"k": 1, "v": [["layer", "5"]], "t": 60, "at": 1}
    assert (page.data["o"]["8"]["e"], page.data["o"]["8"]["c"], page.data["o"]["8"]["x"], page.data["o"]["8"]["a"]) == (9, 6, False, 1)
    # A loop away from the excerpt, or with one iteration kept, has nothing to step through.
    assert set(page.data["o"]) == {"8"}
    # A state list that does not name a loop index hides it, as it hides any value.
    only = StateChoice(True, names=(("per_layer", Mark("labs/lab-01-sample.yml", 1, 1)),))
    hidden = replace(sample.lab, starters=(replace(sample.lab.starters[0], state=only), *sample.lab.starters[1:]))
    quiet = page_state(hidden, sample.excerpt, run_with(LOOPED, spans), spans)
    assert all(s["v"] == [] for s in quiet.data["o"]["8"]["s"])


@pytest.mark.unit
def test_without_loops_the_panel_data_stays_as_it_was(sample) -> None:
    spans = traced_spans(sample.lab, sample.excerpt)
    page = page_state(sample.lab, sample.excerpt, run_with(STATE, spans), spans)
    assert "o" not in page.data
    assert all("t" not in s and "l" not in s for s in page.data["lines"]["9"]["s"])


@pytest.mark.unit
def test_a_state_whose_traced_run_printed_otherwise_backs_no_figure() -> None:
    state = {"version": 1, "printed": False, "lines": {"3": {"samples": [{"values": {"a": "48"}}]}}}
    assert recorded_text(json.dumps(state)) == ""
    assert recorded_text(json.dumps({**state, "printed": True})) == "48"


@pytest.mark.cli
def test_a_figure_only_the_traced_run_computed_backs_nothing_and_check_says_why(sample_site: Path) -> None:
    """Under the tracer this starter binds 8,193 where its plain run binds 8,192: the traced run's
    output differs from the plain one's, so what it recorded backs no claim."""
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text().replace("    per_layer = 2 * kv_heads * head_dim", "    import sys\n    per_layer = 2 * kv_heads * head_dim + (sys.gettrace() is not None)"))
    manifest = sample_site / "labs/lab-01-sample.yml"
    text = manifest.read_text().replace("--layers, 32], expect: ['kv bytes per token: 524,288']", "--layers, 32], expect: ['kv bytes per token']")
    manifest.write_text(text.replace("note: K and V, so the **factor 2**.", "note: K and V, so the **factor 2**; this line yields 8,193."))
    checked = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "the page states 8,193 but no starter of the lab prints it or records it on a line" in checked.stderr
    assert "under the tracer it printed 'kv bytes per token: 524,352' where it printed 'kv bytes per token: 524,288'" in checked.stdout
    # The page still shows the values, and says under the code that the traced run printed otherwise.
    manifest.write_text(text)
    assert run_infralens("check", "lab-01-sample", cwd=sample_site).returncode == 0
    assert run_infralens("build", cwd=sample_site).returncode == 0
    page = (sample_site / LAB_PAGE).read_text()
    assert hints(sample_site / LAB_PAGE) == ["→ 8,193", "→ 524,352"]
    assert "; the traced run printed otherwise.</figcaption>" in page


PLANT = """
import atexit, json, os, sys
def plant(then_exit=False):
    # The state file's path, beside the spec the tracer's command line names (python TRACER STARTER SPEC).
    spec = open("/proc/self/cmdline", "rb").read().split(b"\\0")[3].decode()
    path = os.path.join(os.path.dirname(spec), "tmp", "state.json")
    if sys.gettrace() is None and not os.path.exists(os.path.dirname(path)):
        return  # the plain run
    planted = {"version": 1, "truncated": False, "lines": {"9": {"count": 1, "exact": True, "samples": [{"values": {"per_layer": "8,193"}, "n": 1}]}}, "calls": {}}
    with open(path, "w") as handle:
        json.dump(planted, handle)
    if then_exit:
        os._exit(0)
"""


@pytest.mark.cli
@pytest.mark.parametrize("how", ["an exit hook", "its own state file, then os._exit"])
def test_a_starter_cannot_plant_a_figure_in_its_recorded_state(sample_site: Path, how: str) -> None:
    """A state written after the tracer's (an atexit hook), or instead of it (the starter writes the
    file and ends at once), is not taken: the tracer writes last, and stamps with a token only it holds."""
    starter = sample_site / "code/lab-01-sample/kv.py"
    hook = "atexit.register(plant)\n" if how == "an exit hook" else ""
    text = starter.read_text().replace('if __name__ == "__main__":\n', PLANT + hook + 'if __name__ == "__main__":\n')
    starter.write_text(text + ("" if hook else "    plant(then_exit=True)\n"))  # after it printed what the plain run prints
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("note: K and V, so the **factor 2**.", "note: K and V, so the **factor 2**; this line yields 8,193."))
    checked = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "the page states 8,193 but no starter of the lab prints it or records it on a line" in checked.stderr
