"""Careless and hostile input found by the hostile suite (tests/hostile/): each case a clean error or a bounded cost."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import add_starter, run_infralens
from hypothesis import given, settings
from hypothesis import strategies as st

from infralens.errors import Mark, Problem
from infralens.lab.claims import printed


@pytest.mark.unit
def test_an_error_line_stays_one_line_whatever_the_file_name_or_message_holds() -> None:
    line = str(Problem(Mark("labs/lab-03-x\ny\r.yml"), "bad \x1b[2J value\u2028here"))
    assert line == "labs/lab-03-x\\ny\\r.yml:1:1: error: bad \\x1b[2J value\\u2028here"


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["1", "2", "3", ",", ".", " ", "x", "13.48", "1,234", "\n"]), max_size=12).map("".join), st.sampled_from(["13.48", "1,234", "2.5", "12,345.6"]))
def test_a_figure_is_printed_exactly_when_it_stands_alone_as_a_number(output: str, figure: str) -> None:
    alone = re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d]|[.,]\d)", output) is not None  # the rule, as one regex
    assert printed(figure, output) == alone


@pytest.mark.cli
def test_check_refuses_a_report_path_it_cannot_write_before_running_anything(sample_site: Path) -> None:
    result = run_infralens("check", "--json", "missing/dir/results.json", cwd=sample_site)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "error: cannot write missing/dir/results.json: folder missing/dir does not exist\n"


@pytest.mark.cli
def test_a_failing_starters_output_cannot_send_commands_to_the_terminal(sample_site: Path) -> None:
    add_starter(sample_site, "esc.py", "import sys\nprint('\\x1b[2J\\x1b]0;owned\\x07\\x1b]52;c;ZXZpbA==\\x07')\nsys.exit(3)\n")
    result = run_infralens("check", cwd=sample_site)
    assert result.returncode == 1 and "\x1b" not in result.stderr + result.stdout
    assert "\\x1b[2J\\x1b]0;owned\\x07" in result.stderr


@pytest.mark.cli
def test_a_starter_that_swaps_its_folder_for_a_symlink_loses_only_the_symlink(sample_site: Path, tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious.txt").write_text("mine")
    code = f"import os\nhere = os.getcwd()\nos.rename(here, here + '-moved')\nos.symlink({str(keep)!r}, here)\n"
    add_starter(sample_site, "swap.py", code)
    result = run_infralens("check", cwd=sample_site)
    assert "Traceback" not in result.stderr and re.search(r"swap\.py\s+passed", result.stdout), result.stdout + result.stderr
    assert (keep / "precious.txt").read_text() == "mine"


@pytest.mark.cli
def test_a_run_stopped_by_ctrl_c_is_not_stored_as_its_result(sample_site: Path) -> None:
    add_starter(sample_site, "slow.py", "import time\ntime.sleep(2.5)\nprint('ok')\n")
    check = subprocess.Popen([sys.executable, "-m", "infralens", "check", "lab-01-sample"], cwd=sample_site, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.5)
    check.send_signal(2)
    assert check.wait(timeout=30) == 130
    again = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert re.search(r"slow\.py\s+passed\s+\d+\.\d+ s\n", again.stdout), again.stdout  # run again, not "(stored result)"


@pytest.mark.cli
def test_two_checks_of_one_starter_at_once_both_finish(sample_site: Path) -> None:
    add_starter(sample_site, "art.py", "import time\ntime.sleep(1.5)\nopen('out.txt', 'w').write('x')\n", "{artifacts: [out.txt]}")
    command = [sys.executable, "-m", "infralens", "check", "--no-cache", "lab-01-sample"]
    checks = [subprocess.Popen(command, cwd=sample_site, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for check in checks:
        stdout, stderr = check.communicate(timeout=60)
        assert check.returncode == 0 and "Traceback" not in stderr, stdout + stderr


@pytest.mark.cli
def test_a_huge_or_unreadable_file_beside_a_starter_is_not_read_whole(sample_site: Path) -> None:
    with open(sample_site / "code/lab-01-sample/weights.bin", "wb") as file:
        file.truncate(3 << 30)  # sparse: 3 GiB that take no disk
    script = "import resource, subprocess, sys; subprocess.run(sys.argv[1:]); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    measured = subprocess.run([sys.executable, "-c", script, sys.executable, "-m", "infralens", "check"], cwd=sample_site, capture_output=True, text=True, timeout=120)
    assert int(measured.stdout.split()[-1]) < 512 << 10  # KiB: far below the 3 GiB a whole read took
    assert "2 passed, 0 failed" in measured.stdout


@pytest.mark.cli
@pytest.mark.parametrize("expression", ["-" * 200_000 + "1", "not " * 100_000 + "1", "1" + " + 1" * 200_000], ids=["minus", "not", "plus"])
def test_a_starter_too_deep_for_pythons_parser_is_an_error_not_a_crash(expression: str, sample_site: Path) -> None:
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text() + f"\ndef deep():\n    return {expression}\n")
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("  region: formula", "  symbol: deep"))
    result = run_infralens("build", cwd=sample_site)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "cannot parse code/lab-01-sample/kv.py" in result.stderr.splitlines()[0]


@pytest.mark.cli
@pytest.mark.parametrize("what", ["site.yml", "labs"])
def test_a_symlink_loop_is_an_error_not_a_crash(what: str, sample_site: Path) -> None:
    import shutil

    path = sample_site / what
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.symlink_to(path.name)
    result = run_infralens("build", cwd=sample_site)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert re.fullmatch(r"(\S+:\d+:\d+: error: [^\n]+\n)+\d+ errors?\n", result.stderr), result.stderr
