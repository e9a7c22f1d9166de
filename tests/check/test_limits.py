"""Limits on what one contributor's file can cost everyone: starter size, stored output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import add_starter, run_infralens, run_of

from infralens.check.process import Output
from infralens.check.runner import KEPT_OUTPUT


@pytest.mark.unit
def test_long_output_keeps_its_head_and_tail_and_says_what_it_left_out() -> None:
    text = "".join(f"line {n:07d}\n" for n in range(300_000)).encode()  # 3.9 MB
    kept = Output(text, b"").stored(KEPT_OUTPUT)
    assert len(kept) < KEPT_OUTPUT + 100
    assert kept.startswith("line 0000000\n") and kept.endswith("line 0299999\n")
    assert f"[… {len(text) - KEPT_OUTPUT:,} bytes of output left out …]" in kept
    assert Output(b"short\n", b"").stored(KEPT_OUTPUT) == "short\n"
    # What was never read into memory counts in the note too.
    assert Output(b"a" * 10, b"b" * 20, 1_000_000).stored(16) == "aaaa\n[… 1,000,014 bytes of output left out …]\n" + "b" * 12


@pytest.mark.cli
def test_a_starter_over_a_mebibyte_is_an_error_at_its_manifest_line(sample_site: Path) -> None:
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text() + "# padding\n" * 120_000)
    result = run_infralens("build", cwd=sample_site)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0].startswith("labs/lab-01-sample.yml:10:11: error: starter 'code/lab-01-sample/kv.py' is 1,")
    assert "a starter is code to read, at most 1,048,576" in result.stderr


@pytest.mark.cli
def test_a_run_that_prints_megabytes_is_stored_cut_down(sample_site: Path) -> None:
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text() + "\nprint(('y' * 99 + '\\n') * 40_000)\n")
    result = run_infralens("check", "lab-01-sample", "--json", str(sample_site / "results.json"), cwd=sample_site)
    assert result.returncode == 0, result.stdout + result.stderr
    stored = [p for p in (sample_site / ".infralens/runs").rglob("result.json")]
    assert len(stored) == 1 and stored[0].stat().st_size < 2 * KEPT_OUTPUT
    record = json.loads(stored[0].read_text())
    assert "bytes of output left out" in record["stdout"]


@pytest.mark.unit
def test_expect_patterns_match_in_bounded_time() -> None:
    import time

    from infralens.check.verdicts import expect_found

    assert expect_found(r"kv bytes per token: [0-9,]+", "kv bytes per token: 524,288\n") is True
    assert expect_found(r"^missing$", "kv bytes per token\n") is False
    started = time.monotonic()
    assert expect_found(r"^(a+)+$", "a" * 34 + "b") is False  # re backtracks on this for hours
    assert time.monotonic() - started < 1
    # Past its time limit a match gives up and says so (None), whatever the pattern.
    assert expect_found(r"(\w+\s+){3}\d", "word " * 2_000_000, seconds=0.01) is None


FLOOD = """
import sys
chunk = b"x" * 65535 + b"\\n"
while True:
    sys.stdout.buffer.write(chunk)
"""

MEASURED = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


@pytest.mark.cli
def test_a_starter_printing_without_end_costs_check_a_bounded_amount_of_memory(sample_site: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    add_starter(sample_site, "flood.py", FLOOD, "{timeout: 3}", role="Prints until it is killed.")
    command = [sys.executable, "-m", "infralens", "check", "--json", str(tmp_path / "runs.json")]
    measured = subprocess.run([sys.executable, "-c", MEASURED, *command], cwd=sample_site, capture_output=True, text=True, timeout=120)
    peak_kib = int(measured.stdout.split()[-1])  # the largest process of the run: check, the supervisor or a starter
    flood = run_of(tmp_path / "runs.json", "flood.py")
    assert flood["status"] == "timeout"
    left_out = int(flood["stdout"].split("[… ")[1].split()[0].replace(",", ""))
    assert left_out > 200 << 20, left_out  # it did print hundreds of megabytes in its three seconds
    assert peak_kib < 256 << 10, f"peak {peak_kib / 1024:.0f} MiB"


@pytest.mark.cli
@pytest.mark.parametrize(
    ("writes", "reason"),
    [
        ("os.symlink('/dev/zero', 'out.txt')", "artifact 'out.txt' is a symlink; write the file itself"),
        ("os.symlink(os.path.abspath(sys.argv[0]), 'out.txt')", "artifact 'out.txt' is a symlink; write the file itself"),
        ("os.mkfifo('out.txt')", "artifact 'out.txt' is not a regular file"),
        ("open('out.txt', 'wb').truncate(9 << 20)", "artifact 'out.txt' is 9,437,184 bytes; an artifact is published with the page, at most 8,388,608"),
    ],
    ids=["symlink-to-dev-zero", "symlink-to-a-file", "fifo", "too-big"],
)
def test_an_artifact_that_is_not_a_small_regular_file_fails_the_run_and_is_not_kept(writes: str, reason: str, sample_site: Path, tmp_path: Path) -> None:
    add_starter(sample_site, "art.py", f"import os, sys\n{writes}\n", "{artifacts: [out.txt], timeout: 20}", role="Leaves an artifact.")
    result = run_infralens("check", "--json", str(tmp_path / "runs.json"), cwd=sample_site, timeout=60)
    run = run_of(tmp_path / "runs.json", "art.py")
    assert result.returncode == 1 and (run["status"], run["reason"]) == ("failed", reason)
    assert run["artifacts"] == [] and not list((sample_site / ".infralens/runs").rglob("out.txt"))


@pytest.mark.cli
def test_a_manifest_over_a_mebibyte_is_refused_before_it_is_parsed(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text() + "# padding\n" * 120_000)
    result = run_infralens("build", cwd=sample_site)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0] == (
        "labs/lab-01-sample.yml:1:1: error: labs/lab-01-sample.yml is 1,200,xxx bytes; a manifest or site file is at most 1,048,576"
        .replace("1,200,xxx", f"{manifest.stat().st_size:,}")
    )


SVG = '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">{}</svg>'


@pytest.mark.cli
@pytest.mark.parametrize(
    ("drawing", "reason"),
    [
        ('<rect onload="alert(1)"/>', "artifact 'fig.svg' is an SVG with an onload handler, which runs when the file is opened; an artifact is a plain drawing"),
        ("<script>alert(1)</script>", "artifact 'fig.svg' is an SVG with a <script> element, which runs or changes when the file is opened; an artifact is a plain drawing"),
        ('<a xlink:href="javascript:alert(1)"><text>x</text></a>', "artifact 'fig.svg' is an SVG linking to 'javascript:alert(1)'; an artifact may refer only to its own #ids"),
        ('<image href="https://evil.example/pixel.png"/>', "artifact 'fig.svg' is an SVG linking to 'https://evil.example/pixel.png'; an artifact may refer only to its own #ids"),
        ('<foreignObject><p xmlns="http://www.w3.org/1999/xhtml">x</p></foreignObject>', "artifact 'fig.svg' is an SVG with a <foreignobject> element, which runs or changes when the file is opened; an artifact is a plain drawing"),
        ("<style>@import url(https://evil.example/a.css);</style>", "artifact 'fig.svg' is an SVG whose style fetches a file; an artifact may refer only to its own #ids"),
    ],
    ids=["onload", "script", "javascript-link", "remote-image", "foreign-object", "style-import"],
)
def test_an_svg_artifact_that_could_run_or_fetch_fails_the_run(drawing: str, reason: str, sample_site: Path, tmp_path: Path) -> None:
    add_starter(sample_site, "fig.py", f"open('fig.svg', 'w').write({SVG.format(drawing)!r})\n", "{artifacts: [fig.svg]}", role="Draws.")
    result = run_infralens("check", "--json", str(tmp_path / "runs.json"), cwd=sample_site, timeout=60)
    run = run_of(tmp_path / "runs.json", "fig.py")
    assert result.returncode == 1 and (run["status"], run["reason"]) == ("failed", reason)


@pytest.mark.unit
def test_a_plain_svg_drawing_with_its_own_references_passes() -> None:
    from infralens.check.verdicts import svg_problem

    drawing = '<defs><linearGradient id="g"/></defs><rect style="fill:url(#g)"/><use xlink:href="#g"/><style>text{fill:currentColor}</style>'
    assert svg_problem(SVG.format(drawing).encode()) is None


BACKTRACKING_PRESET = """calculators:
  - id: kv
    title: KV bytes
    after: per_layer
    inputs:
      - {name: layers, label: Layers, unit: layers, default: 32, min: 1, max: 100}
    presets:
      - {label: Measured, printed: {layers: {pattern: '(a|aa)+$'}}}
    outputs:
      - name: total
        label: Total
        expr: layers * 16384
        mirrors: kv_bytes_per_token(layers, 32, 128, 2)
        format: bytes
"""


@pytest.mark.cli
def test_a_printed_preset_that_backtracks_without_end_is_an_error_at_its_pattern_not_a_hang(sample_site: Path) -> None:
    """`re` spins on `(a|aa)+$` against a long line of a's, deaf to SIGTERM; check and build both read the pattern."""
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text() + BACKTRACKING_PRESET)
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text() + "    print('a' * 60 + '!')\n")
    where = f"labs/lab-01-sample.yml:{manifest.read_text().splitlines().index(BACKTRACKING_PRESET.splitlines()[7]) + 1}:55"
    checked = run_infralens("check", "lab-01-sample", cwd=sample_site, timeout=120)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stdout + checked.stderr
    assert "'(a|aa)+$' did not finish matching the run's output in 2 s" in checked.stdout + checked.stderr
    built = run_infralens("build", cwd=sample_site, timeout=120)
    assert built.returncode == 1 and "Traceback" not in built.stderr, built.stderr
    assert built.stderr == f"{where}: error: preset 'Measured': '(a|aa)+$' did not finish matching the run's output in 2 s (a pattern that backtracks without end?)\n1 error\n"
