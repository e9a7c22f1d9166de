"""A hostile or careless contributor against the real commands: every case of tests/hostile/attack.py.

Each case makes its own small site under one folder of /var/tmp, runs the real `infralens` with a
memory limit, a private /tmp and, where the machine allows, a process cgroup, and is judged on its
exit status, the shape of its error lines, the bytes of output/ and the processes it leaves. Left
out of the default run (`-m hostile` runs it; `-n 2` two at a time; `-m "hostile and quick"` the
quick subset; `-k CLASS` one class: names, dataloss, runaway, amplification, yaml, serve, new,
markup, records).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest

import attack

pytestmark = pytest.mark.hostile

SEED = int(os.environ.get("INFRALENS_ATTACK_SEED", random.randrange(1 << 30)))
"""The seed of the random kill moments: set INFRALENS_ATTACK_SEED to replay a run."""


@pytest.fixture(scope="session")
def attack_root():
    """One folder for every case of this process, set up once (launcher, features, baseline build)."""
    root = Path(tempfile.mkdtemp(prefix="infralens-attack-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    attack.set_up_run(root)
    yield root
    if not attack.KEEP:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_before():
    """The repository's status and the machine's shared temporary folders before any case ran."""
    return attack.git_status(), attack.listing("/var/tmp"), attack.listing("/dev/shm")


def params():
    for index, case in enumerate(attack.CASES):
        marks = [pytest.mark.quick] if case.quick else []
        yield pytest.param(index, case, id=f"{case.cls}: {case.name}", marks=marks)


@pytest.mark.parametrize("index, case", list(params()))
def test_case_holds(index: int, case: attack.Case, attack_root: Path, shared_before) -> None:
    outcome = attack.run_case(case, attack_root, index, SEED)
    assert outcome.ok, f"{outcome.detail} (seed {SEED})"


def test_nothing_written_into_the_repository_var_tmp_or_dev_shm(shared_before) -> None:
    """Run last in this module: the cases left no file in the repository or the shared folders."""
    git_before, var_before, shm_before = shared_before
    stray = [f"repo: {line}" for line in sorted(attack.git_status() - git_before)]
    stray += [f"/var/tmp/{name}" for name in sorted(attack.listing("/var/tmp") - var_before) if not name.startswith("infralens-attack-")]
    stray += [f"/dev/shm/{name}" for name in sorted(attack.listing("/dev/shm") - shm_before)]
    assert not stray, stray[:8]
