"""One folder per invalid input under tests/invalid/: the build must print exactly expected.txt.

A folder holding a file named `check` is a starter that builds but does not run (a compile error,
a missing compiler): `infralens check` must fail, and its error lines (stderr without the tail of
the output, indented `  | `) must be expected.txt, where `{g++}` stands for this machine's g++
and its version."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from conftest import TESTS, run_infralens

from infralens.check.compile import compiler_identity

pytestmark = pytest.mark.cli

CASES = sorted(p for p in (TESTS / "invalid").iterdir() if p.is_dir())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_invalid_input_reports_exact_error(case: Path, tmp_path: Path) -> None:
    # A private copy: the build keeps a highlight cache in the site's .infralens/ folder.
    site = tmp_path / case.name
    shutil.copytree(case, site, symlinks=True, ignore=shutil.ignore_patterns(".infralens"))
    if (case / "check").exists():
        if shutil.which("g++") is None:
            pytest.skip("needs g++ (scripts/install-compilers installs it)")
        result = run_infralens("check", cwd=site)
        assert result.returncode == 1
        assert "Traceback" not in result.stderr
        said = [line for line in result.stderr.splitlines() if line and not line.startswith("  | ")]
        assert said == (case / "expected.txt").read_text().replace("{g++}", compiler_identity(shutil.which("g++"), "g++")).splitlines()
        return
    result = run_infralens("build", "--out", str(tmp_path / "output"), cwd=site)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr == (case / "expected.txt").read_text()
    assert not (tmp_path / "output").exists()


def tree_digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("case", ["missing-region", "yaml-syntax-error"])
def test_failed_build_leaves_previous_output_byte_identical(case: str, sample_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "output"
    assert run_infralens("build", "--out", str(out), cwd=sample_site).returncode == 0
    (out / "extra.txt").write_text("left by the user")
    before = tree_digest(out)
    broken = tmp_path / "broken"  # a copy: a build writes caches beside the site it builds
    shutil.copytree(TESTS / "invalid" / case, broken, symlinks=True, ignore=shutil.ignore_patterns(".infralens"))
    result = run_infralens("build", "--site", str(broken / "site.yml"), "--out", str(out), cwd=sample_site)
    assert result.returncode == 1
    assert tree_digest(out) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["broken", "output", "site"]  # no staging folder left
