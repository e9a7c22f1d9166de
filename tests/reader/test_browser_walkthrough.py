"""A walkthrough across two files in real Chromium (tests/sites/walkthrough): each step under its
header, notes bound to either file select exactly their lines (two files' line 9 keep apart), a
link to another file's line restores it, side by side each note stands level with its lines, and
without JS every step and note reads.
"""

from __future__ import annotations

import pytest
from conftest import axe_violations, checked_and_served, tabs_on
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

PAGE = "labs/lab-01-walk/index.html"


@pytest.fixture(scope="module")
def site_url(tmp_path_factory: pytest.TempPathFactory):
    with checked_and_served(tmp_path_factory, "walkthrough") as url:
        yield url


@pytest.fixture(scope="module")
def tabs(chromium, site_url: str):
    with tabs_on(chromium, site_url) as open_one:
        yield open_one


def selected(page) -> list[str]:
    return page.eval_on_selector_all(".excerpt code > span.sel", "rows => rows.map(r => r.id)")


def test_each_step_reads_under_its_header_without_js(tabs) -> None:
    page = tabs(js=False).goto(PAGE)
    heads = page.locator(".step-head")
    expect(heads).to_have_count(3)
    expect(heads.nth(0)).to_have_text("1 Prefill · code/lab-01-walk/decode.py, lines 6–9")
    expect(heads.nth(2)).to_have_text("3 Cache append · code/lab-01-walk/cache.py, lines 9–12")
    expect(heads.nth(2).get_by_role("link")).to_have_attribute("href", "../../code/lab-01-walk/cache.py.html#L9-L12")
    assert page.eval_on_selector_all(".excerpt pre.code", "pres => pres.map(p => p.querySelectorAll('code > span').length)") == [4, 4, 4]
    expect(page.locator("#kb-append .kb-lines")).to_have_text("Lines 10–12 of cache.py")
    assert page.locator("#L9").count() == 1 and page.locator("#s2-L9").count() == 1  # two files' line 9 keep apart


def test_a_note_on_either_file_selects_exactly_its_lines(tabs) -> None:
    tab = tabs(width=1100)
    page = tab.goto(PAGE)
    page.click("#kb-append .kb-link")
    page.wait_for_function("window.InfraLensReader === true")
    assert selected(page) == ["s2-L10", "s2-L11", "s2-L12"]
    assert page.evaluate("location.hash") == "#kb-append"
    page.click("#kb-one-more-row .kb-link")
    assert selected(page) == ["L13"]
    page.click(".kb-panel-next")
    assert selected(page) == ["L14"]
    page.click("#s2-L11", position={"x": 300, "y": 5})  # a bound line of the other file: its note
    assert selected(page) == ["s2-L10", "s2-L11", "s2-L12"]
    assert tab.errors == []


def test_a_link_to_another_files_line_restores_it(tabs) -> None:
    tab = tabs(width=1100)
    page = tab.goto(PAGE + "#s2-L11")
    page.wait_for_function("window.InfraLensReader === true")
    expect(page.locator(".excerpt code > span.sel")).to_have_count(1)
    assert selected(page) == ["s2-L11"]
    page = tab.goto(PAGE + "#L9")
    page.wait_for_function("window.InfraLensReader === true")
    expect(page.locator(".excerpt code > span.sel")).to_have_count(1)
    assert selected(page) == ["L9"]
    assert tab.errors == []


def test_side_by_side_each_note_brings_its_lines_into_the_pane_in_either_file(tabs) -> None:
    page = tabs(width=1280, height=500).goto(PAGE)
    expect(page.locator("html")).to_have_class("js side")
    for note, lines in [("kb-prompt-loop", ["L7"]), ("kb-one-more-row", ["L13"]), ("kb-attended", ["L14"]), ("kb-append", ["s2-L10", "s2-L11", "s2-L12"])]:
        page.click(f"#{note} .kb-link")
        page.wait_for_function("window.InfraLensReader === true")
        assert selected(page) == lines
        inside = page.evaluate(f"""(() => {{ const row = document.getElementById('{lines[0]}').getBoundingClientRect(), pane = document.querySelector('.code-pane').getBoundingClientRect();
          return row.top >= Math.max(pane.top, 0) && row.bottom <= Math.min(pane.bottom, innerHeight); }})()""")
        assert inside, note


@pytest.mark.parametrize("width", [1100, 1280])
def test_a_walkthrough_passes_axe(tabs, width: int) -> None:
    page = tabs(width=width).goto(PAGE)
    page.click("#kb-append .kb-link")
    page.wait_for_function("window.InfraLensReader === true")
    assert axe_violations(page) == []
