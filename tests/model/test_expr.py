"""Calculator expressions: the whitelist, Python's evaluation, and the compiled JavaScript in Chromium."""

from __future__ import annotations

import math

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from infralens.model.expr import ExprError, evaluate, parse_expr, to_js

NAMES = frozenset({"layers", "kv_heads", "head_dim", "bytes", "batch", "seq"})
KV = "2 * layers * kv_heads * head_dim * bytes"
LLAMA = {"layers": 32, "kv_heads": 32, "head_dim": 128, "bytes": 2, "batch": 1, "seq": 4096}


@pytest.mark.unit
def test_the_kv_cache_expression_gives_lab_01s_figure_exactly() -> None:
    assert evaluate(parse_expr(KV, NAMES), LLAMA) == 524_288
    per_sequence = parse_expr(f"{KV} * seq", NAMES)
    assert per_sequence.names == {"layers", "kv_heads", "head_dim", "bytes", "seq"}
    assert evaluate(per_sequence, LLAMA) == 2_147_483_648


@pytest.mark.unit
@pytest.mark.parametrize(
    "text, value",
    [
        ("7 // 2", 3),
        ("-7 // 2", -4),  # floors, as Python does
        ("-7 % 3", 2),  # the divisor's sign, as Python does
        ("7 % -3", -2),
        ("1 // 0.1", 10),  # the true quotient floored, as a browser does
        ("2 ** 10", 1024),
        ("2 ** -1", 0.5),
        ("ceil(seq / 16) * 16", 4096),
        ("min(batch, 8, seq)", 1),
        ("max(1, 2.5)", 2.5),
        ("floor(log2(seq))", 12),
        ("sqrt(head_dim * 2)", 16.0),
        ("abs(1 - seq)", 4095),
        ("1 if batch > 1 else 2", 2),
        ("3 if batch >= 1 and seq == 4096 else 4", 3),
        ("5 if not batch < 1 or seq != 1 else 6", 5),
        ("2 ** 60", float(2**60)),  # beyond 2**53 a value is the float a browser would hold
    ],
)
def test_arithmetic_follows_python_where_a_browser_can_follow(text: str, value) -> None:
    result = evaluate(parse_expr(text, NAMES), LLAMA)
    assert result == value and type(result) is type(value)


@pytest.mark.unit
@pytest.mark.parametrize(
    "text, message, offset",
    [
        ("layers +", "not an expression: invalid syntax", 8),
        ("layer * 2", "unknown name 'layer' (did you mean 'layers'?)", 0),
        ("layers.__class__", "'layers.__class__' is not arithmetic a calculator does", 0),
        ("__import__('os')", "only these functions can be called: min, max, ceil, floor, abs, sqrt, log2", 0),
        ("open('x')", "only these functions can be called: min, max, ceil, floor, abs, sqrt, log2", 0),
        ("'a' * 3", "only numbers may be written, not 'a'", 0),
        ("True + 1", "only numbers may be written, not True", 0),
        ("[1, 2]", "'[1, 2]' is not arithmetic a calculator does", 0),
        ("(lambda: 1)()", "only these functions can be called: min, max, ceil, floor, abs, sqrt, log2", 0),
        ("0 if 1 < seq < 3 else 1", "compare two values at a time (write `a < b and b < c`)", 5),
        ("zz", "unknown name 'zz' (known: batch, bytes, head_dim, kv_heads, layers, seq)", 0),
        ("batch > 1", "a condition is a number only inside `a if condition else b`", 0),
        ("1 if seq else 2", "expected a condition (a comparison such as `batch > 1`)", 5),
        ("min(1)", "min() takes at least 2 arguments, got 1", 0),
        ("ceil(1, 2)", "ceil() takes 1 argument, got 2", 0),
        ("max(*seq)", "max() takes plain arguments, not *seq", 4),
        ("  seq @ seq", "operator MatMult is not arithmetic a calculator does", 2),
        ("x" * 1001, "an expression is at most 1,000 characters, this one has 1,001", 0),
        ("", "the expression is empty", 0),
    ],
)
def test_anything_but_whitelisted_arithmetic_is_refused_with_its_place(text: str, message: str, offset: int) -> None:
    with pytest.raises(ExprError) as caught:
        parse_expr(text, NAMES)
    assert (caught.value.message, caught.value.offset) == (message, offset)


@pytest.mark.unit
@pytest.mark.parametrize(
    "text, message",
    [
        ("seq / (batch - 1)", "division by zero"),
        ("seq // 0", "division by zero"),
        ("seq % 0.0", "division by zero"),
        ("10 ** 400", "a power too large to compute"),
        ("2 ** 100000000", "a power too large to compute"),
        ("0 ** -1", "zero to a negative power"),
        ("(-8) ** 0.5", "a negative number to a fractional power"),
        ("sqrt(-1)", "the square root of a negative number"),
        ("log2(0)", "the logarithm of a number that is not positive"),
        ("1e308 * 10", "the result is not a finite number"),
    ],
)
def test_what_a_page_must_not_show_is_an_error_not_a_value(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=message):
        evaluate(parse_expr(text, NAMES), LLAMA)


# --- Python and the compiled JavaScript agree, in Chromium ---------------------------------------

CASES = [
    KV,
    f"{KV} * seq * batch",
    "7 // 2", "-7 // 2", "-7 % 3", "7 % -3", "7.5 % -2", "1 // 0.1", "-1 // 0.1",
    "2 ** 10", "2 ** -1", "3 ** 33", "3 ** 34", "2 ** 60 + 1", "(-2) ** 51", "(-1) ** 7", "0 ** 0",
    "ceil(seq / 16) * 16", "floor(-seq / 7)", "min(batch, 8, seq)", "max(1, 2.5)",
    "floor(log2(seq))", "sqrt(head_dim * 2)", "abs(1 - seq)", "1 if batch > 1 else 2",
    "3 if batch >= 1 and seq == 4096 else 4", "5 if not batch < 1 or seq != 1 else 6",
    "seq / 3", "layers * 0.1 * 3", "1e300 * 1e8",
    "seq / (batch - 1)", "seq % 0", "10 ** 400", "sqrt(-seq)", "log2(batch - 1)", "1e308 * 10",
]


def python_side(text: str, values: dict) -> dict:
    try:
        return {"value": evaluate(parse_expr(text, NAMES), values)}
    except ExprError as error:
        return {"error": error.message}


def agree(python: dict, browser: dict) -> bool:
    if "error" in python or "error" in browser:
        return python == browser
    a, b = python["value"], browser["value"]
    if isinstance(a, int) and abs(a) < 2**53:
        return a == b  # whole numbers below 2**53: exactly
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


@pytest.fixture(scope="module")
def js_page(chromium):
    """A blank page holding the runtime, with every case compiled to a function."""
    context = chromium.new_context()
    page = context.new_page()
    page.set_content("<!doctype html><title>expr</title>")
    page.add_script_tag(content=(REPO / "templates/static/calculator.js").read_text() + "window.X = X;")
    yield page
    context.close()


def browser_side(page, text: str, values: dict) -> dict:
    source = to_js(parse_expr(text, NAMES))
    return page.evaluate(
        f"""(v) => {{ try {{ return {{value: {source}}}; }} catch (e) {{ return {{error: e.message}}; }} }}""",
        values,
    )


@pytest.mark.browser
@pytest.mark.parametrize("text", CASES)
def test_the_compiled_javascript_computes_what_python_computes(js_page, text: str) -> None:
    python, browser = python_side(text, LLAMA), browser_side(js_page, text, LLAMA)
    assert agree(python, browser), (python, browser, to_js(parse_expr(text, NAMES)))


@pytest.mark.browser
@settings(max_examples=150, deadline=None)
@given(
    text=st.sampled_from([c for c in CASES if "seq % 0" not in c]),
    values=st.fixed_dictionaries({name: st.one_of(st.integers(-10**6, 10**6), st.floats(-1e6, 1e6, allow_nan=False)) for name in sorted(NAMES)}),
)
def test_python_and_javascript_agree_on_any_inputs_even_errors(js_page, text: str, values: dict) -> None:
    python, browser = python_side(text, values), browser_side(js_page, text, values)
    assert agree(python, browser), (text, values, python, browser)


@pytest.mark.unit
def test_the_compiled_javascript_reads_only_its_scope_and_the_runtime() -> None:
    source = to_js(parse_expr("min(seq, 2) if batch > 1 else -seq // 3", NAMES))
    assert source == "X.num(((v['batch'] > 1) ? X.min(v['seq'], 2) : X.floordiv((-v['seq']), 3)))"
