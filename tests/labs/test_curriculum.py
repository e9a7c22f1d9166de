"""Across labs: figures several labs state must agree, and starters use public torch APIs only.

A review of the curriculum found lab 01 assuming 12 bytes per parameter of training state while
labs 09 and 11 assumed 16, and lab 10 leaning on private torch modules. Each lab's own tests pin
its own figures; these pin what labs share, so one lab cannot drift from another again.
"""

from __future__ import annotations

import ast
import re

import pytest
from conftest import REPO, load_starter


def private_torch_names(source: str) -> list[tuple[int, str]]:
    """Return (line, dotted name) for every import or attribute path into a private torch module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute):
            parts, inner = [], node
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            names = [".".join([inner.id, *reversed(parts)])] if isinstance(inner, ast.Name) else []
        else:
            continue
        for name in names:
            head, *rest = name.split(".")
            if head == "torch" and any(p.startswith("_") and not p.endswith("__") for p in rest):
                found.append((node.lineno, name))
    return found


def starter_sources() -> list[tuple[str, str]]:
    """Every starter's Python: a .py file whole, a .md file's python blocks."""
    sources = []
    for path in sorted(REPO.glob("code/*/*")):
        text = path.read_text()
        if path.suffix == ".md":
            text = "\n".join(re.findall(r"^```python\n(.*?)^```", text, re.S | re.M))
        elif path.suffix != ".py":
            continue
        sources.append((str(path.relative_to(REPO)), text))
    return sources


@pytest.mark.unit
def test_the_private_api_finder_finds_what_lab_10_used_to_use() -> None:
    old = "import torch\nfrom torch.utils._python_dispatch import TorchDispatchMode\nx = torch._dynamo.eval_frame._should_skip_dynamo\n"
    found = private_torch_names(old)
    assert (2, "torch.utils._python_dispatch.TorchDispatchMode") in found
    assert (3, "torch._dynamo.eval_frame._should_skip_dynamo") in found
    assert private_torch_names("import torch\ntorch.overrides.TorchFunctionMode\ntorch.Tensor.__add__\n") == []


@pytest.mark.unit
@pytest.mark.parametrize("path, source", starter_sources(), ids=[path for path, _ in starter_sources()])
def test_no_starter_reaches_into_a_private_torch_module(path: str, source: str) -> None:
    assert private_torch_names(source) == [], f"{path} uses private torch APIs; readers copy what starters do"


@pytest.fixture(scope="module")
def labs():
    return {
        name: load_starter(REPO / path)
        for name, path in {
            "01": "code/lab-01-transformer-memory/memory_accounting.py",
            "02": "code/lab-02-roofline/roofline.py",
            "07": "code/lab-07-kv-cache/kv_cache.py",
            "09": "code/lab-09-mixed-precision/mixed_precision.py",
            "11": "code/lab-11-ddp-zero-memory/ddp_zero_memory.py",
            "17": "code/lab-17-decode-batching/decode_batching.py",
        }.items()
    }


@pytest.mark.starters
def test_labs_01_09_and_11_price_mixed_precision_adam_alike(labs) -> None:
    """ZeRO (arXiv 1910.02054) sec. 3.1: 2 + 2 + K bytes per parameter with K = 12."""
    lab01 = labs["01"].RECIPES
    assert lab01["mixed-precision"].total == 16 == sum(labs["09"].bytes_per_param(labs["09"].RECIPES["bf16 mixed precision"]))
    assert labs["11"].WEIGHT_BYTES + labs["11"].GRAD_BYTES + labs["11"].OPTIMIZER_BYTES == 16
    assert lab01["bf16-no-master"].total == 12 == sum(labs["09"].bytes_per_param(labs["09"].RECIPES["pure bf16, no master copy"]))
    assert labs["01"].Config().recipe == "mixed-precision"  # the default every lab 01 figure assumes


@pytest.mark.starters
def test_labs_02_and_17_use_the_same_datasheet_ceilings(labs) -> None:
    """NVIDIA A100 (SXM 80GB) and H100 (SXM) datasheets: 312 and 989 dense bf16 TFLOP/s, 2.039 and 3.35 TB/s."""
    for name in ("A100_SXM", "H100_SXM"):
        roofline, decode = getattr(labs["02"], name), getattr(labs["17"], name)
        assert roofline.bf16_flops == decode.bf16_flops
        assert roofline.bf16_sparse_flops == decode.bf16_sparse_flops
        assert roofline.hbm_bytes_per_s == decode.bandwidth
    assert (labs["02"].A100_SXM.bf16_flops, labs["02"].A100_SXM.hbm_bytes_per_s) == (312e12, 2.039e12)
    assert (labs["02"].H100_SXM.bf16_flops, labs["02"].H100_SXM.hbm_bytes_per_s) == (989e12, 3.35e12)


@pytest.mark.starters
def test_labs_07_and_17_count_llama_2_7b_alike(labs) -> None:
    """meta-llama/Llama-2-7b-hf config.json: 6,738,415,616 parameters, 524,288 bf16 KV bytes per token."""
    params, _, _ = labs["07"].REFERENCE_WEIGHTS["Llama-2-7B"]
    assert labs["17"].LLAMA_2_7B.params == params == 6_738_415_616
    layers, kv_heads, head_dim = labs["07"].REFERENCE_MODELS["Llama-2-7B"]
    assert labs["07"].kv_bytes_per_token(layers, kv_heads, head_dim, 2) == labs["17"].LLAMA_2_7B.kv_bytes_per_token() == 524_288


@pytest.mark.unit
def test_every_lab_records_the_execution_state_of_its_excerpt(project) -> None:
    """Issue 14: every lab's excerpt shows what its lines held in the checked run. A lab that
    opts out (state: false) must be argued for here, not slip through."""
    from infralens.check.runner import lab_excerpt
    from infralens.lab.state import traced_spans

    untraced = [lab.id for lab in project.labs if not traced_spans(lab, lab_excerpt(lab, project.texts))]
    assert untraced == []
