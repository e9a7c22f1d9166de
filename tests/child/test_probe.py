"""The calculators' parity probe: a starter imported, not run, and asked for values as plain data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from infralens.child import PROBE

MEMORY = REPO / "code" / "lab-01-transformer-memory" / "memory_accounting.py"
KV = REPO / "code" / "lab-07-kv-cache" / "kv_cache.py"


def probe(tmp_path: Path, starter: Path, spec: dict) -> tuple[subprocess.CompletedProcess, dict]:
    (tmp_path / "spec.json").write_text(json.dumps({**spec, "output": str(tmp_path / "answers.json")}))
    done = subprocess.run([sys.executable, str(PROBE), str(starter), str(tmp_path / "spec.json")], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    answers = json.loads((tmp_path / "answers.json").read_text()) if (tmp_path / "answers.json").exists() else {}
    return done, answers


@pytest.mark.cli
def test_lab_01_answers_a_kv_cache_calculator_at_its_defaults_and_a_gqa_preset(tmp_path: Path) -> None:
    config = lambda **kw: {"call": "Config", "kwargs": kw}  # noqa: E731
    done, answers = probe(tmp_path, MEMORY, {
        "calls": {
            "defaults": {"call": "estimate_memory", "args": [config()], "attrs": ["kv_bytes_per_token", "kv_cache_bytes"]},
            "gqa-8": {"call": "estimate_memory", "args": [config(kv_heads=8)], "attrs": ["kv_bytes_per_token"]},
            "exact": {"call": "exact_parameter_count", "args": [config()]},
        },
        "tables": ["RECIPES"],
    })
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # imported, not run: the report's printing never happens
    assert answers["calls"]["defaults"] == {"value": {"kv_bytes_per_token": 524_288, "kv_cache_bytes": 2_147_483_648}}
    assert answers["calls"]["gqa-8"] == {"value": {"kv_bytes_per_token": 131_072}}
    assert answers["calls"]["exact"] == {"value": 6_738_415_616}
    assert answers["tables"]["RECIPES"]["value"]["mixed-precision"]["total"] == 16


@pytest.mark.cli
def test_lab_07_answers_with_its_own_table_of_reference_models(tmp_path: Path) -> None:
    done, answers = probe(tmp_path, KV, {"tables": ["REFERENCE_MODELS", "DTYPES", "NO_SUCH_TABLE"]})
    assert done.returncode == 0, done.stderr
    assert answers["tables"]["REFERENCE_MODELS"] == {"value": {"Llama-2-7B": [32, 32, 128], "Llama-2-70B": [80, 8, 128]}}
    assert answers["tables"]["DTYPES"]["error"].startswith("Unanswerable: a torch.dtype")
    assert answers["tables"]["NO_SUCH_TABLE"] == {"error": "Unanswerable: the starter defines no 'NO_SUCH_TABLE'"}


STARTER = """\
import dataclasses
import numpy as np
import torch


@dataclasses.dataclass
class Point:
    x: int
    y: float


def point(x, y=0.5):
    return Point(x, y)


def fails(n):
    raise ValueError(f"no {n}")


def tensor(n):
    return torch.arange(n)


def scalar():
    return np.float32(1.5)


if __name__ == "__main__":
    print("ran as a script")
"""


@pytest.mark.cli
def test_each_answer_stands_alone_and_only_plain_data_comes_back(tmp_path: Path) -> None:
    starter = tmp_path / "starter.py"
    starter.write_text(STARTER)
    done, answers = probe(tmp_path, starter, {"calls": {
        "point": {"call": "point", "args": [3], "kwargs": {"y": 2.5}},
        "x": {"call": "point", "args": [3], "attrs": ["x", "z"]},
        "fails": {"call": "fails", "args": [4]},
        "one": {"call": "tensor", "args": [1]},
        "many": {"call": "tensor", "args": [3]},
        "scalar": {"call": "scalar"},
        "missing": {"call": "nope"},
        "not-callable": {"call": "Point.__doc__"},
    }})
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert answers["calls"] == {
        "point": {"value": {"x": 3, "y": 2.5}},
        "x": {"error": "Unanswerable: the result (Point) has no 'z'"},
        "fails": {"error": "ValueError: no 4"},
        "one": {"value": 0},
        "many": {"error": "Unanswerable: a torch value of 3 elements, not one number"},
        "scalar": {"value": 1.5},
        "missing": {"error": "Unanswerable: the starter defines no 'nope'"},
        "not-callable": {"error": "Unanswerable: 'Point.__doc__' is not a function"},
    }
