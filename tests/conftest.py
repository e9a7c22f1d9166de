"""Shared fixtures and the --update-golden flag."""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="Rewrite tests/golden/ from the current build instead of comparing; review with git diff.",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return request.config.getoption("--update-golden")


def load_starter(path: Path) -> ModuleType:
    """Import a starter file as a module (named after its file) so tests can call its functions."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


@contextmanager
def torch_threads(count: int):
    """Run a block with torch on `count` threads, as several starters do, then restore the setting."""
    import torch  # here, so tests that never touch torch do not pay for importing it

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def one_thread():
    """Run the test's in-process torch work on one thread."""
    with torch_threads(1):
        yield


def run_infralens(*args: str, cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the real command line, as a user would, and capture what it prints."""
    return subprocess.run(
        [sys.executable, "-m", "infralens", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def sample_site(tmp_path: Path) -> Path:
    """A private copy of tests/sites/sample to build and break."""
    target = tmp_path / "site"
    # Results or a build left in the sample by hand must not leak into the tests.
    shutil.copytree(TESTS / "sites" / "sample", target, symlinks=True, ignore=shutil.ignore_patterns(".infralens", "output"))
    return target


@pytest.fixture(scope="session")
def real_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's own site, built once into a temporary folder; returns that folder."""
    out = tmp_path_factory.mktemp("real") / "output"
    result = run_infralens("build", "--out", str(out), cwd=REPO)
    assert result.returncode == 0, result.stderr
    return out
