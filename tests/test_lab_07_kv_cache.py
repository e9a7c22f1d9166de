"""Lab 07's figures checked against published configs, closed forms and exact parity.

Published configs (Hugging Face config.json of meta-llama/Llama-2-7b-hf and Llama-2-70b-hf):
Llama-2-7B has hidden_size 4096, 32 attention heads, 32 key/value heads and 32 layers; Llama-2-70B
has hidden_size 8192, 64 attention heads, 8 key/value heads (GQA) and 80 layers. In bf16 the 7B
cache is 524,288 bytes per token, exactly 1 GiB at 2,048 tokens.
"""

from __future__ import annotations


import pytest
import torch

from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-07-kv-cache/kv_cache.py"
kv = load_starter(STARTER)

PUBLISHED = {  # name: (hidden_size, num_attention_heads, num_key_value_heads, num_hidden_layers)
    "Llama-2-7B": (4096, 32, 32, 32),
    "Llama-2-70B": (8192, 64, 8, 80),
}
GiB = 2**30



@pytest.mark.parametrize("name", PUBLISHED)
def test_reference_models_match_the_published_configs(name: str) -> None:
    hidden, heads, kv_heads, layers = PUBLISHED[name]
    assert kv.REFERENCE_MODELS[name] == (layers, kv_heads, hidden // heads)


@pytest.mark.parametrize(
    "name, per_token, at_2048, at_4096",
    [("Llama-2-7B", 524_288, 1_073_741_824, 2_147_483_648),
     ("Llama-2-70B", 327_680, 671_088_640, 1_342_177_280)],
)
def test_bf16_kv_cache_of_the_llama_2_models(name: str, per_token: int, at_2048: int, at_4096: int) -> None:
    layers, kv_heads, head_dim = kv.REFERENCE_MODELS[name]
    assert kv.kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes=2) == per_token
    assert 2048 * per_token == at_2048
    assert 4096 * per_token == at_4096


def test_llama_2_7b_cache_is_one_gib_at_2048_tokens() -> None:
    assert 2048 * kv.kv_bytes_per_token(32, 32, 128, 2) == 1 * GiB == 1_073_741_824


@pytest.mark.parametrize("prompt_len, new_tokens", [(1, 1), (1, 2), (3, 5), (16, 32), (7, 100)])
def test_row_closed_forms_are_the_sums_they_stand_for(prompt_len: int, new_tokens: int) -> None:
    assert kv.naive_projection_rows(prompt_len, new_tokens) == sum(prompt_len + i for i in range(new_tokens))
    assert kv.cached_projection_rows(prompt_len, new_tokens) == prompt_len + (new_tokens - 1)


SMALL = dict(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, prompt_len=5, new_tokens=9)


@pytest.mark.parametrize(
    "config",
    [kv.Config(**SMALL), kv.Config(**SMALL, kv_heads=2), kv.Config(**SMALL, kv_heads=1),
     kv.Config(**SMALL, dtype="float32"), kv.Config(**{**SMALL, "num_layers": 3}, seed=3)],
    ids=["mha", "gqa-2", "mqa", "float32", "3-layers"],
)
def test_cached_decode_matches_naive_decode_and_the_closed_forms(config, one_thread) -> None:
    model = kv.TinyDecoder(config)
    prompt = torch.randint(config.vocab_size, (config.prompt_len,), generator=torch.Generator().manual_seed(7))
    naive = kv.decode_naive(model, prompt, config.new_tokens)
    cached = kv.decode_cached(model, prompt, config.new_tokens)

    assert cached.token_ids == naive.token_ids
    tolerance = kv.LOGIT_TOLERANCE[kv.DTYPES[config.dtype]]
    assert (naive.logits - cached.logits).abs().max().item() <= tolerance

    P, T, L = config.prompt_len, config.new_tokens, config.num_layers
    projections = {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"}
    assert naive.rows == dict.fromkeys(projections, L * kv.naive_projection_rows(P, T))
    assert cached.rows == dict.fromkeys(projections, L * kv.cached_projection_rows(P, T))

    dtype_bytes = 8 if config.dtype == "float64" else 4
    per_token = kv.kv_bytes_per_token(L, config.kv_heads, config.head_dim, dtype_bytes)
    assert cached.cache_bytes == [(P + step) * per_token for step in range(T)]


def test_default_report_prints_the_tested_figures(capsys, one_thread) -> None:
    kv.print_report(kv.Config(), repeats=1)
    out = capsys.readouterr().out
    assert "growth per token: 4,096 bytes = 2 (K and V) * 2 layers * 4 KV heads * 32 head_dim * 8 bytes" in out
    assert "generated token ids: identical (32 of 32)" in out
    assert "k/v projection FLOPs: naive 132,120,576, cached 6,160,384 (21.45x fewer)" in out
    assert "Llama-2-7B (32 layers, 32 KV heads, head_dim 128): 524,288 bytes per token" in out
    assert "2,048 tokens: 1,073,741,824 bytes (1.00 GiB)" in out
    assert "Llama-2-70B (80 layers, 8 KV heads, head_dim 128): 327,680 bytes per token" in out
