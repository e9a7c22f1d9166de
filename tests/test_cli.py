"""The real `infralens` command on tmp_path: build, check, help, and what they refuse."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from conftest import REPO, run_infralens

pytestmark = pytest.mark.cli


def test_build_prints_one_summary_line_and_writes_pages(sample_site: Path) -> None:
    result = run_infralens("build", cwd=sample_site)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"built 2 labs \(2 rendered\): wrote 5 pages and 21 files into output in \d+\.\d\d s\n", result.stdout)
    out = sample_site / "output"
    for page in (
        "index.html",
        "labs/lab-01-sample/index.html",
        "labs/lab-02-notes/index.html",
        "code/lab-01-sample/kv.py.html",
        "code/lab-01-sample/kv.py",
        "static/infralens.css",
        "search-index.js",
    ):
        assert (out / page).is_file(), page
    assert (out / "code/lab-01-sample/kv.py").read_bytes() == (sample_site / "code/lab-01-sample/kv.py").read_bytes()


def test_raw_html_in_a_manifest_is_shown_as_text(sample_site: Path) -> None:
    assert run_infralens("build", cwd=sample_site).returncode == 0
    page = (sample_site / "output/labs/lab-01-sample/index.html").read_text()
    assert "alert(1)</script>" not in page  # the theme's own two scripts are the only ones
    assert page.count("<script") == 2
    assert "Raw HTML stays text: &lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_failure_trace_has_its_own_badge_kind_line_and_section_titles(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text() + "kind: trace\ntitles:\n  checkpoints: Fixed by a scale\n")
    assert run_infralens("build", cwd=sample_site).returncode == 0
    page = (sample_site / "output/labs/lab-01-sample/index.html").read_text()
    eyebrows = re.findall(r'<p class="eyebrow">([^<]+)</p>\s*<h2 id="[^"]+-title">([^<]+)</h2>', page)
    assert eyebrows[:2] == [("What broke", "The failure, as it first showed"), ("Root cause", "Why it broke")]
    assert ("How it was found", "The investigation, step by step") in eyebrows
    assert ("What fixed it", "Fixed by a scale") in eyebrows  # a manifest's own title still wins
    assert "Failure trace: what broke, how it was found, what fixed it." in page
    assert '<span class="badge badge-trace">Failure trace</span>' in page
    index = (sample_site / "output/index.html").read_text()
    assert '<span class="badge badge-trace">Failure trace</span>' in index
    notes = (sample_site / "output/labs/lab-02-notes/index.html").read_text()
    assert "Annotated code reading lab." in notes and '<p class="eyebrow">Concept Goal</p>' in notes


def test_rebuild_replaces_output_without_leftovers(sample_site: Path) -> None:
    assert run_infralens("build", cwd=sample_site).returncode == 0
    (sample_site / "output/stale.html").write_text("old")
    assert run_infralens("build", cwd=sample_site).returncode == 0
    assert not (sample_site / "output/stale.html").exists()
    assert [p.name for p in sample_site.iterdir() if p.name.startswith(".output")] == []


def test_build_refuses_to_replace_the_project(sample_site: Path) -> None:
    result = run_infralens("build", "--out", ".", cwd=sample_site)
    assert result.returncode == 1
    assert "error: refusing to replace this folder" in result.stderr
    assert (sample_site / "site.yml").exists()


def test_missing_site_file_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    result = run_infralens("build", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("site.yml:1:1: error: file not found: site.yml\n")
    assert "Traceback" not in result.stderr


def test_check_runs_every_starter_and_reports_rows(sample_site: Path) -> None:
    result = run_infralens("check", cwd=sample_site)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"lab-01-sample\s+code/lab-01-sample/kv\.py\s+passed\s+\d+\.\d\d s", lines[0])
    assert re.fullmatch(r"lab-02-notes\s+code/lab-02-notes/notes\.md\s+passed\s+\d+\.\d\d s", lines[1])
    assert lines[-1] == "2 passed, 0 failed"


def test_check_selects_labs_and_rejects_unknown_ids(sample_site: Path) -> None:
    result = run_infralens("check", "lab-02-notes", cwd=sample_site)
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == "1 passed, 0 failed"
    result = run_infralens("check", "lab-02-note", cwd=sample_site)
    assert result.returncode == 2
    assert result.stderr == "error: unknown lab 'lab-02-note' (did you mean 'lab-02-notes'?)\n"


def test_check_fails_on_an_unmet_expectation_and_names_the_manifest_line(sample_site: Path) -> None:
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("kv bytes per token: 524,288", "kv bytes per token: 1,024"))
    result = run_infralens("check", cwd=sample_site)
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "1 passed, 1 failed"
    assert "labs/lab-01-sample.yml:10:11: error: code/lab-01-sample/kv.py: output does not match expect 'kv bytes per token: 1,024'" in result.stderr
    assert "  | kv bytes per token: 524,288" in result.stderr


def test_check_reports_a_crash_with_the_tail_of_its_output(sample_site: Path) -> None:
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text() + "\nraise SystemExit('broken on purpose')\n")
    result = run_infralens("check", cwd=sample_site)
    assert result.returncode == 1
    assert "error: code/lab-01-sample/kv.py: exited with status 1" in result.stderr
    assert "  | broken on purpose" in result.stderr


def test_markdown_starter_traceback_points_at_the_markdown_line(sample_site: Path) -> None:
    notes = sample_site / "code/lab-02-notes/notes.md"
    notes.write_text(notes.read_text().replace('print("total:", sum(rows))', "print(undefined_name)"))
    result = run_infralens("check", "lab-02-notes", cwd=sample_site)
    assert result.returncode == 1
    assert re.search(r'File ".*notes\.md", line 17, in <module>', result.stderr)
    assert "NameError: name 'undefined_name' is not defined" in result.stderr


def test_starter_runs_in_a_scratch_folder_with_a_clean_environment(sample_site: Path) -> None:
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(
        "import os\n"
        "print('cwd', os.getcwd())\n"
        "print('secret', os.environ.get('INFRALENS_TEST_SECRET'))\n"
        "# region formula\nper_layer = 1\ntotal = 2\n# endregion\n"
    )
    # The expectation fails on purpose, so the output tail is printed for us to read.
    result = run_infralens("check", "lab-01-sample", cwd=sample_site, env={"INFRALENS_TEST_SECRET": "leaked"})
    assert result.returncode == 1
    assert "  | secret None" in result.stderr
    cwd = Path(re.search(r"  \| cwd (.*)", result.stderr).group(1))
    assert cwd.parent.name.startswith("infralens-run-")  # a folder of its own inside a private one
    assert not cwd.parent.exists(), "the scratch folder should be removed after the run"


def late_child(tmp_path: Path, seconds: float) -> tuple[Path, Path]:
    """Write a script that writes a marker file after `seconds` unless it is killed; return (script, marker)."""
    marker = tmp_path / "child-still-alive"
    child = tmp_path / "child.py"
    child.write_text(f"import pathlib, time\ntime.sleep({seconds})\npathlib.Path({str(marker)!r}).write_text('x')\n")
    return child, marker


def replace_starter(sample_site: Path, body: str) -> None:
    """Replace lab 01's starter by `body`, keeping the region its manifest previews and binds."""
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text("import subprocess, sys, time\n" + body + "# region formula\nper_layer = 1\ntotal = 2\n# endregion\n")


def test_hanging_starter_is_killed_at_its_timeout_with_its_children(sample_site: Path, tmp_path: Path) -> None:
    # A child that writes the marker after 4 s unless the starter's whole process group is killed.
    child, marker = late_child(tmp_path, 4)
    replace_starter(sample_site, f"subprocess.Popen([sys.executable, {str(child)!r}])\nprint('hanging now', flush=True)\ntime.sleep(600)\n")
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("run: {args: [--layers, 32],", "run: {timeout: 1.5, args: [--layers, 32],"))
    started = time.monotonic()
    result = run_infralens("check", "lab-01-sample", cwd=sample_site)
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert re.search(r"lab-01-sample\s+code/lab-01-sample/kv\.py\s+timeout\s+1\.\d\d s", result.stdout)
    assert "error: code/lab-01-sample/kv.py: killed after 1.5 s timeout" in result.stderr
    assert "  | hanging now" in result.stderr
    assert elapsed < 30
    time.sleep(4)
    assert not marker.exists(), "the starter's child outlived the timeout"


@pytest.mark.parametrize("command", [[], ["build"], ["check"], ["schema"], ["new"], ["links"], ["serve"]])
def test_every_command_has_help(command: list[str]) -> None:
    result = run_infralens(*command, "--help", cwd=REPO)
    assert result.returncode == 0
    assert "Usage:" in result.stdout
    assert len(result.stdout.splitlines()) > 3


def test_base_url_gives_every_page_a_canonical_link(sample_site: Path) -> None:
    site = sample_site / "site.yml"
    site.write_text(site.read_text() + "base_url: https://example.org/lens/\n")
    assert run_infralens("build", cwd=sample_site).returncode == 0
    page = (sample_site / "output/labs/lab-01-sample/index.html").read_text()
    assert '<link rel="canonical" href="https://example.org/lens/labs/lab-01-sample/index.html">' in page


def test_highlighting_is_cached_on_disk_and_a_cached_build_is_identical(sample_site: Path) -> None:
    assert run_infralens("build", "--out", "first", cwd=sample_site).returncode == 0
    cached = sorted((sample_site / ".infralens/highlight").rglob("*.pickle"))
    assert len(cached) == 2  # one per starter
    assert run_infralens("build", "--out", "second", cwd=sample_site).returncode == 0
    for page in (sample_site / "first").rglob("*.html"):
        assert page.read_bytes() == (sample_site / "second" / page.relative_to(sample_site / "first")).read_bytes()
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text().replace("per_layer = 2 * kv_heads", "per_layer = 2 * kv_heads  # edited"))
    assert run_infralens("build", "--out", "third", cwd=sample_site).returncode == 0
    assert len(list((sample_site / ".infralens/highlight").rglob("*.pickle"))) == 3
    assert "# edited" in (sample_site / "third/code/lab-01-sample/kv.py.html").read_text()


def test_a_template_edit_shows_in_the_next_build_despite_compiled_templates(sample_site: Path) -> None:
    shutil.copytree(REPO / "templates", sample_site / "templates")
    assert run_infralens("build", cwd=sample_site).returncode == 0
    assert any((sample_site / ".infralens/templates").iterdir())  # compiled templates were kept
    base = sample_site / "templates/base.html"
    base.write_text(base.read_text().replace("the source of truth", "Edited footer"))
    assert run_infralens("build", cwd=sample_site).returncode == 0
    assert "Edited footer" in (sample_site / "output/index.html").read_text()


ESCAPES = {
    # A child in a new session holds the output pipe open and would outlive a process-group kill.
    "new-session": "subprocess.Popen([sys.executable, CHILD], start_new_session=True)\n",
    # A grandchild whose parent exits at once is an orphan in yet another session.
    "double-fork": (
        "subprocess.Popen([sys.executable, '-c', "
        "'import subprocess, sys; subprocess.Popen([sys.executable, sys.argv[1]], start_new_session=True)', CHILD])\n"
    ),
}


@pytest.mark.parametrize("escape", sorted(ESCAPES))
@pytest.mark.parametrize("ending", ["timeout", "exit"])
def test_nothing_a_starter_starts_outlives_it(escape: str, ending: str, sample_site: Path, tmp_path: Path) -> None:
    child, marker = late_child(tmp_path, 3)
    replace_starter(
        sample_site,
        f"CHILD = {str(child)!r}\n"
        + ESCAPES[escape]
        + "print('kv bytes per token: 524,288', flush=True)\n"
        + ("time.sleep(600)\n" if ending == "timeout" else ""),
    )
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("run: {args: [--layers, 32],", "run: {timeout: 1.5, args: [--layers, 32],"))
    started = time.monotonic()
    result = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert time.monotonic() - started < 20, "check waited for a process the starter left behind"
    status = "timeout" if ending == "timeout" else "passed"
    assert re.search(rf"code/lab-01-sample/kv\.py\s+{status}", result.stdout), result.stdout + result.stderr
    time.sleep(3.5)
    assert not marker.exists(), f"a process started by the starter ({escape}) outlived its run"


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_stopping_check_stops_its_starters_at_once_and_leaves_nothing(how: str, sample_site: Path, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    child, marker = late_child(tmp_path, 4)
    replace_starter(sample_site, f"subprocess.Popen([sys.executable, {str(child)!r}], start_new_session=True)\nprint('running', flush=True)\ntime.sleep(600)\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    check = subprocess.Popen([sys.executable, "-m", "infralens", "check", "lab-01-sample"], cwd=sample_site, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not list(scratch.glob("infralens-run-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)  # the starter is running
    check.send_signal(getattr(signal, how))
    started = time.monotonic()
    _, stderr = check.communicate(timeout=30)
    assert time.monotonic() - started < 10, "check went on waiting for its starter"
    assert check.returncode == 130 and "Traceback" not in stderr, stderr
    assert "stopped: every running starter was killed" in stderr
    assert list(scratch.iterdir()) == [], "a scratch folder was left"
    time.sleep(4.5)
    assert not marker.exists(), "a process the starter started outlived check"


def test_check_killed_outright_leaves_no_starter_and_no_folder_behind(sample_site: Path, tmp_path: Path) -> None:
    """SIGKILL runs no cleanup in check: its supervisors see it gone and stop the starters and
    remove their folders; the next check sweeps the staging folder the killed one left in the store."""
    import signal
    import subprocess
    import sys

    child, marker = late_child(tmp_path, 4)
    replace_starter(sample_site, f"subprocess.Popen([sys.executable, {str(child)!r}], start_new_session=True)\nprint('running', flush=True)\ntime.sleep(600)\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    check = subprocess.Popen([sys.executable, "-m", "infralens", "check", "lab-01-sample"], cwd=sample_site, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not list(scratch.glob("infralens-run-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)  # the starter is running
    runs = sample_site / ".infralens/runs"
    assert [p.name for p in runs.iterdir() if ".new-" in p.name], "no staging folder while the starter runs"
    check.send_signal(signal.SIGKILL)
    assert check.wait(timeout=10) == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while list(scratch.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(scratch.iterdir()) == [], "a run's folder outlived check"
    time.sleep(3.5)
    assert not marker.exists(), "a process the starter started outlived check"
    # The next check (of a quick starter) finds the killed one's staging folder and removes it.
    replace_starter(sample_site, "print('kv bytes per token: 524,288')\n")
    assert run_infralens("check", "lab-01-sample", cwd=sample_site).returncode == 0
    assert [p.name for p in runs.iterdir() if ".new-" in p.name] == []


@pytest.mark.parametrize("how", ["os.kill(os.getppid(), signal.SIGKILL)", "os.killpg(0, signal.SIGKILL)"], ids=["kills-its-supervisor", "kills-its-group"])
def test_a_starter_that_kills_its_supervisor_leaves_nothing_behind(how: str, sample_site: Path, tmp_path: Path) -> None:
    child, marker = late_child(tmp_path, 3)
    replace_starter(
        sample_site,
        "import os, signal\n"
        f"subprocess.Popen([sys.executable, {str(child)!r}], start_new_session=True)\n"  # holds stdout, in a session of its own
        f"{how}\n",
    )
    result = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert re.search(r"code/lab-01-sample/kv\.py\s+failed", result.stdout), result.stdout + result.stderr
    time.sleep(3.5)
    assert not marker.exists(), "the starter's child outlived the supervisor it killed"


def test_a_starter_with_a_byte_order_mark_is_previewed_by_symbol_and_its_state_recorded(sample_site: Path) -> None:
    """A UTF-8 BOM is valid Python; ast.parse of the text refused it ("invalid non-printable character U+FEFF")."""
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_bytes(b"\xef\xbb\xbf" + starter.read_bytes())
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("  region: formula\n", "  symbol: kv_bytes_per_token\n"))
    checked = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    built = run_infralens("build", cwd=sample_site)
    assert built.returncode == 0 and built.stderr == "", built.stderr
    page = next((sample_site / "output").rglob("lab-01-sample/index.html")).read_text()
    assert '<a href="#L9" data-lines="9-9">Line 9</a>' in page  # `per_layer = …` keeps its line number
    assert "8,192" in page  # per_layer's value, recorded by the traced run
