"""Lab 01's figures checked against published model configs and parameter counts.

Parameter counts are the totals the model authors publish for these checkpoints (Hugging Face
model cards and config.json): Llama-2-7B 6,738,415,616; Llama-3-8B 8,030,261,248;
Mistral-7B-v0.1 7,241,732,096.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-01-transformer-memory/memory_accounting.py"
memory = load_starter(STARTER)

LLAMA2_7B = dict(hidden_dim=4096, num_layers=32, num_heads=32, kv_heads=32, vocab_size=32000, ffn_dim=11008)
LLAMA3_8B = dict(hidden_dim=4096, num_layers=32, num_heads=32, kv_heads=8, vocab_size=128256, ffn_dim=14336)
MISTRAL_7B = dict(hidden_dim=4096, num_layers=32, num_heads=32, kv_heads=8, vocab_size=32000, ffn_dim=14336)


@pytest.mark.parametrize(
    "config, published",
    [(LLAMA2_7B, 6_738_415_616), (LLAMA3_8B, 8_030_261_248), (MISTRAL_7B, 7_241_732_096)],
    ids=["llama-2-7b", "llama-3-8b", "mistral-7b"],
)
def test_exact_parameter_count_matches_the_published_total(config: dict, published: int) -> None:
    assert memory.exact_parameter_count(memory.Config(**config)) == published


@pytest.mark.parametrize(
    "config, per_token",
    [(LLAMA2_7B, 524_288), (LLAMA3_8B, 131_072), (MISTRAL_7B, 131_072)],
    ids=["llama-2-7b", "llama-3-8b", "mistral-7b"],
)
def test_bf16_kv_cache_bytes_per_token(config: dict, per_token: int) -> None:
    ledger = memory.estimate_memory(memory.Config(**config, precision_bytes=2))
    assert ledger.kv_bytes_per_token == per_token


def test_default_config_is_llama_2_7b() -> None:
    config = memory.Config()
    assert memory.exact_parameter_count(config) == 6_738_415_616
    assert config.intermediate_dim == 11008  # Llama's rounding rule applied to m = 8


def test_rough_estimate_is_the_4d2_plus_md2_formula() -> None:
    ledger = memory.estimate_memory(memory.Config())
    d = 4096
    assert ledger.total_params == 32 * (4 * d * d + 8 * d * d) + 32000 * d
    assert ledger.param_bytes == ledger.grad_bytes == 2 * ledger.total_params
    assert ledger.adam_bytes == 8 * ledger.total_params


def test_the_printed_ledger_carries_the_tested_figures() -> None:
    result = subprocess.run([sys.executable, str(STARTER)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "exact parameters: 6,738,415,616" in result.stdout
    assert "kv cache per token: 524,288 bytes" in result.stdout
