"""Runs that need a device: `run: {device: cuda, gpu_memory: …}` or a list of runs, one per device.

On a machine without the device, the run is reported skipped (never passed) in check's table, its
JSON, its JUnit and the lab page; where the device is, it runs with CUDA_VISIBLE_DEVICES passed
through and records the hardware it ran on. A starter has one result per device, so a CPU shard's
"skipped" and a GPU job's "passed" of one run merge without a conflict.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import add_starter, run_infralens

from infralens.build import load_project
from infralens.check.devices import (
    Machine,
    cpu_name,
    detect_machine,
    read_gpus,
    torch_cuda,
    visible,
)
from infralens.check.results import ResultStore, merge_results
from infralens.check.runner import run_labs
from infralens.errors import InputError
from infralens.model.parse import parse_lab
from infralens.model.starter import RunSpec

SMI = """0, GPU-1f2e3d4c-aaaa-bbbb-cccc-000000000000, NVIDIA H100 80GB HBM3, 81559, 550.54.15
1, GPU-9a8b7c6d-aaaa-bbbb-cccc-111111111111, NVIDIA H100 80GB HBM3, 81559, 550.54.15
2, GPU-55aa55aa-aaaa-bbbb-cccc-222222222222, NVIDIA L4, [N/A], 550.54.15
"""
GPUS, _ = read_gpus(SMI)
H100_MACHINE = Machine(cpu="AMD EPYC 7V13 64-Core Processor (48 cores)", python="3.12.3", torch="2.13.0+cu128", cuda="12.8", gpus=GPUS[:1])
CPU_MACHINE = Machine(cpu="AMD EPYC (2 cores)", python="3.12.3", torch="2.13.0+cpu", cuda=None)


@pytest.mark.unit
def test_nvidia_smi_rows_are_read_with_memory_in_bytes() -> None:
    assert [(gpu.index, gpu.name, gpu.memory, gpu.driver) for gpu in GPUS] == [
        (0, "NVIDIA H100 80GB HBM3", 81559 * 2**20, "550.54.15"),
        (1, "NVIDIA H100 80GB HBM3", 81559 * 2**20, "550.54.15"),
        (2, "NVIDIA L4", 0, "550.54.15"),
    ]
    assert read_gpus("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n") == ((), ())


@pytest.mark.unit
@pytest.mark.parametrize(
    ("setting", "indices"),
    [(None, [0, 1, 2]), ("1", [1]), ("2,0", [2, 0]), ("GPU-9a8b", [1]), ("", []), ("-1", []), ("1,7,0", [1]), ("0,0", [0]), ("GPU-", [])],
)
def test_cuda_visible_devices_chooses_gpus_as_cuda_does(setting: str | None, indices: list[int]) -> None:
    assert [gpu.index for gpu in visible(GPUS, setting)] == indices


@pytest.mark.unit
def test_torch_build_and_cpu_model_are_read_without_importing_anything() -> None:
    assert torch_cuda("__version__ = '2.13.0+cu128'\ncuda: Optional[str] = '12.8'\n") == "12.8"
    assert torch_cuda("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n") is None
    assert torch_cuda("cuda = '11.8'\n") == "11.8"
    assert cpu_name("processor\t: 0\nmodel name\t: Intel(R) Xeon(R)   Gold 6338 CPU\n", "x86_64", 64) == "Intel(R) Xeon(R) Gold 6338 CPU (64 cores)"
    assert cpu_name("", "arm", 1) == "arm (1 core)"


@pytest.mark.unit
def test_what_a_run_needs_and_why_it_is_missing() -> None:
    cuda, big = RunSpec(device="cuda"), RunSpec(device="cuda", gpu_memory="100 GiB")
    assert CPU_MACHINE.missing(RunSpec()) is None and H100_MACHINE.missing(RunSpec()) is None
    assert H100_MACHINE.missing(cuda) is None
    assert H100_MACHINE.missing(RunSpec(device="cuda", gpu_memory="80 GB")) is None  # 79.6 GiB is 85.5 GB
    assert CPU_MACHINE.missing(cuda) == "needs cuda: this machine has no NVIDIA GPU (nvidia-smi lists none)"
    hidden = Machine(cpu="x (2 cores)", python="3.12.3", torch="2.13.0+cu128", cuda="12.8", gpus=(), hidden=True)
    assert hidden.missing(cuda) == "needs cuda: CUDA_VISIBLE_DEVICES hides every GPU"
    cpu_build = Machine(cpu="x (2 cores)", python="3.12.3", torch="2.13.0+cpu", cuda=None, gpus=GPUS[:1])
    assert cpu_build.missing(cuda) == "needs cuda: torch 2.13.0+cpu is not a CUDA build"
    assert H100_MACHINE.missing(big) == "needs cuda with 100 GiB of GPU memory: the largest GPU here has 79.6 GiB (NVIDIA H100 80GB HBM3)"
    assert big.gpu_bytes == 100 * 2**30 and RunSpec(device="cuda", gpu_memory="24 GB").gpu_bytes == 24 * 10**9 and cuda.gpu_bytes == 0


@pytest.mark.unit
def test_the_hardware_line_names_what_a_reader_needs_to_compare_figures() -> None:
    assert H100_MACHINE.hardware("cuda") == (
        "NVIDIA H100 80GB HBM3, 79.6 GiB; driver 550.54.15, CUDA 12.8; torch 2.13.0+cu128, Python 3.12.3; CPU AMD EPYC 7V13 64-Core Processor (48 cores)"
    )
    assert H100_MACHINE.hardware("cpu") == "CPU AMD EPYC 7V13 64-Core Processor (48 cores); torch 2.13.0+cu128, Python 3.12.3"
    two = Machine(cpu="x (8 cores)", python="3.12.3", torch="2.13.0+cu128", cuda="12.8", gpus=GPUS[:2])
    assert two.hardware("cuda").startswith("NVIDIA H100 80GB HBM3, 79.6 GiB (and 1 more); ")


MANIFEST = """number: 1
title: Devices
track: t
summary: s
concept_goal: c
mechanism: [m]
starters:
  - path: code/lab-01-x/a.py
    role: r
    run: RUN
preview: {starter: code/lab-01-x/a.py, lines: 1-1}
key_blocks: [{name: k, lines: "1", note: n}]
checkpoints: [c]
misunderstandings: [m]
interview: i
intuition: [i]
further_reading: [{kind: official, title: t, url: "https://docs.python.org/3/"}]
"""


def manifest(run: str) -> str:
    return MANIFEST.replace("RUN", run.replace("\n", "\n    "))


@pytest.mark.unit
def test_a_starter_runs_once_per_device_it_lists() -> None:
    lab = parse_lab("labs/lab-01-x.yml", "lab-01-x", manifest("\n- {args: [--n, '2'], expect: [cpu]}\n- {device: cuda, args: [--device, cuda], expect: [gpu], gpu_memory: 16 GiB}"))
    starter = lab.starters[0]
    assert [(run.device, run.args, run.expect) for run in starter.runs] == [("cpu", ("--n", "2"), ("cpu",)), ("cuda", ("--device", "cuda"), ("gpu",))]
    assert starter.run is starter.runs[0] and starter.runs[1].gpu_bytes == 16 * 2**30
    only = parse_lab("labs/lab-01-x.yml", "lab-01-x", manifest("{device: cuda}")).starters[0]
    assert [run.device for run in only.runs] == ["cuda"] and only.run.device == "cuda"
    assert parse_lab("labs/lab-01-x.yml", "lab-01-x", manifest("false")).starters[0].runs == ()


@pytest.mark.unit
@pytest.mark.parametrize(
    ("run", "error"),
    [
        ("\n- {}\n- {args: [x]}", "labs/lab-01-x.yml:12:7: error: a second run on cpu: a starter runs once per device (give each run its own device)"),
        ("{gpu_memory: 8 GiB}", "labs/lab-01-x.yml:10:10: error: gpu_memory is for a run on cuda; add `device: cuda` or remove it"),
        ("{device: tpu}", "labs/lab-01-x.yml:10:19: error: 'tpu' is not one of: cpu, cuda (did you mean 'cpu'?)"),
        ("{device: cuda, gpu_memory: lots}", "labs/lab-01-x.yml:10:37: error: 'lots' is not a size such as '40 GiB' or '24 GB'"),
        # 400 digits made a float of inf, and round(inf) an OverflowError traceback; Unicode digits read as a size.
        ("{device: cuda, gpu_memory: " + "9" * 400 + " GiB}", "labs/lab-01-x.yml:10:37: error: '" + "9" * 400 + " GiB' is not a size such as '40 GiB' or '24 GB'"),
        ("{device: cuda, gpu_memory: ４０ GiB}", "labs/lab-01-x.yml:10:37: error: '４０ GiB' is not a size such as '40 GiB' or '24 GB'"),
        ("[]", "labs/lab-01-x.yml:10:10: error: expected at least 1 item, got 0"),
        (
            "\n- {device: cuda}\n- {args: [x]}",
            "labs/lab-01-x.yml:12:7: error: list the run on cpu first: the page's figures, state, calculators and questions come from the first run, and every machine can make a cpu run",
        ),
        (
            "\n- {artifacts: [plot.svg]}\n- {device: cuda, artifacts: [plot.svg]}",
            "labs/lab-01-x.yml:8:11: error: artifact 'plot.svg' of code/lab-01-x/a.py [cuda] is also written by code/lab-01-x/a.py; the lab page publishes one file of that name, so give each run its own",
        ),
    ],
)
def test_device_mistakes_are_errors_at_their_line(run: str, error: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_lab("labs/lab-01-x.yml", "lab-01-x", manifest(run))
    assert [str(problem) for problem in caught.value.problems] == [error]


def record(store: Path, key: str, status: str, finished: str, device: str = "cuda", hardware: str = "") -> None:
    slot = store / "runs" / key
    slot.mkdir(parents=True)
    data = {
        "lab": "lab-01-x", "starter": "code/lab-01-x/a.py", "status": status, "seconds": 1.0, "returncode": 0, "stdout": "", "stderr": "",
        "reason": "needs cuda: this machine has no NVIDIA GPU (nvidia-smi lists none)" if status == "skipped" else "",
        "mark": {"path": "labs/lab-01-x.yml", "line": 8, "col": 11}, "finished": finished, "artifacts": [], "device": device, "hardware": hardware,
    }
    (slot / "result.json").write_text(json.dumps(data))


@pytest.mark.unit
@pytest.mark.parametrize("order", ["cpu shard first", "gpu job first"])
def test_a_run_that_happened_always_wins_over_a_skipped_one_without_conflict(tmp_path: Path, order: str) -> None:
    record(tmp_path / "cpu-shard", "k1", "skipped", "2026-11-24T10:00:00Z", hardware="CPU x (2 cores)")
    record(tmp_path / "gpu-job", "k1", "passed", "2026-11-20T10:00:00Z", hardware="NVIDIA H100 80GB HBM3, 79.6 GiB")
    folders = [tmp_path / "cpu-shard", tmp_path / "gpu-job"]
    store = ResultStore(tmp_path / "store")
    done = merge_results(store, folders if order == "cpu shard first" else folders[::-1], {"k1": "code/lab-01-x/a.py"})
    merged = done.merged
    assert (done.refused, done.invalid, done.conflicts) == ([], [], [])
    kept = store.load("k1")
    assert kept is not None and kept.status == "passed" and kept.hardware.startswith("NVIDIA H100")
    assert merged[-1] == "code/lab-01-x/a.py [cuda]: passed (2026-11-20T10:00:00Z)"


@pytest.mark.cli
def test_a_cuda_run_runs_where_the_machine_has_one_with_its_gpus_chosen(sample_site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine described with a GPU (this one has none): the cuda run is made, sees the caller's
    CUDA_VISIBLE_DEVICES (a CPU run does not), and records the GPU it ran on."""
    code = "import os\nprint('visible:', os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'))\n"
    add_starter(sample_site, "gpu.py", code, run="[{expect: ['visible: unset']}, {device: cuda, expect: ['visible: 0']}]")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    project = load_project(sample_site / "site.yml")
    labs = tuple(lab for lab in project.labs if lab.id == "lab-01-sample")
    results = {(r.starter, r.device): r for r in run_labs(labs, project.root, jobs=2, texts=project.texts, manifests=project.manifests, machine=H100_MACHINE)}
    cpu, cuda = results["code/lab-01-sample/gpu.py", "cpu"], results["code/lab-01-sample/gpu.py", "cuda"]
    assert (cpu.status, cpu.stdout, cpu.hardware) == ("passed", "visible: unset\n", H100_MACHINE.hardware("cpu"))
    assert (cuda.status, cuda.stdout, cuda.hardware) == ("passed", "visible: 0\n", H100_MACHINE.hardware("cuda"))
    skipped = {(r.starter, r.device): r for r in run_labs(labs, project.root, jobs=2, texts=project.texts, manifests=project.manifests, machine=CPU_MACHINE)}["code/lab-01-sample/gpu.py", "cuda"]
    assert (skipped.status, skipped.passed, skipped.stdout) == ("skipped", False, "")


@pytest.mark.cli
def test_a_cuda_starter_is_skipped_here_in_the_table_json_junit_and_page(sample_site: Path, tmp_path: Path) -> None:
    add_starter(sample_site, "gpu.py", "import torch\nprint(torch.ones(2, device='cuda').sum().item())\n", run="{device: cuda, gpu_memory: 8 GiB}")
    env = {"CUDA_VISIBLE_DEVICES": ""}  # no GPU, on this machine and on one with a GPU alike
    result = run_infralens("check", "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "r.xml"), cwd=sample_site, env=env)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "gpu.py" in line)
    assert row.split()[:3] == ["lab-01-sample", "code/lab-01-sample/gpu.py", "[cuda]"] and " skipped " in row and "needs cuda: " in row
    assert result.stdout.endswith(", 0 failed, 1 skipped\n")
    report = json.loads((tmp_path / "r.json").read_text())
    entry = next(r for r in report["results"] if r["starter"].endswith("gpu.py"))
    assert (entry["status"], entry["passed"], entry["device"], report["skipped"], report["failed"]) == ("skipped", False, "cuda", 1, 0)
    assert entry["reason"].startswith("needs cuda: ") and entry["hardware"].startswith("CPU ")
    suite = ET.parse(tmp_path / "r.xml").getroot()
    case = next(c for c in suite.iter("testcase") if c.get("name") == "code/lab-01-sample/gpu.py [cuda]")
    assert (suite.get("skipped"), suite.get("failures")) == ("1", "0")
    assert case.find("skipped") is not None and case.find("skipped").get("message").startswith("needs cuda: ") and case.find("failure") is None
    built = run_infralens("build", "--out", str(tmp_path / "out"), cwd=sample_site, env=env)
    assert built.returncode == 0, built.stderr
    page = (tmp_path / "out" / "labs" / "lab-01-sample" / "index.html").read_text()
    assert "Run on cuda (8 GiB or more): <code>python code/lab-01-sample/gpu.py</code>" in page
    assert "Last run on cuda: <strong>skipped</strong> on <time" in page and "(needs cuda: " in page
    assert "1 skipped (needs cuda: " in page and "Last run on cuda: <strong>passed" not in page
    only = run_infralens("check", "--device", "cuda", cwd=sample_site, env=env)  # a GPU runner's job: only the cuda runs
    assert only.returncode == 0 and [line.split()[1] for line in only.stdout.splitlines()[:-1]] == ["code/lab-01-sample/gpu.py"]
    assert only.stdout.endswith("0 passed, 0 failed, 1 skipped\n")


@pytest.mark.cli
def test_a_gpu_jobs_result_merges_over_a_cpu_shards_skip_and_shows_on_the_page(sample_site: Path, tmp_path: Path) -> None:
    """The CPU shard skips the cuda run; a GPU job's record of the same run (made here by editing
    the shard's record, as this machine has no GPU) merges over it, and the page shows both
    devices' results with their hardware."""
    code = "import sys\nprint('on', sys.argv[1:])\n"
    add_starter(sample_site, "both.py", code, run="[{args: [cpu]}, {device: cuda, args: [cuda]}]")
    env = {"CUDA_VISIBLE_DEVICES": "", "INFRALENS_CACHE_DIR": str(tmp_path / "cpu")}
    assert run_infralens("check", "--results-dir", str(tmp_path / "cpu-shard"), cwd=sample_site, env=env).returncode == 0
    skipped = next(p for p in (tmp_path / "cpu-shard" / "runs").glob("*/result.json") if json.loads(p.read_text())["device"] == "cuda")
    gpu = tmp_path / "gpu-job" / "runs" / skipped.parent.name
    gpu.mkdir(parents=True)
    made = {**json.loads(skipped.read_text()), "status": "passed", "reason": "", "seconds": 0.4, "stdout": "on ['cuda']\n", "finished": "2026-11-20T09:00:00Z"}
    made["hardware"] = H100_MACHINE.hardware("cuda")
    (gpu / "result.json").write_text(json.dumps(made))
    merged_env = {"INFRALENS_CACHE_DIR": str(tmp_path / "site")}
    result = run_infralens("results", "merge", str(tmp_path / "cpu-shard"), str(tmp_path / "gpu-job"), cwd=sample_site, env=merged_env)
    assert result.returncode == 0, result.stderr
    assert "merged: code/lab-01-sample/both.py [cuda]: passed (2026-11-20T09:00:00Z)" in result.stdout and "conflict" not in result.stderr
    built = run_infralens("build", "--out", str(tmp_path / "out"), cwd=sample_site, env=merged_env)
    assert built.returncode == 0, built.stderr
    page = (tmp_path / "out" / "labs" / "lab-01-sample" / "index.html").read_text()
    assert "Last run on cpu: <strong>passed</strong>" in page and "Last run on cuda: <strong>passed</strong> in 0.40 s on <time" in page
    assert f"On {H100_MACHINE.hardware('cuda')}</span>" in page


@pytest.mark.unit
@pytest.mark.parametrize(
    ("row", "why"),
    [
        ("0, GPU-1f2e, NVIDIA H100, inf, 550.54.15", "nvidia-smi row 1: memory 'inf' is not a number of MiB"),
        ("0, GPU-1f2e, NVIDIA H100, 1e400, 550.54.15", "nvidia-smi row 1: memory '1e400' is not a number of MiB"),
        ("0, GPU-1f2e, NVIDIA H100, " + "9" * 400 + ", 550.54.15", "nvidia-smi row 1: memory '" + "9" * 40 + "…' is not a number of MiB"),
        ("², GPU-1f2e, NVIDIA H100, 81559, 550.54.15", "nvidia-smi row 1: index '²' is not a GPU index"),
    ],
)
def test_a_gpu_whose_numbers_nvidia_smi_garbles_is_absent_and_says_why(row: str, why: str) -> None:
    gpus, refused = read_gpus(row + "\n" + SMI.splitlines()[1])
    assert [gpu.index for gpu in gpus] == [1] and refused == (why,)


@pytest.mark.unit
@pytest.mark.parametrize("setting", ["²", "0,²", "１"])
def test_cuda_visible_devices_with_a_number_that_is_not_ascii_names_no_gpu(setting: str) -> None:
    assert [gpu.index for gpu in visible(GPUS, setting)] == ([0] if setting.startswith("0") else [])


FAKE_SMI = """#!/bin/sh
printf '0, GPU-1f2e, NVIDIA \\377\\376 H100, inf, 550.54.15\\n'
"""


@pytest.mark.unit
def test_nvidia_smi_output_that_is_not_utf8_or_garbled_leaves_no_gpu_and_says_why(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    machine = detect_machine({"PATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": "²"})
    assert machine.gpus == () and machine.unread == ("nvidia-smi row 1: memory 'inf' is not a number of MiB", "CUDA_VISIBLE_DEVICES: '²' is not a GPU index")
    assert machine.missing(RunSpec(device="cuda")) == (
        "needs cuda: this machine has no NVIDIA GPU (nvidia-smi lists none) (nvidia-smi row 1: memory 'inf' is not a number of MiB; CUDA_VISIBLE_DEVICES: '²' is not a GPU index)"
    )
