"""Benchmark: wall time of `infralens build` and `infralens check` (cold and with stored results).

Prints the median, min and max of several runs of each command, run exactly as a user runs them
(a new process each time, so interpreter and import start-up are included). Run from the
repository root:  python bench/build_check.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def report(name: str, seconds: list[float]) -> None:
    print(f"{name:<32} median {statistics.median(seconds):6.2f} s   min {min(seconds):6.2f} s   max {max(seconds):6.2f} s   ({len(seconds)} runs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    infralens = [sys.executable, "-m", "infralens"]
    with tempfile.TemporaryDirectory() as scratch:
        out = str(Path(scratch) / "output")
        report("infralens build", [timed([*infralens, "build", "--out", out]) for _ in range(args.runs)])
    for jobs in (1, 2):
        cold = [timed([*infralens, "check", "--no-cache", "--jobs", str(jobs)]) for _ in range(args.runs)]
        report(f"infralens check --no-cache -j {jobs}", cold)
    report("infralens check (stored results)", [timed([*infralens, "check"]) for _ in range(args.runs)])


if __name__ == "__main__":
    main()
