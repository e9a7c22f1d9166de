"""Execution state in real Chromium: the values at line ends, the state panel opened from a line or
a note, stepping through a function's calls and a loop's iterations (by mouse and by keyboard),
axe-core with the panel open, and the per-note tables that read without JS.

The site is built from a private `check` of two labs (lab 01, whose values are single runs, and
lab 04, whose excerpt has functions called many times and loops), in a temporary folder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REPO, axe_violations, run_infralens, served, tabs_on
from playwright.sync_api import expect

from infralens.lab.state import HINT, brief

pytestmark = pytest.mark.browser

MEMORY = "lab-01-transformer-memory"
STEPPED = "lab-04-online-softmax"
"""A lab whose excerpt has a function called several times (its calls differ) and a loop."""
KV = "lab-07-kv-cache"
"""A lab whose excerpt holds attention inside a loop over layers, in a function called many times."""
KV_STARTER = "code/lab-07-kv-cache/kv_cache.py"
MEMORY_PAGE = f"labs/{MEMORY}/index.html"
STEPPED_PAGE = f"labs/{STEPPED}/index.html"


def line_of(starter: str, start: str) -> int:
    """The number of the one line of a starter that starts (after its indent) with `start`."""
    lines = (REPO / starter).read_text().splitlines()
    found = [n for n, text in enumerate(lines, 1) if text.lstrip().startswith(start)]
    assert len(found) == 1, f"{starter}: {len(found)} lines start with {start!r}"
    return found[0]


@pytest.fixture(scope="module")
def memory_starter(resolved) -> str:
    """The starter of lab 01's excerpt."""
    return resolved[MEMORY].excerpt.starter


@pytest.fixture(scope="module")
def kv_line(memory_starter: str) -> int:
    return line_of(memory_starter, "kv_bytes_per_token = 2 * layers")


@pytest.fixture(scope="module")
def exact_line(memory_starter: str) -> int:
    return line_of(memory_starter, "def exact_parameter_count")


# --- The site, checked and built in a temporary folder, served on 127.0.0.1 ----------------------


@pytest.fixture(scope="module")
def state_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Check the two labs into a private cache, then build the site from it; returns the output."""
    cache = tmp_path_factory.mktemp("state-cache")
    checked = run_infralens("check", MEMORY, STEPPED, KV, "--cache-dir", str(cache), cwd=REPO)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    out = cache / "output"
    built = run_infralens("build", "--out", str(out), "--cache-dir", str(cache), cwd=REPO)
    assert built.returncode == 0, built.stdout + built.stderr
    for lab in (MEMORY, STEPPED, KV):
        assert (out / "labs" / lab / "state.js").is_file(), f"the build wrote no state for {lab}"
    return out


@pytest.fixture(scope="module")
def state_url(state_site: Path):
    with served(state_site) as url:
        yield url


@pytest.fixture
def state_tab(chromium, state_url: str):
    """Open tabs on the built site: state_tab(js=True, scheme='light') → Tab, 1100 px wide unless
    told: the notes stacked under the code, where the note and state panels dock (at 1200 px and
    wider the notes stand beside the code; test_side_by_side_keeps_the_state_panel_under_the_code)."""
    with tabs_on(chromium, state_url) as open_one:
        yield lambda width=1100, **options: open_one(width=width, **options)


def recorded(site: Path, lab: str) -> dict:
    """The data of a lab's state.js: the JSON it hands to InfraLensState(...)."""
    text = (site / "labs" / lab / "state.js").read_text()
    opening, closing = "InfraLensState(", ");\n"
    assert text.startswith(opening) and text.endswith(closing)
    return json.loads(text[len(opening):-len(closing)])


# --- What the pages should show, from the recorded data -------------------------------------------


def of_count(entry: dict) -> str:
    """`60`, `≥ 4,097` (a lower bound): the total in a step label."""
    return ("" if entry["x"] else "≥ ") + f"{entry['c']:,}"


def call_items(sample: dict) -> list[str]:
    items = [f"⬇ input {name} = {value}" for name, value in sample["i"]]
    return items + ([f"↩ returned return = {sample['r']}"] if sample["r"] is not None else [])


def line_items(sample: dict) -> list[str]:
    items = [f"⬆ bound {name} = {value}" for name, value in sample["v"]]
    if "b" in sample:
        items.append(f"⑂ branch condition = {'true' if sample['b'] else 'false'}")
    return items + ([f"↩ returned return = {sample['r']}"] if "r" in sample else [])


def iteration_label(loop: dict, step: int) -> str:
    """The step bar at a loop's kept iteration: which one (or at return), its call, its indices."""
    sample = loop["s"][step]
    total = ("" if loop["x"] else "≥ ") + f"{loop['c']:,}"
    parts = [f"at return, after {total} iterations" if sample.get("at") else f"iteration {sample['l'][-1]:,} of {total}"]
    if sample["k"] and loop["a"] > 1:
        parts.append(f"call {sample['k']:,} of {loop['a']:,}")
    if sample["v"]:
        parts.append(", ".join(f"{name} = {value}" for name, value in sample["v"]))
    return " · ".join(parts)


def at_call(data: dict, first: int, last: int, call: int) -> list[list]:
    """Per line of first..last with state: ["Line N", its items] in the call numbered `call`."""
    shown = []
    for n in range(first, last + 1):
        entry, line = data["calls"].get(str(n)), data["lines"].get(str(n))
        if entry is None and line is None:
            continue
        items = []
        for kept, describe in ((entry, call_items), (line, line_items)):
            chosen = [s for s in (kept or {"s": []})["s"] if s["k"] == call]
            if chosen:
                items += describe(chosen[-1])
        shown.append([f"Line {n}", items or ["not run in this call"]])
    return shown


def block_table(data: dict, first: int, last: int) -> list[list[str]]:
    """The rows of a note's no-JS table: line, 'name' / '⬇ name' / '↩ return', value (last run).
    A method's receiver and a procedure's None are left out."""
    rows = []
    for n in range(first, last + 1):
        if str(n) in data["calls"]:
            sample = data["calls"][str(n)]["s"][-1]
            rows += [[str(n), f"⬇ {name}", value] for name, value in sample["i"] if name not in ("self", "cls")]
            if sample["r"] not in (None, "None"):
                rows.append([str(n), "↩ return", sample["r"]])
        elif str(n) in data["lines"]:
            sample = data["lines"][str(n)]["s"][-1]
            rows += [[str(n), name, value] for name, value in sample["v"]]
            if "b" in sample:
                rows.append([str(n), "condition", "true" if sample["b"] else "false"])
            if "r" in sample and not any(row[1] == "↩ return" and row[2] == brief(sample["r"]) for row in rows):  # not the def's again
                rows.append([str(n), "↩ return", sample["r"]])
    rows = [[number, name, brief(value)] for number, name, value in rows]  # as a line's end: tensors by shape
    means = next((m for a, b, m in data.get("m", ()) if (a, b) == (first, last)), {})
    figures = [["", f"{name} = {formula}", value, words] for a, b, shown in data.get("d", ()) if (a, b) == (first, last) for name, formula, value, words in shown]
    if not worded(data, first, last):
        return rows + [figure[:3] for figure in figures]
    return [[*row, means.get(row[1].removeprefix("⬇ ").removeprefix("↩ "), "")] for row in rows] + figures


def worded(data: dict, first: int, last: int) -> bool:
    """Whether a note's table has a Meaning column: its manifest says what a value or a figure means."""
    means = any((a, b) == (first, last) for a, b, _ in data.get("m", ()))
    return means or any((a, b) == (first, last) and any(figure[3] for figure in shown) for a, b, shown in data.get("d", ()))


WHEN = re.compile(r" \((?:last of|run|call|at return|at the end)[^()]*\)$")
"""The wording after a value in a table cell (lab/state.py's `when`), which block_table leaves out."""


# --- Reading the page ------------------------------------------------------------------------------


def hint(page, line: int) -> str:
    """The computed `::after` content of a line's value hint (a CSS string, quotes included)."""
    return page.eval_on_selector(f"#L{line} i[data-v]", "el => getComputedStyle(el, '::after').content")


def hint_width(page, line: int) -> float:
    return page.eval_on_selector(f"#L{line} i[data-v]", "el => el.getBoundingClientRect().width")


def panel_lines(page) -> list[list]:
    """The state panel as shown: per .st-line, ["Line N", [the text of each value item]]."""
    return page.eval_on_selector_all(
        ".state-panel .st-line",
        "boxes => boxes.map(box => [box.querySelector('.st-title a').textContent,"
        " [...box.querySelectorAll('.st-values li')].map(li => li.textContent)])",
    )


def selected(page) -> list[str]:
    return page.eval_on_selector_all(".excerpt code > span.sel", "rows => rows.map(r => r.id)")


def stepped_call(data: dict, resolved: dict):
    """The first key block of the stepped lab whose lines hold a function called several times,
    with two kept calls that show differently; returns (block, its def line, the call entry)."""
    found = [(block, n, data["calls"][str(n)]) for block in resolved[STEPPED].excerpt.key_blocks for n in range(block.first, block.last + 1)
             if len(data["calls"].get(str(n), {"s": ()})["s"]) > 1]
    if not found:
        pytest.fail(f"no key block of {STEPPED} covers a function called several times")
    block, n, entry = max(found, key=lambda one: len(one[2]["s"]))  # the most kept calls, the first of those
    calls = [s["k"] for s in entry["s"]]
    assert at_call(data, block.first, block.last, calls[0]) != at_call(data, block.first, block.last, calls[1])
    return block, n, entry


def loop_line(data: dict) -> tuple[int, dict]:
    """The first line of the stepped lab run several times within one call (a loop), whose first
    two runs bound different values."""
    for key, entry in data["lines"].items():
        calls = {s["k"] for s in entry["s"]}
        if key not in data["calls"] and len(entry["s"]) > 1 and len(calls) == 1 and entry["s"][0]["v"] != entry["s"][1]["v"]:
            return int(key), entry
    pytest.fail(f"no line of {STEPPED} ran several times in one call")


# --- The tests ---------------------------------------------------------------------------------


def test_recorded_values_show_at_the_end_of_their_lines_on_the_lab_page_and_the_source_view(state_tab, state_site: Path, memory_starter, kv_line, exact_line) -> None:
    data = recorded(state_site, MEMORY)
    assert data["lines"][str(kv_line)]["s"][-1]["v"] == [["kv_bytes_per_token", "524,288"]]
    assert data["calls"][str(exact_line)]["s"][-1]["r"] == "6,738,415,616"
    tab = state_tab()
    for path in (MEMORY_PAGE, f"{memory_starter}.html"):
        page = tab.goto(path)
        assert hint(page, kv_line) == '"→ 524,288"'
        assert hint(page, exact_line) == '"↩ 6,738,415,616"'
        assert hint_width(page, kv_line) > 0 and hint_width(page, exact_line) > 0
        # Seen, never copied: the hint is CSS content of an empty element.
        assert page.locator(f"#L{kv_line}").text_content().rstrip("\n").endswith("config.precision_bytes")
    assert tab.errors == []


def test_clicking_a_line_number_opens_the_state_panel_with_what_the_line_bound(state_tab, kv_line) -> None:
    tab = state_tab()
    page = tab.goto(MEMORY_PAGE)
    # An excerpt's numbers are CSS counters in the row's left padding: a click there selects the line
    # (the first click also loads the reader, and is replayed once it has).
    page.locator(f"#L{kv_line}").click(position={"x": 8, "y": 5})
    panel = page.locator(".state-panel")
    expect(panel).to_be_visible()
    assert panel.get_attribute("aria-label") == "Execution state"
    assert page.evaluate("window.InfraLensReader") is True
    assert selected(page) == [f"L{kv_line}"] and page.evaluate("location.hash") == f"#L{kv_line}"
    assert panel_lines(page) == [[f"Line {kv_line}", ["⬆ bound kv_bytes_per_token = 524,288"]]]
    assert panel.locator(".st-title a").get_attribute("href") == f"#L{kv_line}"
    assert "kv_bytes_per_token = 2 * layers" in panel.locator(".st-title code").text_content()
    assert panel.locator(".st-step").count() == 0  # one run: nothing to step through
    assert page.locator(".kb-panel").is_hidden()  # lines, not a note, are selected
    assert tab.errors == []


def test_selecting_a_note_shows_its_functions_input_and_return(state_tab, state_site: Path, exact_line) -> None:
    data = recorded(state_site, MEMORY)
    config = data["calls"][str(exact_line)]["s"][-1]["i"]
    assert [name for name, _ in config] == ["config"]
    tab = state_tab()
    page = tab.goto(MEMORY_PAGE)
    page.click("#kb-exact_parameter_count .kb-link")
    panel = page.locator(".state-panel")
    expect(panel).to_be_visible()
    expect(page.locator(".kb-panel")).to_be_visible()
    # Of the note's lines, the def line holds the call's input and its return, and the return line what it returned.
    shown = panel_lines(page)
    assert shown[0] == [f"Line {exact_line}", [f"⬇ input config = {config[0][1]}", "↩ returned return = 6,738,415,616"]]
    assert shown[1:] == [[f"Line {n}", ["↩ returned return = 6,738,415,616"]] for n, entry in data["lines"].items() if entry["s"][-1].get("r") == "6,738,415,616"]
    returned = panel.locator(".st-values li", has_text="↩")
    assert returned.count() == len(shown)
    assert returned.first.locator(".st-value").text_content() == "6,738,415,616"
    assert panel.locator(".st-step").count() == 0
    assert tab.errors == []


def test_a_note_with_meanings_and_derived_figures_shows_them_beside_its_values(state_tab, state_site: Path, resolved) -> None:
    data = recorded(state_site, MEMORY)
    block = next(b for b in resolved[MEMORY].excerpt.key_blocks if b.derived)
    means = {name: words for name, words, _ in block.meaning}
    assert means and [first for first, _, _ in data["m"]].count(block.first) == 1
    (name, formula, value, words), = next(shown for first, last, shown in data["d"] if (first, last) == (block.first, block.last))
    assert value == "16"  # 16 B/param: mixed-precision Adam's recipe, the run's own totals divided by its count
    tab = state_tab()
    page = tab.goto(MEMORY_PAGE)
    page.click(f"#kb-{block.slug} .kb-link")
    panel = page.locator(".state-panel")
    expect(panel).to_be_visible()
    items = [item for _, shown in panel_lines(page) for item in shown]
    for bound, said in means.items():
        assert any(item.startswith(f"⬆ bound {bound} = ") and item.endswith(f" — {said}") for item in items), (bound, items)
    derived = panel.locator(".st-derived")
    expect(derived.locator(".st-title")).to_have_text("Derived")
    assert derived.locator("li").all_text_contents() == [f"= derived {name} = {formula} = {value} — {words}"]
    # Without JS, the note's table says the same.
    plain = state_tab(js=False).goto(MEMORY_PAGE)
    rows = plain.locator(f"#kb-{block.slug} table.kb-state tr").evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))")
    assert rows[0] == ["Line", "Name", "Value", "Meaning"]
    assert rows[-1] == ["", f"{name} = {formula}", value, words]
    assert tab.errors == []


def test_stepping_through_the_calls_of_a_function_and_the_iterations_of_a_loop(state_tab, state_site: Path, resolved) -> None:
    data = recorded(state_site, STEPPED)
    block, definition, entry = stepped_call(data, resolved)
    calls = [s["k"] for s in entry["s"]]
    tab = state_tab()
    page = tab.goto(STEPPED_PAGE)
    page.click(f"#kb-{block.slug} .kb-link")
    at, prev, next_ = page.locator(".st-at"), page.locator(".st-prev"), page.locator(".st-next")
    expect(at).to_have_text(f"call 1 of {of_count(entry)}")
    assert prev.get_attribute("aria-label") == "Previous call" and next_.get_attribute("aria-label") == "Next call"
    assert prev.is_disabled() and next_.is_enabled()
    seen = [at.text_content()]
    shown = [panel_lines(page)]
    while next_.is_enabled():
        next_.click()
        seen.append(at.text_content())
        shown.append(panel_lines(page))
    # Every kept call, by its real number, and what each one held.
    assert seen == [f"call {k:,} of {of_count(entry)}" for k in calls]
    assert shown == [at_call(data, block.first, block.last, k) for k in calls]
    assert shown[0][0][0] == f"Line {definition}" and shown[0] != shown[1]
    assert next_.is_disabled() and prev.is_enabled()
    if len(calls) < entry["c"]:
        assert page.locator(".st-kept").text_content() == f"({len(calls)} of {of_count(entry)} kept)"
    prev.click()
    assert at.text_content() == seen[-2] and panel_lines(page) == shown[-2]
    assert tab.errors == []

    # A loop, from a deep link to its line: one line run many times within one call steps by iteration
    # of its loop, the bar naming the loop index.
    line, runs = loop_line(data)
    header = max((int(h) for h, loop in data["o"].items() if int(h) <= line <= loop["e"]), default=None)
    assert header is not None, f"line {line} of {STEPPED} is in no loop with iterations to step through"
    loop = data["o"][str(header)]
    tab = state_tab()
    page = tab.goto(f"{STEPPED_PAGE}#L{line}")
    at = page.locator(".st-at")
    expect(at).to_have_text(iteration_label(loop, 0))
    assert " · i = 0" in at.text_content()
    assert selected(page) == [f"L{line}"]
    assert page.locator(".st-prev").is_disabled()
    assert page.locator(".st-next").get_attribute("aria-label") == "Next iteration"
    assert panel_lines(page) == [[f"Line {line}", line_items(runs["s"][0])]]
    page.click(".st-next")
    assert at.text_content() == iteration_label(loop, 1)
    assert at.text_content().startswith(f"iteration 2 of {of_count(loop)}")
    assert panel_lines(page) == [[f"Line {line}", line_items(runs["s"][1])]]
    assert page.locator(".st-prev").is_enabled()
    assert tab.errors == []


SHAPE = re.compile(r"= Tensor \(([\d, ]+)\)")


def shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    """The tensors a panel line lists, by name: `⬆ bound k = Tensor (4, 16, 32) …` → {'k': (4, 16, 32)}."""
    found = {}
    for item in items:
        match = SHAPE.search(item)
        if match:
            found[item.split(" = ")[0].split()[-1]] = tuple(int(d) for d in match[1].replace(" ", "").split(",") if d)
    return found


def absent(data: dict, panel: dict, n: int, moment: dict, entry: dict) -> str:
    """Why a line shows nothing at a loop's step: the condition whose body holds it was false then,
    the step is the values at return (only each name's last binding kept), or its run was not kept."""
    for head, (first, last) in data.get("g", {}).items():
        if first <= n <= last and panel.get(f"Line {head}") == ["⑂ branch condition = false"]:
            return f"did not run in this iteration: the condition on line {head} was false"
    if moment.get("at"):
        return "not known at return: tracing had stopped, and only what each name held when the call returned was kept"
    return "not kept for this iteration" if entry["c"] > len(entry["s"]) or not entry["x"] else "did not run in this iteration"


def test_stepping_through_the_layer_loop_shows_q_k_v_of_one_moment(state_tab, state_site: Path) -> None:
    data = recorded(state_site, KV)
    first, last = line_of(KV_STARTER, "q = project(h, \"q_proj\")"), line_of(KV_STARTER, "scores = (q @ k.transpose(1, 2))")
    header = line_of(KV_STARTER, "for layer, w in enumerate(self.layers):")
    loop = data["o"][str(header)]
    assert first > header and last <= loop["e"] and len(loop["s"]) >= 3
    lines = {name: line_of(KV_STARTER, start) for name, start in (
        ("q", "q = project(h"), ("k", "k = project(h"), ("v", "v = project(h"), ("cached", "k, v = cache.append(layer, k, v)"),
        ("k heads", "k = k.repeat_interleave"), ("v heads", "v = v.repeat_interleave"), ("scores", "scores = (q @ k"),
    )}
    tab = state_tab()
    page = tab.goto(f"labs/{KV}/index.html#L{first}-L{last}")
    at, next_ = page.locator(".st-at"), page.locator(".st-next")
    expect(at).to_have_text(iteration_label(loop, 0))
    seen, shown = [at.text_content()], [dict(panel_lines(page))]
    while next_.is_enabled():
        next_.click()
        seen.append(at.text_content())
        shown.append(dict(panel_lines(page)))
    # Every kept iteration, in order, named with the loop index: the first, the kept ones, the true last.
    assert seen == [iteration_label(loop, step) for step in range(len(loop["s"]))]
    assert [label.split(" · ")[-1] for label in seen[:2]] == ["layer = 0", "layer = 1"]
    for step, panel in enumerate(shown):
        moment = loop["s"][step]
        tensors = {name: shapes(panel[f"Line {n}"]) for name, n in lines.items()}
        q, k, v, scores = tensors["q"].get("q"), tensors["k"].get("k"), tensors["v"].get("v"), tensors["scores"].get("scores")
        # q, k and v of one iteration: the same new rows; scores, those rows against every key so far.
        assert q is not None and scores is not None, (step, panel)
        assert scores[:2] == q[:2], (step, q, scores)
        for shape in (k, v):
            assert shape is None or shape[1:] == q[1:], (step, q, shape)
        cached, k_heads, v_heads = tensors["cached"], tensors["k heads"].get("k"), tensors["v heads"].get("v")
        assert k_heads == v_heads and k_heads[1] == scores[2], (step, k_heads, v_heads, scores)
        if cached:  # the cache this step appended to holds as many tokens as the keys scored
            assert cached["k"] == cached["v"] and cached["k"][1] == scores[2], (step, cached, scores)
        # Each line's values are its run of this very iteration, as recorded.
        for name, n in lines.items():
            entry = data["lines"][str(n)]
            runs = [s for s in entry["s"] if (s.get("l") == moment.get("l") if "l" in moment else s["k"] == moment["k"] and s.get("at"))]
            if runs:
                assert panel[f"Line {n}"] == line_items(runs[-1]), (step, name)
            else:
                assert panel[f"Line {n}"] == [absent(data, panel, n, moment, entry)], (step, name)
    # Some step shows the cache's line left out by its false condition, and says so.
    condition = line_of(KV_STARTER, "if cache is not None:")
    assert data["g"][str(condition)] == [lines["cached"], lines["cached"]]
    assert any(panel[f"Line {lines['cached']}"] == [f"did not run in this iteration: the condition on line {condition} was false"] for panel in shown)
    # The last step is the loop's true last iteration, with q as that iteration left it.
    last_q = data["lines"][str(lines["q"])]["s"][-1]
    assert shown[-1][f"Line {lines['q']}"] == line_items(last_q)
    assert last_q["t"] >= loop["s"][-1]["t"] and ("l" not in last_q or last_q["l"] == loop["s"][-1]["l"])
    assert tab.errors == []


def test_a_keyboard_alone_selects_a_note_and_steps_through_its_calls(state_tab, state_site: Path, resolved) -> None:
    data = recorded(state_site, STEPPED)
    block, _, entry = stepped_call(data, resolved)
    assert len(entry["s"]) >= 4  # three steps forward from the first, still one to spare
    label = [f"call {s['k']:,} of {of_count(entry)}" for s in entry["s"]]
    tab = state_tab()
    page = tab.goto(STEPPED_PAGE)
    page.focus(f"#kb-{block.slug} .kb-link")
    page.keyboard.press("Enter")
    at = page.locator(".st-at")
    expect(at).to_have_text(label[0])
    assert page.locator(f"#kb-{block.slug}").get_attribute("class") == "key-block active"
    focused = "document.activeElement.matches('.state-panel .st-next')"
    # The panel is docked under the code, before the notes: back up to its "next" button.
    presses = 0
    while not page.evaluate(focused):
        assert presses < 100, "Shift+Tab never reached the state panel's next button"
        page.keyboard.press("Shift+Tab")
        presses += 1
    page.keyboard.press("Enter")
    assert at.text_content() == label[1]
    assert page.evaluate(focused)  # the redrawn button keeps the focus
    page.keyboard.press("Space")
    assert at.text_content() == label[2]
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.matches('.state-panel .st-prev')")
    page.keyboard.press("Enter")
    assert at.text_content() == label[1]
    # At either end the pressed button is disabled: the focus moves to the other one, not to <body>.
    page.keyboard.press("Enter")
    assert at.text_content() == label[0]
    assert page.evaluate("document.activeElement.matches('.state-panel .st-next')")
    for step in label[1:]:
        page.keyboard.press("Enter")
        assert at.text_content() == step
    assert page.evaluate("document.activeElement.matches('.state-panel .st-prev')")
    assert page.locator(".st-live").text_content() == label[-1]  # announced from a region that stays
    assert tab.errors == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("lab", [MEMORY, STEPPED])
def test_axe_core_finds_no_violations_with_the_state_panel_open(state_tab, state_site: Path, lab: str, scheme: str, resolved) -> None:
    data = recorded(state_site, lab)
    block = stepped_call(data, resolved)[0] if lab == STEPPED else next(b for b in resolved[lab].excerpt.key_blocks if b.slug == "exact_parameter_count")
    tab = state_tab(scheme=scheme)
    page = tab.goto(f"labs/{lab}/index.html")
    page.click(f"#kb-{block.slug} .kb-link")
    expect(page.locator(".state-panel")).to_be_visible()
    if lab == STEPPED:  # with the step bar past its first call
        page.click(".st-next")
        expect(page.locator(".st-prev")).to_be_enabled()
    assert axe_violations(page) == []
    assert tab.errors == []


def test_without_javascript_each_note_shows_its_state_table_and_the_lines_their_values(state_tab, state_site: Path, resolved, kv_line, exact_line) -> None:
    data = recorded(state_site, MEMORY)
    tab = state_tab(js=False)
    page = tab.goto(MEMORY_PAGE)
    with_state = 0
    for block in resolved[MEMORY].excerpt.key_blocks:
        expected = block_table(data, block.first, block.last)
        table = page.locator(f"#kb-{block.slug} table.kb-state")
        explained = worded(data, block.first, block.last) or any(not row[0] for row in expected)  # meanings or figures
        whole = expected and len({row[0] for row in expected}) == len(expected) and all(len(row[2]) <= HINT for row in expected) and not explained
        if not expected or whole:  # nothing, or each line's one value whole at its end already
            assert table.count() == 0, block.slug
            continue
        with_state += 1
        assert table.is_visible(), block.slug
        assert table.locator("caption").text_content() == "Values"
        rows = table.locator("tr").evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))")
        rows = [[WHEN.sub("", cell) for cell in row] for row in rows]
        assert rows == [["Line", "Name", "Value", *(["Meaning"] if worded(data, block.first, block.last) else [])], *expected], block.slug
    assert with_state >= 1
    assert "↩ return\t6,738,415,616" in page.locator("#kb-exact_parameter_count table.kb-state").inner_text()
    # Every line with state ends with its value, visible.
    returns_only = {key for key, entry in data["lines"].items() if "r" in entry["s"][-1] and not entry["s"][-1]["v"]}
    for key in [*data["lines"], *data["calls"]]:
        if key in returns_only and page.locator(f"#L{key} i[data-v]").count() == 0:
            continue  # a `return` line whose function's `def` line shows the same return
        assert hint(page, int(key)) not in ("none", "normal", '""'), key
        assert hint_width(page, int(key)) > 0, key
    assert hint(page, kv_line) == '"→ 524,288"'
    assert hint(page, exact_line) == '"↩ 6,738,415,616"'
    assert page.locator(".state-panel").count() == 0
    assert tab.errors == [] and tab.external == []
