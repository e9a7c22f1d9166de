"""README.md is a newcomer's first stop: its commands must be the ones CI runs."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

pytestmark = pytest.mark.unit


def readme_commands() -> list[str]:
    block = re.search(r"## Two commands.*?```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_has_exactly_two_setup_commands() -> None:
    build, test = readme_commands()
    assert build.endswith("infralens build")
    assert test.endswith("python -m pytest")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci_lines = [line for line in (REPO / ".ci/run").read_text().splitlines() if line and not line.startswith(("#", "set ", "cd "))]
    assert ci_lines == [readme_commands()[1]]
