"""Unchanged builds: a build whose inputs and outputs all keep the stamps the last one recorded
does nothing, without importing the build; any change of a stamp (an edit that kept the size and
the mtime included), a stray file, a young input or a killed build's leftovers means a real build."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import run_infralens

from infralens.project import unchanged

AGE = unchanged.RACY_NS / 1e9 + 0.1
"""Seconds to wait for the inputs just written to be old enough to be trusted."""


def record(tmp_path: Path, inputs: list[Path], outputs: list[Path] = (), *, labs: int = 3, started_ns: int | None = None) -> bool:
    return unchanged.remember(
        tmp_path / "site.yml", tmp_path / "output", tmp_path / "cache", False, labs,
        [str(p) for p in inputs], [str(p) for p in outputs], started_ns if started_ns is not None else time.time_ns() + unchanged.RACY_NS * 10,
    )


def holds(tmp_path: Path, strict: bool = False) -> int | None:
    return unchanged.unchanged_labs(tmp_path / "site.yml", tmp_path / "output", tmp_path / "cache", strict)


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    (tmp_path / "labs").mkdir()
    (tmp_path / "output").mkdir()
    made = [tmp_path / "site.yml", tmp_path / "labs" / "a.yml", tmp_path / "output" / "index.html"]
    for path in made:
        path.write_text("x = 1\n")
    return made


@pytest.mark.unit
def test_a_record_holds_while_every_stamp_is_the_same(tmp_path: Path, files: list[Path]) -> None:
    # `started_ns` far ahead stands for a build that began long after these files were written.
    assert record(tmp_path, files[:2] + [tmp_path / "labs"], files[2:])
    assert holds(tmp_path) == 3
    assert holds(tmp_path, strict=True) is None  # a strict build has its own record


@pytest.mark.unit
@pytest.mark.parametrize("change", ["edit", "same_size_same_mtime", "new_file", "removed", "output_edit", "leftover"])
def test_any_change_of_a_stamp_ends_it(tmp_path: Path, files: list[Path], change: str) -> None:
    site, manifest, page = files
    assert record(tmp_path, [site, manifest, tmp_path / "labs"], [tmp_path / "output", page])
    if change == "edit":
        manifest.write_text("x = 22\n")
    elif change == "same_size_same_mtime":  # the ctime, which no tool sets back, still moves
        before = manifest.stat()
        time.sleep(0.01)
        manifest.write_text("x = 2\n")
        os.utime(manifest, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert manifest.stat().st_mtime_ns == before.st_mtime_ns and manifest.stat().st_size == before.st_size
    elif change == "new_file":
        (tmp_path / "labs" / "b.yml").write_text("y\n")
    elif change == "removed":
        manifest.unlink()
    elif change == "output_edit":
        page.write_text("<p>by hand</p>\n")
    else:  # a build killed outright left its staging folder beside output/
        (tmp_path / ".output.new-1234").mkdir()
    assert holds(tmp_path) is None


@pytest.mark.unit
def test_no_record_is_written_while_an_input_is_younger_than_the_clock_can_tell(tmp_path: Path, files: list[Path]) -> None:
    assert record(tmp_path, files[:2], files[2:])
    assert not record(tmp_path, files[:2], files[2:], started_ns=time.time_ns())  # just written: too young
    assert holds(tmp_path) is None  # and the older record is gone with it


@pytest.mark.unit
def test_a_missing_or_unreadable_record_is_no_record(tmp_path: Path, files: list[Path]) -> None:
    assert holds(tmp_path) is None
    assert record(tmp_path, files[:2], files[2:])
    target = unchanged.record_path(tmp_path / "site.yml", tmp_path / "output", tmp_path / "cache", False)
    target.write_bytes(b"not a pickle")
    assert holds(tmp_path) is None
    for garbage in DAMAGED_PICKLES:
        target.write_bytes(garbage)
        assert holds(tmp_path) is None


DAMAGED_PICKLES = (
    b"\x80\x04\x95" + (2**64 - 1).to_bytes(8, "little"),  # a frame longer than any machine's: OverflowError
    b"\x80\x04K\x01)R.",  # an int called: TypeError
    b"\x80\x04cbuiltins\nnope\n.",  # a name no module has: AttributeError
    b"\x80\x04h\x05.",  # a memo index never stored: UnpicklingError
    b"",
)
"""Bytes that make pickle.load raise (a cache file truncated or overwritten with garbage): not only
UnpicklingError."""


@pytest.mark.unit
def test_a_damaged_cache_entry_is_a_miss(tmp_path: Path) -> None:
    from infralens.project.workspace import Workspace

    ws = Workspace.open(tmp_path / "site.yml", cache_dir=tmp_path / "cache")
    ws.store("search", "ab" * 16, ("a value",))
    assert ws.recall("search", "ab" * 16) == ("a value",)
    for garbage in DAMAGED_PICKLES:
        ws.cache_path("search", "ab" * 16).write_bytes(garbage)
        assert ws.recall("search", "ab" * 16) is None, garbage


@pytest.mark.cli
def test_an_unchanged_site_is_said_built_without_the_build_and_every_edit_still_shows(sample_site: Path) -> None:
    time.sleep(AGE)  # the copied site is as young as the test: wait until its stamps can be trusted
    first = run_infralens("build", cwd=sample_site)
    assert first.returncode == 0, first.stderr
    again = run_infralens("build", cwd=sample_site, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert again.returncode == 0, again.stderr
    assert "infralens.build.pipeline" not in again.stderr and "jinja2" not in again.stderr  # nothing of the build was loaded
    assert again.stdout.startswith("built 2 labs (0 rendered): wrote 0 pages and 0 files into output in ")

    # An edit that keeps the manifest's size and mtime (`cp -p`, an editor restoring times) is still seen.
    manifest = sample_site / "labs" / "lab-01-sample.yml"
    text, before = manifest.read_text(), manifest.stat()
    assert "Sample KV bytes" in text
    manifest.write_text(text.replace("Sample KV bytes", "Sample KV BYTES"))
    os.utime(manifest, ns=(before.st_atime_ns, before.st_mtime_ns))
    edited = run_infralens("build", cwd=sample_site)
    assert edited.returncode == 0 and "(0 rendered)" not in edited.stdout, edited.stdout + edited.stderr
    assert "Sample KV BYTES" in (sample_site / "output" / "labs" / "lab-01-sample" / "index.html").read_text()
    # That build read a file too young to trust its stamp: it left no record, so the next build is a real one.
    young = run_infralens("build", cwd=sample_site, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert young.returncode == 0 and "infralens.build.pipeline" in young.stderr, young.stdout

    # A file dropped into output/ by hand is removed, as by any build.
    time.sleep(AGE)
    assert run_infralens("build", cwd=sample_site).returncode == 0
    (sample_site / "output" / "labs" / "stray.html").write_text("<p>by hand</p>")
    swept = run_infralens("build", cwd=sample_site)
    assert "removed 1 files" in swept.stdout, swept.stdout + swept.stderr
    assert not (sample_site / "output" / "labs" / "stray.html").exists()

    # --full always builds.
    assert "(2 rendered)" in run_infralens("build", "--full", cwd=sample_site).stdout


@pytest.mark.cli
@pytest.mark.parametrize("folder", ["code", "labs"])
def test_a_folder_linked_out_of_the_project_is_still_refused_file_by_file(sample_site: Path, tmp_path: Path, folder: str) -> None:
    # Starters (and manifests that are no links) are read without resolving each path again: the
    # folder's own place is what decides, so code/ or labs/ linked elsewhere is refused as before.
    elsewhere = tmp_path / f"elsewhere-{folder}"
    (sample_site / folder).rename(elsewhere)
    (sample_site / folder).symlink_to(elsewhere)
    done = run_infralens("build", cwd=sample_site)
    assert done.returncode == 1
    assert "is a symlink to a file outside the project" in done.stderr, done.stderr
