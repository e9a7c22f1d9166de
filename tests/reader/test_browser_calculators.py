"""Calculators in real Chromium: the page's numbers and arithmetic equal the build's, typing and
presets update the results, a link restores the inputs, errors read as messages (never NaN or
Infinity), the keyboard reaches everything, axe-core passes, and without JS the table stands alone.

Two sites: tests/sites/calculator, checked and built in a temporary folder (its calculator is
verified), and the repository's own site (every lab's calculators, compiled, against Python).
"""

from __future__ import annotations

import math

import pytest
from conftest import (
    REPO,
    TESTS,
    axe_violations,
    calculator_labs,
    checked_and_served,
    run_infralens,
    served,
    tabs_on,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from playwright.sync_api import expect

from infralens.lab.calculators import check_calculator, listed_cases, outputs_at, unmet
from infralens.lab.shown import counted, exact, show
from infralens.model.expr import ExprError

pytestmark = pytest.mark.browser

PAGE = "labs/lab-01-calc/index.html"
FORMATS = ("number", "int", "bytes", "bytes-iec", "si", "ratio", "percent", "label")


@pytest.fixture(scope="module")
def calc_url(tmp_path_factory: pytest.TempPathFactory):
    """tests/sites/calculator, checked (so its calculator is verified) and built, served."""
    with checked_and_served(tmp_path_factory, "calculator") as url:
        yield url


@pytest.fixture(scope="module")
def tabs(chromium, calc_url: str):
    with tabs_on(chromium, calc_url) as open_one:
        yield open_one


def started(tab, path: str = PAGE):
    """Open a page and its first calculator the way a reader does: with "Open the calculator"."""
    page = tab.goto(path)
    page.get_by_role("button", name="Open the calculator").first.click()
    page.wait_for_function("document.querySelector('[data-calc]').dataset.ready")
    return page


def result(page, name: str) -> str:
    return page.locator(f'output[name="{name}"]').inner_text()


def test_typing_updates_every_result_and_its_arithmetic(tabs) -> None:
    tab = tabs()
    page = started(tab)
    assert result(page, "total") == "32 B"
    page.fill("#calc-kv-heads", "8")
    assert result(page, "per_layer") == "32"
    assert result(page, "total") == "64 B"
    assert page.locator('[data-work="total"]').inner_text() == "2 layers × 32 = 64 B"
    page.fill("#calc-kv-layers", "4,096")  # separators are read; the bound is 100
    assert page.locator(".calc-status").inner_text() == "Layers: at most 100 layers."
    assert result(page, "total") == "—" and page.get_attribute("#calc-kv-layers", "aria-invalid") == "true"
    page.fill("#calc-kv-layers", "64")
    assert result(page, "total") == "2.05 kB (2,048 B)"
    assert page.locator(".calc-status").inner_text() == ""
    assert tab.errors == []


@pytest.mark.parametrize("typed, message", [
    ("", "Heads: enter a number."),
    ("abc", "Heads: “abc” is not a number."),
    ("0", "Heads: at least 1 head."),  # a count of one is singular
    ("2.5", "Heads: enter a whole number."),
    ("1e400", "Heads: too large to compute with."),
])
def test_a_field_that_is_not_a_value_says_why_and_no_result_shows_nan(tabs, typed: str, message: str) -> None:
    page = started(tabs())
    page.fill("#calc-kv-heads", typed)
    assert page.locator(".calc-status").inner_text() == message
    text = page.locator(".calc").inner_text()
    assert "NaN" not in text and "Infinity" not in text
    assert result(page, "per_layer") == "—"


def test_huge_inputs_give_a_message_not_infinity(tabs) -> None:
    page = started(tabs())
    page.fill("#calc-kv-heads", "1e308")
    assert page.locator(".calc-status").inner_text() == "Per layer: the result is not a finite number."
    text = page.locator(".calc").inner_text()
    assert "NaN" not in text and "Infinity" not in text


def test_presets_fill_the_fields_and_say_which_is_on(tabs) -> None:
    page = started(tabs())
    page.get_by_role("button", name="Full").click()
    assert page.input_value("#calc-kv-layers") == "3" and page.input_value("#calc-kv-dtype") == "fp32"
    assert result(page, "total") == "96 B"
    assert page.get_attribute("[data-preset='2']", "aria-pressed") == "true"
    assert page.get_attribute("[data-preset='0']", "aria-pressed") == "false"
    page.fill("#calc-kv-layers", "2")
    assert page.get_attribute("[data-preset='2']", "aria-pressed") == "false"  # no longer that preset


def test_the_share_link_restores_the_inputs_in_a_new_tab(tabs) -> None:
    page = started(tabs())
    page.fill("#calc-kv-heads", "16")
    page.select_option("#calc-kv-dtype", "fp32")
    link = page.locator(".calc-share a").get_attribute("href")
    assert link == "#calc-kv?heads=16&dtype=fp32"
    fresh = tabs()
    other = fresh.goto(PAGE + link)  # no interaction: the address alone opens the calculator
    other.wait_for_function("document.querySelector('[data-calc]').dataset.ready")
    assert other.input_value("#calc-kv-heads") == "16" and other.input_value("#calc-kv-dtype") == "fp32"
    assert result(other, "total") == "256 B"
    assert fresh.errors == []


def test_keyboard_alone_opens_the_calculator_and_reaches_fields_and_presets(tabs) -> None:
    page = tabs().goto(PAGE)
    page.focus(".calc-open button")
    page.keyboard.press("Enter")
    page.wait_for_function("document.activeElement.id === 'calc-kv-layers'")  # the first field, focused
    page.keyboard.press("Shift+Tab")  # back through the presets: Full, Wide, Defaults
    assert page.evaluate("document.activeElement.textContent") == "Full"
    page.keyboard.press("Enter")
    assert page.input_value("#calc-kv-layers") == "3"
    assert page.get_attribute("[data-preset='2']", "aria-pressed") == "true"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "calc-kv-layers"
    page.keyboard.press("Control+A")
    page.keyboard.type("5")
    assert result(page, "total") == "160 B"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_nothing_with_the_form_working(tabs, scheme: str) -> None:
    page = started(tabs(scheme=scheme))
    page.fill("#calc-kv-heads", "abc")  # an error showing, too
    assert axe_violations(page) == []


def test_without_js_the_table_stands_alone(tabs) -> None:
    page = tabs(js=False).goto(PAGE)
    expect(page.locator(".calc-open")).to_be_hidden()
    assert page.locator(".calc-form").count() == 0
    table = page.locator(".calc-table table")
    expect(table).to_be_visible()
    assert "Each column checked against the starter's kv_bytes" in table.locator("caption").inner_text()
    assert table.locator("thead th").all_inner_texts() == ["Defaults", "Wide", "Full"]
    assert table.locator("tr.calc-out").last.locator("td").all_inner_texts() == ["32 B", "64 B", "96 B"]
    # A unit the label already says is not repeated; the others are said once, in the heading.
    assert table.locator("tbody th").all_inner_texts()[:3] == ["Layers", "Heads", "Precision (B)"]


def test_at_375_px_the_table_scrolls_inside_its_box(tabs) -> None:
    page = started(tabs(width=375))
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375


# --- Every lab's calculators: the page's compiled JavaScript against Python ---------------------


LABS = calculator_labs()


@pytest.fixture(scope="module")
def real_tabs(chromium, site_url: str):
    with tabs_on(chromium, site_url) as open_one:
        yield open_one


def test_the_site_has_calculators(project) -> None:
    assert LABS, "no lab declares a calculator"
    assert LABS == [lab.id for lab in project.labs if lab.calculators], "labs/*.yml read as YAML and parsed disagree"


def js_outputs(page, calc_id: str, values: dict) -> dict:
    return page.evaluate(
        "([id, values]) => { const r = InfraLensCalc.compute(InfraLensCalculators[id], values);"
        " return r.error ? {error: r.error} : {out: r.out}; }",
        [calc_id, values],
    )


@pytest.mark.parametrize("lab", LABS, indirect=True)
def test_compiled_outputs_equal_python_at_every_case_and_at_edges(real_tabs, lab) -> None:
    assert lab.calculators
    tab = real_tabs()
    page = started(tab, f"labs/{lab.id}/index.html")
    for calc in lab.calculators:
        checked, problems = check_calculator(calc, None)
        assert problems == []
        edges = [{**dict(listed_cases(calc)[0][1]), **{i.name: edge for i in calc.inputs if i.choices is None}} for edge in (0, 1, 2**53 + 1, 1e300)]
        for values in [dict(case.values) for case in checked.cases] + edges:
            got = js_outputs(page, calc.id, values)
            broken = unmet(calc, values)
            if broken is not None:
                assert got == {"error": broken.message}, (values, got)
                continue
            try:
                expected = outputs_at(calc, values)
            except ExprError as exc:
                assert "error" in got and got["error"].endswith(exc.message + "."), (values, got, exc.message)
                continue
            assert "out" in got, (values, got)
            for name, value in expected.items():
                assert got["out"][name] == value or math.isclose(got["out"][name], value, rel_tol=1e-12), (calc.id, name, values)
    assert tab.errors == []


# --- Number formatting: the page's show() against Python's, character for character ------------


@pytest.fixture(scope="module")
def formatter(tabs):
    return started(tabs())


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(
        st.integers(min_value=-(10**22), max_value=10**22).map(float),
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e22, max_value=1e22),
        st.sampled_from([0.0005, 0.00099999, 0.001, 999.5, 999.95, 1023.5, 1024.0, 1048575.9, 0.125, 2.5, 1.005, -0.5]),
        st.sampled_from([0.9995, 0.0125, 3.2e-5, 4.5e-9, 2e-13, -0.00099999, 1e-300]),  # `si` below 1: m, µ, n
    ),
    fmt=st.sampled_from(FORMATS),
    digits=st.integers(min_value=1, max_value=8),
)
def test_the_page_shows_every_number_as_the_build_does(formatter, value: float, fmt: str, digits: int) -> None:
    unit = "FLOP/s" if fmt == "si" else "per token"
    labels = ["no", "yes"]
    page = formatter.evaluate("([v, f, u, l, d]) => InfraLensCalc.show(v, f, u, l, d)", [value, fmt, unit, labels, digits])
    assert page == show(value, fmt, unit, tuple(labels), digits)


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(
        st.integers(min_value=-(10**22), max_value=10**22).map(float),
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e22, max_value=1e22),
        st.sampled_from([1 / 12, 2.039, 0.1003, 999999.5, 99999.95, 0.999999951, 1e-6, 123456789012.3125, 6738415616.0, 1.0, -1.0]),
    ),
    unit=st.sampled_from(["layers", "KV heads", "FLOP/s", "B", "batches", "queries", "loss", ""]),
)
def test_the_page_gives_inputs_and_their_units_as_the_build_does(formatter, value: float, unit: str) -> None:
    page = formatter.evaluate("([v, u]) => InfraLensCalc.counted(InfraLensCalc.exact(v), u)", [value, unit])
    assert page == counted(exact(value), unit or None)


# --- Lab 07: what the manifest says is what the form shows and computes with ---------------------


KV_CACHE = "labs/lab-07-kv-cache/index.html"


def test_lab_07_fills_the_exact_parameter_count_and_agrees_with_its_table(real_tabs) -> None:
    tab = real_tabs()
    page = started(tab, KV_CACHE)
    assert page.input_value("#calc-kv-fit-params") == "6,738,415,616"  # never 6,738,420,000
    table = page.locator("#calc-kv-fit .calc-table tr.calc-out", has=page.locator("th", has_text="Weights held")).locator("td").first.inner_text()
    assert table == "13.5 GB (13,476,831,232 B)"
    assert result(page, "weights") == table
    assert page.locator('[data-work="weights"]').inner_text() == "6,738,415,616 params × 2 B = 13.5 GB (13,476,831,232 B)"
    assert page.locator("#calc-kv-fit-gpu option:checked").inner_text() == "A100 80GB (80,000,000,000 B)"
    page.get_by_role("button", name="Llama-2-70B").click()
    assert page.input_value("#calc-kv-fit-params") == "68,976,648,192"
    assert page.get_attribute("[data-preset='1']", "aria-pressed") == "true"
    page.fill("#calc-kv-fit-layers", "1")
    assert page.locator('[data-work="kv_per_token"]').inner_text() == "2 × 1 layer × 8 KV heads × 128 × 2 B = 4 KiB (4,096 B)"
    page.fill("#calc-kv-fit-layers", "0")
    assert page.locator(".calc-status").inner_text() == "Layers: at least 1 layer."
    assert tab.errors == []


# --- The roofline of lab 02: the ring, the bound on both sides of the ridge, the slider -----------


ROOFLINE = "labs/lab-02-roofline/index.html"


@pytest.fixture(scope="module")
def roofline_tabs(chromium, tmp_path_factory: pytest.TempPathFactory):
    """Lab 02 checked into a private cache (its presets come from the starter's tables and its
    measured roof from the run) and the site built from it."""
    cache = tmp_path_factory.mktemp("roofline-cache")
    checked = run_infralens("check", "lab-02-roofline", "--no-state", "--cache-dir", str(cache), cwd=REPO)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    out = cache / "output"
    built = run_infralens("build", "--out", str(out), "--cache-dir", str(cache), cwd=REPO)
    assert built.returncode == 0, built.stderr
    with served(out) as url, tabs_on(chromium, url) as open_one:
        yield open_one


def marker(page) -> tuple[float, float]:
    ring = page.locator("#calc-roofline .marker")
    return float(ring.get_attribute("cx")), float(ring.get_attribute("cy"))


def test_the_roofline_reads_without_js(roofline_tabs) -> None:
    page = roofline_tabs(js=False).goto(ROOFLINE)
    image = page.locator("#calc-roofline .calc-chart img")
    expect(image).to_be_visible()
    assert page.evaluate("(img) => img.complete && img.naturalWidth", image.element_handle()) == 640  # the file loads
    svg = page.context.request.get(image.evaluate("img => img.src")).text()
    assert svg.count('<g class="roof">') == 3  # the datasheet GPUs and this machine's measured roof
    operators = svg[svg.index('<g class="ops">'):]
    assert operators[: operators.index("</g>")].count("<circle") == 6
    assert "memory-bound" in page.locator("#calc-roofline .calc-table").inner_text()


def test_the_bound_flips_at_the_ridge_and_the_ring_follows(roofline_tabs) -> None:
    tab = roofline_tabs()
    page = started(tab, ROOFLINE)
    page.get_by_role("button", name="A100 80GB SXM (defaults)").click()
    assert page.input_value("#calc-roofline-hbm_bytes_per_s") == "2.039"  # TB/s as the starter gives it, not 2.04
    for typed, bound, share in (("152", "memory-bound", "99.3%"), ("153.1", "compute-bound", "100%"), ("0.01", "memory-bound", "0.00654%")):
        page.fill("#calc-roofline-intensity", typed)
        assert result(page, "bound") == bound, typed
        assert result(page, "efficiency") == share, typed
    page.fill("#calc-roofline-intensity", "152")  # the choice in words, never "1 if … else 0"
    assert page.locator('[data-work="bound"]').inner_text() == "152 FLOP/B < 153 FLOP/B: memory-bound"
    low = marker(page)
    page.fill("#calc-roofline-intensity", "1000")
    high = marker(page)
    assert high[0] > low[0] and high[1] < low[1]  # right and up (SVG y grows downwards)
    assert page.locator('[data-work="bound"]').inner_text() == "1,000 FLOP/B ≥ 153 FLOP/B: compute-bound"
    assert result(page, "ridge") == "153 FLOP/B"
    page.get_by_role("button", name="H100 SXM").click()  # hardware changes, the intensity stays
    assert page.input_value("#calc-roofline-intensity") == "1000" and result(page, "ridge") == "295 FLOP/B"
    page.get_by_role("button", name="matmul n=1024").click()  # 170.7 FLOP/B: compute-bound on A100, not on H100
    assert result(page, "bound") == "memory-bound" and page.input_value("#calc-roofline-bf16_flops") == "989"
    page.get_by_role("button", name="A100 80GB SXM (defaults)").click()
    assert result(page, "bound") == "compute-bound"
    assert tab.errors == []


def test_the_slider_moves_the_intensity_on_a_log_scale_by_keyboard(roofline_tabs) -> None:
    page = started(roofline_tabs(), ROOFLINE)
    slider = page.locator("#calc-roofline [data-slider]")
    slider.focus()
    before = marker(page)
    for _ in range(100):  # one decade up, a hundredth at a time
        page.keyboard.press("ArrowRight")
    assert page.input_value("#calc-roofline-intensity") == "10"
    assert slider.get_attribute("aria-valuetext") == "10 FLOP/B"
    assert marker(page)[0] > before[0]
    page.fill("#calc-roofline-intensity", "100")
    assert slider.input_value() == "200"  # the slider follows what is typed


def test_the_roofline_is_axe_clean_in_both_themes(roofline_tabs) -> None:
    for scheme in ("light", "dark"):
        page = started(roofline_tabs(scheme=scheme), ROOFLINE)
        page.get_by_role("button", name="H100 SXM").click()
        assert axe_violations(page) == [], scheme


def test_the_roofline_follows_the_theme_and_reads_at_375_px(roofline_tabs) -> None:
    """Inlined, the chart takes the page's colours, the theme toggle's included; as an image, its
    own light-dark() colours follow the color-scheme of the page around it; on a phone its text is
    larger and crowded ticks lose every other label."""
    tab = roofline_tabs(scheme="light")
    page = started(tab, ROOFLINE)
    page.evaluate("document.documentElement.dataset.theme = 'dark'")
    panel = page.evaluate("getComputedStyle(document.querySelector('#calc-roofline .panel')).fill")
    assert panel == page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(20, 23, 27)"
    narrow = started(roofline_tabs(width=375, scheme="dark"), ROOFLINE)
    text = narrow.locator("#calc-roofline svg text").first
    assert float(text.evaluate("t => getComputedStyle(t).fontSize").removesuffix("px")) >= 20  # about 11 px once the picture is scaled to the phone
    assert narrow.locator("#calc-roofline svg .minor").count() > 0
    assert all(not box.is_visible() for box in narrow.locator("#calc-roofline svg .minor").all())
    image = roofline_tabs(width=375, js=False, scheme="dark").goto(ROOFLINE).locator("#calc-roofline .calc-chart img")
    assert image.bounding_box()["width"] >= 300  # the figure keeps no 40px sides
    svg = image.page.context.request.get(image.evaluate("img => img.src")).text()
    assert "light-dark(#fbfaf7,#14171b)" in svg and "svg:root{color-scheme:light dark}" in svg
    assert tab.errors == []


# --- Names a plain object would take for its own, and a mangled link ---------------------------

HOSTILE = {  # an input named __proto__, preset groups named as Object.prototype's methods
    "{name: heads, label: Heads,": "{name: __proto__, label: Heads,",
    "{label: Wide, values: {heads: 8}}": "{label: Wide, values: {__proto__: 8}, group: constructor}\n      - {label: Narrow, values: {__proto__: 2}, group: constructor}",
    "{label: Full, values: {dtype: fp32, layers: 3}}": "{label: Full, values: {dtype: fp32}, group: toString}\n      - {label: Deep, values: {layers: 3}, group: valueOf}",
    "kv_bytes(1, heads, dtype)": "kv_bytes(1, __proto__, dtype)",
    "expr: 2 * heads * dtype": "expr: 2 * __proto__ * dtype",
    "heads=heads": "heads=__proto__",
}


@pytest.fixture(scope="module")
def hostile_tabs(chromium, tmp_path_factory: pytest.TempPathFactory):
    """tests/sites/calculator with the names of HOSTILE, checked, built and served."""
    import shutil

    site = tmp_path_factory.mktemp("hostile") / "site"
    shutil.copytree(TESTS / "sites" / "calculator", site, ignore=shutil.ignore_patterns(".infralens", "output"))
    manifest = site / "labs/lab-01-calc.yml"
    text = manifest.read_text()
    for old, new in HOSTILE.items():
        assert old in text
        text = text.replace(old, new)
    manifest.write_text(text)
    env = {"INFRALENS_CACHE_DIR": str(site / ".infralens")}
    checked = run_infralens("check", cwd=site, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    built = run_infralens("build", "--out", "out", cwd=site, env=env)
    assert built.returncode == 0, built.stderr
    with served(site / "out") as url, tabs_on(chromium, url) as open_one:
        yield open_one


def test_an_input_named_proto_and_groups_named_as_object_methods_work(hostile_tabs) -> None:
    tab = hostile_tabs()
    page = started(tab)
    assert page.locator(".calc-group").all_inner_texts() == ["constructor", "toString", "valueOf"]
    assert result(page, "total") == "32 B"
    page.fill("#calc-kv-__proto__", "8")
    assert result(page, "per_layer") == "32" and result(page, "total") == "64 B"
    assert page.get_attribute("[data-preset='1']", "aria-pressed") == "true"  # Wide: __proto__ 8
    page.get_by_role("button", name="Narrow").click()
    assert page.input_value("#calc-kv-__proto__") == "2" and result(page, "total") == "16 B"
    page.get_by_role("button", name="Full").click()
    assert page.input_value("#calc-kv-dtype") == "fp32" and page.input_value("#calc-kv-__proto__") == "2"  # the group sets dtype only
    assert result(page, "total") == "32 B"
    assert page.locator(".calc-share a").get_attribute("href") == "#calc-kv?__proto__=2&dtype=fp32"
    assert page.locator(".calc-status").inner_text() == "" and tab.errors == []


def test_a_link_with_a_mangled_parameter_ignores_it_and_computes(tabs) -> None:
    tab = tabs()
    page = tab.goto(PAGE + "#calc-kv?layers=%E0%A4&heads=16")
    page.wait_for_function("document.querySelector('[data-calc]').dataset.ready")
    assert page.input_value("#calc-kv-heads") == "16" and page.input_value("#calc-kv-layers") == "2"  # the bad one left at its default
    assert result(page, "total") == "128 B"
    assert tab.errors == []
