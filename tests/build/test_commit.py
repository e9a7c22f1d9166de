"""Committing a build to output/: output/ is the old site or the new one, whatever fails or is killed.

A build that fails leaves output/ byte for byte as it was; a commit cut short by an error or Ctrl-C
is rolled back; a build killed during its commit is finished by the next build.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import TESTS, run_infralens
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infralens.build import Session, build
from infralens.errors import InputError
from infralens.project import workspace
from infralens.project.workspace import Workspace

pytestmark = pytest.mark.cli

SAMPLE = TESTS / "sites/sample"


def tree(folder: Path) -> dict[str, str]:
    """Every file and folder below `folder`, with a hash of each file's bytes."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        found[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
    return found


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.new-"))


def clean_build(root: Path, scratch: Path) -> dict[str, str]:
    """What a first build of the project at `root` writes, in a fresh output and cache of its own."""
    out = scratch / "clean"
    shutil.rmtree(out, ignore_errors=True)
    build(Workspace.open(root / "site.yml", out, scratch / "clean-cache"), session=Session(jobs=1))
    return tree(out)


# Edits a careless contributor makes: some leave a valid site, most break it somewhere.
BREAKERS = ["!!python/object:os.system", "&a", "*b", "<<: *a", "\x00", "\x07", "{", "]", "- ", "\t", ": x:", "'", "$\\frac{a}$", "9" * 5000]
EDIT = st.one_of(
    st.tuples(st.just("splice"), st.sampled_from(["site.yml", "labs/lab-01-sample.yml", "labs/lab-02-notes.yml", "code/lab-01-sample/kv.py", "code/lab-02-notes/notes.md"]), st.floats(0, 1), st.sampled_from(BREAKERS) | st.text(max_size=8)),
    st.tuples(st.just("retitle"), st.sampled_from(["labs/lab-01-sample.yml", "labs/lab-02-notes.yml"]), st.floats(0, 1), st.text("abc XYZ", min_size=1, max_size=10)),
    st.tuples(st.just("delete"), st.sampled_from(["labs/lab-02-notes.yml", "code/lab-01-sample/kv.py", "site.yml"]), st.just(0.0), st.just("")),
    st.tuples(st.just("bytes"), st.sampled_from(["labs/lab-01-sample.yml", "code/lab-02-notes/notes.md"]), st.floats(0, 1), st.sampled_from([b"\xff\xfe", b"\xc3"])),
    st.tuples(st.just("restore"), st.just(""), st.just(0.0), st.just("")),
)


def apply(root: Path, edit: tuple) -> None:
    kind, name, where, piece = edit
    path = root / name
    if kind == "restore":
        shutil.rmtree(root)
        shutil.copytree(SAMPLE, root)
        return
    if kind == "delete":
        path.unlink(missing_ok=True)
        return
    if not path.exists():
        return
    data = path.read_bytes()
    at = int(where * len(data))
    if kind == "retitle":
        text = data.decode("utf-8", "replace")
        text = "\n".join(f"title: {piece}" if line.startswith("title:") else line for line in text.splitlines()) + "\n"
        path.write_text(text)
    elif kind == "bytes":
        path.write_bytes(data[:at] + piece + data[at:])
    else:
        path.write_bytes(data[:at] + piece.encode() + data[at:])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(EDIT, min_size=1, max_size=5))
def test_a_failed_build_leaves_output_byte_identical_and_a_good_one_equals_a_clean_build(edits: list) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="infralens-commit-"))
    try:
        root = scratch / "site"
        shutil.copytree(SAMPLE, root)
        ws = Workspace.open(root / "site.yml", scratch / "out", scratch / "cache")
        session = Session(jobs=1)
        build(ws, session=session)
        for edit in edits:
            apply(root, edit)
            before = tree(ws.out)
            ws = Workspace.open(root / "site.yml", scratch / "out", scratch / "cache")  # a new `infralens build`
            try:
                build(ws, session=session)
            except InputError as exc:
                assert all(str(problem).count("\n") == len(problem.notes) for problem in exc.problems)  # a line each, and one per note
                assert tree(ws.out) == before, f"failed build after {edit!r} changed output/"
            else:
                assert tree(ws.out) == clean_build(root, scratch), f"incremental build after {edit!r} differs from a clean one"
            assert leftovers(ws.out) == []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def changed_site(folder: Path) -> tuple[Workspace, dict[str, str], dict[str, str]]:
    """A site built into folder/out, then edited so that its next build writes, replaces and removes files.

    Returns the workspace, the tree of output/ as built, and the tree a clean build of the edits gives.
    """
    root = folder / "site"
    shutil.copytree(SAMPLE, root)
    ws = Workspace.open(root / "site.yml", folder / "out", folder / "cache")
    build(ws, session=Session(jobs=1))
    before = tree(ws.out)
    (root / "labs/lab-02-notes.yml").unlink()  # its pages and starter files go
    site = root / "site.yml"
    site.write_text(site.read_text().replace("title: ", "title: Renamed ", 1))  # every page changes
    return ws, before, clean_build(root, folder)


def is_commit_move(source) -> bool:
    """A rename of the commit: from the staging folder's site/ into output/."""
    return ".new-" in str(source) and "/site/" in str(source)


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), KeyboardInterrupt()], ids=["OSError", "KeyboardInterrupt"])
def test_a_commit_cut_short_at_any_file_is_rolled_back(failure: BaseException, tmp_path: Path, monkeypatch) -> None:
    real_replace, real_unlink = os.replace, Path.unlink
    for fail_at in range(1000):
        ws, before, after = changed_site(tmp_path / str(fail_at))
        steps = []

        def step() -> None:
            steps.append(1)
            if len(steps) > fail_at:
                raise failure

        def replace(source, target, *args, **kwargs):
            if is_commit_move(source):
                step()
            return real_replace(source, target, *args, **kwargs)

        def unlink(path: Path, *args, **kwargs):
            if ws.out in path.parents:  # a file the new site no longer has
                step()
            return real_unlink(path, *args, **kwargs)

        monkeypatch.setattr(workspace.os, "replace", replace)
        monkeypatch.setattr(Path, "unlink", unlink)
        try:
            build(Workspace.open(ws.site_file, ws.out, ws.cache), session=Session(jobs=1))
        except (InputError, KeyboardInterrupt):
            assert tree(ws.out) == before, f"a commit failing at step {fail_at} changed output/"
        else:
            break  # the commit has fewer steps than fail_at: every point was tried
        finally:
            monkeypatch.setattr(workspace.os, "replace", real_replace)
            monkeypatch.setattr(Path, "unlink", real_unlink)
            assert leftovers(ws.out) == []
    assert fail_at >= 7 and tree(ws.out) == after  # the edits replace every page and remove a lab's files


KILLER = """
import os, signal, sys
from infralens.project import workspace
real, moves = os.replace, []
def replace(source, target, *args, **kwargs):
    if ".new-" in str(source) and "/site/" in str(source):
        moves.append(target)
        if len(moves) > {kill_at}:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(source, target, *args, **kwargs)
workspace.os.replace = replace
from infralens.cli import main
sys.argv = ["infralens", "build", "--out", {out!r}, "--cache-dir", {cache!r}, "--jobs", "1"]
main()
"""


@pytest.mark.parametrize("kill_at", [0, 1, 2, 3])
def test_a_build_killed_during_its_commit_is_finished_by_the_next_build(kill_at: int, tmp_path: Path) -> None:
    ws, before, after = changed_site(tmp_path)
    code = KILLER.format(kill_at=kill_at, out=str(ws.out), cache=str(ws.cache))
    killed = subprocess.run([sys.executable, "-c", code], cwd=ws.root, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert leftovers(ws.out), "the killed build left no journal to finish"
    mixed = tree(ws.out)
    assert mixed != before and mixed != after or kill_at == 0
    assert all(mixed[path] in (before.get(path), after.get(path)) for path in mixed)  # each file old or new, never torn
    result = run_infralens("build", "--out", str(ws.out), "--cache-dir", str(ws.cache), cwd=ws.root)
    assert result.returncode == 0, result.stderr
    assert tree(ws.out) == after, "the next build did not finish the killed commit"
    assert leftovers(ws.out) == []


def test_the_old_site_a_killed_version_1_build_left_aside_is_put_back(tmp_path: Path) -> None:
    ws, before, _ = changed_site(tmp_path)
    aside = ws.out.parent / f".{ws.out.name}.old-k1ll3d"
    os.rename(ws.out, aside)  # killed between its two renames: no output/ at all
    (ws.root / "site.yml").write_text("title: [broken\n")
    with pytest.raises(InputError):
        build(Workspace.open(ws.site_file, ws.out, ws.cache), session=Session(jobs=1))
    assert tree(ws.out) == before and not aside.exists()  # the old site is back, though this build failed


def test_a_folder_of_someone_elses_files_is_refused_not_emptied(sample_site: Path) -> None:
    docs = sample_site / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("a page the user wrote")
    result = run_infralens("build", "--out", "docs", cwd=sample_site)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0].startswith("docs:1:1: error: refusing to build into docs: it holds files `infralens build` did not write")
    assert [p.name for p in docs.iterdir()] == ["notes.txt"]
    # A folder a build wrote is the site's, whatever the cache remembers: its strays go.
    assert run_infralens("build", "--out", "site-out", cwd=sample_site).returncode == 0
    shutil.rmtree(sample_site / ".infralens")
    (sample_site / "site-out/stray.txt").write_text("left by an older build")
    assert run_infralens("build", "--out", "site-out", cwd=sample_site).returncode == 0
    assert not (sample_site / "site-out/stray.txt").exists() and (sample_site / "site-out/.infralens-site").exists()


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rfind(b")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.fixture
def many_labs(tmp_path: Path) -> Path:
    """A site of 60 generated labs: enough for a build to render them in worker processes."""
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("synthetic", REPO / "bench/synthetic.py")
    synthetic = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("synthetic", synthetic)  # its dataclasses look their module up
    spec.loader.exec_module(sys.modules["synthetic"])
    synthetic = sys.modules["synthetic"]
    root = tmp_path / "site"
    synthetic.generate(root, 60)
    return root


@pytest.mark.parametrize("how", ["SIGINT to the group", "SIGTERM to the group", "SIGKILL to the build"])
def test_a_build_stopped_while_its_workers_render_leaves_no_worker_and_no_lock(how: str, many_labs: Path, tmp_path: Path) -> None:
    import time

    out, cache = tmp_path / "out", tmp_path / "cache"
    command = [sys.executable, "-m", "infralens", "build", "--full", "--jobs", "2", "--out", str(out), "--cache-dir", str(cache)]
    assert subprocess.run(command, cwd=many_labs, capture_output=True, timeout=300).returncode == 0
    before = tree(out)
    process = subprocess.Popen(command, cwd=many_labs, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while len(workers := children(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(workers) >= 2, "the build never started its workers"
    signum = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}[how.split()[0]]
    if how.endswith("group"):
        os.killpg(process.pid, signum)
    else:
        os.kill(process.pid, signum)
    stdout, stderr = process.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers), "a worker outlived its build"
    if signum == signal.SIGKILL:
        assert process.returncode == -signal.SIGKILL
    else:
        assert (process.returncode, stderr) == (130, f"stopped: {out} is as it was\n")
        assert tree(out) == before
    # Nothing holds the lock: the next build runs at once and leaves the full site.
    again = subprocess.run(command, cwd=many_labs, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert leftovers(out) == []


def test_a_cache_that_cannot_be_written_costs_speed_not_the_build(sample_site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert run_infralens("build", "--out", str(tmp_path / "out"), "--cache-dir", str(cache), cwd=sample_site).returncode == 0
    manifest = sample_site / "labs/lab-01-sample.yml"
    manifest.write_text(manifest.read_text().replace("title: Sample KV bytes", "title: Edited KV bytes"))
    # Every cache folder read-only, for root too: a file where each kind's subfolder would be made.
    for kind in ("search", "highlight", "state"):
        shutil.rmtree(cache / kind, ignore_errors=True)
        (cache / kind).write_text("not a folder")
    result = run_infralens("build", "--out", str(tmp_path / "out"), "--cache-dir", str(cache), cwd=sample_site)
    assert result.returncode == 0, result.stderr
    assert tree(tmp_path / "out") == clean_build(sample_site, tmp_path)
