"""`build --strict` and `infralens links`: broken internal links and anchors, non-http(s) links."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_infralens

pytestmark = pytest.mark.cli


def add_note_link(site: Path, markdown: str) -> None:
    manifest = site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("note: Multiply by layers and the dtype width.", f"note: 'Multiply by layers, see {markdown}.'"))


def test_sample_site_is_clean(sample_site: Path) -> None:
    assert run_infralens("build", "--strict", cwd=sample_site).returncode == 0
    result = run_infralens("links", cwd=sample_site)
    assert result.returncode == 0
    assert result.stdout.endswith(": 0 broken\n")


@pytest.mark.parametrize(
    "markdown, problem",
    [
        ("[notes](../lab-02-notes/index.html#kb-nope)", "broken anchor: ../lab-02-notes/index.html#kb-nope (no id 'kb-nope' in labs/lab-02-notes/index.html)"),
        ("[line](../../code/lab-01-sample/kv.py.html#L99)", "broken anchor: ../../code/lab-01-sample/kv.py.html#L99 (no id 'L99' in code/lab-01-sample/kv.py.html)"),
        ("[lab](../lab-03-missing/index.html)", "broken link: ../lab-03-missing/index.html (no labs/lab-03-missing/index.html in the site)"),
        ("[mirror](ftp://example.org/file)", "external link is not http(s): ftp://example.org/file"),
    ],
)
def test_strict_build_fails_on_a_broken_link_and_links_reports_it(sample_site: Path, markdown: str, problem: str) -> None:
    add_note_link(sample_site, markdown)
    assert run_infralens("build", cwd=sample_site).returncode == 0  # not strict: built anyway
    strict = run_infralens("build", "--strict", "--out", "strict-out", cwd=sample_site)
    assert strict.returncode == 1
    assert f": error: {problem}\n" in strict.stderr
    assert strict.stderr.startswith("strict-out/labs/lab-01-sample/index.html:")
    assert not (sample_site / "strict-out").exists()
    report = run_infralens("links", cwd=sample_site)
    assert report.returncode == 1
    assert "output/labs/lab-01-sample/index.html:" in report.stderr and problem in report.stderr
    assert report.stdout.endswith(": 1 broken\n")


def test_valid_links_between_labs_pass(sample_site: Path) -> None:
    add_note_link(sample_site, "[notes](../lab-02-notes/index.html#kb-setup-contract) and [line 9](../../code/lab-01-sample/kv.py.html#L9)")
    assert run_infralens("build", "--strict", cwd=sample_site).returncode == 0
