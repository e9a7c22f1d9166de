"""Lab 15's counts checked against the architecture, the tensors themselves and PyTorch's documented behaviour.

References (PyTorch 2.13 documentation, https://docs.pytorch.org/docs/stable/):
- Profiler recipe: operators can call other operators; self CPU time excludes the time spent in
  those children, and `export_chrome_trace` writes the events for chrome://tracing.
- torch.compile custom backends: a backend is a callable `(gm, example_inputs) -> Callable` that
  Dynamo calls with each FX graph it captures.
- Dynamo core concepts and "Common Graph Breaks": data-dependent control flow (an `if` on a
  tensor's value) causes a graph break; Dynamo compiles the graph so far, runs the unsupported
  code in Python and resumes tracing in a new graph. `fullgraph=True` errors on the first break.
- Ansel et al., "PyTorch 2" (ASPLOS 2024): TorchInductor generates C++ for CPUs.

Two checks use private helpers because no public API exposes what they read: Inductor's generated
source (`torch._inductor.utils.run_and_get_code`) and Dynamo's own graph-break count
(`torch._dynamo.explain`), used only to cross-check the recording backend.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import torch
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-15-profiling-compile/profiling_compile.py"
lab = load_starter(STARTER)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Forget every compiled graph, so each test traces from scratch and never hits a cache limit."""
    torch.compiler.reset()
    yield
    torch.compiler.reset()


@pytest.mark.parametrize(
    "config",
    [lab.Config(), lab.Config(batch=4, dim=16, hidden=48), lab.Config(batch=1, dim=8, hidden=8, seed=3)],
    ids=["defaults", "small", "tiny"],
)
def test_profiled_step_makes_the_calls_the_architecture_implies(config, tmp_path, one_thread) -> None:
    prof, model = lab.profile_training_step(config, tmp_path / "trace.json")
    counts = lab.aten_calls(prof.events())
    params = len(list(model.parameters()))
    assert params == 6  # LayerNorm, two Linears: a weight and a bias each
    for name, expected in lab.expected_step_counts(num_linear=2, num_params=params).items():
        assert counts[name] == expected, name


def test_linear_is_dispatched_as_t_and_addmm(tmp_path, one_thread) -> None:
    prof, _ = lab.profile_training_step(lab.Config(), tmp_path / "trace.json")
    linears = [event for event in prof.events() if event.name == "aten::linear"]
    assert len(linears) == 2
    for linear in linears:
        children = Counter(child.name for child in linear.cpu_children)
        assert children == Counter({"aten::t": 1, "aten::addmm": 1})


def test_trace_keeps_the_re_entries_that_the_event_list_folds(tmp_path, one_thread) -> None:
    prof, _ = lab.profile_training_step(lab.Config(), tmp_path / "trace.json")
    counted = sum(lab.aten_calls(prof.events()).values())
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and str(e.get("name", "")).startswith("aten::")]

    def innermost_parent(event):
        start, end = event["ts"], event["ts"] + event["dur"]
        around = [p for p in events if p is not event and p["tid"] == event["tid"]
                  and p["ts"] <= start and end <= p["ts"] + p["dur"] + 1e-3]
        return min(around, key=lambda p: p["dur"], default=None)

    reentries = Counter(e["name"] for e in events if (p := innermost_parent(e)) is not None and p["name"] == e["name"])
    assert len(events) - counted == sum(reentries.values()) > 0
    assert "aten::mean" in reentries


def test_a_folded_re_entry_is_one_overload_calling_another(tmp_path) -> None:
    """`mean` without dims calls `mean.dim`: two dispatcher calls, not a redispatch, which is never recorded."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.randn(4, 4).mean()
    prof.export_chrome_trace(str(tmp_path / "mean.json"))
    trace = json.loads((tmp_path / "mean.json").read_text())
    means = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == "aten::mean"]
    outer, inner = sorted(means, key=lambda e: -e["dur"])
    assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3
    assert len(outer["args"]["Input Dims"]) == len(torch.ops.aten.mean.default._schema.arguments) == 2
    assert len(inner["args"]["Input Dims"]) == len(torch.ops.aten.mean.dim._schema.arguments) == 4
    assert [e.name for e in prof.events()].count("aten::mean") == 1  # folded into one event


@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 5), (2048, 1024)])
def test_chain_bytes_equal_the_tensors_each_eager_op_reads_and_writes(rows: int, cols: int) -> None:
    x, w, b = torch.randn(rows, cols), torch.randn(cols), torch.randn(cols)
    t1 = x * w
    t2 = t1 + b
    t3 = torch.nn.functional.gelu(t2)
    out = t3 * 0.5
    per_op = [(x, w, t1), (t1, b, t2), (t2, t3), (t3, out)]  # inputs then output of each kernel
    eager = sum(t.nbytes for op in per_op for t in op)
    fused = x.nbytes + w.nbytes + b.nbytes + out.nbytes
    assert lab.chain_bytes(rows, cols) == (eager, fused)
    assert eager - fused == 2 * (t1.nbytes + t2.nbytes + t3.nbytes)  # each intermediate written and read once


def test_default_chain_figures() -> None:
    eager, fused = lab.chain_bytes(2048, 1024)
    assert (eager, fused) == (67_117_056, 16_785_408)
    assert eager - fused == 50_331_648 == 6 * 8_388_608
    assert f"{eager / fused:.2f}" == "4.00"


def test_the_eager_chain_is_four_operators_and_the_scalar_hides_inside_mul() -> None:
    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    outermost, every, regions = lab.profile_call(lab.pointwise_chain, x, w, b)
    assert outermost == Counter({"aten::mul": 2, "aten::add": 1, "aten::gelu": 1})
    assert every["aten::to"] == 1 and regions == 0


def test_a_data_dependent_branch_breaks_the_graph_and_torch_where_does_not() -> None:
    x = torch.arange(1.0, 9.0)
    branchy = lab.GraphRecorder()
    compiled = torch.compile(lab.branchy, backend=branchy)
    assert torch.equal(compiled(x), lab.branchy(x))
    assert len(branchy.graphs) == 2
    first = [str(node.target) for node in branchy.graphs[0].graph.nodes if node.op.startswith("call_")]
    assert len(first) == 3 and "sum" in first  # mul, sum, gt: the graph ends at the `if`
    assert torch.equal(compiled(-x), lab.branchy(-x))
    assert branchy.ops_per_graph() == [3, 2, 1]

    branchless = lab.GraphRecorder()
    compiled = torch.compile(lab.branchless, backend=branchless)
    assert torch.equal(compiled(x), lab.branchy(x)) and torch.equal(compiled(-x), lab.branchy(-x))
    assert branchless.ops_per_graph() == [7]


def test_dynamo_counts_the_same_graphs_and_breaks_as_the_recorder() -> None:
    x = torch.arange(1.0, 9.0)
    explained = torch._dynamo.explain(lab.branchy)(x)
    assert (explained.graph_count, explained.graph_break_count) == (2, 1)
    explained = torch._dynamo.explain(lab.branchless)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_fullgraph_refuses_the_data_dependent_branch() -> None:
    with pytest.raises(torch._dynamo.exc.Unsupported, match="Data-dependent branching"):
        torch.compile(lab.branchy, backend=lab.GraphRecorder(), fullgraph=True)(torch.ones(3))


def test_inductor_fuses_the_chain_into_one_cpp_kernel(one_thread) -> None:
    from torch._inductor.utils import (
        run_and_get_code,  # private: the only way to read the generated source
    )

    config = lab.Config()
    g = torch.Generator().manual_seed(config.seed)
    x = torch.randn(config.rows, config.cols, generator=g)
    w, b = torch.randn(config.cols, generator=g), torch.randn(config.cols, generator=g)
    fusion, sources = run_and_get_code(lab.run_fusion, x, w, b)

    assert len(sources) == 1  # one Inductor compile; the recording backend generates no code
    kernels = re.findall(r"^(cpp_fused_\w+) = ", sources[0], flags=re.MULTILINE)
    assert kernels == ["cpp_fused_add_gelu_mul_0"]
    assert fusion.graph_ops == [4] and fusion.regions == 1 and not fusion.ops_inside
    assert fusion.max_diff <= lab.PARITY_TOLERANCE


def test_mul_sizes_step_by_16_from_tiny_to_large() -> None:
    assert lab.mul_sizes(16, 2**24) == [16, 256, 4096, 65536, 1048576, 16777216]
    assert lab.mul_sizes(16, 1000) == [16, 256, 1000]
    assert lab.mul_sizes(64, 64) == [64]


@pytest.mark.parametrize(
    "argv", [["--rows", "0"], ["--tiny", "4096", "--large", "16"], ["--tiny", "64", "--large", "64"], ["--repeats", "-1"]]
)
def test_bad_sizes_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        lab.parse_args(argv)
    assert exit_info.value.code == 2
