"""Lab 01's figures checked against published model configs and parameter counts.

Parameter counts are the totals the model authors publish for these checkpoints (Hugging Face
model cards and config.json): Llama-2-7B 6,738,415,616; Llama-3-8B 8,030,261,248;
Mistral-7B-v0.1 7,241,732,096; Llama-2-70B 68,976,648,192. Bytes per parameter of training state: ZeRO (Rajbhandari et al.,
arXiv 1910.02054) sec. 3.1 for mixed-precision Adam; Megatron-LM's
megatron/training/theoretical_memory_usage.py for the 18-byte variant with fp32 gradients.
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
LLAMA2_70B = dict(hidden_dim=8192, num_layers=80, num_heads=64, kv_heads=8, vocab_size=32000, ffn_dim=28672)


def test_the_starters_published_table_holds_these_configs() -> None:
    """The calculator's presets come from this table (config.json of each model)."""
    assert memory.PUBLISHED == {"Llama-2-7B": LLAMA2_7B, "Llama-3-8B": LLAMA3_8B, "Mistral-7B": MISTRAL_7B, "Llama-2-70B": LLAMA2_70B}
    assert memory.Config(**memory.PUBLISHED["Llama-2-7B"]) == memory.Config(ffn_dim=11008)  # the defaults' model


def test_model_flag_starts_from_a_published_config_and_other_flags_still_apply() -> None:
    config = memory.parse_config(["--model", "Llama-2-70B", "--seq-len", "8192"])
    assert (config.num_layers, config.kv_heads, config.ffn_dim, config.seq_len) == (80, 8, 28672, 8192)
    assert memory.estimate_memory(config).kv_bytes_per_token == 327_680
    assert memory.parse_config([]) == memory.Config()  # no --model: the defaults, Llama-2-7B


@pytest.mark.parametrize(
    "config, published",
    [(LLAMA2_7B, 6_738_415_616), (LLAMA3_8B, 8_030_261_248), (MISTRAL_7B, 7_241_732_096), (LLAMA2_70B, 68_976_648_192)],
    ids=["llama-2-7b", "llama-3-8b", "mistral-7b", "llama-2-70b"],
)
def test_exact_parameter_count_matches_the_published_total(config: dict, published: int) -> None:
    assert memory.exact_parameter_count(memory.Config(**config)) == published


@pytest.mark.parametrize(
    "config, per_token",
    [(LLAMA2_7B, 524_288), (LLAMA3_8B, 131_072), (MISTRAL_7B, 131_072), (LLAMA2_70B, 327_680)],
    ids=["llama-2-7b", "llama-3-8b", "mistral-7b", "llama-2-70b"],
)
def test_bf16_kv_cache_bytes_per_token(config: dict, per_token: int) -> None:
    ledger = memory.estimate_memory(memory.Config(**config, precision_bytes=2))
    assert ledger.kv_bytes_per_token == per_token


def test_default_recipe_is_the_zero_papers_mixed_precision_adam() -> None:
    """ZeRO (arXiv 1910.02054), sec. 3.1: mixed-precision Adam keeps fp16 parameters and gradients
    (2Ψ + 2Ψ bytes) and K = 12 bytes per parameter of optimizer state (fp32 parameters, momentum and
    variance, 4 bytes each): 16Ψ bytes. For Llama-2-7B, Ψ = 6,738,415,616 gives 107,814,649,856 bytes.
    """
    config = memory.Config()
    recipe = memory.RECIPES[config.recipe]
    assert (recipe.weights, recipe.grads, recipe.master + recipe.moments) == (2, 2, 12)
    assert (recipe.master, recipe.moments) == (4, 4 + 4)
    assert recipe.total == sum(recipe.parts().values()) == 16
    exact = memory.exact_parameter_count(config)
    assert exact * recipe.total == 107_814_649_856
    ledger = memory.estimate_memory(config)
    assert ledger.training_bytes == 16 * ledger.total_params


@pytest.mark.parametrize(
    "name, parts, total",
    [("bf16-no-master", (2, 2, 0, 8), 12),
     ("mixed-precision", (2, 2, 4, 8), 16),
     ("fp32-grads", (2, 4, 4, 8), 18)],
)
def test_each_recipe_adds_up_and_prices_the_ledger(name: str, parts: tuple, total: int) -> None:
    """12: bf16 weights and grads with fp32 moments and no master copy. 16: ZeRO sec. 3.1.
    18: Megatron-LM's theoretical_memory_usage.py, 2 bf16 params + 4 fp32 main params + 4 fp32
    grads + 8 Adam states."""
    recipe = memory.RECIPES[name]
    assert (recipe.weights, recipe.grads, recipe.master, recipe.moments) == parts
    assert sum(recipe.parts().values()) == recipe.total == total
    ledger = memory.estimate_memory(memory.Config(recipe=name))
    assert ledger.training_bytes == total * ledger.total_params
    assert ledger.master_bytes == parts[2] * ledger.total_params


def test_unknown_recipe_is_rejected() -> None:
    with pytest.raises(ValueError, match="recipe must be one of"):
        memory.Config(recipe="fp8")


def test_default_config_is_llama_2_7b() -> None:
    config = memory.Config()
    assert memory.exact_parameter_count(config) == 6_738_415_616
    assert config.intermediate_dim == 11008  # Llama's rounding rule applied to m = 8


def test_rough_estimate_is_the_4d2_plus_md2_formula() -> None:
    ledger = memory.estimate_memory(memory.Config())
    d = 4096
    assert ledger.total_params == 32 * (4 * d * d + 8 * d * d) + 32000 * d
    assert ledger.param_bytes == ledger.grad_bytes == 2 * ledger.total_params
    assert ledger.master_bytes == 4 * ledger.total_params
    assert ledger.adam_bytes == 8 * ledger.total_params


def test_the_printed_ledger_carries_the_tested_figures() -> None:
    result = subprocess.run([sys.executable, str(STARTER)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "exact parameters: 6,738,415,616" in result.stdout
    assert "kv cache per token: 524,288 bytes" in result.stdout
    assert "training state, recipe mixed-precision: 16 B/param" in result.stdout
    assert "= 107,814,649,856 bytes (107.81 GB, 100.41 GiB)" in result.stdout
    # The 12 B/param total is printed only as that recipe's line, never as the default.
    twelve = [line for line in result.stdout.splitlines() if "80.86 GB" in line]
    assert twelve == ["    = 80,860,987,392 bytes (80.86 GB, 75.31 GiB)"]
