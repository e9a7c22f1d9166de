"""Stored results: check re-runs only what changed; build shows the last run, its output and artifacts."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import run_infralens

pytestmark = pytest.mark.cli


def rows(stdout: str) -> dict[str, str]:
    return {line.split()[1]: line for line in stdout.splitlines() if line.startswith("lab-")}


def test_second_check_reuses_results_and_a_change_reruns_only_that_starter(sample_site: Path) -> None:
    first = run_infralens("check", cwd=sample_site)
    assert first.returncode == 0
    assert "(stored result)" not in first.stdout
    second = run_infralens("check", cwd=sample_site)
    assert second.returncode == 0
    assert all(line.endswith("(stored result)") for line in rows(second.stdout).values())
    notes = sample_site / "code/lab-02-notes/notes.md"
    notes.write_text(notes.read_text() + "\nOne more line of prose.\n")
    third = rows(run_infralens("check", cwd=sample_site).stdout)
    assert third["code/lab-01-sample/kv.py"].endswith("(stored result)")
    assert not third["code/lab-02-notes/notes.md"].endswith("(stored result)")
    forced = run_infralens("check", "--no-cache", cwd=sample_site)
    assert "(stored result)" not in forced.stdout


def test_a_changed_run_spec_is_a_new_version(sample_site: Path) -> None:
    assert run_infralens("check", "lab-01-sample", cwd=sample_site).returncode == 0
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("args: [--layers, 32]", "args: [--layers, 16]"))
    result = run_infralens("check", "lab-01-sample", cwd=sample_site)
    assert "(stored result)" not in result.stdout
    assert result.returncode == 1  # 16 layers no longer print 524,288


def test_json_and_junit_reports(sample_site: Path, tmp_path: Path) -> None:
    result = run_infralens("check", "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "r.xml"), cwd=sample_site)
    assert result.returncode == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["passed"], report["failed"]) == (2, 0)
    assert [r["starter"] for r in report["results"]] == ["code/lab-01-sample/kv.py", "code/lab-02-notes/notes.md"]
    assert "kv bytes per token: 524,288" in report["results"][0]["stdout"]
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == "2" and suite.get("failures") == "0"
    assert [case.get("name") for case in suite.iter("testcase")] == ["code/lab-01-sample/kv.py", "code/lab-02-notes/notes.md"]


def test_junit_report_records_a_failure(sample_site: Path, tmp_path: Path) -> None:
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text() + "\nraise SystemExit(3)\n")
    run_infralens("check", "--junit", str(tmp_path / "r.xml"), cwd=sample_site)
    failure = ET.parse(tmp_path / "r.xml").getroot().find("testcase/failure")
    assert failure is not None
    assert failure.get("message") == "labs/lab-01-sample.yml:10:11: exited with status 3"


def test_lab_page_shows_the_last_run_only_for_the_current_version(sample_site: Path) -> None:
    assert run_infralens("build", cwd=sample_site).returncode == 0
    page = (sample_site / "output/labs/lab-01-sample/index.html").read_text()
    assert "Not checked since the last change: <code>infralens check lab-01-sample</code>" in page
    assert "No recorded run of this version yet" in page
    assert run_infralens("check", cwd=sample_site).returncode == 0
    assert run_infralens("build", cwd=sample_site).returncode == 0
    page = (sample_site / "output/labs/lab-01-sample/index.html").read_text()
    assert re.search(r'<span class="run-ok">Passed</span> on \d{4}-\d\d-\d\d', page)
    assert re.search(r"Last run: <strong>passed</strong> in \d+\.\d\d s", page)
    assert "<pre>kv bytes per token: 524,288</pre>" in page
    index = (sample_site / "output/index.html").read_text()
    # The index's cards say it in the reader's words, with the day; the lab page names the command.
    assert len(re.findall(r'<span class="run-ok">Run checked</span> <time datetime="\d{4}-\d\d-\d\d">', index)) == 2
    assert "infralens check" not in index
    starter = sample_site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text() + "\n# a comment is a change too\n")
    assert run_infralens("build", cwd=sample_site).returncode == 0
    page = (sample_site / "output/labs/lab-01-sample/index.html").read_text()
    assert "No recorded run of this version yet" in page


def write_artifacts(site: Path, files: dict[str, str]) -> Path:
    """Make the sample starter write these files and declare them as artifacts; return the manifest."""
    starter = site / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text() + "".join(f"\nopen({name!r}, 'w').write({text!r})" for name, text in files.items()) + "\n")
    manifest = site / "labs/lab-01-sample.yml"
    names = ", ".join(files)
    manifest.write_text(manifest.read_text().replace("run: {args: [--layers, 32],", f"run: {{artifacts: [{names}], args: [--layers, 32],"))
    return manifest


def test_artifacts_are_kept_and_shown_and_a_missing_one_fails(sample_site: Path) -> None:
    manifest = write_artifacts(sample_site, {"plot.svg": '<svg xmlns="http://www.w3.org/2000/svg"/>'})
    assert run_infralens("check", cwd=sample_site).returncode == 0
    assert run_infralens("build", cwd=sample_site).returncode == 0
    assert (sample_site / "output/runs/lab-01-sample/plot.svg").read_text().startswith("<svg")
    page = (sample_site / "output/labs/lab-01-sample/index.html").read_text()
    assert '<img src="../../runs/lab-01-sample/plot.svg" alt="plot.svg, written by the last run"' in page
    manifest.write_text(manifest.read_text().replace("artifacts: [plot.svg]", "artifacts: [plot.svg, table.csv]"))
    result = run_infralens("check", cwd=sample_site)
    assert result.returncode == 1
    assert "error: code/lab-01-sample/kv.py: did not write artifact 'table.csv' into its working folder" in result.stderr


def test_an_artifact_that_is_not_an_image_is_offered_as_a_download(sample_site: Path) -> None:
    write_artifacts(sample_site, {"trace.json": '{"traceEvents": []}', "t.csv": "a,b"})
    assert run_infralens("check", cwd=sample_site).returncode == 0
    assert run_infralens("build", cwd=sample_site).returncode == 0
    assert (sample_site / "output/runs/lab-01-sample/trace.json").read_text() == '{"traceEvents": []}'
    page = (sample_site / "output/labs/lab-01-sample/index.html").read_text()
    assert ('<p class="run-files">Files it wrote: <a href="../../runs/lab-01-sample/trace.json" download><code>trace.json</code></a>, '
            '<a href="../../runs/lab-01-sample/t.csv" download><code>t.csv</code></a></p>') in page
    assert "<img" not in page.split('class="run-files"')[1].split("</p>")[0]


def test_a_remembered_run_key_is_hashed_again_when_what_every_key_depends_on_changes(sample_site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build remembers each starter's run key while its folder is unchanged; a new tracer or
    probe changes every key without touching a folder, and the build must see the new one."""
    from infralens.build import Session
    from infralens.check import results
    from infralens.model.parse import parse_lab
    from infralens.project.workspace import Workspace

    ws = Workspace.open(sample_site / "site.yml")
    manifest = next((sample_site / "labs").glob("*.yml"))
    starter = next(s for s in parse_lab(f"labs/{manifest.name}", manifest.stem, manifest.read_text()).starters if s.run)
    session = Session()
    first = session.run_key(ws, starter, starter.run)
    assert session.run_key(ws, starter, starter.run) == first
    monkeypatch.setattr(results, "recorders_digest", lambda: "a new tracer")
    monkeypatch.setattr(results, "run_environment", lambda: "a new tracer")
    assert session.run_key(ws, starter, starter.run) == results.run_key(ws.root, starter) != first
