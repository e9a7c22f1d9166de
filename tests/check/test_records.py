"""Run records from outside: `results merge`, `check` and `build` read every record through one
validation, refuse a bad one with a `path:line:col: error:` line, and never lose a stored record."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_infralens

from infralens.check.results import ResultStore, merge_results, run_key
from infralens.errors import InputError
from infralens.model.record import parse_run

KV = "code/lab-01-sample/kv.py"
ERROR_LINE = re.compile(r"^\S.*?:\d+:\d+: (error|note): .+$")


def kv_key(site: Path) -> str:
    """The current run key of the sample's kv.py, as merge and build compute it."""
    from infralens.build import load_project

    project = load_project(site / "site.yml")
    starter = next(s for lab in project.labs for s in lab.starters if s.path == KV)
    return run_key(project.root, starter, starter.run)


def kv_record(**fields) -> dict:
    record = {
        "lab": "lab-01-sample", "starter": KV, "status": "passed", "seconds": 0.5, "returncode": 0, "stdout": "kv bytes per token: 524,288\n",
        "stderr": "", "reason": "", "mark": {"path": "labs/lab-01-sample.yml", "line": 10, "col": 11}, "finished": "2026-11-20T09:00:00Z",
        "artifacts": [], "device": "cpu", "hardware": "CPU x (2 cores)",
    }
    return {**record, **fields}


def results_folder(root: Path, key: str, record: dict | str, files: dict[str, bytes] | None = None) -> Path:
    """A results folder as `check --results-dir` writes one, holding one record (and its files)."""
    slot = root / "runs" / key
    slot.mkdir(parents=True)
    (slot / "result.json").write_text(record if isinstance(record, str) else json.dumps(record, indent=1), encoding="utf-8")
    for name, data in (files or {}).items():
        (slot / name).write_bytes(data)
    return root


def clean_errors(stderr: str) -> list[str]:
    """The stderr of a refusal: only `path:line:col: error:` lines (and refused/conflict lines), never a traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if not line.startswith(("refused: ", "conflict: ")) and not re.fullmatch(r"\d+ errors?", line)]
    assert lines and all(ERROR_LINE.match(line) for line in lines), stderr
    return lines


@pytest.mark.cli
@pytest.mark.parametrize("name", ["/proc/self/environ", "../../../escaped.txt", "sub/dir.txt", "..", "env.txt"])
def test_a_merged_record_naming_a_file_outside_its_slot_is_refused_and_never_published(sample_site: Path, tmp_path: Path, name: str) -> None:
    """An absolute name, a `..` name, a path, or a symlink (env.txt → /proc/self/environ) in a
    results folder is refused at the merge; the build then publishes nothing of it."""
    key = kv_key(sample_site)
    shard = results_folder(tmp_path / "shard", key, kv_record(artifacts=[name]))
    if name == "env.txt":
        (shard / "runs" / key / name).symlink_to("/proc/self/environ")
    cache = {"INFRALENS_CACHE_DIR": str(tmp_path / "cache" / "a" / "b")}
    merged = run_infralens("results", "merge", str(shard), cwd=sample_site, env=cache)
    assert merged.returncode == 1
    errors = clean_errors(merged.stderr)
    assert any("result.json:" in line and ("artifact" in line) for line in errors), errors
    assert merged.stdout.endswith("0 merged, 1 refused, 0 conflicting\n")
    assert not (tmp_path / "cache" / "a" / "b" / "runs" / key).exists()
    built = run_infralens("build", "--out", str(tmp_path / "out"), cwd=sample_site, env=cache)
    assert built.returncode == 0, built.stderr
    assert not (tmp_path / "out" / "runs").exists() and not (tmp_path / "escaped.txt").exists()


@pytest.mark.cli
@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"seconds": "fast"}, "seconds: must be a finite number"),
        ({"finished": 5}, "finished: must be a string"),
        ({"state": 5}, "state: must be a string"),
        ({"traced": [[1, 2]], "state": json.dumps({"version": 1, "lines": {"x": {"samples": []}}, "calls": {}})}, "state: lines 'x': is not a line number"),
        ({"status": "great"}, "status: must be one of"),
        ({"stdout": "\udc80"}, "stdout: holds text that cannot be written as UTF-8"),
    ],
)
def test_a_record_of_the_wrong_shape_is_refused_by_merge_and_by_build_with_its_line(sample_site: Path, tmp_path: Path, fields: dict, error: str) -> None:
    key = kv_key(sample_site)
    shard = results_folder(tmp_path / "shard", key, kv_record(**fields))
    cache = tmp_path / "cache"
    merged = run_infralens("results", "merge", str(shard), cwd=sample_site, env={"INFRALENS_CACHE_DIR": str(cache)})
    assert merged.returncode == 1
    errors = clean_errors(merged.stderr)
    assert any(error in line for line in errors), errors
    line = next(line for line in errors if error in line)
    field = error.split(":")[0]
    at = int(line.split("result.json:")[1].split(":")[0])
    assert f'"{field}":' in (shard / "runs" / key / "result.json").read_text().splitlines()[at - 1]  # the field's own line
    # The same record put into the store by hand: the build refuses it, and output/ is kept.
    out = tmp_path / "out"
    assert run_infralens("build", "--out", str(out), cwd=sample_site, env={"INFRALENS_CACHE_DIR": str(cache)}).returncode == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    shutil.copytree(shard / "runs" / key, cache / "runs" / key)
    built = run_infralens("build", "--out", str(out), cwd=sample_site, env={"INFRALENS_CACHE_DIR": str(cache)})
    assert built.returncode == 1
    assert any(error in line for line in clean_errors(built.stderr))
    assert "infralens check lab-01-sample` records this run again" in built.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # check runs it again and its fresh record replaces the broken one; the build then works.
    checked = run_infralens("check", "lab-01-sample", "--no-state", cwd=sample_site, env={"INFRALENS_CACHE_DIR": str(cache)})
    assert checked.returncode == 0 and "Traceback" not in checked.stderr, checked.stderr
    assert run_infralens("build", "--out", str(out), cwd=sample_site, env={"INFRALENS_CACHE_DIR": str(cache)}).returncode == 0


@pytest.mark.cli
def test_a_record_nested_too_deeply_or_with_nan_seconds_is_refused_cleanly(sample_site: Path, tmp_path: Path) -> None:
    key = kv_key(sample_site)
    deep = results_folder(tmp_path / "deep", key, '{"lab": ' + "[" * 100_000 + "]" * 100_000 + "}")
    nan = results_folder(tmp_path / "nan", key, json.dumps(kv_record(seconds=float("nan"))))
    merged = run_infralens("results", "merge", str(deep), str(nan), cwd=sample_site, env={"INFRALENS_CACHE_DIR": str(tmp_path / "cache")})
    assert merged.returncode == 1
    errors = clean_errors(merged.stderr)
    assert any("nested too deeply" in line for line in errors) and any("seconds: must be a finite number" in line for line in errors), errors
    # Put into the store by hand, the NaN record is no recorded time for --shard, and no traceback.
    shutil.copytree(nan / "runs" / key, tmp_path / "cache" / "runs" / key)
    sharded = run_infralens("check", "--shard", "1/2", "--no-state", cwd=sample_site, env={"INFRALENS_CACHE_DIR": str(tmp_path / "cache")})
    assert sharded.returncode == 0 and "Traceback" not in sharded.stderr, sharded.stderr


@pytest.mark.cli
def test_merge_copies_only_what_the_record_names_within_checks_caps(sample_site: Path, tmp_path: Path) -> None:
    """A 2 GiB sparse artifact, an active SVG and a dangling symlink are refused; the good record
    already stored stays; a file the record does not name is not copied."""
    key = kv_key(sample_site)
    cache = {"INFRALENS_CACHE_DIR": str(tmp_path / "cache")}
    good = results_folder(tmp_path / "good", key, kv_record(artifacts=["ok.txt"]), {"ok.txt": b"ok", "extra.bin": b"not named"})
    assert run_infralens("results", "merge", str(good), cwd=sample_site, env=cache).returncode == 0
    stored = tmp_path / "cache" / "runs" / key
    assert sorted(p.name for p in stored.iterdir()) == ["ok.txt", "result.json"]
    later = kv_record(finished="2026-12-01T00:00:00Z")
    big = results_folder(tmp_path / "big", key, {**later, "artifacts": ["big.txt"]})
    with open(big / "runs" / key / "big.txt", "wb") as file:
        file.truncate(2 << 30)
    svg = results_folder(tmp_path / "svg", key, {**later, "artifacts": ["a.svg"]}, {"a.svg": b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'})
    dangling = results_folder(tmp_path / "dangling", key, {**later, "artifacts": ["gone.txt"]})
    (dangling / "runs" / key / "gone.txt").symlink_to(tmp_path / "nowhere")
    merged = run_infralens("results", "merge", str(big), str(svg), str(dangling), cwd=sample_site, env=cache)
    assert merged.returncode == 1
    errors = clean_errors(merged.stderr)
    assert [bool(re.search(pattern, "\n".join(errors))) for pattern in (r"big\.txt' is 2,147,483,648 bytes", r"a\.svg.*script", r"gone\.txt' is a symlink")] == [True] * 3, errors
    assert merged.stdout.endswith("0 merged, 3 refused, 0 conflicting\n")
    assert sorted(p.name for p in stored.iterdir()) == ["ok.txt", "result.json"]
    assert json.loads((stored / "result.json").read_text())["finished"] == "2026-11-20T09:00:00Z"
    assert sum(p.stat().st_blocks for p in (tmp_path / "cache").rglob("*") if p.is_file()) < 1 << 16


@pytest.mark.unit
def test_a_replace_killed_between_its_moves_keeps_the_old_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ResultStore(tmp_path / "runs")
    old = results_folder(tmp_path / "old", "k1", kv_record())
    shutil.copytree(old / "runs" / "k1", store.slot("k1"))
    new = store.staging("k1")
    (new / "result.json").write_text(json.dumps(kv_record(finished="2026-12-01T00:00:00Z")))
    renames = []
    real = Path.rename

    def killed(self, target):
        renames.append(self)
        if len(renames) == 2:  # the old record is aside, the new one not yet in: the process dies here
            raise KeyboardInterrupt
        return real(self, target)

    monkeypatch.setattr(Path, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        store.replace("k1", new)
    monkeypatch.setattr(Path, "rename", real)
    kept = store.load("k1")
    assert kept is not None and kept.finished == "2026-11-20T09:00:00Z"
    assert [p.name for p in store.folder.iterdir()] == ["k1"]


@pytest.mark.unit
def test_a_replace_killed_outright_leaves_the_old_record_aside_and_the_next_load_puts_it_back(tmp_path: Path) -> None:
    """What SIGKILL leaves between the two moves: no slot, the old record aside."""
    store = ResultStore(tmp_path / "runs")
    old = results_folder(tmp_path / "old", "k1", kv_record())
    (store.folder / ".k1.old-x1y2").mkdir(parents=True)
    shutil.copytree(old / "runs" / "k1", store.folder / ".k1.old-x1y2" / "slot")
    kept = store.load("k1")
    assert kept is not None and kept.finished == "2026-11-20T09:00:00Z"


@pytest.mark.unit
def test_merge_into_a_store_keeps_the_old_record_when_the_new_one_is_refused(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "store")
    good = results_folder(tmp_path / "good", "k1", kv_record())
    bad = results_folder(tmp_path / "bad", "k1", kv_record(finished="2026-12-01T00:00:00Z", artifacts=["gone.txt"]))
    done = merge_results(store, [good, bad], {"k1": KV})
    assert len(done.merged) == 1 and [p.message for p in done.invalid] == ["artifact 'gone.txt' is missing"]
    kept = store.load("k1")
    assert kept is not None and kept.finished == "2026-11-20T09:00:00Z"


@pytest.mark.unit
def test_every_field_problem_of_a_record_is_reported_at_once() -> None:
    text = json.dumps(kv_record(seconds="fast", finished=5, extra=1), indent=1)
    with pytest.raises(InputError) as caught:
        parse_run("r/result.json", text)
    assert [str(p) for p in caught.value.problems] == [
        "r/result.json:5:2: error: seconds: must be a finite number",
        "r/result.json:15:2: error: finished: must be a string",
        "r/result.json:19:2: error: unknown field 'extra'",
    ]


@pytest.mark.unit
def test_the_tracer_never_stores_a_lone_surrogate() -> None:
    from infralens.child.trace_state import summarize

    class Odd:
        def __repr__(self) -> str:
            return "\udc80"

    assert summarize("a\udc80b").encode("utf-8") and summarize([Odd()]).encode("utf-8")
    assert "\\udc80" in summarize("a\udc80b")


@pytest.mark.unit
def test_a_state_the_tracer_wrote_with_a_lone_surrogate_is_repaired_on_read(tmp_path: Path) -> None:
    from infralens.check.runner import read_state

    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "truncated": False, "lines": {"3": {"count": 1, "exact": True, "samples": [{"n": 1, "values": {"x": "\udc80"}}]}}, "calls": {}, "token": "t0"}))
    state = read_state(path, "t0")
    assert state and state.encode("utf-8") and json.loads(state)["lines"]["3"]["samples"][0]["values"]["x"] == "?"
    assert "token" not in json.loads(state)
    assert read_state(path, "another") == ""  # a state without this check's token is not the tracer's


def unshare_available() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.mark.cli
@pytest.mark.skipif(not unshare_available(), reason="needs a user and mount namespace (unshare -rm) to mount a small tmpfs")
@pytest.mark.parametrize("cache", ["read-only", "full"])
def test_check_on_a_read_only_or_full_cache_says_so_in_one_line(sample_site: Path, tmp_path: Path, cache: str) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    fill = f"dd if=/dev/zero of={folder}/fill bs=1k count=200 2>/dev/null; " if cache == "full" else f"mount -o remount,ro {folder}; "
    script = f"mount -t tmpfs -o size=128k tmpfs {folder} && {fill}exec {sys.executable} -m infralens check lab-01-sample --no-state --cache-dir {folder}"
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=sample_site, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    reason = "Read-only file system" if cache == "read-only" else "No space left on device"
    assert f"{folder}/runs: error: cannot store run results: {reason}\n" in result.stderr


@pytest.mark.cli
@pytest.mark.skipif(not unshare_available(), reason="needs a user and mount namespace (unshare -rm) to mount a small tmpfs")
@pytest.mark.parametrize("cache", ["read-only", "full"])
def test_build_on_a_full_cache_still_builds_and_on_a_read_only_one_names_the_cache(sample_site: Path, tmp_path: Path, cache: str) -> None:
    # The build's caches (parsed inputs, compiled templates) only save time: a full cache costs
    # the time, not the build. It used to fail it as "output: cannot write the site", naming the
    # wrong folder (Jinja's bytecode cache raised on its write). A read-only cache cannot hold the
    # lock builds of one output folder take turns under: an error that names the cache.
    folder, out = tmp_path / "cache", tmp_path / "out"
    folder.mkdir()
    fill = f"dd if=/dev/zero of={folder}/fill bs=1k count=200 2>/dev/null; " if cache == "full" else f"mount -o remount,ro {folder}; "
    script = f"mount -t tmpfs -o size=128k tmpfs {folder} && {fill}exec {sys.executable} -m infralens build --cache-dir {folder} --out {out}"
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=sample_site, capture_output=True, text=True, timeout=300)
    if cache == "read-only":
        assert result.returncode == 1 and result.stderr == f"{folder}:1:1: error: cannot write the cache, where builds of one output folder take turns: Read-only file system\n1 error\n"
        return
    assert result.returncode == 0, result.stderr
    assert (out / "labs/lab-01-sample/index.html").is_file()
