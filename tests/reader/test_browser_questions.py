"""Questions and progress in real Chromium: a right, a close and a wrong answer get their verdicts,
choices say why, the answer reveals with and without JS, progress survives a reload and marks the
index and the navigation (and resets), the keyboard reaches everything, axe-core passes, and the
page reads numbers exactly as the build does (the table of tests/readings.py).
"""

from __future__ import annotations

import pytest
from conftest import axe_violations, checked_and_served, tabs_on
from hypothesis import given, settings
from hypothesis import strategies as st
from playwright.sync_api import expect
from readings import READINGS

from infralens.lab.questions import reading

pytestmark = pytest.mark.browser

PAGE = "labs/lab-01-q/practice.html"
LAB = "labs/lab-01-q/index.html"


@pytest.fixture(scope="module")
def site_url(tmp_path_factory: pytest.TempPathFactory):
    """tests/sites/questions, checked (so its numeric questions have answers) and built, served."""
    with checked_and_served(tmp_path_factory, "questions") as url:
        yield url


@pytest.fixture(scope="module")
def tabs(chromium, site_url: str):
    with tabs_on(chromium, site_url) as open_one:
        yield open_one


def answer(question, text: str) -> str:
    question.get_by_role("textbox").fill(text)
    question.get_by_role("button", name="Check").click()
    verdict = question.locator(".q-verdict")
    expect(verdict).to_be_visible()
    return verdict.inner_text()


def test_a_right_a_close_and_a_wrong_answer_get_their_verdicts(tabs) -> None:
    page = tabs().goto(PAGE)
    first = page.locator("#q-per-token")
    assert answer(first, "1024") == "Right: that is the checked run's figure."
    assert answer(first, "1 KiB") == "Right: that is the checked run's figure."
    assert answer(first, "1,000 B") == "Close: within 5% of the checked run's figure (off by 2.3%)."
    assert answer(first, "4096") == "Off by 4.0x, too high."
    assert answer(first, "2.56e1") == "Off by 40x, too low."
    assert answer(first, "-1024") == "Off: the answer is positive."
    assert answer(first, "a lot") == "“a lot” is not a number in B."
    expect(first.get_by_role("textbox")).to_have_attribute("aria-invalid", "true")
    assert answer(first, "") == "Type an answer first."
    second = page.locator("#q-q2")  # printed as "4.00 MiB": the page reads its prefix too
    assert answer(second, "4 MiB") == "Right: that is the checked run's figure."
    assert answer(second, "4,194,304") == "Right: that is the checked run's figure."
    assert answer(second, "4.1 MiB") == "Close: within 3% of the checked run's figure (off by 2.5%)."
    assert answer(second, "4 GiB") == "Off by 1,024x, too high."
    recorded = page.locator("#q-per-layer")  # a value the run recorded on a line, not one it printed
    assert answer(recorded, "32 bytes") == "Right: that is the checked run's figure."


def test_the_lab_page_leads_to_its_practice(tabs) -> None:
    page = tabs().goto(LAB)
    page.locator(".practice-link").click()
    expect(page).to_have_title("Practice · Lab 01: Question lab · Questions")
    expect(page.locator(".q")).to_have_count(4)


def test_a_choice_says_why_and_the_answer_reveals(tabs) -> None:
    page = tabs().goto(PAGE)
    question = page.locator("#q-why-two")
    question.get_by_role("button", name="Check").click()
    expect(question.locator(".q-verdict")).to_have_text("Pick a choice first.")
    question.get_by_label("Two bytes per value").check()
    question.get_by_role("button", name="Check").click()
    expect(question.locator(".q-verdict")).to_have_text("Not this one. The dtype is its own factor; this 2 counts tensors.")
    question.get_by_label("Keys and values are both kept").check()
    question.get_by_role("button", name="Check").click()
    expect(question.locator(".q-verdict")).to_have_text("Right. Attention reads both K and V of every past token.")
    reveal = page.locator("#q-per-token details")
    expect(reveal.get_by_text("1,024 B")).to_be_hidden()
    reveal.locator("summary").click()
    expect(reveal.get_by_text("1,024 B")).to_be_visible()
    expect(reveal.get_by_role("link", name="note 1, per_layer")).to_have_attribute("href", "../../labs/lab-01-q/index.html#kb-per_layer")


def test_progress_survives_a_reload_marks_the_index_and_resets(tabs) -> None:
    tab = tabs()
    page = tab.goto(PAGE)
    answer(page.locator("#q-per-token"), "1024")
    answer(page.locator("#q-q2"), "9 MiB")  # tried, not right
    page.reload()
    page.get_by_text("All labs", exact=True).click()  # folded above the page below 100rem
    nav = page.get_by_role("navigation", name="Labs").get_by_role("link", name="Question lab")
    expect(nav).to_contain_text("✓ 1/4")
    expect(nav.locator(".sr")).to_have_text(" (visited, 1 of 4 questions right)")
    lab = tab.goto(LAB)
    expect(lab.locator(".practice-link")).to_contain_text("✓ 1/4")
    index = tab.goto("index.html")
    card = index.locator(".lab-card-link")
    expect(card).to_contain_text("✓ 1/4")
    panel = index.locator(".progress")
    expect(panel).to_contain_text("In this browser: 1 lab visited, 1 question answered right.")
    panel.get_by_role("button", name="Reset progress").click()
    expect(panel).to_be_hidden()
    expect(card.locator(".mark")).to_have_count(0)
    index.reload()
    expect(index.locator(".mark")).to_have_count(0)
    assert index.evaluate("localStorage.getItem('infralens-progress')") is None


def test_the_keyboard_alone_answers_and_reveals(tabs) -> None:
    page = tabs().goto(PAGE)
    page.locator("#q-per-token .q-p").click()  # a place to start tabbing from
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.name") == "a"
    page.keyboard.type("1024 B")
    page.keyboard.press("Enter")
    expect(page.locator("#q-per-token .q-verdict")).to_have_text("Right: that is the checked run's figure.")
    page.keyboard.press("Tab")  # the Check button
    page.keyboard.press("Tab")  # the reveal
    page.keyboard.press("Enter")
    expect(page.locator("#q-per-token details")).to_have_attribute("open", "")
    page.locator("#q-why-two .q-p").click()
    page.keyboard.press("Tab")
    page.keyboard.press("ArrowDown")  # radios: the arrows move and pick
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.locator("#q-why-two .q-verdict")).to_have_text("Not this one. The dtype is its own factor; this 2 counts tensors.")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_questions_pass_axe_after_answers(tabs, scheme: str) -> None:
    page = tabs(scheme=scheme).goto(PAGE)
    answer(page.locator("#q-per-token"), "4096")
    answer(page.locator("#q-q2"), "4 MiB")
    page.locator("#q-why-two details summary").click()
    assert axe_violations(page) == []


def test_without_js_each_answer_is_a_reveal_and_nothing_to_check(tabs) -> None:
    page = tabs(js=False).goto(PAGE)
    expect(page.get_by_role("button", name="Check")).to_have_count(0)
    expect(page.get_by_role("textbox")).to_have_count(0)
    expect(page.get_by_label("Keys and values are both kept")).to_be_visible()  # choices to think with
    reveal = page.locator("#q-q2 details")
    reveal.locator("summary").click()
    expect(reveal).to_contain_text("4.00 MiB, as the checked run of")


def test_at_375_px_questions_fit_the_screen(tabs) -> None:
    page = tabs(width=375, height=800).goto(PAGE)
    answer(page.locator("#q-per-token"), "1,000 B")
    widths = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    assert widths[0] <= widths[1]
    box = page.locator("#q-per-token input").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 375


def test_the_page_reads_numbers_as_the_build_does(tabs) -> None:
    page = tabs().goto(PAGE)
    answer(page.locator("#q-per-token"), "1")  # loads questions.js
    ours = page.evaluate(
        "cases => cases.map(([text, unit]) => { const r = InfraLensQuestions.reading(text, unit); return r && [r.value, r.half]; })",
        [[text, unit] for text, unit, _ in READINGS],
    )
    for (text, unit, _), theirs in zip(READINGS, ours):
        figure = reading(text, unit)
        assert (None if figure is None else [pytest.approx(figure.value, rel=1e-12), pytest.approx(figure.half_step, rel=1e-12)]) == theirs, text


@pytest.fixture(scope="module")
def grader(tabs):
    """One page with questions.js loaded, for the drawn answers (reloading it 200 times is slow)."""
    page = tabs().goto(PAGE)
    answer(page.locator("#q-per-token"), "1")
    return page


@settings(max_examples=200, deadline=None)
@given(
    number=st.floats(min_value=-1e15, max_value=1e15, allow_nan=False),
    digits=st.integers(min_value=0, max_value=6),
    grouped=st.booleans(),
    suffix=st.sampled_from(["", " B", "B", " KiB", "MiB", " GB", " bytes", " k", "e3", "E-2 ms", " x", "%", " Gi B", "?"]),
    unit=st.sampled_from([None, "B", "s", "x", "%"]),
)
def test_drawn_answers_read_alike_in_page_and_build(grader, number: float, digits: int, grouped: bool, suffix: str, unit: str | None) -> None:
    text = f"{number:{',' if grouped else ''}.{digits}f}{suffix}"
    theirs = grader.evaluate("([t, u]) => { const r = InfraLensQuestions.reading(t, u); return r && [r.value, r.half]; }", [text, unit])
    figure = reading(text, unit)
    assert (None if figure is None else [pytest.approx(figure.value, rel=1e-12), pytest.approx(figure.half_step, rel=1e-12)]) == theirs, text
