"""Notes beside the code, in real Chromium: at 1280 px the notes stand in a column to the right of
the code, in order and never overlapping, and the code stays in the window in a pane of its own
while they scroll past: the note at the reading line is current and the pane brings its lines into
view. Selecting a note keeps its lines in view and shows their state in the note. At 375 and 1100 px,
with JS off and in print, the notes are stacked under the code as before. Labs 13 and 02 of the real
site: the longest excerpts with the most notes.
"""

from __future__ import annotations

import re
import time

import pytest
from conftest import axe_violations
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

PAGES = ["labs/lab-13-paged-kv-cache/index.html", "labs/lab-02-roofline/index.html"]

BOXES = """() => [...document.querySelectorAll('.key-block')].map((note) => {
  const [first, last] = note.querySelector('[data-lines]').dataset.lines.split('-').map(Number);
  const rows = [...document.querySelectorAll('.excerpt pre.code > code > span')].filter((row) => +row.id.slice(1) >= first && +row.id.slice(1) <= last);
  const box = note.getBoundingClientRect(), top = rows[0].getBoundingClientRect(), bottom = rows[rows.length - 1].getBoundingClientRect();
  const code = document.querySelector('.excerpt pre.code').getBoundingClientRect(), pane = document.querySelector('.code-pane').getBoundingClientRect();
  return {id: note.id, top: box.top, bottom: box.bottom, left: box.left, linesTop: top.top, linesBottom: bottom.bottom, codeRight: code.right,
          codeBottom: code.bottom, paneTop: Math.max(pane.top, 0), paneBottom: Math.min(pane.bottom, innerHeight)};
})"""


def boxes(page) -> list[dict]:
    return page.evaluate(BOXES)


def read_to(page, note_id: str) -> dict:
    """Scroll the window until the note stands at the reading line (two fifths down); its box then."""
    page.evaluate(f"(() => {{ const box = document.getElementById('{note_id}').getBoundingClientRect(); scrollBy(0, box.top - innerHeight * 0.4 + 4); }})()")
    expect(page.locator(".key-block.current")).to_have_attribute("id", note_id)
    page.wait_for_timeout(700)  # the pane scrolls smoothly
    return next(n for n in boxes(page) if n["id"] == note_id)


@pytest.mark.parametrize("path", PAGES)
def test_at_1280_px_the_notes_scroll_past_the_code_and_bring_their_lines_into_view(open_tab, path: str) -> None:
    tab = open_tab(width=1280)
    page = tab.goto(path)
    expect(page.locator("html")).to_have_class("js side")
    found = boxes(page)
    assert len(found) >= 9
    for note in found:
        assert note["left"] >= note["codeRight"], note  # to the right of the code
    assert all(a["bottom"] <= b["top"] for a, b in zip(found, found[1:]))  # in order, no two overlapping
    assert page.locator("#key-blocks .key-block").count() == 0  # all moved beside the code
    expect(page.locator("#key-blocks .calc").first).to_be_visible()  # its calculators stay, with their heading
    for note in found[::3]:
        now = read_to(page, note["id"])
        assert now["paneTop"] <= now["linesTop"] and now["linesTop"] + 10 <= now["paneBottom"], now  # its first line in sight
        assert page.locator(".excerpt code > span.near").count() >= 1
    assert tab.errors == []


@pytest.mark.parametrize("width", [375, 1100])
def test_narrower_the_notes_are_stacked_under_the_code(open_tab, width: int) -> None:
    page = open_tab(width=width).goto(PAGES[0])
    assert "side" not in (page.locator("html").get_attribute("class") or "")
    for note in boxes(page):
        assert note["top"] > note["codeBottom"], note
    assert page.locator("#key-blocks .key-block").count() == len(boxes(page))


def test_without_js_and_in_print_the_notes_are_stacked(open_tab) -> None:
    page = open_tab(width=1280, js=False).goto(PAGES[0])
    for note in boxes(page):
        assert note["top"] > note["codeBottom"], note
    page = open_tab(width=1280).goto(PAGES[0])
    page.emulate_media(media="print")
    for note in boxes(page):
        assert note["top"] > note["codeBottom"], note
    page.emulate_media(media="screen")
    expect(page.locator("html")).to_have_class("js side")
    for note in boxes(page):
        assert note["left"] >= note["codeRight"], note


def test_resizing_moves_the_notes_back_and_forth(open_tab) -> None:
    tab = open_tab(width=1280)
    page = tab.goto(PAGES[1])
    page.set_viewport_size({"width": 1000, "height": 900})
    expect(page.locator("html")).not_to_have_class("js side")
    assert page.locator("#key-blocks .key-block").count() == 11
    assert page.locator(".side-notes").count() == 0
    page.set_viewport_size({"width": 1300, "height": 900})
    expect(page.locator("html")).to_have_class("js side")
    for note in boxes(page):
        assert note["left"] >= note["codeRight"], note
    assert tab.errors == []


def test_the_note_at_the_reading_line_is_current(open_tab) -> None:
    page = open_tab(width=1280, height=800).goto(PAGES[0])
    for note in [n["id"] for n in boxes(page)][2:5]:
        read_to(page, note)
        assert page.locator(".key-block.current").count() == 1


def test_selecting_a_note_selects_its_lines_beside_it_and_keeps_the_state_panel(open_tab) -> None:
    tab = open_tab(width=1280, height=800)
    page = tab.goto(PAGES[0])
    note = boxes(page)[5]
    page.click(f"#{note['id']} .kb-link")
    page.wait_for_function("window.InfraLensReader === true")
    expect(page.locator(f"#{note['id']}")).to_have_class(re.compile(r"\bactive\b"))
    rows = page.locator(".excerpt code > span.sel")
    assert rows.count() >= 1
    box, pane = rows.first.bounding_box(), page.locator(".code-pane").bounding_box()
    assert max(pane["y"], 0) <= box["y"] and box["y"] + box["height"] <= min(pane["y"] + pane["height"], 800)  # in the pane, in sight
    assert page.locator(".kb-panel").is_hidden()  # the note itself is beside the lines
    assert page.locator(f"#{note['id']} .dock").count() == 1  # their state shows in it
    assert tab.errors == []


def test_the_reader_runs_only_once_its_stylesheet_is_in_the_page(open_tab) -> None:
    """A slow reader.css (a cold cache, a slow disk) never shows the note's own panel beside it: the
    reader, which un-hides that panel, runs after its styles have come, which hide it side by side."""
    tab = open_tab(width=1280, height=800)

    def slowly(route) -> None:
        time.sleep(0.8)
        route.continue_()

    tab.page.route(re.compile(r"/reader\.css"), slowly)
    page = tab.goto(PAGES[0])
    page.evaluate("""() => { window.seenPanel = false;
      new MutationObserver(() => { const p = document.querySelector('.kb-panel');
        if (p && getComputedStyle(p).display !== 'none' && !p.hidden) window.seenPanel = true; })
        .observe(document.body, {subtree: true, childList: true, attributes: true}); }""")
    note = boxes(page)[5]
    page.click(f"#{note['id']} .kb-link")
    page.wait_for_function("window.InfraLensReader === true")
    expect(page.locator(f"#{note['id']}")).to_have_class(re.compile(r"\bactive\b"))
    assert page.evaluate("window.seenPanel") is False
    assert page.locator(".kb-panel").is_hidden()
    assert tab.errors == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_side_by_side_passes_axe(open_tab, scheme: str) -> None:
    page = open_tab(width=1280, scheme=scheme).goto(PAGES[1])
    expect(page.locator("html")).to_have_class("js side")
    assert axe_violations(page) == []


def test_a_lab_without_calculators_hides_its_emptied_notes_section(open_tab) -> None:
    page = open_tab(width=1280).goto("labs/lab-03-vectorization/index.html")
    expect(page.locator("html")).to_have_class("js side")
    assert page.locator("#key-blocks").is_hidden()
    page.set_viewport_size({"width": 1000, "height": 900})
    expect(page.locator("#key-blocks")).to_be_visible()


def test_the_keyboard_reaches_the_notes_beside_the_code_and_selects_one(open_tab) -> None:
    tab = open_tab(width=1280)
    page = tab.goto(PAGES[1])
    page.focus(".excerpt pre.code")
    for _ in range(20):  # past the badges in the code and the Copy button
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.matches('.side-notes .kb-link')"):
            break
    assert page.evaluate("document.activeElement.closest('.key-block').id") == "kb-add_cost"
    page.keyboard.press("Enter")
    page.wait_for_function("window.InfraLensReader === true")
    expect(page.locator(".excerpt code > span.sel")).to_have_count(1)
    assert page.evaluate("document.querySelector('.excerpt code > span.sel').id") == "L75"
    assert tab.errors == []
