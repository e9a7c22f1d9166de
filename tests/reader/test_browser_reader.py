"""The reader in real Chromium: key blocks and lines, deep links, theme, copy, navigation, no JS."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, axe_violations, lab_ids

from infralens.model.lab import SECTIONS

pytestmark = pytest.mark.browser

LAB_ID = "lab-13-paged-kv-cache"
LAB_PAGE = f"labs/{LAB_ID}/index.html"
STARTER = "code/lab-13-paged-kv-cache/paged_kv_cache.py"
"""The starter of the lab's excerpt (the `paged` fixture holds it to that)."""


@pytest.fixture(scope="module")
def paged(resolved):
    """Lab 13 resolved: the lab whose page these tests read."""
    lab = resolved[LAB_ID]
    assert lab.excerpt.starter == STARTER
    return lab


def shown_lines(paged, block) -> list[str]:
    """Ids of the excerpt rows a key block covers."""
    return [f"L{line.number}" for line in paged.excerpt.lines if block.first <= line.number <= block.last]


def selected(page) -> list[str]:
    return page.eval_on_selector_all(".excerpt code > span.sel, .page-source code > span.sel", "rows => rows.map(r => r.id)")


def test_selecting_a_key_block_highlights_exactly_its_lines_and_shows_its_note(open_tab, paged) -> None:
    tab = open_tab(width=1100)  # stacked: the note panel docks under the code (side by side, the note is beside it)
    page = tab.goto(LAB_PAGE)
    block = paged.excerpt.key_blocks[1]
    assert len(shown_lines(paged, block)) > 1
    page.click(f"#kb-{block.slug} .kb-link")  # the reader loads on this first click, then handles it
    page.wait_for_function("window.InfraLensReader === true")
    assert selected(page) == shown_lines(paged, block)
    assert page.evaluate("location.hash") == f"#kb-{block.slug}"
    panel = page.locator(".kb-panel")
    assert panel.is_visible()
    assert block.name in panel.inner_text()
    assert page.locator(f"#kb-{block.slug} .kb-note").inner_text().split()[:6] == page.locator(".kb-panel-note").inner_text().split()[:6]
    # The first selected line is scrolled into view.
    assert page.evaluate(f"(() => {{ const r = document.getElementById('{shown_lines(paged, block)[0]}').getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }})()")

    # Keyboard: focus another block's link and press Enter.
    other = paged.excerpt.key_blocks[2]
    page.focus(f"#kb-{other.slug} .kb-link")
    page.keyboard.press("Enter")
    assert selected(page) == shown_lines(paged, other)
    page.click(".kb-panel-prev")
    assert selected(page) == shown_lines(paged, block)
    assert tab.errors == []


def test_clicking_a_highlighted_line_shows_its_note(open_tab, paged) -> None:
    tab = open_tab(width=1100)
    page = tab.goto(LAB_PAGE)
    tab.reader()
    block = paged.excerpt.key_blocks[3]
    line = shown_lines(paged, block)[-1]
    assert page.locator(".kb-panel").is_hidden()
    page.locator(f"#{line}").click(position={"x": 300, "y": 5})
    assert page.locator(".kb-panel").is_visible()
    assert block.name in page.locator(".kb-panel-head").inner_text()
    assert page.locator(f"#kb-{block.slug}").get_attribute("class") == "key-block active"
    assert selected(page) == shown_lines(paged, block)
    page.click(".kb-panel-close")
    assert selected(page) == [] and page.locator(".kb-panel").is_hidden()
    assert tab.errors == []


def test_a_key_block_deep_link_restores_the_selection_on_load(open_tab, paged) -> None:
    tab = open_tab()
    block = paged.excerpt.key_blocks[4]
    page = tab.goto(f"{LAB_PAGE}#kb-{block.slug}")
    tab.reader()
    page.wait_for_function("document.querySelector('pre.code > code > span.sel') !== null")
    assert selected(page) == shown_lines(paged, block)
    assert block.name in page.locator(".kb-panel").inner_text()
    page.wait_for_timeout(200)  # the reveal runs after the browser's own jump to the fragment
    first = shown_lines(paged, block)[0]
    assert page.evaluate(f"(() => {{ const r = document.getElementById('{first}').getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }})()")
    assert tab.errors == []


def test_line_ranges_link_and_restore_on_the_source_view(open_tab, paged) -> None:
    tab = open_tab()
    source = f"{paged.excerpt.starter}.html"
    page = tab.goto(f"{source}#L20-L24")
    tab.reader()
    assert selected(page) == [f"L{n}" for n in range(20, 25)]
    page.click("#L30 .ln")
    page.click("#L33 .ln", modifiers=["Shift"])
    assert selected(page) == [f"L{n}" for n in range(30, 34)]
    assert page.evaluate("location.hash") == "#L30-L33"
    page.reload()
    assert selected(page) == [f"L{n}" for n in range(30, 34)]
    # "Lines with notes" selects the block's whole range.
    block = paged.excerpt.key_blocks[1]
    page.click(f'.bound-notes a[data-lines="{block.first}-{block.last}"]')
    assert selected(page) == [f"L{n}" for n in range(block.first, block.last + 1)]
    assert tab.errors == []


def background(page) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


def test_the_theme_follows_the_os_and_a_choice_persists_across_reload(open_tab) -> None:
    tab = open_tab(scheme="light")
    page = tab.goto(LAB_PAGE)
    light = background(page)
    toggle = page.locator(".theme-toggle")
    assert toggle.is_visible() and toggle.get_attribute("aria-pressed") == "false"
    toggle.click()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    dark = background(page)
    assert dark != light
    page.reload()
    assert background(page) == dark and toggle.get_attribute("aria-pressed") == "true"
    tab.goto("index.html")  # the choice holds on every page of the site
    assert background(page) == dark
    toggle.click()
    page.reload()
    assert background(page) == light

    os_dark = open_tab(scheme="dark").goto(LAB_PAGE)
    assert background(os_dark) == dark
    assert os_dark.locator(".theme-toggle").get_attribute("aria-pressed") == "true"


def test_navigation_folds_and_works_at_375_px(open_tab, paged, project) -> None:
    tab = open_tab(width=375, height=740)
    page = tab.goto(LAB_PAGE)
    assert page.evaluate("document.documentElement.scrollWidth") <= 375  # nothing overflows sideways
    nav_list = page.locator(".sidenav ul").first
    assert nav_list.is_hidden()  # folded above the content
    page.click(".sidenav summary")
    assert nav_list.is_visible()
    # The navigation holds the lab's own track; every other lab is one click away on the index.
    target = next(lab for lab in project.labs if lab.track == paged.lab.track and lab.id != paged.lab.id)
    page.click(f'.sidenav a[href$="/{target.id}/index.html"]')
    page.wait_for_url(f"**/labs/{target.id}/index.html")
    assert page.locator(f'.sidenav a[href$="/{target.id}/index.html"]').get_attribute("aria-current") == "page"
    page.click(".sidenav summary")
    page.click(".sidenav-home a")
    page.wait_for_url("**/index.html")
    page.click(f'a.lab-card-link[href$="/{project.labs[0].id}/index.html"]')
    page.click(".pager-next")
    assert page.locator("h1").inner_text() == project.labs[1].title
    assert tab.errors == []


def test_the_copy_button_copies_the_code_without_line_numbers(open_tab, paged) -> None:
    tab = open_tab(permissions=["clipboard-read", "clipboard-write"])
    page = tab.goto(LAB_PAGE)
    page.click(".excerpt .copy")
    copied = page.evaluate("navigator.clipboard.readText()")
    expected = "".join(line.text + "\n" for line in paged.excerpt.lines)
    assert copied == expected
    assert page.locator(".excerpt .copy").inner_text() == "Copied"

    page = tab.goto(f"{paged.excerpt.starter}.html")
    page.click("pre.code + .copy")
    assert page.evaluate("navigator.clipboard.readText()") == (REPO / paged.excerpt.starter).read_text()
    assert tab.errors == []


@pytest.mark.parametrize("lab_id", lab_ids())
def test_without_javascript_every_section_and_note_reads(open_tab, lab_id: str, resolved) -> None:
    lab = resolved[lab_id]
    tab = open_tab(js=False)
    page = tab.goto(f"labs/{lab_id}/index.html")
    for sid, _, _ in SECTIONS:
        assert page.locator(f"#{sid.replace('_', '-')}").is_visible()
    for block in lab.excerpt.key_blocks:
        note = page.locator(f"#kb-{block.slug}")
        assert note.is_visible()
        lines = note.locator(".kb-lines").inner_text()
        assert str(block.first) in lines and str(block.last) in lines
    # The full file: linked under the excerpt, or in each step's header of a walkthrough.
    links = page.locator(".step-head a" if lab.excerpt.walkthrough else ".excerpt figcaption a")
    assert [links.nth(i).get_attribute("href").split("code/", 1)[1] for i in range(links.count())] == [
        f"{part.starter.split('code/', 1)[1]}.html#L{part.first}-L{part.last}" for part in lab.excerpt.parts
    ]
    # Controls that need JS stay out of the way.
    assert page.locator(".theme-toggle").is_hidden()
    assert page.locator(".copy").count() == 0
    # Every bound line is marked without JS.
    bound = page.eval_on_selector_all(".excerpt code > span.bound", "rows => rows.map(r => r.id)")
    expected = [  # in page order: each step's lines, in a walkthrough's order
        f"{part.prefix}L{line.number}"
        for at, part in enumerate(lab.excerpt.parts)
        for line in part.lines
        if any(b.part == at and b.first <= line.number <= b.last for b in lab.excerpt.key_blocks)
    ]
    assert bound == expected
    assert tab.external == []


def pages_of_the_site(real_site: Path) -> list[str]:
    return sorted(str(p.relative_to(real_site)) for p in real_site.rglob("*.html"))


def test_no_page_logs_a_console_error_or_fetches_off_site(open_tab, real_site: Path) -> None:
    tab = open_tab()
    for path in pages_of_the_site(real_site):
        tab.goto(path)
        tab.page.wait_for_load_state("networkidle")
    assert tab.errors == []
    assert tab.external == []




@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("path", ["index.html", LAB_PAGE, f"{STARTER}.html", "labs/lab-10-memory-optimization-reading/index.html"])
def test_axe_core_finds_no_violations(open_tab, path: str, scheme: str, paged) -> None:
    tab = open_tab(scheme=scheme)
    page = tab.goto(path)
    if path == LAB_PAGE:  # with the note panel open and a selection, as a reader sees it
        page.click(f"#kb-{paged.excerpt.key_blocks[0].slug} .kb-link")
    assert axe_violations(page) == []
    assert tab.errors == []


def test_screenshots_of_the_index_and_a_lab_page(open_tab, screenshot_dir: Path, paged) -> None:
    for width in (1280, 375):
        for name, path in (("index", "index.html"), ("lab", f"{LAB_PAGE}#kb-{paged.excerpt.key_blocks[1].slug}")):
            tab = open_tab(width=width, height=900)
            page = tab.goto(path)
            page.wait_for_timeout(200)
            target = screenshot_dir / f"{name}-{width}.png"
            page.screenshot(path=str(target), full_page=name == "index")
            assert target.stat().st_size > 10_000
            assert tab.errors == []


@pytest.mark.parametrize("fragment", ["#%E0%A4%A", "#L99999", "#kb-no-such-note", "#L5-Lx", "#concept-goal"])
def test_a_fragment_that_names_nothing_selects_nothing_and_logs_no_error(open_tab, fragment: str) -> None:
    tab = open_tab()
    page = tab.goto(LAB_PAGE + fragment)
    tab.reader()
    page.wait_for_load_state("load")
    assert selected(page) == [] and page.locator(".kb-panel").is_hidden()
    assert tab.errors == []
