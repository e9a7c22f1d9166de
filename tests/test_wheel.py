"""An installed wheel (not an editable install) carries the theme and builds a site with no templates/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.cli

PACKAGED = ("pyproject.toml", "README.md", "infralens", "templates")
"""What the wheel is built from; copied first, since building in place writes build/ into the repository."""


def test_a_wheel_builds_the_real_site_from_a_folder_without_templates(tmp_path: Path) -> None:
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", *PACKAGED], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("infralens-*.whl"))
    installed = tmp_path / "installed"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(installed), str(wheel)], check=True, capture_output=True)

    site = tmp_path / "site"
    site.mkdir()
    for name in ("site.yml", "labs", "code"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, site / name)
    env = {**os.environ, "PYTHONPATH": str(installed), "INFRALENS_CACHE_DIR": str(tmp_path / "cache")}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=site, env=env, capture_output=True, text=True, timeout=300)

    theme = run("-c", "import infralens.theme as t; print(t.__file__)")
    assert Path(theme.stdout.strip()).is_relative_to(installed), theme.stdout + theme.stderr  # not the repository's templates/
    built = run("-m", "infralens", "build")
    assert built.returncode == 0, built.stderr
    labs = len(list((REPO / "labs").glob("*.yml")))
    assert built.stdout.startswith(f"built {labs} labs ({labs} rendered)"), built.stdout
    out = site / "output"
    assert (out / "static" / "infralens.css").stat().st_size > 0
    for lab in sorted((REPO / "labs").glob("*.yml")):
        assert "Starter Preview" in (out / "labs" / lab.stem / "index.html").read_text()
    free = max(int(lab.stem.split("-")[1]) for lab in (REPO / "labs").glob("*.yml")) + 1
    skeleton = run("-m", "infralens", "new", f"lab-{free:02d}-from-a-wheel", "--track", "foundations", "--title", "From a wheel")
    assert skeleton.returncode == 0, skeleton.stderr
    assert run("-m", "infralens", "build").returncode == 0
