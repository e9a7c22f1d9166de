"""`$…$` and `$$…$$` in manifest prose: MathML at build time, and a bad formula is an error at its line."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from conftest import AXE, REPO, run_infralens

from infralens.build import load_project
from infralens.build.render import Renderer
from infralens.errors import InputError
from infralens.lab.claims import figure_line, stated_figures
from infralens.model.parse import parse_lab
from infralens.text.markdown import Formula, formulas
from infralens.text.mathml import MalformedMath, to_mathml

MANIFEST = """\
number: 1
title: Math lab
track: basics
summary: One line.
concept_goal: Goal.
mechanism: [One.]
starters:
  - path: code/lab-01-math/kv.py
    role: A starter.
preview: {starter: code/lab-01-math/kv.py, region: formula}
key_blocks:
  - {name: per_layer, lines: per_layer =, note: K and V.}
checkpoints: [One.]
misunderstandings: [One.]
interview: Say it.
intuition: [One.]
further_reading:
  - {kind: paper, title: GQA, url: "https://arxiv.org/abs/2305.13245"}
"""


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    return Renderer(REPO / "templates")


def errors_of(text: str) -> list[str]:
    with pytest.raises(InputError) as caught:
        parse_lab("labs/lab-01-math.yml", "lab-01-math", text)
    return [str(problem) for problem in caught.value.problems]


def math_elements(rendered: str) -> list[str]:
    return re.findall(r'<math display="(\w+)">', rendered)


# ------------------------------------------------------------------ finding formulas


@pytest.mark.unit
def test_single_dollars_are_inline_and_double_dollars_display() -> None:
    assert formulas("a $x^2$ b") == (Formula("x^2", display=False),)
    assert formulas("a $$x^2$$ b") == (Formula("x^2", display=True),)
    assert formulas("Before.\n\n$$\n\\frac{a}{b}\n$$\n\nAfter.") == (Formula(r"\frac{a}{b}", display=True),)
    assert 'display="inline"' in to_mathml("x", display=False)
    assert 'display="block"' in to_mathml("x", display=True)


@pytest.mark.parametrize("text", [
    "Costs $5 and $6 a month.",
    "From $5 to $10.",
    "Between $5, or $x.",
    "A lone $ sign.",
    "$ x $ has spaces inside the dollars.",
    "5$x$ and $x$5 touch digits.",
    "`$x$` is inline code.",
    "```\n$x$\n```",
    r"\$x$ starts with an escaped dollar.",
    r"Both escaped: \$x\$.",
])
@pytest.mark.unit
def test_text_that_is_not_math(text: str, renderer: Renderer) -> None:
    assert formulas(text) == ()
    assert "<math" not in renderer.block_markdown(text)
    assert "<math" not in renderer.inline_markdown(text)


@pytest.mark.unit
def test_dollars_stay_literal_in_the_page(renderer: Renderer) -> None:
    assert renderer.inline_markdown("Costs $5 and $6.") == "Costs $5 and $6."
    assert renderer.inline_markdown(r"Price: \$x$.") == "Price: $x$."
    assert renderer.inline_markdown("Use `$x$` here.") == "Use <code>$x$</code> here."


@pytest.mark.parametrize("text", [
    "a $x$ b $$y$$ c",
    "Costs $5, so $c = 5$ here.",
    "| a | b |\n| - | - |\n| $x$ | $y$ |",
    "- $a$\n- `$b$`\n- $$c$$",
])
@pytest.mark.unit
def test_formulas_are_found_the_way_the_renderer_tokenizes(text: str, renderer: Renderer) -> None:
    assert len(math_elements(renderer.block_markdown(text))) == len(formulas(text))


@pytest.mark.unit
def test_formulas_cover_block_and_inline_rendering(renderer: Renderer) -> None:
    # An indented line is a code block to `md` but prose to `mdi`; a field may be rendered either way.
    text = "Para $x$.\n\n    indented $y$"
    assert formulas(text) == (Formula("x", display=False), Formula("y", display=False))
    assert len(math_elements(renderer.block_markdown(text))) == 1
    assert len(math_elements(renderer.inline_markdown(text))) == 2


# ------------------------------------------------------------------ converting


@pytest.mark.unit
def test_inline_math_renders_in_inline_prose(renderer: Renderer) -> None:
    rendered = renderer.inline_markdown(r"The rate is $\min(\pi, I \beta)$, or $$I = F / B$$.")
    assert math_elements(rendered) == ["inline", "block"]
    assert "<p>" not in rendered


@pytest.mark.unit
def test_display_math_is_a_block_of_its_own(renderer: Renderer) -> None:
    rendered = renderer.block_markdown("Before.\n\n$$\nl \\leftarrow l\\,e^{m - m'}\n$$\n\nAfter.")
    assert math_elements(rendered) == ["block"]
    assert "<p>Before.</p>\n<math" in rendered
    assert "←" in rendered  # \leftarrow, as the character itself


@pytest.mark.unit
def test_html_special_characters_are_escaped() -> None:
    script = to_mathml("<script>alert(1)</script>", display=False)
    assert "<script" not in script and "&lt;" in script
    text = to_mathml(r"\text{<b>&amp; x}", display=False)
    assert "<b>" not in text
    assert "&lt;b&gt;&amp;amp;" in text
    assert to_mathml(r"\text{a & b}", display=False).count("&amp;") == 1


@pytest.mark.unit
def test_commands_that_write_html_attributes_are_refused() -> None:
    for latex in (r"\href{javascript:alert(1)}{x}", r"\style{color:red}{x}", r"\class{x}{y}"):
        with pytest.raises(MalformedMath, match="not allowed"):
            to_mathml(latex, display=False)


@pytest.mark.parametrize(("latex", "reason"), [
    (r"\frac{a}{", "unbalanced braces (a { is never closed)"),
    (r"a}", "unbalanced braces (a } closes nothing)"),
    (r"x^", "^ or _ has nothing after it"),
    (r"\notacommand", r"unknown command \notacommand"),
    (r"\text{\{x\}}", r"\{ inside \text{…} is not supported; write it outside the text"),
    ("\\", r"a lone \ starts no command"),
    (r"\left( x", r"\left and \right do not pair up"),
    (r"\begin{matrix} a", r"\begin has no matching \end"),
    (r"\frac{a}", "a command is missing an argument"),
    (r"\sqrt", "it ends too early (a command is missing an argument, or \\left its \\right)"),
])
@pytest.mark.unit
def test_malformed_formulas_say_why(latex: str, reason: str) -> None:
    with pytest.raises(MalformedMath) as caught:
        to_mathml(latex, display=False)
    assert str(caught.value) == reason


@pytest.mark.unit
def test_sound_formulas_convert() -> None:
    for latex in (r"\frac{}{}", r"\{a\}", r"a \\ b", r"\$5", r"\sqrt{d_k}", r"10^{9}", r"\text{FLOPs} / \text{bytes}"):
        assert to_mathml(latex, display=False).startswith("<math ")


@pytest.mark.unit
def test_escapes_inside_text_show_the_character_not_the_backslash() -> None:
    assert "<mtext>50%</mtext>" in to_mathml(r"\text{50\%}", display=False)
    assert "<mtext>d_model</mtext>" in to_mathml(r"\text{d\_model}", display=False)


# ------------------------------------------------------------------ errors at the formula's line


@pytest.mark.unit
def test_a_malformed_formula_in_a_plain_scalar_points_at_its_dollar() -> None:
    text = MANIFEST.replace("interview: Say it.", r"interview: Say $\frac{a}{$ out loud.")
    line = text.split("\n").index(r"interview: Say $\frac{a}{$ out loud.") + 1
    assert errors_of(text) == [
        f"labs/lab-01-math.yml:{line}:16: error: malformed math $\\frac{{a}}{{$: unbalanced braces (a {{ is never closed)"
    ]


@pytest.mark.parametrize("style", ["|", ">", ">-"])
@pytest.mark.unit
def test_a_malformed_formula_in_a_block_scalar_points_at_its_line(style: str) -> None:
    note = f"note: {style}\n      K and V.\n\n      Per layer: $2 h x^$ entries.\n"
    text = MANIFEST.replace("  - {name: per_layer, lines: per_layer =, note: K and V.}\n", f"  - name: per_layer\n    lines: per_layer =\n    {note}")
    line = text.split("\n").index("      Per layer: $2 h x^$ entries.") + 1
    assert errors_of(text) == [f"labs/lab-01-math.yml:{line}:18: error: malformed math $2 h x^$: ^ or _ has nothing after it"]


@pytest.mark.unit
def test_a_malformed_display_block_points_at_its_opening_dollars() -> None:
    text = MANIFEST.replace("interview: Say it.", "interview: |\n  Say it:\n\n  $$\n  x = \\frac{a}\n  $$")
    line = text.split("\n").index("  $$") + 1
    assert errors_of(text) == [f"labs/lab-01-math.yml:{line}:3: error: malformed math $$x = \\frac{{a}}$$: a command is missing an argument"]


@pytest.mark.unit
def test_a_formula_folded_across_lines_points_at_its_first_line() -> None:
    text = MANIFEST.replace("concept_goal: Goal.", "concept_goal: >-\n  The cost is $2 \\cdot L \\cdot\n  \\notacommand$ bytes.")
    line = text.split("\n").index("  The cost is $2 \\cdot L \\cdot") + 1
    assert errors_of(text) == [
        f"labs/lab-01-math.yml:{line}:15: error: malformed math $2 \\cdot L \\cdot \\notacommand$: unknown command \\notacommand"
    ]


@pytest.mark.unit
def test_a_malformed_formula_in_a_list_item_points_at_the_item() -> None:
    text = MANIFEST.replace("checkpoints: [One.]", "checkpoints:\n  - Fine $x$.\n  - Also fine, then $y_$ is not.")
    line = text.split("\n").index("  - Also fine, then $y_$ is not.") + 1
    assert errors_of(text) == [f"labs/lab-01-math.yml:{line}:21: error: malformed math $y_$: ^ or _ has nothing after it"]


@pytest.mark.unit
def test_every_malformed_formula_is_reported() -> None:
    text = MANIFEST.replace("summary: One line.", "summary: $a}$ and $x^$.").replace("mechanism: [One.]", "mechanism: [One $\\nope$.]")
    assert [e.split(": error: ")[1] for e in errors_of(text)] == [
        "malformed math $a}$: unbalanced braces (a } closes nothing)",
        "malformed math $x^$: ^ or _ has nothing after it",
        "malformed math $\\nope$: unknown command \\nope",
    ]


@pytest.mark.unit
def test_a_formula_yaml_escaped_falls_back_to_the_start_of_the_value() -> None:
    text = MANIFEST.replace("interview: Say it.", 'interview: "Say $\\\\frac{a}$."')
    line = text.split("\n").index('interview: "Say $\\\\frac{a}$."') + 1
    assert errors_of(text) == [f"labs/lab-01-math.yml:{line}:12: error: malformed math $\\frac{{a}}$: a command is missing an argument"]


# ------------------------------------------------------------------ figures and the built page


@pytest.mark.unit
def test_numbers_in_math_count_as_figures_but_tex_syntax_does_not(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    note = r"note: 'K and V: $10^{9}$ over $\sqrt{d_k}$, $x_{1}$, $2^{10}$ and $\hspace{1.5em}$; $524{,}288$ bytes, $0.5$ MiB.'"
    manifest.write_text(manifest.read_text().replace("note: K and V, so the **factor 2**.", note))
    lab = load_project(sample_site / "site.yml").labs[0]
    assert stated_figures(lab) == ["524,288", "0.5"]
    assert figure_line("a: 6,7\nb: $6{,}738$\n", "6,738") == (2, 5)


@pytest.mark.cli
def test_the_built_page_carries_mathml(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text()
        .replace("interview: Start from `2 * layers * kv_heads * head_dim * bytes`.",
                 "interview: |\n  Start from $2 L h_\\text{kv} d_\\text{head} b$ bytes per token:\n\n  $$\n  2 \\cdot 32 \\cdot 8 \\cdot 128 \\cdot 2\n  $$")
        .replace("  - Bytes grow with *layers*, KV heads and head size.",
                 "  - Bytes grow with $L$, $h_\\text{kv}$ and $d_\\text{head}$, not with $5 or $6 of budget."))
    out = sample_site / "output"
    result = run_infralens("build", "--out", str(out), cwd=sample_site)
    assert result.returncode == 0, result.stderr
    page = (out / "labs/lab-01-sample/index.html").read_text()
    assert math_elements(page) == ["inline", "inline", "inline", "inline", "block"]
    assert "<msub><mi>h</mi><mtext>kv</mtext></msub>" in page
    assert "not with $5 or $6 of budget." in html.unescape(page)




@pytest.mark.parametrize("width", [1280, 375])
@pytest.mark.browser
def test_chromium_lays_out_the_mathml_with_scripts_off(open_tab, width: int) -> None:
    tab = open_tab(width=width, js=False)
    page = tab.goto("labs/lab-04-online-softmax/index.html")
    boxes = page.evaluate("[...document.querySelectorAll('math')].map(m => m.getBoundingClientRect().toJSON())")
    assert len(boxes) >= 4
    assert all(0 < box["width"] and box["right"] <= width for box in boxes)
    assert tab.errors == [] and tab.external == []


@pytest.mark.browser
def test_a_page_with_math_has_no_axe_violations(open_tab) -> None:
    tab = open_tab()
    page = tab.goto("labs/lab-04-online-softmax/index.html")
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    assert [v["id"] for v in result["violations"]] == []
    assert tab.errors == []


KEPT_PROBE = """\
import sys
from pathlib import Path
from infralens.text import mathml
mathml.keep_in(Path(sys.argv[1]))
print(mathml.to_mathml(r"\\frac{a}{b} + \\sum_i x_i", display=True))
print("converter loaded" if "latex2mathml" in sys.modules else "converter not loaded")
"""


@pytest.mark.cli
def test_a_formula_converted_before_is_read_back_without_the_converter(tmp_path: Path) -> None:
    import subprocess
    import sys

    def convert() -> list[str]:
        done = subprocess.run([sys.executable, "-c", KEPT_PROBE, str(tmp_path / "kept")], capture_output=True, text=True, check=True)
        return done.stdout.splitlines()

    first, second = convert(), convert()
    assert first[1] == "converter loaded" and second[1] == "converter not loaded"
    assert first[0] == second[0] == to_mathml(r"\frac{a}{b} + \sum_i x_i", display=True)
    assert len(list((tmp_path / "kept").rglob("*.html"))) == 1


@pytest.mark.unit
def test_kept_formulas_are_kept_per_formula_and_mode_and_bad_ones_still_fail(tmp_path: Path) -> None:
    from infralens.text import mathml

    to_mathml.cache_clear()
    mathml.keep_in(tmp_path)
    try:
        inline, block = to_mathml("x^2", display=False), to_mathml("x^2", display=True)
        assert inline != block and 'display="block"' in block
        assert len(list(tmp_path.rglob("*.html"))) == 2
        with pytest.raises(MalformedMath, match="double superscript"):
            to_mathml("x^2^3", display=False)
        assert len(list(tmp_path.rglob("*.html"))) == 2
        kept = next(tmp_path.rglob("*.html"))
        kept.write_text(kept.read_text()[:-5])  # damaged: cut short
        to_mathml.cache_clear()
        assert to_mathml("x^2", display=False) == inline and to_mathml("x^2", display=True) == block
        (tmp_path / "blocked").write_text("a file where the folder would go")
        mathml.keep_in(tmp_path / "blocked")
        assert to_mathml("y_1", display=False).startswith("<math")  # a cache that cannot be written costs a conversion, no more
    finally:
        mathml.keep_in(None)
        to_mathml.cache_clear()
