"""What recording execution state costs `check`: each previewed starter's plain run and its traced run.

    python bench/state_capture.py [--runs 3] [LAB_ID ...]

`check` runs a previewed starter as it always did (that run's output is what the page shows and
what `expect` checks) and, when it passed, once more under `infralens/child/trace_state.py` recording
exactly the lines check records (.md starters through their python blocks). This runs both,
alternating, RUNS times each, and prints the median wall time of each, what check now spends on
the starter against before ((plain + traced) / plain), the state's size and how many lines it
holds, and whether the traced run printed as many lines as the plain one. A starter that opts out
(`state: false`) is listed as such. Issue 14's target was the whole of `check` at most 1.3x, no
starter over 2x: a second run puts every starter at 2x or more, the price of a page whose printed
timings and peaks are the untraced run's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from infralens.build import load_project
from infralens.check.runner import lab_excerpt
from infralens.child import RUN_MARKDOWN, TRACE_STATE
from infralens.lab.state import traced_spans
from infralens.text.markdown import python_blocks

ROOT = Path(__file__).resolve().parent.parent
TRACER = TRACE_STATE


def timed(command: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False)
    return time.perf_counter() - started, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("labs", nargs="*")
    args = parser.parse_args()
    project = load_project(ROOT / "site.yml")
    print(f"{'lab':38} {'plain s':>8} {'traced s':>9} {'check':>6} {'lines':>6} {'state B':>8}  same output")
    plain_total = traced_total = 0.0
    for lab in project.labs:
        starter = next(s for s in lab.starters if s.path == lab.previewed)
        if (args.labs and lab.id not in args.labs) or starter.run is None:
            continue
        excerpt = lab_excerpt(lab, project.texts)
        spans = traced_spans(lab, excerpt) if excerpt else ()
        if not spans:
            print(f"{lab.id:38} {'':>8} {'':>9} {'':>6} {'':>6} {'':>8}  records no state (state: false)")
            continue
        source = ROOT / starter.path
        with tempfile.TemporaryDirectory() as folder:
            work = Path(folder)
            spec: dict = {"ranges": spans, "output": str(work / "state.json")}
            plain_command = [sys.executable, str(source), *starter.run.args]
            if source.suffix == ".md":
                blocks = python_blocks(source.read_text())
                spec["blocks"] = blocks
                (work / "blocks.json").write_text(json.dumps(blocks))
                plain_command = [sys.executable, str(RUN_MARKDOWN), str(source), str(work / "blocks.json"), *starter.run.args]
            (work / "spec.json").write_text(json.dumps(spec))
            plain_times, traced_times = [], []
            for _ in range(args.runs):
                seconds, plain = timed(plain_command, work)
                plain_times.append(seconds)
                seconds, traced = timed([sys.executable, str(TRACER), str(source), str(work / "spec.json"), *starter.run.args], work)
                traced_times.append(seconds)
            state = json.loads((work / "state.json").read_text()) if (work / "state.json").exists() else {"lines": {}}
        a, b = statistics.median(plain_times), statistics.median(traced_times)
        plain_total, traced_total = plain_total + a, traced_total + b
        same = traced.returncode == plain.returncode and len(traced.stdout.splitlines()) == len(plain.stdout.splitlines())
        print(f"{lab.id:38} {a:8.2f} {b:9.2f} {(a + b) / a:6.2f} {len(state['lines']):6} {len(json.dumps(state)):8,}  "
              f"{'yes' if same else 'NO: exit ' + str(traced.returncode)}")
    if plain_total:
        print(f"{'all':38} {plain_total:8.2f} {traced_total:9.2f} {(plain_total + traced_total) / plain_total:6.2f}")


if __name__ == "__main__":
    main()
