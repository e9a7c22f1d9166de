"""Notes beside the code, in real Chromium: at 1280 px each note stands level with its lines (its
box overlaps theirs) to the right of the code, the note beside the middle of the window is marked
current as the reader scrolls, and selecting a note keeps its lines in view; at 375 and 1100 px, with
JS off and in print, the notes are stacked under the code as before. Labs 13 and 02 of the real site:
the longest excerpts with the most notes.
"""

from __future__ import annotations

import re

import pytest
from conftest import axe_violations
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

PAGES = ["labs/lab-13-paged-kv-cache/index.html", "labs/lab-02-roofline/index.html"]

BOXES = """() => [...document.querySelectorAll('.key-block')].map((note) => {
  const [first, last] = note.querySelector('[data-lines]').dataset.lines.split('-').map(Number);
  const rows = [...document.querySelectorAll('.excerpt pre.code > code > span')].filter((row) => +row.id.slice(1) >= first && +row.id.slice(1) <= last);
  const box = note.getBoundingClientRect(), top = rows[0].getBoundingClientRect(), bottom = rows[rows.length - 1].getBoundingClientRect();
  const code = document.querySelector('.excerpt pre.code').getBoundingClientRect();
  return {id: note.id, top: box.top, bottom: box.bottom, left: box.left, linesTop: top.top, linesBottom: bottom.bottom, codeRight: code.right, codeBottom: code.bottom};
})"""


def boxes(page) -> list[dict]:
    return page.evaluate(BOXES)


@pytest.mark.parametrize("path", PAGES)
def test_at_1280_px_each_note_stands_beside_its_lines(open_tab, path: str) -> None:
    tab = open_tab(width=1280)
    page = tab.goto(path)
    expect(page.locator("html")).to_have_class("js side")
    found = boxes(page)
    assert len(found) >= 9
    for note in found:
        assert note["top"] < note["linesBottom"] and note["linesTop"] < note["bottom"], note  # overlapping
        assert note["left"] >= note["codeRight"], note  # to the right of the code
    ordered = sorted(found, key=lambda n: n["top"])
    assert all(a["bottom"] <= b["top"] for a, b in zip(ordered, ordered[1:]))  # no two notes overlap
    assert page.locator("#key-blocks .key-block").count() == 0  # all moved beside the code
    expect(page.locator("#key-blocks .calc").first).to_be_visible()  # its calculators stay, with their heading
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
    assert page.evaluate("getComputedStyle(document.querySelector('#L75')).marginTop") == "0px"  # no room left behind
    page.set_viewport_size({"width": 1300, "height": 900})
    expect(page.locator("html")).to_have_class("js side")
    for note in boxes(page):
        assert note["top"] < note["linesBottom"] and note["linesTop"] < note["bottom"], note
    assert tab.errors == []


def test_the_note_beside_the_middle_of_the_window_is_current(open_tab) -> None:
    page = open_tab(width=1280, height=800).goto(PAGES[0])
    for note in [n["id"] for n in boxes(page)][2:5]:
        page.evaluate(f"(() => {{ const box = document.getElementById('{note}').getBoundingClientRect(); scrollBy(0, (box.top + box.bottom - innerHeight) / 2); }})()")
        expect(page.locator(".key-block.current")).to_have_attribute("id", note)
        assert page.locator(".key-block.current").count() == 1


def test_selecting_a_note_selects_its_lines_beside_it_and_keeps_the_state_panel(open_tab) -> None:
    tab = open_tab(width=1280, height=800)
    page = tab.goto(PAGES[0])
    note = boxes(page)[5]
    page.click(f"#{note['id']} .kb-link")
    page.wait_for_function("window.InfraLensReader === true")
    expect(page.locator(f"#{note['id']}")).to_have_class(re.compile(r"\bactive\b"))
    assert "current" in page.locator(f"#{note['id']}").get_attribute("class").split()
    rows = page.locator(".excerpt code > span.sel")
    assert rows.count() >= 1
    box = rows.first.bounding_box()
    assert 0 <= box["y"] <= 800  # in view, beside its note
    assert page.locator(".kb-panel").is_hidden()  # the note itself is beside the lines
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
