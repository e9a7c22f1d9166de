"""Checks across machines: `check --shard K/N` (N disjoint shares of the labs that together cover
each once, the same on every run, balanced by recorded run times, round-robin by id when none are
recorded), `check --results-dir` and `infralens results merge` (records that travel; a stale one is
refused, a disagreement reported)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from conftest import REPO, run_infralens

from infralens.check.shards import parse_shard, split

SITE_LABS = sorted(p.stem for p in (REPO / "labs").glob("*.yml"))
TIMED = [(lab_id, seconds) for lab_id, seconds in zip(SITE_LABS, [3.7, 1.2, 0.4, 5.1, 2.2, 1.9, 0.8, 4.4, 6.0, None, 2.9, 1.1, 3.3, 2.5, 7.8, 1.0, 3.0, 2.2, 9.6, 8.1, 2.4])]


@pytest.mark.unit
@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("labs", [[(lab_id, None) for lab_id in SITE_LABS], TIMED], ids=["unrecorded", "recorded"])
def test_shards_are_disjoint_complete_and_stable(labs, count: int) -> None:
    shards = split(labs, count)
    assert len(shards) == count
    every = [lab_id for shard in shards for lab_id in shard]
    assert sorted(every) == sorted(lab_id for lab_id, _ in labs)  # each lab exactly once
    shuffled = labs[:]
    random.Random(count).shuffle(shuffled)
    assert split(shuffled, count) == shards  # the order labs come in changes nothing
    assert all(shard == sorted(shard) for shard in shards)


@pytest.mark.unit
def test_without_records_labs_go_round_robin_by_id() -> None:
    assert split([("c", None), ("a", None), ("b", None), ("d", None)], 2) == [["a", "c"], ["b", "d"]]


@pytest.mark.unit
@pytest.mark.parametrize("count", [2, 3, 4, 5])
def test_recorded_times_balance_the_shards(count: int) -> None:
    cost = {lab_id: seconds for lab_id, seconds in TIMED}
    typical = sorted(int(-(-s // 1)) for s in cost.values() if s is not None)[10]
    loads = [sum(int(-(-cost[i] // 1)) if cost[i] is not None else typical for i in shard) for shard in split(TIMED, count)]
    assert max(loads) - min(loads) <= 10  # at most the longest lab apart (9.6 s rounds to 10)


@pytest.mark.unit
def test_a_fraction_of_a_second_of_jitter_moves_no_lab() -> None:
    jittered = [(lab_id, None if s is None else s - 0.05) for lab_id, s in TIMED]
    assert split(jittered, 3) == split(TIMED, 3)


@pytest.mark.unit
@pytest.mark.parametrize(("text", "parsed"), [("1/1", (1, 1)), ("2/4", (2, 4)), (" 3 / 5 ", (3, 5)), ("0/2", None), ("3/2", None), ("2", None), ("a/b", None), ("1/0", None)])
def test_reading_k_of_n(text: str, parsed) -> None:
    assert parse_shard(text) == parsed


@pytest.mark.cli
def test_two_shards_of_a_site_check_each_lab_once(sample_site: Path, tmp_path: Path) -> None:
    checked = []
    for k in (1, 2):
        report = tmp_path / f"shard-{k}.json"
        result = run_infralens("check", "--shard", f"{k}/2", "--json", str(report), cwd=sample_site)
        assert result.returncode == 0, result.stderr
        assert result.stderr.startswith(f"shard {k}/2: 1 of 2 labs")
        checked.append(sorted({entry["lab"] for entry in json.loads(report.read_text())["results"]}))
    assert checked == [["lab-01-sample"], ["lab-02-notes"]]
    bad = run_infralens("check", "--shard", "3/2", cwd=sample_site)
    assert bad.returncode == 2 and "'3/2' is not K/N with 1 <= K <= N" in bad.stderr and "Traceback" not in bad.stderr


def stored(cache: Path) -> dict[str, str]:
    """key → status of every record in a cache's store."""
    return {slot.name: json.loads((slot / "result.json").read_text())["status"] for slot in sorted((cache / "runs").iterdir()) if (slot / "result.json").is_file()}


@pytest.mark.cli
def test_merged_shard_results_equal_one_machines_and_build_shows_them(sample_site: Path, tmp_path: Path) -> None:
    for k in (1, 2):
        env = {"INFRALENS_CACHE_DIR": str(tmp_path / f"cache-{k}")}
        assert run_infralens("check", "--shard", f"{k}/2", "--results-dir", str(tmp_path / f"shard-{k}"), cwd=sample_site, env=env).returncode == 0
        assert (tmp_path / f"shard-{k}" / "junit.xml").is_file() and (tmp_path / f"shard-{k}" / "results.json").is_file()
    merged = {"INFRALENS_CACHE_DIR": str(tmp_path / "merged")}
    result = run_infralens("results", "merge", str(tmp_path / "shard-1"), str(tmp_path / "shard-2"), cwd=sample_site, env=merged)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("2 merged, 0 refused, 0 conflicting\n")
    single = {"INFRALENS_CACHE_DIR": str(tmp_path / "single")}
    assert run_infralens("check", cwd=sample_site, env=single).returncode == 0
    assert stored(tmp_path / "merged") == stored(tmp_path / "single")  # the same records, by key
    built = run_infralens("build", "--out", str(tmp_path / "out"), cwd=sample_site, env=merged)
    assert built.returncode == 0, built.stderr
    for lab in ("lab-01-sample", "lab-02-notes"):
        assert "Last run: <strong>passed</strong>" in (tmp_path / "out" / "labs" / lab / "index.html").read_text()


@pytest.mark.cli
def test_a_record_of_another_version_is_refused_and_a_disagreement_reported(sample_site: Path, tmp_path: Path) -> None:
    env = {"INFRALENS_CACHE_DIR": str(tmp_path / "cache")}
    assert run_infralens("check", "--results-dir", str(tmp_path / "old"), cwd=sample_site, env=env).returncode == 0
    twin = tmp_path / "twin"  # the same run, said to have failed later on another machine
    shutil.copytree(tmp_path / "old", twin)
    record = next(p for p in (twin / "runs").glob("*/result.json") if json.loads(p.read_text())["starter"] == "code/lab-01-sample/kv.py")
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "status": "failed", "finished": "2999-01-01T00:00:00Z"}))
    merged = {"INFRALENS_CACHE_DIR": str(tmp_path / "merged")}
    result = run_infralens("results", "merge", str(tmp_path / "old"), str(twin), cwd=sample_site, env=merged)
    assert result.returncode == 1
    assert "conflict: code/lab-01-sample/kv.py: passed in the store" in result.stderr and "failed in " in result.stderr
    starter = sample_site / "code" / "lab-01-sample" / "kv.py"
    starter.write_text(starter.read_text() + "\n# changed after the shard ran\n")
    result = run_infralens("results", "merge", str(tmp_path / "old"), cwd=sample_site, env={"INFRALENS_CACHE_DIR": str(tmp_path / "fresh")})
    assert result.returncode == 1
    assert "refused: " in result.stderr and "code/lab-01-sample/kv.py: stale (its starter, or what the run depends on, changed since; it ran with CPU " in result.stderr
    assert result.stdout.endswith("1 merged, 1 refused, 0 conflicting\n")  # the unchanged lab's record still comes in


@pytest.mark.unit
def test_the_example_workflow_checks_every_shard_and_merges_them() -> None:
    """.github/workflows/site.yml: its matrix covers shards 1..SHARDS, each job checks its own
    share into its own results folder, and the site job merges them all before it builds."""
    import yaml

    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "site.yml").read_text())
    count = int(workflow["env"]["SHARDS"])
    check = workflow["jobs"]["check"]
    assert check["strategy"]["matrix"]["shard"] == list(range(1, count + 1))
    runs = [step["run"] for step in check["steps"] if "run" in step]
    assert "infralens check --shard ${{ matrix.shard }}/${{ env.SHARDS }} --results-dir results-${{ matrix.shard }}" in runs
    gpu = workflow["jobs"]["gpu"]
    assert gpu["if"] == "vars.GPU_RUNNER != ''" and gpu["runs-on"] == "${{ vars.GPU_RUNNER }}"
    assert "infralens check --device cuda --results-dir results-gpu" in [step["run"] for step in gpu["steps"] if "run" in step]
    uploaded = [step["with"]["name"] for job in (check, gpu) for step in job["steps"] if step.get("uses", "").startswith("actions/upload-artifact")]
    assert uploaded == ["results-${{ matrix.shard }}", "results-gpu"]  # both match the site job's results-* pattern
    site = workflow["jobs"]["site"]
    assert site["needs"] == ["check", "gpu"] and site["if"] == "always()"  # a skipped gpu job does not stop the site
    downloads = [step["with"]["pattern"] for step in site["steps"] if step.get("uses", "").startswith("actions/download-artifact")]
    assert downloads == ["results-*"]
    commands = [step["run"] for step in site["steps"] if "run" in step]
    assert commands.index("infralens results merge shards/*") < commands.index("infralens build")
