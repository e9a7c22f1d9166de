"""Figures a page states must be printed by the lab's runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_infralens

from infralens.build import load_project
from infralens.check.verdicts import CLAIMS_SHOWN
from infralens.lab.claims import printed, stated_figures


@pytest.mark.unit
def test_figures_are_numbers_with_separators_or_decimals_outside_urls(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace(
        "note: K and V, so the **factor 2**.",
        "note: 'K and V: 524,288 bytes, 0.5 MiB, 32 layers, year 2023, see [GQA](https://arxiv.org/abs/2305.13245).'",
    ))
    lab = load_project(sample_site / "site.yml").labs[0]
    assert stated_figures(lab) == ["524,288", "0.5"]


@pytest.mark.unit
def test_a_figure_must_match_a_whole_number_in_the_output() -> None:
    assert printed("524,288", "kv bytes per token: 524,288\n")
    assert not printed("24,288", "kv bytes per token: 524,288\n")
    assert not printed("524,28", "kv bytes per token: 524,288\n")
    assert printed("2.45", "(+2.45% of exact)")
    assert not printed("2.4", "(+2.45% of exact)")
    assert printed("13.48", "weights 13.48 GB.")


@pytest.mark.cli
def test_check_fails_when_the_page_states_a_figure_no_run_prints(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace(
        "checkpoints:\n  - The factor 2 is K plus V.",
        "checkpoints:\n  - The factor 2 is K plus V, so 524,288 bytes, or 1,048,576 bytes at fp32.",
    ))
    result = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "0 passed, 1 failed"
    assert (
        "labs/lab-01-sample.yml:24:52: error: code/lab-01-sample/kv.py: the page states 1,048,576 "
        "but no starter of the lab prints it" in result.stderr
    )


@pytest.mark.unit
def test_every_prose_field_is_read_including_topic_and_kind_line(sample_site: Path) -> None:
    # The fields come from the declarations in models.py, not from a list kept by hand.
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace(
        "title: Sample KV bytes",
        "title: Sample KV bytes\ntopic: KV cache at 1,024 tokens\nkind_line: Runs in 0.25 s on a CPU.",
    ))
    lab = load_project(sample_site / "site.yml").labs[0]
    assert {"1,024", "0.25"} <= set(stated_figures(lab))


@pytest.mark.unit
def test_a_figure_in_inline_code_is_not_a_claim(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace(
        "note: K and V, so the **factor 2**.",
        "note: 'Since `NCCL 2.4`, run ``torchrun --lr 0.001``; the page states 13.48.'",
    ))
    lab = load_project(sample_site / "site.yml").labs[0]
    assert stated_figures(lab) == ["13.48"]  # before: ['2.4', '0.001', '13.48']


@pytest.mark.cli
def test_check_names_every_unbacked_figure_on_its_own_error_line(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace(
        "checkpoints:\n  - The factor 2 is K plus V.",
        "checkpoints:\n  - The factor 2 is K plus V, so 1,048,576 bytes,\n  - or 2,097,152 bytes,\n  - or 3.25 MiB.",
    ))
    result = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "0 passed, 1 failed"
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert errors == [  # before: one line, '(and 2 more: 2,097,152, 3.25)'
        f"labs/lab-01-sample.yml:{line}:{col}: error: code/lab-01-sample/kv.py: the page states {figure} but no starter of the lab prints it or records it on a line"
        for line, col, figure in [(24, 34, "1,048,576"), (25, 8, "2,097,152"), (26, 8, "3.25")]
    ]


@pytest.mark.cli
def test_check_gives_twenty_unbacked_figures_a_line_each_and_counts_the_rest(sample_site: Path) -> None:
    # A line each for 20,000 figures took check past its bound (a search of the manifest per figure).
    figures = [f"{n}.25" for n in range(101, 126)]
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("checkpoints:\n  - The factor 2 is K plus V.", "checkpoints:\n  - The factor 2 is K plus V, then " + ", ".join(figures) + "."))
    result = run_infralens("check", "lab-01-sample", cwd=sample_site)
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert result.returncode == 1 and len(errors) == CLAIMS_SHOWN == 20
    assert errors[-1].endswith(f"the page states {figures[19]} but no starter of the lab prints it or records it on a line (and 5 more figures no run backs: {', '.join(figures[20:])})")
