"""Golden HTML: the sample site's build compared file by file with tests/golden/sample/.

Regenerate with `pytest tests/test_golden.py --update-golden` and review the change with git diff.
"""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

from conftest import TESTS, run_infralens

GOLDEN = TESTS / "golden" / "sample"


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_sample_site_matches_golden(sample_site: Path, tmp_path: Path, update_golden: bool) -> None:
    out = tmp_path / "output"
    result = run_infralens("build", "--out", str(out), cwd=sample_site)
    assert result.returncode == 0, result.stderr
    if update_golden:
        shutil.rmtree(GOLDEN, ignore_errors=True)
        shutil.copytree(out, GOLDEN)
    built, golden = files(out), files(GOLDEN)
    assert sorted(built) == sorted(golden), "the set of built files changed"
    for name, content in built.items():
        if content != golden[name]:
            diff = "".join(
                difflib.unified_diff(
                    golden[name].decode().splitlines(keepends=True),
                    content.decode().splitlines(keepends=True),
                    f"golden/{name}",
                    f"built/{name}",
                )
            )
            raise AssertionError(f"{name} differs from its golden copy (run with --update-golden to accept):\n{diff}")
