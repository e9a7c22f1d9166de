"""Calculators: the manifest section, the parity with the starter, and the numbers a page shows."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import REPO, TESTS, calculator_labs, run_infralens

from infralens.errors import InputError
from infralens.lab.calculators import calculators_script, check_calculator, check_lab_calculators, listed_cases, probe_request, starter_probe, unmet
from infralens.lab.shown import arithmetic, branches, counted, exact, show, show_input, significant
from infralens.model.expr import ExprError, parse_call, parse_expr
from infralens.model.parse import parse_lab
from infralens.model.run import RunResult

LAB_HEAD = """number: 1
title: Calc lab
track: basics
summary: A lab with a calculator.
concept_goal: Goal.
mechanism: [One.]
starters:
  - path: code/lab-01-calc/kv.py
    role: A starter.
preview:
  starter: code/lab-01-calc/kv.py
  region: formula
key_blocks:
  - name: per_layer
    lines: per_layer =
    note: K and V.
checkpoints: [One.]
misunderstandings: [One.]
interview: Say it.
intuition: [One.]
further_reading:
  - {kind: paper, title: GQA, url: "https://arxiv.org/abs/2305.13245"}
"""

CALC = """calculators:
  - id: kv
    title: KV bytes
    after: per_layer
    inputs:
      - {name: layers, label: Layers, unit: layers, default: 2, min: 1, max: 100}
      - {name: heads, label: Heads, unit: heads, default: 4, min: 1}
      - {name: dtype, label: Precision, unit: B, default: bf16, choices: {fp32: 4, bf16: 2}}
    presets:
      - {label: Wide, values: {heads: 8}}
      - {label: Full, values: {dtype: fp32, layers: 3}}
    outputs:
      - name: per_layer
        label: Per layer
        expr: 2 * heads * dtype
        mirrors: kv_bytes(1, heads, dtype)
        format: int
      - name: total
        label: Total
        expr: layers * per_layer
        mirrors: "kv_bytes(layers=layers, heads=heads, dtype=dtype)"
        format: bytes
"""


def shipped_json(script: str) -> str:
    """The JSON a lab's calculators.js hands to JSON.parse, as text (it ships as a JS string literal)."""
    return "".join(json.loads(literal) for literal in re.findall(r'JSON\.parse\(("(?:[^"\\]|\\.)*")\)', script))


def lab_with(calc: str = CALC):
    return parse_lab("labs/lab-01-calc.yml", "lab-01-calc", LAB_HEAD + calc)


def problems_of(calc: str) -> list[str]:
    with pytest.raises(InputError) as caught:
        lab_with(calc)
    return [str(p) for p in caught.value.problems]


@pytest.mark.unit
def test_a_calculator_parses_with_its_inputs_presets_and_outputs() -> None:
    calc = lab_with().calculators[0]
    assert [i.name for i in calc.inputs] == ["layers", "heads", "dtype"]
    assert calc.input("dtype").number("fp32") == 4 and calc.input("layers").whole
    assert [p.label for p in calc.presets] == ["Wide", "Full"]
    assert probe_request(calc)["mirrors"]["per_layer"] == {
        "call": "kv_bytes", "args": [1, {"input": "heads"}, {"input": "dtype"}], "kwargs": {},
    }
    assert probe_request(calc)["choices"] == {"dtype": {"fp32": 4, "bf16": 2}}


@pytest.mark.unit
@pytest.mark.parametrize("change, expected", [
    ("expr: 2 * heads * dtype", None),
    ("expr: 2 * head * dtype", "labs/lab-01-calc.yml:37:19: error: expr: unknown name 'head' (did you mean 'heads'?)"),
    ("expr: 2 * heads * total", "labs/lab-01-calc.yml:37:27: error: expr: unknown name 'total' (known: dtype, heads, layers)"),
    ("expr: 2 * heads ** dtype)", "labs/lab-01-calc.yml:37:33: error: expr: not an expression: unmatched ')'"),
    ("expr: '2 * heads.real'", "labs/lab-01-calc.yml:37:20: error: expr: 'heads.real' is not arithmetic a calculator does"),
])
def test_an_expression_error_points_at_its_column(change: str, expected: str | None) -> None:
    text = CALC.replace("expr: 2 * heads * dtype", change)
    if expected is None:
        lab_with(text)
    else:
        assert problems_of(text) == [expected]


@pytest.mark.unit
@pytest.mark.parametrize("change, expected", [
    ("kv_bytes(1, heads, dtype.name)", "labs/lab-01-calc.yml:38:18: error: mirrors: dtype.name: only an input with choices has a name; 'dtype' is a number"),
    ("kv_bytes(1, head, dtype)", "labs/lab-01-calc.yml:38:30: error: mirrors: unknown input 'head' (did you mean 'heads'?)"),
    ("kv_bytes(*heads)", "labs/lab-01-calc.yml:38:27: error: mirrors: pass arguments one by one, not with *"),
    ("heads(1)", "labs/lab-01-calc.yml:38:18: error: mirrors: 'heads' is an input, not a function of the starter"),
    ("kv_bytes(1, heads, dtype)[heads]", "labs/lab-01-calc.yml:38:44: error: mirrors: an index must be a whole number or a quoted key"),
])
def test_a_mirrors_error_points_at_its_column(change: str, expected: str) -> None:
    text = CALC.replace("mirrors: kv_bytes(1, heads, dtype)", f"mirrors: {change}")
    if "dtype.name" in change:
        text = text.replace("choices: {fp32: 4, bf16: 2}", "min: 1").replace("default: bf16", "default: 2").replace("{dtype: fp32, layers: 3}", "{layers: 3}")
    assert problems_of(text) == [expected]


@pytest.mark.unit
@pytest.mark.parametrize("old, new, expected", [
    ("{label: Wide, values: {heads: 8}}", "{label: Wide, values: {head: 8}}", "labs/lab-01-calc.yml:32:32: error: preset 'Wide': 'head' is not an input (did you mean 'heads'?)"),
    ("{label: Wide, values: {heads: 8}}", "{label: Wide, values: {heads: 0}}", "labs/lab-01-calc.yml:32:32: error: preset 'Wide': heads must be at least 1, got 0"),
    ("{label: Full, values: {dtype: fp32, layers: 3}}", "{label: Full, values: {dtype: fp16, layers: 3}}", "labs/lab-01-calc.yml:33:32: error: preset 'Full': dtype must be one of: fp32, bf16; got 'fp16'"),
    ("{label: Full, values:", "{label: Wide, values:", "labs/lab-01-calc.yml:33:9: error: duplicate preset 'Wide'"),
    ("default: 2, min: 1, max: 100", "default: 2.5, min: 1, max: 100", None),
    ("default: 2, min: 1, max: 100", "default: 200, min: 1, max: 100", "labs/lab-01-calc.yml:28:62: error: default: layers must be at most 100, got 200"),
    ("default: 2, min: 1, max: 100", "default: 2, min: 10, max: 1", "labs/lab-01-calc.yml:28:79: error: max (1) is below min (10)"),
    ("default: bf16, choices", "default: bf16, min: 1, choices", "labs/lab-01-calc.yml:30:70: error: input 'dtype' has choices, so it takes no min"),
    ("name: total", "name: heads", "labs/lab-01-calc.yml:40:9: error: 'heads' is already the name of an input or output\nlabs/lab-01-calc.yml:29:9: note: 'heads' is first named here"),
    ("name: total", "name: ceil", "labs/lab-01-calc.yml:40:9: error: 'ceil' is a function of expressions; name it otherwise"),
    ("after: per_layer", "after: per_layers", "labs/lab-01-calc.yml:24:5: error: calculator 'kv': after: 'per_layers' is not a key block's name (did you mean 'per_layer'?)"),
])
def test_inputs_presets_and_names_are_checked_where_they_are_written(old: str, new: str, expected: str | None) -> None:
    text = CALC.replace(old, new, 1)
    assert text != CALC
    if expected is None:
        assert not lab_with(text).calculators[0].input("layers").whole
    else:
        assert problems_of(text) == [expected]


@pytest.mark.unit
def test_an_expression_that_fails_at_a_preset_is_an_error_naming_the_preset() -> None:
    text = CALC.replace("expr: layers * per_layer", "expr: per_layer // (4 - heads // 2)")
    assert problems_of(text) == ["labs/lab-01-calc.yml:42:15: error: expr: at preset 'Wide': division by zero"]


def answers_for(calc, values_by_case: list[dict], per_layer: int | float | None = None) -> dict:
    """Answers as the probe gives them, computed here as the starter would: 2 * heads * bytes."""
    sizes = {"fp32": 4, "bf16": 2}
    cases = []
    for label, values in values_by_case:
        one = 2 * values["heads"] * sizes[values["dtype"]]
        cases.append({"label": label, "values": values, "answers": {
            "per_layer": {"value": one if per_layer is None else per_layer},
            "total": {"value": values["layers"] * one},
        }})
    return {"cases": cases}


DEFAULTS = {"layers": 2, "heads": 4, "dtype": "bf16"}
CASES = [("defaults", DEFAULTS), ("Wide", {**DEFAULTS, "heads": 8}), ("Full", {**DEFAULTS, "dtype": "fp32", "layers": 3})]


@pytest.mark.unit
def test_a_calculator_that_agrees_at_every_case_is_verified() -> None:
    calc = lab_with().calculators[0]
    checked, problems = check_calculator(calc, answers_for(calc, CASES), "2026-11-24T07:00:00Z")
    assert problems == []
    assert checked.verified and checked.checked == "2026-11-24T07:00:00Z"
    assert [case.label for case in checked.cases] == ["Defaults", "Wide", "Full"]
    assert [dict(case.results)["total"] for case in checked.cases] == [32, 64, 96]


@pytest.mark.unit
def test_a_disagreeing_value_fails_at_the_expression_a_failed_call_at_mirrors() -> None:
    calc = lab_with().calculators[0]
    _, problems = check_calculator(calc, answers_for(calc, CASES, per_layer=17))
    assert [str(p) for p in problems][:1] == [
        "labs/lab-01-calc.yml:37:15: error: expr: at the defaults, per_layer = 16 but the starter's kv_bytes(1, heads, dtype) gives 17 (also at preset 'Wide', preset 'Full')"
    ]
    broken = answers_for(calc, CASES)
    broken["cases"][1]["answers"]["total"] = {"error": "TypeError: kv_bytes() got an unexpected keyword argument 'dtype'"}
    _, problems = check_calculator(calc, broken)
    assert [str(p) for p in problems] == [
        "labs/lab-01-calc.yml:43:19: error: mirrors: at preset 'Wide', kv_bytes(layers=layers, heads=heads, dtype=dtype) raised TypeError: kv_bytes() got an unexpected keyword argument 'dtype'"
    ]


@pytest.mark.unit
def test_whole_numbers_agree_exactly_other_numbers_within_the_tolerance() -> None:
    calc = lab_with().calculators[0]
    close = answers_for(calc, CASES, per_layer=16.0000000001)
    close["cases"] = close["cases"][:1]
    _, problems = check_calculator(calc, close)
    assert problems == []  # the starter's 16.0000000001 is not whole: within 1e-9 of our 16
    exact_int = answers_for(calc, CASES[:1])
    exact_int["cases"][0]["answers"]["total"]["value"] = 33  # ours is 32: whole numbers must be equal
    assert len(check_calculator(calc, exact_int)[1]) == 1


@pytest.mark.unit
def test_without_answers_the_listed_cases_are_computed_but_not_verified() -> None:
    lab = lab_with()
    checked, problems = check_lab_calculators(lab, {})
    assert problems == [] and not checked[0].verified
    assert [case.label for case in checked[0].cases] == ["Defaults", "Wide", "Full"]
    stale = RunResult(lab="lab-01-calc", starter="code/lab-01-calc/kv.py", status="passed", seconds=1.0, returncode=0, stdout="", stderr="", reason="", mark=lab.starters[0].mark,
                      probed="not-this-request", answers=json.dumps({"calculators": {"kv": answers_for(None, CASES, per_layer=99)}}))
    checked, problems = check_lab_calculators(lab, {stale.starter: stale})
    assert problems == [] and not checked[0].verified  # answers to another request are not evidence
    assert starter_probe(lab, "code/lab-01-calc/other.py") is None


@pytest.mark.unit
@pytest.mark.parametrize("value, fmt, unit, text", [
    (524_288, "bytes-iec", "per token", "512 KiB (524,288 B) per token"),
    (2_147_483_648, "bytes-iec", None, "2 GiB (2,147,483,648 B)"),
    (107_814_649_856, "bytes", None, "108 GB (107,814,649,856 B)"),
    (512, "bytes", None, "512 B"),
    (1536.5, "bytes-iec", None, "1.5 KiB"),
    (312e12, "si", "FLOP/s", "312 TFLOP/s"),
    (2.039e12, "si", "B/s", "2.04 TB/s"),
    (0.0125, "si", "s", "12.5 ms"),  # before: '0.0125 s', so a manifest multiplied by 1000 to show ms
    (3.2e-5, "si", "s", "32 µs"),
    (4.5e-9, "si", "s", "4.5 ns"),
    (2e-13, "si", "s", "0.0002 ns"),  # nano is the smallest prefix
    (-0.5, "si", "V", "-500 mV"),
    (1, "si", "s", "1 s"),
    (0.026, "percent", None, "2.6%"),
    (153.0, "ratio", None, "153×"),
    (6_738_415_616, "int", "parameters", "6,738,415,616 parameters"),
    (1234.5, "number", None, "1,235"),
    (0.0012345, "number", None, "0.00123"),
    (999.96, "number", None, "1,000"),
    (-0.5, "int", None, "-1"),
    (0, "number", "B", "0 B"),
    (3e-9, "number", None, "< 1e-6"),
    (2e21, "int", None, "> 1e21"),
])
def test_numbers_are_shown_by_their_format(value, fmt, unit, text) -> None:
    assert show(value, fmt, unit) == text


@pytest.mark.unit
@pytest.mark.parametrize("expression, shown", [
    ("2 * layers * heads", "2 × ▢layers × ▢heads"),
    ("(layers + heads) * 2", "(▢layers + ▢heads) × 2"),
    ("layers - (heads - 1)", "▢layers − (▢heads − 1)"),
    ("layers - heads - 1", "▢layers − ▢heads − 1"),
    ("layers // heads", "⌊▢layers ÷ ▢heads⌋"),
    ("ceil(layers / heads) * 4096", "⌈▢layers ÷ ▢heads⌉ × 4,096"),
    ("2 ** (layers + 1)", "2^(▢layers + 1)"),
    ("-layers ** 2", "−▢layers^2"),
    ("min(layers, heads) if layers > 2 and not heads == 1 else 0.5", "min(▢layers, ▢heads) if ▢layers > 2 and not ▢heads = 1 else 0.5"),
])
def test_the_arithmetic_reads_as_written_by_hand(expression: str, shown: str) -> None:
    pieces = arithmetic(parse_expr(expression, {"layers", "heads"}))
    assert "".join(p if isinstance(p, str) else "▢" + p[0] for p in pieces) == shown


@pytest.mark.unit
@pytest.mark.parametrize("expression, held, other", [
    ("1 if layers < heads else 0", "▢layers < ▢heads", "▢layers ≥ ▢heads"),
    ("layers * 2 if layers >= heads else heads", "▢layers ≥ ▢heads: ▢layers × 2", "▢layers < ▢heads: ▢heads"),
    ("1 if layers == 2 and heads != 3 else 0", "▢layers = 2 and ▢heads ≠ 3", "▢layers ≠ 2 or ▢heads = 3"),
    ("1 if not layers > 2 else 0", "not ▢layers > 2", "▢layers > 2"),
])
def test_a_choice_says_in_words_which_side_held(expression: str, held: str, other: str) -> None:
    """Never "1 if 1,000 FLOP/B < 153 FLOP/B else 0": the condition that held, then the branch's arithmetic."""
    def line(branch) -> str:
        when, then = branch
        text = "".join(p if isinstance(p, str) else "▢" + p[0] for p in when)
        return text + (": " + "".join(p if isinstance(p, str) else "▢" + p[0] for p in then) if then is not None else "")
    assert [line(branch) for branch in branches(parse_expr(expression, {"layers", "heads"}))] == [held, other]
    assert branches(parse_expr("layers * 2", {"layers"})) is None


@pytest.mark.unit
@pytest.mark.parametrize("value, text", [
    (6_738_415_616, "6,738,415,616"),  # a parameter count is never rounded to 6,738,420,000
    (6_738_415_616.0, "6,738,415,616"),
    (2039e9 / 1e12, "2.039"),  # TB/s as the manifest wrote it, not 2.04
    (1 / 12, "0.0833333"),  # a computed float: 6 digits, not 17
    (123_456_789_012.3125, "123,456,789,012"),
    (0.999999951, "1"),
    (80_000_000_000, "80,000,000,000"),
    (-2.5, "-2.5"),
    (0, "0"),
    (2e21, "> 1e21"),
])
def test_a_given_number_is_shown_as_given(value, text) -> None:
    assert exact(value) == text


@pytest.mark.unit
@pytest.mark.parametrize("number, unit, text", [
    ("1", "layers", "1 layer"), ("1", "KV heads", "1 KV head"), ("-1", "tokens", "-1 token"),
    ("1", "batches", "1 batch"), ("1", "queries", "1 query"), ("1", "loss", "1 loss"),
    ("1", "FLOP/s", "1 FLOP/s"), ("1", "B", "1 B"), ("1", "TB/s", "1 TB/s"), ("1", "bits/weight", "1 bits/weight"),
    ("2", "layers", "2 layers"), ("1.5", "layers", "1.5 layers"), ("1", None, "1"),
])
def test_a_count_of_one_takes_the_singular(number: str, unit, text: str) -> None:
    assert counted(number, unit) == text
    assert show(1, "int", "sequences") == "1 sequence" and show(1, "number", "layers") == "1 layer"


@pytest.mark.unit
def test_an_output_may_show_more_digits() -> None:
    assert show(4.125, "number", "bits/weight") == "4.13 bits/weight"
    assert show(4.125, "number", "bits/weight", digits=4) == "4.125 bits/weight"
    assert show(0.03125, "percent", digits=4) == "3.125%"
    assert show(123.456, "number", digits=5) == "123.46" and show(1234.5, "number", digits=5) == "1,235"
    assert problems_of(CALC.replace("        format: int\n", "        format: int\n        digits: 16\n", 1)) == ["labs/lab-01-calc.yml:40:17: error: digits: at most 15 (a float holds no more), got 16"]


@pytest.mark.unit
def test_significant_digits_never_depend_on_a_logarithm() -> None:
    # 0.001 and 1000 sit on the boundaries where a log10-based rule may fall either side.
    assert [significant(v) for v in (0.001, 0.01, 0.1, 1, 10, 100, 999.4, 1000)] == ["0.001", "0.01", "0.1", "1", "10", "100", "999", "1,000"]


@pytest.mark.unit
def test_a_mirrors_call_becomes_the_probes_request() -> None:
    request = parse_call("estimate_memory(Config(num_layers=layers, recipe=recipe.name, tied=True)).ledger[0]['kv']", {"layers", "recipe"})
    assert request == {
        "call": "estimate_memory",
        "args": [{"call": "Config", "args": [], "kwargs": {"num_layers": {"input": "layers"}, "recipe": {"input": "recipe", "name": True}, "tied": True}}],
        "kwargs": {},
        "path": ["ledger", 0, "kv"],
    }
    with pytest.raises(ExprError, match="not a call"):
        parse_call("kv_bytes(", set())


@pytest.fixture
def calc_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of tests/sites/calculator: one lab whose calculator mirrors a starter without torch."""
    site = tmp_path / "site"
    shutil.copytree(TESTS / "sites" / "calculator", site, ignore=shutil.ignore_patterns(".infralens", "output"))
    monkeypatch.setenv("INFRALENS_CACHE_DIR", str(site / ".infralens"))
    return site


@pytest.mark.cli
def test_check_proves_a_calculator_and_the_page_says_so(calc_site: Path) -> None:
    done = run_infralens("check", "--json", "report.json", cwd=calc_site)
    assert done.returncode == 0, done.stderr
    built = run_infralens("build", "--out", "out", cwd=calc_site)
    assert built.returncode == 0, built.stderr
    page = (calc_site / "out/labs/lab-01-calc/index.html").read_text()
    assert "Each column checked against the starter's <code>kv_bytes</code> by <code>infralens check</code>" in page
    assert "<td>32 B<td>64 B<td>96 B" in page  # totals at the defaults, Wide and Full
    script = (calc_site / "out/labs/lab-01-calc/calculators.js").read_text()
    assert '"label":"Wide"' in shipped_json(script) and "X.mul(v['layers'], v['per_layer'])" in script


@pytest.mark.cli
def test_a_calculator_that_disagrees_with_its_starter_fails_check_and_build_at_its_line(calc_site: Path) -> None:
    assert run_infralens("check", cwd=calc_site).returncode == 0
    assert run_infralens("build", "--out", "out", cwd=calc_site).returncode == 0
    before = (calc_site / "out/labs/lab-01-calc/index.html").read_bytes()
    manifest = calc_site / "labs/lab-01-calc.yml"
    manifest.write_text(manifest.read_text().replace("expr: layers * per_layer", "expr: layers * per_layer + 1"))
    expected = "labs/lab-01-calc.yml:42:15: error: expr: at the defaults, total = 33 but the starter's kv_bytes(layers=layers, heads=heads, dtype=dtype) gives 32"
    checked = run_infralens("check", cwd=calc_site)
    assert checked.returncode == 1
    assert "lab-01-calc  code/lab-01-calc/kv.py  failed" in checked.stdout and "(stored result)" in checked.stdout
    assert expected.replace("error: ", "error: code/lab-01-calc/kv.py: ") + " (also at preset 'Wide', preset 'Full')\n" in checked.stderr
    built = run_infralens("build", "--out", "out", cwd=calc_site)
    assert built.returncode == 1 and "Traceback" not in built.stderr
    assert built.stderr.splitlines()[0] == expected + " (also at preset 'Wide', preset 'Full')"
    assert (calc_site / "out/labs/lab-01-calc/index.html").read_bytes() == before  # nothing built is lost


@pytest.mark.cli
def test_a_starter_that_changes_its_formula_fails_the_calculator_on_the_next_check(calc_site: Path) -> None:
    starter = calc_site / "code/lab-01-calc/kv.py"
    starter.write_text(starter.read_text().replace("per_layer = 2 * heads * dtype", "per_layer = heads * dtype"))
    checked = run_infralens("check", cwd=calc_site)
    assert checked.returncode == 1
    assert "labs/lab-01-calc.yml:37:15: error: code/lab-01-calc/kv.py: expr: at the defaults, per_layer = 16 but the starter's kv_bytes(1, heads, dtype) gives 8 (also at preset 'Wide', preset 'Full'); and 1 more problem (infralens build lists them)" in checked.stderr


@pytest.mark.cli
def test_editing_only_the_calculator_probes_again_without_running_the_starter(calc_site: Path) -> None:
    assert run_infralens("check", cwd=calc_site).returncode == 0
    manifest = calc_site / "labs/lab-01-calc.yml"
    manifest.write_text(manifest.read_text().replace("{label: Wide, values: {heads: 8}}", "{label: Wide, values: {heads: 16}}"))
    again = run_infralens("check", cwd=calc_site)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "(stored result)" in again.stdout  # the run was recalled; only the probe ran
    assert run_infralens("build", "--out", "out", cwd=calc_site).returncode == 0
    assert '"label":"Wide","group":"Presets","values":{"layers":2,"heads":16' in shipped_json((calc_site / "out/labs/lab-01-calc/calculators.js").read_text())


# --- Every lab's calculators against its own starter ------------------------------------------


@pytest.mark.starters
@pytest.mark.parametrize("lab", calculator_labs(), indirect=True)
def test_every_calculator_agrees_with_its_starter_at_its_defaults_and_presets(lab) -> None:
    """The parity `check` proves, asked of the starter directly: each output at every case."""
    assert lab.calculators
    from infralens.check.runner import probed, run_starter
    from infralens.model.calculator import PrintedPreset
    from infralens.model.lab import mirrored_starter

    runs = {}
    for path in {mirrored_starter(lab, calc) for calc in lab.calculators}:
        starter = next(s for s in lab.starters if s.path == path)
        if any(isinstance(p, PrintedPreset) for calc in lab.calculators for p in calc.presets):
            passed = run_starter(lab, starter, REPO, text=(REPO / path).read_text(encoding="utf-8"))  # a printed preset needs what the run prints
            assert passed.passed, passed.reason
        else:
            passed = RunResult(lab=lab.id, starter=path, status="passed", seconds=0.0, returncode=0, stdout="", stderr="", reason="", mark=starter.mark, finished="2026-11-24T00:00:00Z")
        runs[path] = probed(passed, lab, REPO, starter, None, None)
    checked, problems = check_lab_calculators(lab, runs)
    assert [str(p) for p in problems] == []
    assert all(one.verified for one in checked)
    for one in checked:  # a preset table that reads as nothing would verify nothing
        assert len(one.cases) >= 2, f"{one.calc.id}: only its defaults were checked"


@pytest.mark.unit
def test_presets_in_groups_set_only_what_their_group_sets() -> None:
    text = CALC.replace("{label: Wide, values: {heads: 8}}", "{label: Wide, values: {heads: 8}, group: Shape}").replace(
        "{label: Full, values: {dtype: fp32, layers: 3}}", "{label: Full, values: {dtype: fp32, layers: 3}, group: Precision}")
    calc = lab_with(text).calculators[0]
    assert calc.groups() == {"Shape": ("heads",), "Precision": ("layers", "dtype")}
    checked, _ = check_calculator(calc, None)
    assert [(case.label, case.group) for case in checked.cases] == [("Defaults", ""), ("Wide", "Shape"), ("Full", "Precision")]


PRINTED = CALC.replace("      - {label: Full, values: {dtype: fp32, layers: 3}}\n", "      - {label: Measured, printed: {heads: {pattern: 'heads: (\\d+)', scale: 2}}}\n")


@pytest.mark.unit
def test_a_printed_preset_reads_the_checked_runs_output() -> None:
    calc = lab_with(PRINTED).calculators[0]
    assert [label for label, _, _ in listed_cases(calc, "heads: 6\n")] == ["Defaults", "Wide", "Measured"]
    request = probe_request(calc, "heads: 6\n")
    assert request["presets"][1] == {"label": "Measured", "values": {"heads": 12.0}}  # printed 6, scaled by 2
    assert probe_request(calc, "")["presets"] == [{"label": "Wide", "values": {"heads": 8}}]  # not printed: not asked


@pytest.mark.unit
def test_a_printed_figure_is_read_in_ascii_digits_as_the_page_reads_them() -> None:
    calc = lab_with(PRINTED).calculators[0]
    assert probe_request(calc, "heads: ４\n")["presets"] == [{"label": "Wide", "values": {"heads": 8}}]  # fullwidth 4: not a number
    _, problems = check_calculator(calc, {"cases": []}, stdout="heads: ٤")
    assert [p.message for p in problems] == ["preset 'Measured': the checked run printed nothing that matches 'heads: (\\\\d+)' (with a number in its first group)"]


@pytest.mark.unit
def test_a_printed_figure_the_run_did_not_print_is_an_error_at_its_pattern() -> None:
    calc = lab_with(PRINTED).calculators[0]
    _, problems = check_calculator(calc, {"cases": []}, stdout="no such line")
    assert [str(p) for p in problems] == ["labs/lab-01-calc.yml:33:54: error: preset 'Measured': the checked run printed nothing that matches 'heads: (\\\\d+)' (with a number in its first group)"]


@pytest.mark.unit
def test_requirements_are_checked_at_every_listed_case_and_named_on_the_page() -> None:
    text = CALC.replace("    after: per_layer\n", "    after: per_layer\n    requires:\n      - {that: heads % 2 == 0, message: Heads come in pairs.}\n")
    calc = lab_with(text).calculators[0]
    assert unmet(calc, {"layers": 2, "heads": 3, "dtype": "bf16"}).message == "Heads come in pairs."
    assert unmet(calc, {"layers": 2, "heads": 4, "dtype": "bf16"}) is None
    broken = text.replace("{label: Wide, values: {heads: 8}}", "{label: Wide, values: {heads: 7}}")
    assert problems_of(broken) == ["labs/lab-01-calc.yml:28:16: error: requires: 'heads % 2 == 0' does not hold at preset 'Wide'"]
    assert problems_of(text.replace("heads % 2 == 0", "heads % 2")) == ["labs/lab-01-calc.yml:28:16: error: requires: expected a condition (a comparison such as `batch > 1`)"]
    script = calculators_script([check_calculator(calc, None)[0]])
    assert "holds: [(v) => (X.mod(v['heads'], 2) === 0)]" in script and '\\"requires\\":[\\"Heads come in pairs.\\"]' in script


@pytest.mark.unit
def test_a_scaled_input_is_typed_in_its_unit_and_computed_in_the_base_one() -> None:
    text = CALC.replace("{name: heads, label: Heads, unit: heads, default: 4, min: 1}", "{name: heads, label: Heads, unit: kheads, scale: 1000, default: 4000, min: 1}")
    calc = lab_with(text).calculators[0]
    field = calc.input("heads")
    assert field.shown(4000) == "4" and field.shown(2500) == "2.5" and not field.whole
    assert show_input(calc, "heads", 4000) == "4 kheads"
    assert show_input(calc, "heads", 2039) == "2.039 kheads"  # as given, not 2.04
    assert show_input(calc, "heads", 1000) == "1 khead"
    assert show_input(calc, "dtype", "fp32") == "fp32 (4 B)"
    assert dict(check_calculator(calc, None)[0].cases[0].results)["per_layer"] == 16_000  # computed in heads


@pytest.mark.unit
def test_a_label_output_reads_its_index_and_a_chart_names_real_inputs() -> None:
    assert show(1, "label", None, ("compute-bound", "memory-bound")) == "memory-bound"
    assert show(2, "label", None, ("compute-bound", "memory-bound")) == "2"  # no such label: the number
    assert problems_of(CALC.replace("        format: int\n", "        format: label\n", 1)) == ["labs/lab-01-calc.yml:39:17: error: format: label and labels go together"]
    chart = CALC.replace("    after: per_layer\n", "    after: per_layer\n    chart: {kind: roofline, x: layer, y: total, peak: heads, bandwidth: dtype}\n")
    assert problems_of(chart) == [
        "labs/lab-01-calc.yml:27:12: error: chart: bandwidth: 'dtype' is not a number input",
        "labs/lab-01-calc.yml:27:12: error: chart: x: 'layer' is not a number input (did you mean 'layers'?)",
    ]


@pytest.mark.cli
def test_the_probe_answers_inside_the_sandbox_too(calc_site: Path) -> None:
    """`check --sandbox` imports the starter for its calculators under bubblewrap, as it runs it."""
    from infralens.check.sandbox import SandboxUnavailable, open_sandbox

    try:
        open_sandbox()
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))
    checked = run_infralens("check", "--sandbox", cwd=calc_site)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert run_infralens("build", "--out", "out", cwd=calc_site).returncode == 0
    assert "Each column checked against the starter's" in (calc_site / "out/labs/lab-01-calc/index.html").read_text()
