"""The reader's view of the code, in real Chromium, on the real site with the values of checked runs:
at 1280 and 1440 px no more than 5% of an excerpt's lines run past the visible edge and no excerpt
is taller than 1.5x its lines; after following any note's link at 375 and 768 px the first selected
line is in sight and nothing covers it; nothing moves after load; in print nothing fixed or sticky
stands over the code.

The site is built from a private `check` of the labs whose pages carry the longest values (their
lines show what the run recorded), in a temporary folder; the other labs are built without runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, lab_ids, run_infralens, served, tabs_on

pytestmark = pytest.mark.browser

CHECKED = ["lab-01-transformer-memory", "lab-02-roofline", "lab-03-vectorization", "lab-05-flash-attention-cpu", "lab-07-kv-cache"]
NOTED = ["lab-01-transformer-memory", "lab-02-roofline", "lab-05-flash-attention-cpu", "lab-07-kv-cache"]


@pytest.fixture(scope="module")
def valued_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Check CHECKED into a private cache, then build the whole site from it; returns the output."""
    cache = tmp_path_factory.mktemp("codeview-cache")
    checked = run_infralens("check", *CHECKED, "--cache-dir", str(cache), cwd=REPO, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    out = cache / "output"
    built = run_infralens("build", "--out", str(out), "--cache-dir", str(cache), cwd=REPO)
    assert built.returncode == 0, built.stdout + built.stderr
    return out


@pytest.fixture
def tab(chromium, valued_site: Path):
    """Open tabs on the built site: tab(width, height=900, js=True, scheme='light') → Tab."""
    with served(valued_site) as url, tabs_on(chromium, url) as open_one:
        yield open_one


# Each row of the excerpt: whether what it shows (its text and its value) ends past the right edge
# of its listing's visible box, and the listings' height over their lines' (one line-height each).
MEASURE = """() => {
  const pres = [...document.querySelectorAll('.excerpt pre.code')];
  let rows = 0, cut = 0, height = 0, lines = 0;
  for (const pre of pres) {
    const edge = pre.getBoundingClientRect().right - parseFloat(getComputedStyle(pre).borderRightWidth);
    const lh = parseFloat(getComputedStyle(pre).lineHeight);
    for (const row of pre.querySelectorAll('code > span')) {
      const range = document.createRange();
      range.selectNodeContents(row);
      const right = Math.max(0, ...[...range.getClientRects()].map((r) => r.right));
      rows += 1;
      if (right > edge + 0.5) cut += 1;
    }
    height += pre.getBoundingClientRect().height - parseFloat(getComputedStyle(pre).paddingTop) - parseFloat(getComputedStyle(pre).paddingBottom);
    lines += pre.querySelectorAll('code > span').length * lh;
  }
  return {rows, cut, stretch: height / lines, values: document.querySelectorAll('.excerpt i[data-v]').length};
}"""


@pytest.mark.parametrize("width", [1280, 1440])
@pytest.mark.parametrize("lab_id", lab_ids())
def test_at_wide_widths_the_code_is_neither_cut_nor_stretched(tab, lab_id: str, width: int) -> None:
    page = tab(width=width).goto(f"labs/{lab_id}/index.html")
    found = page.evaluate(MEASURE)
    if lab_id in CHECKED:
        assert found["values"] > 0, "the checked run's values are on the lines"
    assert found["cut"] <= 0.05 * found["rows"], found
    assert found["stretch"] <= 1.5, found


# The first selected row, and what stands at a point in its code (past the gutter) and at its end.
SIGHT = """() => {
  const row = document.querySelector('.excerpt code > span.sel'), box = row.getBoundingClientRect();
  const pre = row.closest('pre').getBoundingClientRect();
  const y = box.top + Math.min(box.height, 20) / 2;
  const mine = (x) => { const hit = document.elementFromPoint(x, y); return !!hit && row.contains(hit) || hit === row; };
  return {top: box.top, bottom: box.top + Math.min(box.height, 20), height: innerHeight, start: mine(pre.left + 90), end: mine(Math.min(pre.right, innerWidth) - 20)};
}"""


@pytest.mark.parametrize("width", [375, 768])
@pytest.mark.parametrize("lab_id", NOTED)
def test_after_every_note_link_the_first_selected_line_is_in_sight_and_uncovered(tab, lab_id: str, width: int) -> None:
    opened = tab(width=width, height=740)
    page = opened.goto(f"labs/{lab_id}/index.html")
    notes = page.eval_on_selector_all(".key-block", "notes => notes.map((n) => n.id)")
    assert notes
    for note in notes:
        page.evaluate("scrollTo(0, 0)")
        page.click(f"#{note} .kb-lines a")
        page.wait_for_function("window.InfraLensReader === true")
        page.wait_for_function("document.querySelector('.excerpt code > span.sel')")
        page.wait_for_timeout(250)  # the state panel has loaded and filled the dock
        seen = page.evaluate(SIGHT)
        assert 0 <= seen["top"] and seen["bottom"] <= seen["height"], (note, seen)
        assert seen["start"] and seen["end"], (note, seen)  # not under the dock, the note or the state
    assert opened.errors == []


CLS = """window.__shift = 0; new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) if (!entry.hadRecentInput) window.__shift += entry.value;
}).observe({type: 'layout-shift', buffered: true});"""


@pytest.mark.parametrize("width", [375, 768, 1280, 1440])
@pytest.mark.parametrize("path", ["index.html", "labs/lab-01-transformer-memory/index.html", "labs/lab-05-flash-attention-cpu/index.html",
                                  "labs/lab-07-kv-cache/index.html", "code/lab-05-flash-attention-cpu/flash_attention_cpu.py.html"])
def test_nothing_moves_after_load(tab, path: str, width: int) -> None:
    opened = tab(width=width)
    opened.context.add_init_script(CLS)
    page = opened.goto(path)
    page.wait_for_load_state("load")
    page.wait_for_timeout(800)
    assert page.evaluate("window.__shift") <= 0.1


@pytest.mark.parametrize("lab_id", ["lab-05-flash-attention-cpu", "lab-02-roofline"])
def test_in_print_nothing_stands_over_the_code_and_tables_fit(tab, lab_id: str) -> None:
    page = tab(width=1280).goto(f"labs/{lab_id}/index.html#kb-{'causal-skip' if lab_id.startswith('lab-05') else 'add_cost'}")
    page.wait_for_function("document.querySelector('.excerpt code > span.sel')")
    page.emulate_media(media="print")
    over = page.evaluate("""() => {
      const code = [...document.querySelectorAll('pre.code')].map((p) => p.getBoundingClientRect());
      return [...document.querySelectorAll('body *')].filter((node) => {
        const style = getComputedStyle(node);
        if (!['fixed', 'sticky', 'absolute'].includes(style.position) || style.display === 'none' || node.closest('pre.code')) return false;
        const box = node.getBoundingClientRect();
        return box.width > 0 && box.height > 0 && code.some((c) => box.left < c.right && c.left < box.right && box.top < c.bottom && c.top < box.bottom);
      }).map((node) => node.className || node.tagName);
    }""")
    assert over == []
    clipped = page.evaluate("""() => [...document.querySelectorAll('.calc table')].filter((table) =>
      table.getBoundingClientRect().right > document.querySelector('.content').getBoundingClientRect().right + 1).length""")
    assert clipped == 0


def selected(page) -> list[str]:
    return page.eval_on_selector_all(".excerpt code > span.sel", "rows => rows.map((r) => r.id)")


def test_the_keyboard_moves_and_widens_a_selection_on_the_code_and_esc_closes_it(tab) -> None:
    opened = tab(width=1100)
    page = opened.goto("labs/lab-01-transformer-memory/index.html")
    first = page.eval_on_selector(".excerpt code > span", "row => row.id")
    page.focus(".excerpt pre.code")
    page.wait_for_function("window.InfraLensReader === true")
    page.keyboard.press("ArrowDown")
    assert selected(page) == [first]
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Shift+ArrowDown")
    rows = page.eval_on_selector_all(".excerpt code > span", "rows => rows.map((r) => r.id)")
    assert selected(page) == rows[1:3]
    assert page.evaluate("location.hash") == f"#{rows[1]}-{rows[2]}"
    page.keyboard.press("Escape")
    assert selected(page) == []
    assert opened.errors == []


def test_a_note_chosen_from_the_keyboard_takes_the_focus_into_its_panel_and_arrows_step(tab) -> None:
    page = tab(width=1100).goto("labs/lab-05-flash-attention-cpu/index.html")
    notes = page.eval_on_selector_all(".key-block", "notes => notes.map((n) => n.id)")
    page.focus(f"#{notes[0]} .kb-link")
    page.keyboard.press("Enter")
    page.wait_for_function("document.activeElement && document.activeElement.closest('.dock')")
    moment = "() => [document.querySelector('.key-block.active').id, (document.querySelector('.dock .st-at') || {}).textContent]"
    before = page.evaluate(moment)
    page.keyboard.press("ArrowRight")  # the state's next run, or the next note where there is none
    page.wait_for_function(f"JSON.stringify(({moment})()) !== {json.dumps(json.dumps(before))}")
    page.keyboard.press("Escape")
    assert selected(page) == []
    assert page.evaluate("document.activeElement.classList.contains('kb-link')")


def test_on_a_touch_screen_two_taps_on_line_numbers_select_a_range(chromium, valued_site: Path) -> None:
    with served(valued_site) as url:
        context = chromium.new_context(viewport={"width": 375, "height": 740}, has_touch=True, is_mobile=True)
        try:
            page = context.new_page()
            page.goto(url + "labs/lab-01-transformer-memory/index.html")
            rows = page.eval_on_selector_all(".excerpt code > span", "rows => rows.map((r) => r.id)")
            page.tap(f"#{rows[2]}", position={"x": 12, "y": 6})  # on its number
            page.wait_for_function("window.InfraLensReader === true")
            page.wait_for_function(f"document.getElementById('{rows[2]}').classList.contains('sel')")
            page.tap(f"#{rows[5]}", position={"x": 12, "y": 6})
            assert selected(page) == rows[2:6]
        finally:
            context.close()


def test_lines_the_excerpt_does_not_show_are_offered_in_the_whole_file(tab) -> None:
    opened = tab(width=1100)
    page = opened.goto("labs/lab-01-transformer-memory/index.html#L3-L5")
    away = page.locator(".kb-away")
    away.wait_for()
    assert "Lines 3–5 are not in this excerpt" in away.inner_text()
    href = away.locator("a").get_attribute("href")
    assert href.endswith("code/lab-01-transformer-memory/memory_accounting.py.html#L3-L5")
    away.locator("a").click()
    page.wait_for_function("document.querySelectorAll('pre.code > code > span.sel').length === 3")
    assert opened.errors == []


# What a row shows at its end: the recorded value, drawn by CSS from its data-v.
SHOWN = """(start) => {
  const rows = [...document.querySelectorAll('.excerpt code > span')].filter((row) => row.textContent.trim().startsWith(start));
  return rows.map((row) => { const hint = row.querySelector('i[data-v]'); return hint ? getComputedStyle(hint, '::after').content : null; });
}"""


@pytest.mark.parametrize(("lab_id", "start", "value"), [
    ("lab-03-vectorization", "steps += inner", "16,777,216"),
    ("lab-05-flash-attention-cpu", "skipped += 1", "496"),
    ("lab-05-flash-attention-cpu", "computed += 1", "528"),
])
def test_a_loop_counter_shows_its_final_value_not_the_last_one_traced(tab, lab_id: str, start: str, value: str) -> None:
    page = tab(width=1280).goto(f"labs/{lab_id}/index.html")
    [shown] = page.evaluate(SHOWN, start)
    assert shown is not None and shown.startswith(f'"→ {value} ('), shown
    assert "+" not in shown  # a count the tracer stopped at says so in words (≥), never a bare "+"
