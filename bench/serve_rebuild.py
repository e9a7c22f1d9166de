"""Benchmark: how long `infralens serve` takes to show a one-file change.

Starts the server on a copy of the repository's site, then several times appends a comment to one
starter and measures the time until the server's state endpoint reports the new build (that
includes the watcher's 0.25 s polling interval) and the rebuild time the server itself measured.
Run from the repository root:  python bench/serve_rebuild.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def state(base: str) -> dict:
    with urllib.request.urlopen(base + "__infralens/state", timeout=5) as response:
        return json.load(response)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        site = Path(scratch) / "site"
        site.mkdir()
        for name in ("site.yml", "labs", "code", "templates"):
            source = REPO / name
            (shutil.copytree if source.is_dir() else shutil.copy)(source, site / name)
        server = subprocess.Popen([sys.executable, "-m", "infralens", "serve", "--port", "0"], cwd=site, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            base = server.stdout.readline().split()[1]
            starter = site / "code/lab-01-transformer-memory/memory_accounting.py"
            seen, rebuilds = [], []
            for run in range(args.runs):
                before = state(base)["version"]
                started = time.perf_counter()
                starter.write_text(starter.read_text() + f"# edit {run}\n")
                while (current := state(base))["version"] == before:
                    time.sleep(0.01)
                seen.append(time.perf_counter() - started)
                rebuilds.append(current["seconds"])
                time.sleep(0.5)
        finally:
            server.terminate()
            server.wait()
    print(f"one-file change visible after: median {statistics.median(seen) * 1000:.0f} ms (includes 250 ms polling), min {min(seen) * 1000:.0f} ms, max {max(seen) * 1000:.0f} ms")
    print(f"rebuild itself:                median {statistics.median(rebuilds) * 1000:.0f} ms, min {min(rebuilds) * 1000:.0f} ms, max {max(rebuilds) * 1000:.0f} ms ({args.runs} runs)")


if __name__ == "__main__":
    main()
