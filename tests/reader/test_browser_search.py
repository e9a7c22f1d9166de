"""Site search in real Chromium: `/` to focus, a lab found by an identifier only its starter has,
keyboard navigation, results within milliseconds, no JS no box, file:// works, axe-core clean."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import AXE, REPO, Tab

IDENTIFIER = "requests_that_fit"
STARTER = "code/lab-13-paged-kv-cache/paged_kv_cache.py"
LAB = "lab-13-paged-kv-cache"
BOX = "header.topbar .site-search"
INPUT = "#site-search-input"


@pytest.fixture
def search_tab(open_tab, real_site: Path):
    """open_tab, for pages whose top bar has the search box."""
    assert "data-search-index=" in (real_site / "index.html").read_text()
    return open_tab


def focus_and_load(page) -> None:
    page.keyboard.press("/")
    page.wait_for_function("window.InfraLensSearchIndex !== undefined")


@pytest.mark.unit
def test_the_identifier_is_in_one_starter_and_no_manifest(project) -> None:
    manifests = [lab.path for lab in project.labs if IDENTIFIER in (REPO / lab.path).read_text()]
    starters = [path for path, source in project.sources.items() if IDENTIFIER in source.text]
    assert (manifests, starters) == ([], [STARTER])
    assert any(starter.path == STARTER for lab in project.labs if lab.id == LAB for starter in lab.starters)


@pytest.mark.browser
def test_slash_then_an_identifier_only_a_starter_has_finds_its_lab_and_enter_opens_it(search_tab) -> None:
    tab = search_tab()
    page = tab.goto("index.html")
    assert page.locator(BOX).is_visible()
    assert page.locator(".site-search-panel").is_hidden()
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == INPUT[1:]
    page.wait_for_function("window.InfraLensSearchIndex !== undefined")
    page.keyboard.type(IDENTIFIER)
    first = page.locator("#site-search-option-0")
    first.wait_for()
    href = first.evaluate("a => a.href")
    assert href in (tab.base + f"{STARTER}.html", tab.base + f"labs/{LAB}/index.html")
    assert IDENTIFIER in first.locator("mark").all_inner_texts()
    assert page.get_attribute(INPUT, "aria-expanded") == "true"

    page.keyboard.press("ArrowDown")
    assert page.get_attribute(INPUT, "aria-activedescendant") == "site-search-option-0"
    assert first.get_attribute("aria-selected") == "true"
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url == href
    assert tab.errors == [] and tab.external == []


@pytest.mark.browser
def test_arrows_move_through_results_and_escape_clears(search_tab) -> None:
    tab = search_tab()
    page = tab.goto(f"labs/{LAB}/index.html")
    focus_and_load(page)
    page.keyboard.type("kv cache")
    page.locator("#site-search-option-2").wait_for()
    count = page.locator("#site-search-results [role=option]").count()
    active = lambda: page.get_attribute(INPUT, "aria-activedescendant")  # noqa: E731
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert active() == "site-search-option-1"
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    assert active() == f"site-search-option-{count - 1}"  # wraps to the last result
    assert page.locator("[aria-selected=true]").count() == 1
    page.keyboard.press("Escape")
    assert page.input_value(INPUT) == ""
    assert page.locator(".site-search-panel").is_hidden()
    assert page.get_attribute(INPUT, "aria-expanded") == "false"
    page.keyboard.type("a/b")  # `/` typed into the box is text, not a shortcut
    assert page.input_value(INPUT) == "a/b"
    assert tab.errors == [] and tab.external == []


@pytest.mark.browser
def test_what_is_typed_before_the_index_arrives_is_searched_when_it_does(search_tab) -> None:
    tab = search_tab()
    page = tab.goto("index.html")
    page.keyboard.press("/")
    page.keyboard.type(IDENTIFIER)  # at once: search.js and the index may still be on their way
    assert page.locator("#site-search-option-0").evaluate("a => a.href") == tab.base + f"{STARTER}.html"
    assert tab.errors == []


@pytest.mark.browser
def test_no_results_says_so(search_tab) -> None:
    tab = search_tab()
    page = tab.goto(f"{STARTER}.html")
    focus_and_load(page)
    page.keyboard.type("zyzzyva quux")
    message = page.locator(".site-search-message")
    message.wait_for()
    assert message.inner_text() == "No results for “zyzzyva quux”"
    assert page.locator("#site-search-results").is_hidden()
    assert tab.errors == []


@pytest.mark.browser
def test_results_fit_a_375_px_screen(search_tab) -> None:
    tab = search_tab(width=375, height=740)
    page = tab.goto(f"labs/{LAB}/index.html")
    focus_and_load(page)
    page.keyboard.type("cache")
    page.locator("#site-search-option-0").wait_for()
    panel = page.locator(".site-search-panel").bounding_box()
    assert panel["x"] >= 0 and panel["x"] + panel["width"] <= 375
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    assert tab.errors == []


@pytest.mark.browser
def test_without_javascript_there_is_no_search_box(search_tab) -> None:
    tab = search_tab(js=False)
    page = tab.goto("index.html")
    assert page.locator(BOX).count() == 1
    assert page.locator(BOX).is_hidden()


@pytest.mark.browser
def test_search_works_from_file_urls(search_tab, chromium, real_site: Path) -> None:
    context = chromium.new_context()
    try:
        tab = Tab(context, real_site.as_uri() + "/")
        page = tab.goto(f"labs/{LAB}/index.html")
        focus_and_load(page)
        page.keyboard.type(IDENTIFIER)
        page.locator("#site-search-option-0").wait_for()
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert page.url == (real_site / f"{STARTER}.html").as_uri()
        assert tab.errors == [] and tab.external == []
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.browser
def test_axe_core_finds_no_violations_in_the_open_search_box(search_tab, scheme: str) -> None:
    assert AXE.is_file(), "axe-core is missing: run scripts/install-browser-deps"
    tab = search_tab(scheme=scheme)
    page = tab.goto(f"labs/{LAB}/index.html")
    page.add_script_tag(path=str(AXE))
    focus_and_load(page)
    for query in ("kv cache", IDENTIFIER, "zyzzyva"):
        page.fill(INPUT, query)
        page.wait_for_timeout(50)
        if query != "zyzzyva":
            page.keyboard.press("ArrowDown")
        result = page.evaluate("axe.run({include: ['.site-search']}, {resultTypes: ['violations']})")
        problems = [f"{v['id']}: {v['help']} — {[n['target'] for n in v['nodes']][:5]}" for v in result["violations"]]
        assert problems == [], query
    assert tab.errors == []
