"""Execution state: the summaries of values and the tracer that records what excerpt lines bind.

The tracer runs as a script in the starter's own interpreter (`infralens/child/trace_state.py`), so its
tests run it that way too, on small starters written into tmp_path.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from infralens.child import trace_state
from infralens.child.trace_state import capped, statement_names, summarize

SCRIPT = Path(trace_state.__file__)


@pytest.mark.unit
@pytest.mark.parametrize(
    "value, shown",
    [
        (524_288, "524,288"),
        (6_738_415_616, "6,738,415,616"),
        (-3, "-3"),
        (True, "True"),
        (None, "None"),
        (3.14159265, "3.14159"),
        (1234567.0, "1.23457e+06"),
        (2.5e-9, "2.5e-09"),
        (float("nan"), "nan"),
        ("kv", "'kv'"),
        ([1, 2, 3], "[1, 2, 3]"),
        ([1, 2, 3, 4, 5, 6], "[1, 2, 3, 4, … 6 items]"),
        ((7,), "(7,)"),
        ({"heads": 32, "dims": [128]}, "{'heads': 32, 'dims': [128]}"),
        ({3, 1, 2}, "{1, 2, 3}"),
        (range(4), "range(0, 4)"),
        (b"abc", "bytes of 3 bytes"),
    ],
)
def test_plain_values_read_as_a_starter_would_print_them(value, shown: str) -> None:
    assert summarize(value) == shown


@pytest.mark.unit
def test_tensors_and_arrays_show_shape_dtype_device_bytes_values_and_range() -> None:
    assert summarize(torch.arange(12.0).reshape(3, 4)) == "Tensor (3, 4) float32 cpu 48 B [0, 1, 2, …] min 0 max 11"
    assert summarize(torch.tensor([5], dtype=torch.int64)) == "Tensor (1,) int64 cpu 8 B [5]"
    assert summarize(torch.zeros(2, 3, device="meta")) == "Tensor (2, 3) float32 meta 24 B"  # no values to read
    assert summarize(torch.empty(0)) == "Tensor (0,) float32 cpu 0 B"
    assert summarize(np.full((2, 3), 1.5, dtype=np.float32)) == "ndarray (2, 3) float32 24 B [1.5, 1.5, 1.5, …] min 1.5 max 1.5"
    assert summarize(torch.bfloat16) == "torch.bfloat16"


@pytest.mark.unit
def test_dataclasses_strings_and_nesting_are_bounded() -> None:
    @dataclasses.dataclass
    class Config:
        layers: int
        name: str

    assert summarize(Config(32, "llama")) == "Config(layers=32, name='llama')"
    long = summarize("x" * 500)
    assert long.endswith("… (500 chars)") and len(long) < 100
    assert summarize([[[[1]]]]) == "[[list of 1]]"  # depth 2 below the top
    assert summarize({"a": list(range(100))}) == "{'a': [0, 1, 2, 3, … 100 items]}"


@pytest.mark.unit
def test_a_value_whose_own_methods_would_raise_is_read_without_them() -> None:
    class Hostile(list):
        def __iter__(self):
            raise RuntimeError("no")

    assert summarize(Hostile([1])) == "<Hostile>"  # its __iter__ is never called


CALLED: list[str] = []
"""Every method of the classes below that ran: summarizing a value must run none of them."""


def spy(name: str, result=None):
    def method(self, *args):
        CALLED.append(name)
        return result(self, *args) if callable(result) else result
    return method


class Count(int):
    __format__ = spy("int.__format__", lambda self, spec: "48")
    __repr__ = __str__ = spy("int.__repr__", lambda self: "48")


class Ratio(float):
    __format__ = spy("float.__format__", lambda self, spec: "4.8")
    __repr__ = spy("float.__repr__", lambda self: "4.8")
    __abs__ = spy("float.__abs__", lambda self: 1.0)
    __eq__ = spy("float.__eq__", lambda self, other: True)
    __hash__ = float.__hash__


class Name(str):
    __len__ = spy("str.__len__", lambda self: 1)
    __repr__ = spy("str.__repr__", lambda self: "'planted'")
    __getitem__ = spy("str.__getitem__", lambda self, key: "planted")


class Blob(bytes):
    __len__ = spy("bytes.__len__", lambda self: 48)


class Lazy(list):
    __iter__ = spy("list.__iter__", lambda self: iter([48]))
    __len__ = spy("list.__len__", lambda self: 48)


class Table(dict):
    items = spy("dict.items", lambda self: [("k", 48)])
    __iter__ = spy("dict.__iter__", lambda self: iter(["k"]))


class Plain(list):
    """A list subclass that changes nothing of how it is read: shown as a list."""


class Proxy:
    __getattribute__ = spy("Proxy.__getattribute__", lambda self, name: 48)
    __getattr__ = spy("Proxy.__getattr__", lambda self, name: 48)
    __repr__ = spy("Proxy.__repr__", lambda self: "48")
    __len__ = spy("Proxy.__len__", lambda self: 48)
    __call__ = spy("Proxy.__call__")


class Meta(type):
    __instancecheck__ = spy("Meta.__instancecheck__", lambda cls, value: True)

    @property
    def __name__(cls):
        CALLED.append("Meta.__name__")
        return "Planted"


class Shaped(metaclass=Meta):
    pass


class Keyed:
    def __repr__(self):
        CALLED.append("Keyed.__repr__")
        return "48"


@dataclasses.dataclass
class Config:
    layers: int

    def __getattribute__(self, name):
        if name == "layers":
            CALLED.append("Config.__getattribute__")
            return 48
        return object.__getattribute__(self, name)


@pytest.mark.unit
@pytest.mark.parametrize(
    "value, shown",
    [
        (Count(42), "42"),
        (Ratio(4.2), "4.2"),
        (Name("kv"), "'kv'"),
        (Blob(b"abc"), "Blob of 3 bytes"),
        (Lazy([42]), "<Lazy>"),
        (Table(k=42), "<Table>"),
        (Plain([42]), "[42]"),
        (Proxy(), "<Proxy>"),
        (Shaped(), "<Shaped>"),
        ({Keyed(), Keyed()}, "{<Keyed>, <Keyed>}"),
        (Config(42), "Config(layers=42)"),
        ([Count(42), {"r": Ratio(4.2)}], "[42, {'r': 4.2}]"),
    ],
    ids=["int", "float", "str", "bytes", "list", "dict", "plain-list", "object", "metaclass", "set", "dataclass", "nested"],
)
def test_summarizing_a_value_runs_none_of_its_own_methods(value, shown: str) -> None:
    CALLED.clear()
    assert summarize(value) == shown
    assert CALLED == []


@pytest.mark.unit
def test_statements_name_what_they_bind_and_functions_their_def_line() -> None:
    source = "\n".join([
        "@decorator",  # 1
        "def f(x):",  # 2
        "    a, (b, *c) = x",  # 3
        "    self.total += a",  # 4
        "    table[b] = c",  # 5
        "    for i, j in pairs:",  # 6
        "        pass",  # 7
        "    with open(p) as handle:",  # 8
        "        if (n := len(x)) > 1:",  # 9
        "            return n",  # 10
    ])
    names, functions = statement_names(source)
    assert functions == {1: 2}
    assert names[3] == ["a", "b", "c"]
    assert names[4] == ["self.total"]
    assert names[5] == ["table"]
    assert names[6] == ["i", "j"]
    assert names[8] == ["handle"]
    assert names[9] == []  # an if binds nothing itself; its walrus belongs to the expression
    assert names[10] == []


@pytest.mark.unit
def test_a_state_over_its_cap_keeps_first_samples_then_drops_whole_lines() -> None:
    sample = {"n": 1, "values": {"x": "y" * 200}}
    state = {"version": 1, "truncated": False, "calls": {},
             "lines": {str(n): {"count": 4, "exact": True, "samples": [sample] * 4} for n in range(1, 200)}}
    cut = capped(state, limit=8_000)
    assert cut["truncated"] is True and len(json.dumps(cut)) <= 8_000
    assert all(len(entry["samples"]) == 1 for entry in cut["lines"].values())
    assert list(cut["lines"])[0] == "1"  # the first lines stay
    small = {"version": 1, "truncated": False, "lines": {}, "calls": {}}
    assert capped(small) is small


def bare(record: dict) -> dict:
    """A record without when it ran ("t") and in which iterations ("l"): what it holds."""
    return {key: value for key, value in record.items() if key not in ("t", "l")}


def trace(tmp_path: Path, code: str, ranges: list[list[int]], *args: str) -> tuple[subprocess.CompletedProcess, dict, subprocess.CompletedProcess]:
    starter = tmp_path / "starter.py"
    starter.write_text(code)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"ranges": ranges, "output": str(tmp_path / "state.json")}))
    traced = subprocess.run([sys.executable, str(SCRIPT), str(starter), str(spec), *args], capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False)
    plain = subprocess.run([sys.executable, str(starter), *args], capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False)
    return traced, json.loads((tmp_path / "state.json").read_text()), plain


STARTER = """\
import sys


def scale(x, k=2):
    y = x * k
    return y


total = 0
for i in range(10):
    total += scale(i)
name = sys.argv[1]
print("total", total, name, __name__)
"""


@pytest.mark.cli
def test_the_tracer_records_bindings_loops_and_calls_and_prints_what_the_starter_prints(tmp_path: Path) -> None:
    traced, state, plain = trace(tmp_path, STARTER, [[4, 13]], "kv")
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout == "total 90 kv __main__\n"
    lines = state["lines"]
    assert {**lines["9"], "samples": [bare(s) for s in lines["9"]["samples"]]} == {"count": 1, "exact": True, "samples": [{"values": {"total": "0"}, "n": 1}], "calls": 0}
    loop = lines["11"]  # total += scale(i): ten runs, the first three and the last kept
    assert (loop["count"], loop["exact"]) == (10, True)
    assert [s["values"]["total"] for s in loop["samples"]] == ["0", "2", "6", "90"]
    assert [s["n"] for s in loop["samples"]] == [1, 2, 3, 10]
    assert [s["values"]["i"] for s in lines["10"]["samples"]] == ["0", "1", "2", "9"]
    assert lines["12"]["samples"][0]["values"] == {"name": "'kv'"}
    calls = state["calls"]["4"]  # every call counted; the first three and the powers of two traced,
    assert calls["count"] == 10  # the others' returns seen: the last kept is the last call
    assert [c["call"] for c in calls["samples"]] == [1, 2, 3, 10]
    assert calls["samples"][1] == {"call": 2, "inputs": {"x": "1", "k": "2"}, "return": "2", "n": 2}
    body = lines["5"]  # y = x * k, traced on calls 1, 2, 3, 4 and 8 only: a lower bound
    assert (body["count"], body["exact"], body["calls"]) == (5, False, 10)
    assert [s["call"] for s in body["samples"]] == [1, 2, 3, 10]  # the last: y as call 10 returned
    assert bare(body["samples"][-1]) == {"values": {"y": "18"}, "call": 10, "n": 5, "at": "return"}
    returned = lines["6"]  # return y: the value each call returned
    assert [(s["call"], s["return"]) for s in returned["samples"]] == [(1, "0"), (2, "2"), (3, "4"), (10, "18")]
    assert state["truncated"] is False


@pytest.mark.cli
def test_only_lines_inside_the_ranges_are_recorded(tmp_path: Path) -> None:
    traced, state, _ = trace(tmp_path, STARTER, [[9, 10]], "kv")
    assert traced.returncode == 0, traced.stderr
    assert set(state["lines"]) == {"9", "10"}
    assert state["calls"] == {}


@pytest.mark.cli
def test_a_hot_loop_stops_being_traced_and_says_its_count_is_a_lower_bound(tmp_path: Path) -> None:
    code = "def spin(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n\nprint(spin(50_000))\n"
    traced, state, plain = trace(tmp_path, code, [[1, 7]])
    assert traced.stdout == plain.stdout == f"{sum(range(50_000))}\n"
    body = state["lines"]["4"]
    assert body["exact"] is False and body["count"] < 50_000
    assert state["calls"]["1"]["samples"][0]["return"] == f"{sum(range(50_000)):,}"
    # Its last sample is what s held when the call returned, not when tracing stopped.
    assert body["samples"][-1]["values"] == {"s": f"{sum(range(50_000)):,}"} and body["samples"][-1]["at"] == "return"
    assert state["lines"]["3"]["samples"][-1]["values"] == {"i": "49,999"}
    assert state["lines"]["5"]["samples"][-1]["return"] == f"{sum(range(50_000)):,}"
    assert [bare(s) for s in state["lines"]["2"]["samples"]] == [{"values": {"s": "0"}, "call": 1, "n": 1}]  # rebound since: its own run stays


@pytest.mark.cli
def test_a_hot_loop_at_module_level_ends_with_its_final_value(tmp_path: Path) -> None:
    code = "total = 0\nfor i in range(30_000):\n    total += i\nprint(total)\n"
    traced, state, plain = trace(tmp_path, code, [[1, 4]])
    assert traced.stdout == plain.stdout
    last = state["lines"]["3"]["samples"][-1]
    assert last["values"] == {"total": f"{sum(range(30_000)):,}"} and last["at"] == "return" and "call" not in last


CONDITIONS = """\
import math


def check(loss, items):
    cache = []
    if not math.isfinite(loss):
        return -1
    elif loss > 1:
        cache.append(loss)
    while len(cache) < 3:
        cache.append(0)
    items.sort()
    math.sqrt(loss)
    print(loss)
    return len(cache)


for v in (0.5, 2.0, float("nan")):
    check(v, [3, 1, 2])
"""


@pytest.mark.cli
def test_conditions_record_the_branch_taken_and_how_often_each_way(tmp_path: Path) -> None:
    traced, state, plain = trace(tmp_path, CONDITIONS, [[4, 15]])
    assert traced.returncode == 0 and traced.stdout == plain.stdout
    lines = state["lines"]
    assert [s["branch"] for s in lines["6"]["samples"]] == [False, False, True] and lines["6"]["taken"] == [1, 2]
    assert [s["branch"] for s in lines["8"]["samples"]] == [False, True]  # elif: run only when the if was false
    assert lines["10"]["taken"] == [5, 2]  # while: 3 + 2 passes, then false twice
    assert bare(lines["10"]["samples"][-1]) == {"values": {}, "branch": False, "call": 2, "n": 7}


@pytest.mark.cli
def test_return_lines_record_the_value_returned(tmp_path: Path) -> None:
    traced, state, _ = trace(tmp_path, CONDITIONS, [[4, 15]])
    lines = state["lines"]
    assert [(s["call"], s["return"]) for s in lines["7"]["samples"]] == [(3, "-1")]
    assert [(s["call"], s["return"]) for s in lines["15"]["samples"]] == [(1, "3"), (2, "3")]


@pytest.mark.cli
def test_call_statements_record_what_they_changed_or_were_handed_never_a_module(tmp_path: Path) -> None:
    traced, state, _ = trace(tmp_path, CONDITIONS, [[4, 15]])
    lines = state["lines"]
    assert lines["9"]["samples"][0]["values"] == {"cache": "[2]"}  # cache.append(loss): the receiver
    assert lines["11"]["samples"][-1]["values"] == {"cache": "[2, 0, 0]"}
    assert lines["12"]["samples"][0]["values"] == {"items": "[1, 2, 3]"}  # items.sort(): sorted in place
    assert lines["13"]["samples"][0]["values"] == {"loss": "0.5"}  # math.sqrt(loss): a module's function, its argument
    assert lines["14"]["samples"][0]["values"] == {"loss": "0.5"}  # print(loss)
    # cache = [] keeps the value it bound: the appends after it own what they changed.
    assert lines["5"]["samples"][0]["values"] == {"cache": "[]"} and lines["5"]["samples"][-1]["values"] == {"cache": "[]"}


@pytest.mark.unit
def test_statement_shapes_name_conditions_returns_and_calls() -> None:
    from infralens.child.trace_state import statement_shapes

    source = "def f(x, dist, y):\n    if x:\n        y = 1\n    while (x and\n           y):\n        x.add_(y)\n    dist.all_reduce(x)\n    f(y)\n    return x\n"
    branches, returns, effects = statement_shapes(source)
    assert branches == {2: (2, 3, 3), 4: (5, 6, 6)}
    assert returns == {9}
    assert effects == {6: ("x", ["y"]), 7: ("dist", ["x"]), 8: (None, ["y"])}


@pytest.mark.cli
def test_a_failing_starter_fails_the_same_way_under_the_tracer(tmp_path: Path) -> None:
    traced, state, plain = trace(tmp_path, "x = 1\nraise SystemExit(3)\n", [[1, 2]])
    assert traced.returncode == plain.returncode == 3
    assert state["lines"]["1"]["samples"][0]["values"] == {"x": "1"}


@pytest.mark.unit
def test_reading_a_tensor_runs_nothing_a_starters_torch_function_mode_sees() -> None:
    from torch.overrides import TorchFunctionMode

    class Count(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    x = torch.arange(6.0).reshape(2, 3)
    with Count() as mode:
        shown = summarize(x)
    assert shown == "Tensor (2, 3) float32 cpu 24 B [0, 1, 2, …] min 0 max 5"
    assert mode.calls == []  # lab 10's PeakTracker once counted the tracer's min() and max()


@pytest.mark.cli
def test_a_markdown_starters_blocks_are_traced_at_their_lines_of_the_md_file(tmp_path: Path) -> None:
    from infralens.text.markdown import python_blocks

    text = "# Notes\n\nProse.\n\n```python\nsize = 4 * 1024\nprint(size)\n```\n\nMore prose.\n\n```python\ndouble = size * 2\n```\n"
    starter = tmp_path / "notes.md"
    starter.write_text(text)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"ranges": [[1, 14]], "output": str(tmp_path / "state.json"), "blocks": python_blocks(text)}))
    run = subprocess.run([sys.executable, str(SCRIPT), str(starter), str(spec)], capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False)
    assert run.returncode == 0 and run.stdout == "4096\n"
    lines = json.loads((tmp_path / "state.json").read_text())["lines"]
    assert {line: entry["samples"][-1]["values"] for line, entry in lines.items()} == {"6": {"size": "4,096"}, "7": {"size": "4,096"}, "13": {"double": "8,192"}}  # 7: print(size) was handed size


SPAWNING = """\
import multiprocessing
import os


def rank_main(rank):
    shard = [rank] * (rank + 2)
    os.write(1, f"rank {rank} {len(shard)}\\n".encode())  # one write: two ranks' lines never interleave
    os._exit(0)  # as lab 20's ranks end: no atexit handler runs


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    ranks = [context.Process(target=rank_main, args=(rank,), name=f"rank {rank}") for rank in range(2)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join()
    print("exit codes", [p.exitcode for p in ranks])
"""


@pytest.mark.cli
def test_processes_the_starter_spawns_record_their_lines_too_rank_0_first(tmp_path: Path) -> None:
    traced, state, plain = trace(tmp_path, SPAWNING, [[5, 8]])
    assert traced.returncode == 0, traced.stderr
    assert sorted(traced.stdout.splitlines()) == sorted(plain.stdout.splitlines())
    assert state["lines"]["6"]["samples"][-1]["values"] == {"shard": "[0, 0]"}
    assert state["lines"]["6"]["process"] == "rank 0"
    assert state["calls"]["5"]["samples"][-1]["inputs"] == {"rank": "0"}


@pytest.mark.cli
def test_a_call_that_raises_says_so_and_a_generator_is_not_taken_for_one(tmp_path: Path) -> None:
    code = "def fails(x):\n    raise ValueError(x)\n\n\ndef counts(n):\n    yield from range(n)\n\n\ntry:\n    fails(3)\nexcept ValueError:\n    pass\nprint(sum(counts(4)))\n"
    traced, state, plain = trace(tmp_path, code, [[1, 6]])
    assert traced.stdout == plain.stdout == "6\n"
    assert state["calls"]["1"]["samples"] == [{"call": 1, "inputs": {"x": "3"}, "raised": True, "n": 1}]
    assert not any("raised" in sample for sample in state["calls"]["5"]["samples"])


@pytest.mark.unit
def test_under_a_profiler_a_tensor_is_read_for_its_shape_only_and_the_profiler_sees_nothing() -> None:
    from torch.autograd.profiler import profile

    x = torch.arange(6.0)
    with profile() as prof:
        shown = summarize(x)
    assert shown == "Tensor (6,) float32 cpu 24 B"
    assert [event.name for event in prof.function_events] == []


COMPILED = """\
import torch
from torch.autograd.profiler import profile


def branchy(x):
    y = x * 2
    if y.sum() > 0:
        return torch.relu(y) + 1
    return y - 1


graphs = []


def record(gm, example_inputs):
    graphs.append(len(gm.graph.nodes))
    return gm.forward


compiled = torch.compile(branchy, backend=record)
out = compiled(torch.ones(4))
with profile() as prof:
    out = compiled(-torch.ones(4))
regions = sum(e.name.startswith("Torch-Compiled Region") for e in prof.function_events)
print("graphs", graphs, "compiled regions entered", regions)
"""


@pytest.mark.cli
def test_torch_compile_captures_the_same_graphs_under_the_tracer(tmp_path: Path) -> None:
    traced, state, plain = trace(tmp_path, COMPILED, [[5, 9]])
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout and plain.stdout.startswith("graphs [")
    assert "compiled regions entered 2" in plain.stdout  # the graph, and the one resumed after the break


LOOPS = """\
def grid(rows, cols):
    total = 0
    for h in range(rows):
        row = h * 10
        for i in range(cols):
            cell = row + i
            total += cell
    return total


def spin(n):
    s = 0
    for i in range(n):
        s += i
    return s


def drain(items):
    while items:
        last = items.pop()
    return last


print(grid(2, 3), grid(1, 2), drain([1, 2]))
print(spin(50_000))
"""


@pytest.mark.cli
def test_each_record_says_when_it_ran_and_in_which_iteration_of_each_loop_around_it(tmp_path: Path) -> None:
    traced, state, plain = trace(tmp_path, LOOPS, [[1, 25]])
    assert traced.returncode == 0 and traced.stdout == plain.stdout
    lines, loops = state["lines"], state["loops"]
    # The outer loop: 2 + 1 iterations over two calls of grid, each with its index.
    outer = loops["3"]
    assert (outer["count"], outer["exact"], outer["end"], outer["calls"]) == (3, True, 7, 2)
    assert [(s["call"], s["l"], s["values"]) for s in outer["samples"]] == [(1, [1], {"h": "0"}), (1, [2], {"h": "1"}), (2, [3], {"h": "0"})]
    # The inner one: 3 + 3 + 2 iterations, numbered over all calls; its indices name the outer loop's too.
    inner = loops["5"]
    assert inner["count"] == 8
    assert [(s["call"], s["l"], s["values"]) for s in inner["samples"]] == [
        (1, [1, 1], {"h": "0", "i": "0"}), (1, [1, 2], {"h": "0", "i": "1"}), (1, [1, 3], {"h": "0", "i": "2"}),
        (2, [3, 8], {"h": "0", "i": "1"}),  # the true last: call 2's second inner iteration
    ]
    # The body's lines carry the same iterations as the loops' records of their moment.
    assert [s["l"] for s in lines["6"]["samples"]] == [[1, 1], [1, 2], [1, 3], [3, 8]]
    assert [s["values"]["cell"] for s in lines["6"]["samples"]] == ["0", "1", "2", "1"]
    assert [s["l"] for s in lines["4"]["samples"]] == [[1], [2], [3]]  # in the outer loop only
    assert "l" not in lines["2"]["samples"][0] and "l" not in lines["8"]["samples"][0]  # before and after the loops
    # A for header's runs are its iterations: the run that finds the iterator exhausted is none.
    assert lines["5"]["count"] == 8 and [s["l"] for s in lines["5"]["samples"]] == [[1, 1], [1, 2], [1, 3], [3, 8]]
    assert lines["3"]["count"] == 3
    # "t" orders every record of a run: a loop's iteration starts before its body's lines run.
    ticks = [s["t"] for s in inner["samples"]]
    assert ticks == sorted(ticks)
    for iteration, body in zip(inner["samples"], lines["6"]["samples"], strict=True):
        assert iteration["t"] < body["t"] < iteration["t"] + 3
    assert lines["2"]["samples"][0]["t"] < outer["samples"][0]["t"] < lines["8"]["samples"][0]["t"]
    # A while loop: its true tests start iterations; the false one, the last, belongs to none.
    assert loops["19"]["count"] == 2 and [s["l"] for s in loops["19"]["samples"]] == [[1], [2]]
    tests = lines["19"]["samples"]
    assert [(s["branch"], s.get("l")) for s in tests] == [(True, [1]), (True, [2]), (False, None)]
    assert [s["l"] for s in lines["20"]["samples"]] == [[1], [2]]


@pytest.mark.cli
def test_a_hot_loop_ends_with_its_iteration_at_return_after_tracing_stopped(tmp_path: Path) -> None:
    traced, state, _ = trace(tmp_path, LOOPS, [[1, 25]])
    assert traced.returncode == 0
    loop = state["loops"]["13"]
    assert loop["exact"] is False and 3 < loop["count"] < 50_000
    first, last = loop["samples"][:3], loop["samples"][-1]
    assert [s["values"] for s in first] == [{"i": "0"}, {"i": "1"}, {"i": "2"}]
    # The last: the indices when the call returned, not when tracing stopped, and said so.
    assert last["values"] == {"i": "49,999"} and last["at"] == "return" and last["n"] == loop["count"]
    body = state["lines"]["14"]["samples"][-1]
    assert body["at"] == "return" and body["values"] == {"s": f"{sum(range(50_000)):,}"}
    assert "l" not in last and "l" not in body  # no iteration known: the loop ran on untraced
    assert body["t"] == last["t"] > state["lines"]["14"]["samples"][2]["t"]


@pytest.mark.unit
def test_loops_are_found_with_their_bodies_and_every_statement_with_the_loops_around_it() -> None:
    from infralens.child.trace_state import statement_loops

    source = "\n".join([
        "for h in x:",  # 1
        "    while h:",  # 2
        "        h -= 1",  # 3
        "    def f():",  # 4
        "        for j in y:",  # 5
        "            pass",  # 6
        "else:",  # 7
        "    z = 1",  # 8
        "async def g():",  # 9
        "    async for k in aiter():",  # 10
        "        pass",  # 11
    ])
    loops, chains, fors = statement_loops(source)
    assert loops == {1: (2, 6), 2: (3, 3), 5: (6, 6), 10: (11, 11)}
    assert fors == {1, 5, 10}
    assert chains[1] == () and chains[2] == (1,) and chains[3] == (1, 2)
    assert chains[4] == (1,) and chains[5] == () and chains[6] == (5,)  # a nested function's frame starts anew
    assert chains[8] == ()  # the else runs once, after the loop
    assert chains[11] == (10,)


@pytest.mark.cli
def test_a_loop_keeps_its_own_last_index_when_a_later_loop_reuses_the_name(tmp_path: Path) -> None:
    code = "def passes(n):\n    for i in range(n):\n        a = i\n    for i in range(2):\n        b = i\n    return a + b\n\nprint(passes(9))\n"
    traced, state, _ = trace(tmp_path, code, [[1, 8]])
    assert traced.returncode == 0, traced.stderr
    first = state["loops"]["2"]["samples"][-1]
    assert (first["n"], first["l"], first["values"]) == (9, [9], {"i": "8"})  # not the 1 the second loop left in i


PROPERTY_STARTER = """\
class Box:
    def __init__(self):
        self._v = 0
        self.reads = 0

    @property
    def value(self):
        self.reads += 1
        return self._v

    @value.setter
    def value(self, v):
        self._v = v


box = Box()
box.value = 42
box.size = 7
print("reads", box.reads)
"""


@pytest.mark.cli
def test_names_are_looked_up_without_running_a_property_getter(tmp_path: Path) -> None:
    traced, state, plain = trace(tmp_path, PROPERTY_STARTER, [[16, 19]])
    assert traced.stdout == plain.stdout == "reads 0\n", traced.stderr
    assert state["lines"]["18"]["samples"][0]["values"] == {"box.size": "7"}  # in the instance's own dict
    assert "box.value" not in state["lines"].get("17", {"samples": [{"values": {}}]})["samples"][0]["values"]
