"""Lab 06's figures checked against published model configs, and its MHA/MQA/GQA parity.

Shapes come from each model's Hugging Face config.json (num_hidden_layers, num_attention_heads,
num_key_value_heads, hidden_size / num_attention_heads): Llama-2-7B 32/32/32/128, Meta-Llama-3-8B
32/32/8/128, Mistral-7B-v0.1 32/32/8/128, Llama-2-70B 80/64/8/128. The bf16 KV-cache figures per
token are the widely quoted 524,288 B (Llama-2-7B) and 131,072 B (Llama-3-8B, Mistral-7B).
"""

from __future__ import annotations

import pytest
import torch
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-06-mqa-gqa/mqa_gqa.py"
lab = load_starter(STARTER)

# name: (layers, query heads, kv heads, head_dim, bf16 KV bytes per token)
PUBLISHED = {
    "Llama-2-7B": (32, 32, 32, 128, 524_288),
    "Llama-3-8B": (32, 32, 8, 128, 131_072),
    "Mistral-7B": (32, 32, 8, 128, 131_072),
    "Llama-2-70B": (80, 64, 8, 128, 327_680),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_shapes_and_bf16_kv_bytes_per_token(name: str) -> None:
    layers, heads, kv_heads, head_dim, per_token = PUBLISHED[name]
    assert tuple(lab.PUBLISHED[name]) == (layers, heads, kv_heads, head_dim)
    assert lab.kv_cache_bytes_per_token(layers, kv_heads, head_dim, lab.BF16_BYTES) == per_token
    # Against MHA, the cache shrinks by query heads / KV heads: 1x, 4x, 4x, 8x.
    assert lab.mha_cache_ratio(layers, heads, kv_heads, head_dim, lab.BF16_BYTES) == heads / kv_heads
    assert lab.kv_cache_bytes(4096, layers, kv_heads, head_dim, lab.BF16_BYTES) == 4096 * per_token


@pytest.mark.parametrize(
    "name, per_layer",
    [("Llama-2-7B", 4 * 4096 * 4096), ("Llama-3-8B", 2 * 4096 * 4096 + 2 * 4096 * 1024),
     ("Llama-2-70B", 2 * 8192 * 8192 + 2 * 8192 * 1024)],
)
def test_attention_params_match_a_module_built_to_the_published_shape(name: str, per_layer: int) -> None:
    _, heads, kv_heads, head_dim = lab.PUBLISHED[name]
    d_model = heads * head_dim
    with torch.device("meta"):  # shapes only: a 70B layer costs no memory
        module = lab.GroupedQueryAttention(d_model, heads, kv_heads, head_dim)
    assert sum(p.numel() for p in module.parameters()) == per_layer
    assert lab.attention_params(d_model, heads, kv_heads, head_dim) == per_layer


def _toy_input() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(2, 16, 8 * 16)


@torch.no_grad()
@pytest.mark.parametrize("kv_heads, reference", [(8, "reference_mha"), (1, "reference_mqa")])
def test_extremes_match_hand_written_mha_and_mqa(kv_heads: int, reference: str) -> None:
    x = _toy_input()
    module = lab.GroupedQueryAttention(128, 8, kv_heads, 16)
    expected = getattr(lab, reference)(x, *lab.module_weights(module), 8)
    torch.testing.assert_close(module(x), expected, rtol=0, atol=lab.PARITY_ATOL)


@torch.no_grad()
def test_gqa_pairs_query_heads_with_kv_heads_like_the_checkpoints() -> None:
    """Query head h must read K/V head h // group_size; PyTorch's enable_gqa fixes that order."""
    x = _toy_input()
    gqa = lab.GroupedQueryAttention(128, 8, 2, 16)
    q = gqa.q_proj(x).view(2, 16, 8, 16).transpose(1, 2)
    fused = torch.nn.functional.scaled_dot_product_attention(q, *gqa.project_kv(x), is_causal=True,
                                                             enable_gqa=True)
    expected = gqa.o_proj(fused.transpose(1, 2).reshape(2, 16, -1))
    torch.testing.assert_close(gqa(x), expected, rtol=0, atol=lab.PARITY_ATOL)


@torch.no_grad()
def test_mean_pooling_is_lossless_when_group_heads_agree_and_closer_otherwise() -> None:
    x = _toy_input()
    tied = lab.mha_checkpoint(128, 8, 2, 16, spread=0.0)
    torch.testing.assert_close(lab.gqa_from_mha(tied, 2)(x), tied(x), rtol=0, atol=lab.PARITY_ATOL)
    mha = lab.mha_checkpoint(128, 8, 2, 16, spread=0.25)
    target = mha(x)
    mean = lab.relative_error(lab.gqa_from_mha(mha, 2, "mean")(x), target)
    first = lab.relative_error(lab.gqa_from_mha(mha, 2, "first")(x), target)
    assert 0 < mean < first


def test_the_printed_report_carries_the_published_figures(capsys: pytest.CaptureFixture[str]) -> None:
    lab.print_report(lab.parse_args([]))  # in-process: the default run, without a second torch import
    stdout = capsys.readouterr().out
    for name, (layers, heads, kv_heads, head_dim, per_token) in PUBLISHED.items():
        line = (f"{name} (layers={layers}, heads={heads}, kv_heads={kv_heads}, head_dim={head_dim}): "
                f"kv cache {per_token:,} B/token")
        assert line in stdout
