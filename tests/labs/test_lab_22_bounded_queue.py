"""Lab 22: the bounded queue's model and threads, read from the program's own output.

The manifest's expect patterns pin the printed rows; these check what every row must satisfy
whatever the numbers: Little's law, blocking throttling the producer to the consumer's pace,
dropping losing exactly the excess, and the threaded run's invariants.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from conftest import REPO

pytestmark = [pytest.mark.starters, pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (scripts/install-compilers installs it)")]

STARTER = REPO / "code/lab-22-bounded-queue/bounded_queue.cpp"
ROW = re.compile(r"^\s*(\d\.\d\d)\s+(block|drop)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d,]+)\s+([\d.]+)%\s+(\d+)$", re.M)


@pytest.fixture(scope="module")
def output(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("lab22")
    program = folder / "bounded_queue"
    subprocess.run(["g++", "-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", str(STARTER), "-o", str(program)], check=True)
    return subprocess.run([str(program)], check=True, capture_output=True, text=True, cwd=folder, timeout=60).stdout


def test_every_row_keeps_littles_law_and_its_policy(output: str) -> None:
    rows = ROW.findall(output)
    assert len(rows) == 8
    for load, policy, offered, throughput, depth, wait, product, dropped, blocked, most in rows:
        assert depth == product  # L = lambda * W, to the printed digit
        assert float(throughput) <= 1.0 and int(most) <= 16
        if float(load) <= 1.0:
            assert (offered, throughput, dropped, blocked) == (load + "0", load + "0", "0", "0.0")
        elif policy == "block":
            assert (offered, throughput, dropped) == ("1.000", "1.000", "0") and float(blocked) > 50
        else:
            assert float(offered) > 1.0 and throughput == "1.000" and int(dropped.replace(",", "")) > 0 and blocked == "0.0"


def test_dropping_loses_the_excess_over_the_consumers_pace(output: str) -> None:
    lost, offered = (int(n.replace(",", "")) for n in re.search(r"dropping loses ([\d,]+) of ([\d,]+) offered", output).groups())
    assert offered == 12 * 1000
    # Past load 1 the queue never empties once filled, so the consumer serves every tick: 8 a
    # period until the last burst (tick 8 x 999), then the 16 the full queue holds. The rest is lost.
    assert lost == offered - (8 * 999 + 16)


def test_the_threads_deliver_every_item_once_in_order_within_capacity(output: str) -> None:
    assert "every item once, each producer's in order" in output
    depth = int(re.search(r"max depth (\d+)", output).group(1))
    assert 1 <= depth <= 8
