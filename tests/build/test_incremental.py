"""Incremental builds: only the labs whose inputs changed are rendered and written again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from infralens.build import Session, build
from infralens.errors import InputError
from infralens.project.workspace import Workspace

pytestmark = pytest.mark.cli


def stamps(out: Path) -> dict[str, int]:
    """Every file of a built site with its modification time, to see which ones a build rewrote."""
    return {p.relative_to(out).as_posix(): p.stat().st_mtime_ns for p in sorted(out.rglob("*")) if p.is_file()}


def rewritten(before: dict[str, int], after: dict[str, int]) -> set[str]:
    return {path for path, stamp in after.items() if before.get(path) != stamp}


@pytest.fixture
def site(sample_site: Path, tmp_path: Path) -> Workspace:
    ws = Workspace.open(sample_site / "site.yml", tmp_path / "out", tmp_path / "cache")
    assert build(ws).rendered == 2
    return ws


def test_an_unchanged_site_is_neither_rendered_nor_written(site: Workspace) -> None:
    before = stamps(site.out)
    summary = build(site)
    assert (summary.rendered, summary.pages, summary.files, summary.removed) == (0, 0, 0, 0)
    assert stamps(site.out) == before


def test_a_starter_edit_rewrites_its_lab_and_nothing_of_the_other(site: Workspace) -> None:
    before = stamps(site.out)
    starter = site.root / "code/lab-01-sample/kv.py"
    starter.write_text(starter.read_text().replace("# one K and one V vector per KV head", "# K and V, edited"))
    assert build(site).rendered == 1
    assert rewritten(before, stamps(site.out)) == {
        "labs/lab-01-sample/index.html", "code/lab-01-sample/kv.py.html", "code/lab-01-sample/kv.py", "code/lab-01-sample/kv.ipynb",
        "search/chunk-0000.js",
    }
    assert "# K and V, edited" in (site.out / "code/lab-01-sample/kv.py.html").read_text()


def test_a_title_edit_rewrites_the_labs_that_name_it_and_the_index(site: Workspace) -> None:
    manifest = site.root / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("title: Sample KV bytes", "title: Renamed KV bytes"))
    before = stamps(site.out)
    assert build(site).rendered == 2  # lab 02's pager names lab 01
    assert {"index.html", "labs/lab-02-notes/index.html"} <= rewritten(before, stamps(site.out))
    assert "Renamed KV bytes" in (site.out / "labs/lab-02-notes/index.html").read_text()


def test_a_prose_edit_off_the_card_rewrites_its_lab_not_the_index(site: Workspace) -> None:
    # The edit moves every mark below it (the starters' among them); the index shows no mark.
    manifest = site.root / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace(
        "concept_goal: Every generated token stores one key and one value vector per layer and KV head.",
        "concept_goal: >-\n  Every generated token stores one key\n  and one value vector per layer and KV head, edited.",
    ))
    before = stamps(site.out)
    assert build(site).rendered == 1
    changed = rewritten(before, stamps(site.out))
    assert "labs/lab-01-sample/index.html" in changed and "index.html" not in changed
    assert "per layer and KV head, edited." in (site.out / "labs/lab-01-sample/index.html").read_text()


def test_a_lost_or_edited_output_file_is_written_again_and_a_stray_one_removed(site: Workspace) -> None:
    (site.out / "labs/lab-02-notes/index.html").unlink()
    (site.out / "code/lab-01-sample/kv.py.html").write_text("tampered")
    (site.out / "stray.html").write_text("left by hand")
    summary = build(site)
    assert summary.rendered == 2 and summary.removed == 1
    assert not (site.out / "stray.html").exists()
    assert "tampered" not in (site.out / "code/lab-01-sample/kv.py.html").read_text()
    assert (site.out / "labs/lab-02-notes/index.html").is_file()


def test_a_removed_lab_takes_its_files_with_it(site: Workspace) -> None:
    (site.root / "labs/lab-02-notes.yml").unlink()
    shutil.rmtree(site.root / "code/lab-02-notes")
    summary = build(site)
    assert summary.labs == 1 and summary.removed == 3
    assert not (site.out / "labs/lab-02-notes").exists() and not (site.out / "code/lab-02-notes").exists()


def test_the_owner_of_a_starter_is_its_manifest_not_its_folder(site: Workspace) -> None:
    # A starter kept in another lab's folder still belongs to the lab that lists it.
    helper = site.root / "code/lab-02-notes/kv_helper.py"
    helper.write_text("# region helper\nHELPER = 1\n# endregion\n")
    manifest = site.root / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace(
        "starters:\n", "starters:\n  - path: code/lab-02-notes/kv_helper.py\n    role: A helper kept elsewhere.\n    run: false\n", 1
    ))
    build(site)
    session = Session(keep_state=True)
    build(site, session=session)
    helper.write_text("# region helper\nHELPER = 2  # edited\n# endregion\n")
    summary = build(site, session=session)
    assert summary.rendered == 1
    assert "edited" in (site.out / "code/lab-02-notes/kv_helper.py.html").read_text()
    assert (site.out / "code/lab-02-notes/kv_helper.py.html").read_text().count("Lab 01") >= 1


def test_a_failed_build_leaves_output_as_it_was(site: Workspace) -> None:
    before = stamps(site.out)
    manifest = site.root / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("region: formula", "region: nowhere"))
    with pytest.raises(InputError, match="region 'nowhere' not found"):
        build(site)
    assert stamps(site.out) == before
    assert not [p for p in site.out.parent.iterdir() if p.name.startswith(f".{site.out.name}.new")]


def test_the_cache_folder_comes_from_the_option_then_the_environment_then_the_site(sample_site: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("INFRALENS_CACHE_DIR", str(tmp_path / "from-env"))
    assert Workspace.open(sample_site / "site.yml", cache_dir=tmp_path / "option").cache == tmp_path / "option"
    assert Workspace.open(sample_site / "site.yml").cache == tmp_path / "from-env"
    monkeypatch.delenv("INFRALENS_CACHE_DIR")
    assert Workspace.open(sample_site / "site.yml").cache == sample_site / ".infralens"
    assert os.environ.get("INFRALENS_CACHE_DIR") is None


def test_builds_of_one_output_take_turns_and_clean_what_a_killed_build_left(sample_site: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "out"
    leftover = tmp_path / ".out.new-killed"  # what a build killed before its commit leaves beside output/
    (leftover / "labs").mkdir(parents=True)
    command = [sys.executable, "-m", "infralens", "build", "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    builds = [subprocess.Popen(command, cwd=sample_site, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [build.communicate(timeout=120) + (build.returncode,) for build in builds]
    assert all(code == 0 for _, _, code in results), results
    assert sorted(int(stdout.split("(")[1].split()[0]) for stdout, _, _ in results) == [0, 0, 0, 2]  # one rendered, three found it done
    assert not leftover.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.new")] == []


def test_an_output_folder_that_cannot_be_written_is_an_error_not_a_traceback(sample_site: Path, tmp_path: Path) -> None:
    from conftest import run_infralens

    blocker = tmp_path / "a-file"  # a file where output/'s parent folder should be: even root cannot write there
    blocker.write_text("not a folder")
    result = run_infralens("build", "--out", str(blocker / "site"), "--cache-dir", str(tmp_path / "cache"), cwd=sample_site)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[0] == f"{blocker / 'site'}:1:1: error: cannot write the output folder: {blocker} is a file, not a folder"
