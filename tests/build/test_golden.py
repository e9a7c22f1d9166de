"""Golden HTML: the sample site's build compared file by file with tests/golden/sample/.

Regenerate with `pytest tests/build/test_golden.py --update-golden` and review the change with git diff.
"""

from __future__ import annotations

import difflib
import re
import shutil
from pathlib import Path

import pytest
from conftest import TESTS, run_infralens

pytestmark = pytest.mark.cli

GOLDEN = TESTS / "golden" / "sample"
THEME = TESTS.parent / "templates" / "static"


def files(folder: Path) -> dict[str, bytes]:
    """Every file of a built site but the theme's minified assets, which only repeat templates/static/."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not (p.parent.name == "static" and p.suffix in (".css", ".js"))
    }


def test_sample_site_matches_golden(sample_site: Path, tmp_path: Path, update_golden: bool) -> None:
    out = tmp_path / "output"
    result = run_infralens("build", "--out", str(out), cwd=sample_site)
    assert result.returncode == 0, result.stderr
    if update_golden:
        shutil.rmtree(GOLDEN, ignore_errors=True)
        shutil.copytree(out, GOLDEN, ignore=shutil.ignore_patterns("*.css", "*.js"))
        shutil.copy(out / "search-index.js", GOLDEN / "search-index.js")
        shutil.copytree(out / "search", GOLDEN / "search", dirs_exist_ok=True)
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


def test_theme_assets_are_served_minified_and_complete(sample_site: Path, tmp_path: Path) -> None:
    from infralens.build.assets import minified

    out = tmp_path / "output"
    assert run_infralens("build", "--out", str(out), cwd=sample_site).returncode == 0
    for source in sorted(THEME.iterdir()):
        served = out / "static" / source.name
        if source.suffix in (".css", ".js"):
            text = source.read_text()
            assert served.read_text() == minified(source.name, text)
            assert len(served.read_text()) < len(text)
        else:
            assert served.read_bytes() == source.read_bytes()


def nests_a_template_literal(code: str) -> bool:
    """Whether a template literal sits inside another's `${…}` (strings and comments aside)."""
    inside, depth, i = False, 0, 0
    while i < len(code):
        char = code[i]
        if inside and depth == 0:
            if char == "\\":
                i += 2
                continue
            if char == "`":
                inside = False
            elif code.startswith("${", i):
                depth, i = 1, i + 2
                continue
        elif inside:
            if char == "`":
                return True
            depth += {"{": 1, "}": -1}.get(char, 0)
        elif char == "`":
            inside = True
        i += 1
    return False


def test_no_script_nests_a_template_literal() -> None:
    """rjsmin drops the spaces of a template literal nested in another's `${…}`: a script that nests
    one shows words run together (one did: "visited,1of 3questions right")."""
    assert nests_a_template_literal("x = `a ${b ? `, ${c} of d` : ''}`;")
    assert not nests_a_template_literal("x = `a ${b ? ', ' + c + ' of d' : ''}`;")
    for source in sorted(THEME.glob("*.js")):
        code = re.sub(r"/\*.*?\*/|^\s*//.*$|  // .*$", "", source.read_text(), flags=re.S | re.M)  # comments quote code in backticks
        assert not nests_a_template_literal(code), source.name
