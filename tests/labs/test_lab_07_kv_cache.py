"""Lab 07's figures checked against published configs, closed forms and exact parity.

Published configs (Hugging Face config.json of meta-llama/Llama-2-7b-hf and Llama-2-70b-hf,
https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json and
https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json):
Llama-2-7B has hidden_size 4096, intermediate_size 11008, 32 attention heads, 32 key/value heads,
32 layers, vocab_size 32000 and tie_word_embeddings false; Llama-2-70B has hidden_size 8192,
intermediate_size 28672, 64 attention heads, 8 key/value heads (GQA), 80 layers, vocab_size 32000
and tie_word_embeddings false. Both are bias-free SwiGLU decoders with two RMSNorm weights per layer
and a final one. From those shapes the parameter counts are 6,738,415,616 (7B), the "all params"
total PEFT's print_trainable_parameters reports for Llama-2-7b-hf, and 68,976,648,192 (70B). In bf16
the 7B cache is 524,288 bytes per token, exactly 1 GiB at 2,048 tokens.
"""

from __future__ import annotations

import pytest
import torch
import yaml
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-07-kv-cache/kv_cache.py"
kv = load_starter(STARTER)

PUBLISHED = {  # name: (hidden_size, num_attention_heads, num_key_value_heads, num_hidden_layers)
    "Llama-2-7B": (4096, 32, 32, 32),
    "Llama-2-70B": (8192, 64, 8, 80),
}
FFN_AND_VOCAB = {  # name: (intermediate_size, vocab_size), same config.json files
    "Llama-2-7B": (11008, 32000),
    "Llama-2-70B": (28672, 32000),
}
PUBLISHED_PARAMETERS = {"Llama-2-7B": 6_738_415_616, "Llama-2-70B": 68_976_648_192}
GiB = 2**30


def llama_parameters(name: str) -> int:
    """Count a Llama-2 checkpoint's parameters from its config: untied embeddings, SwiGLU, no biases."""
    return decoder_parameters(*PUBLISHED[name], *FFN_AND_VOCAB[name])


def decoder_parameters(hidden: int, heads: int, kv_heads: int, layers: int, intermediate: int, vocab: int) -> int:
    """Count a Llama-style decoder's parameters: untied embeddings, SwiGLU, no biases, RMSNorm."""
    kv_width = kv_heads * (hidden // heads)
    attention = 2 * hidden * hidden + 2 * hidden * kv_width  # q_proj, o_proj; k_proj, v_proj
    mlp = 3 * hidden * intermediate  # gate_proj, up_proj, down_proj
    norms = 2 * hidden  # input_layernorm, post_attention_layernorm
    embeddings = 2 * vocab * hidden  # embed_tokens and a separate lm_head (tie_word_embeddings false)
    return layers * (attention + mlp + norms) + embeddings + hidden  # + the final norm



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


@pytest.mark.parametrize("name", PUBLISHED)
def test_parameter_counts_follow_from_the_published_configs(name: str) -> None:
    assert llama_parameters(name) == PUBLISHED_PARAMETERS[name]
    params, vocab, hidden = kv.REFERENCE_WEIGHTS[name]
    assert params == PUBLISHED_PARAMETERS[name]
    assert (vocab, hidden) == (FFN_AND_VOCAB[name][1], PUBLISHED[name][0])


def test_llama_2_7b_weights_in_bf16() -> None:
    assert 6_738_415_616 * 2 == 13_476_831_232  # held in memory
    # A decode step multiplies by every matrix but only indexes the input embedding table.
    assert (6_738_415_616 - 32_000 * 4_096) * 2 == 13_214_687_232


@pytest.mark.parametrize("batch", [1, 3, 8, 32])
@pytest.mark.parametrize("context", [1, 2048, 4096])
def test_decode_step_reads_the_weights_once_and_every_cache(batch: int, context: int) -> None:
    weights, per = 13_214_687_232, 524_288
    assert kv.decode_step_bytes(weights, per, batch, context) == (weights, batch * context * per)


def test_kv_share_of_a_llama_2_7b_step_at_batch_1() -> None:
    weights, cache = kv.decode_step_bytes(13_214_687_232, 524_288, batch=1, context=2048)
    assert cache == 1 * GiB
    assert round(100 * cache / (weights + cache), 1) == 7.5  # the weights are 92.5% of the read


def test_crossover_batch_times_context_for_llama_2_7b() -> None:
    per = kv.kv_bytes_per_token(32, 32, 128, 2)
    # Against the bytes a step reads: the weights minus the input embedding table.
    crossover = kv.kv_crossover_tokens(13_214_687_232, per)
    assert crossover == 25_205.015625
    assert 25_205 * per < 13_214_687_232 < 25_206 * per
    # Against all the weights held (the embedding table counted too) it would be 25,705 tokens.
    assert kv.kv_crossover_tokens(13_476_831_232, per) == pytest.approx(25_705.0, abs=0.02)
    assert 25_705 * per < 13_476_831_232 < 25_706 * per


def test_crossover_for_llama_2_70b() -> None:
    per = kv.kv_bytes_per_token(80, 8, 128, 2)
    weights = (68_976_648_192 - 32_000 * 8_192) * 2
    assert weights == 137_429_008_384
    assert 419_400 * per < weights < 419_401 * per


def test_seven_4096_token_sequences_outweigh_the_llama_2_7b_weights() -> None:
    sequence = 4096 * kv.kv_bytes_per_token(32, 32, 128, 2)
    assert sequence == 2 * GiB == 2_147_483_648
    assert kv.sequences_to_outweigh(13_476_831_232, sequence) == 7
    assert 6 * sequence == 12_884_901_888 < 13_476_831_232 < 15_032_385_536 == 7 * sequence


@pytest.mark.parametrize("weights, sequence, fewest",
                         [(10, 10, 2), (10, 11, 1), (10, 3, 4), (12, 3, 5)])
def test_sequences_to_outweigh_needs_strictly_more(weights: int, sequence: int, fewest: int) -> None:
    assert kv.sequences_to_outweigh(weights, sequence) == fewest


def test_decode_step_table_prints_the_tested_figures(capsys) -> None:
    kv.print_decode_step_reads()
    out = capsys.readouterr().out
    assert "weights held 13,476,831,232 bytes (12.55 GiB); read per step 13,214,687,232" in out
    assert "= 13,214,687,232 / 524,288 = 25,205.02 tokens, i.e. from 25,206 tokens on" in out
    assert "caches outweigh the weights held: 7 (7 * 2,147,483,648 = 15,032,385,536 > 13,476,831,232" in out
    assert "= 137,429,008,384 / 327,680 = 419,400.05 tokens, i.e. from 419,401 tokens on" in out


# The calculator "How many sequences fit on one GPU" (labs/lab-07-kv-cache.yml) presets two more
# published models. Hugging Face config.json of meta-llama/Meta-Llama-3-8B,
# https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json, and of
# mistralai/Mistral-7B-v0.1, https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json:
# both have hidden_size 4096, 32 attention heads, 8 key/value heads, 32 layers, intermediate_size
# 14336 and tie_word_embeddings false; vocab_size is 128256 (Llama-3-8B) and 32000 (Mistral-7B).
# Their parameter counts, 8,030,261,248 and 7,241,732,096, are the general.parameter_count of their
# GGUF conversions and follow from those shapes below.
OTHER_PUBLISHED = {  # name: (hidden_size, heads, kv_heads, layers, intermediate_size, vocab_size)
    "Llama-3-8B": (4096, 32, 8, 32, 14336, 128256),
    "Mistral-7B": (4096, 32, 8, 32, 14336, 32000),
}
OTHER_PARAMETERS = {"Llama-3-8B": 8_030_261_248, "Mistral-7B": 7_241_732_096}

# GPU memory as the NVIDIA datasheets state it, in GB (10**9 bytes):
# A100 40GB and A100 80GB, https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
# H100 SXM 80GB, https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
# H200 141GB, https://www.nvidia.com/en-us/data-center/h200/
DATASHEET_GB = {"A100 40GB": 40, "A100 80GB": 80, "H100 80GB": 80, "H200 141GB": 141}

MANIFEST = REPO / "labs/lab-07-kv-cache.yml"


def calculator(calc_id: str = "kv-fit") -> dict:
    manifest = yaml.safe_load(MANIFEST.read_text())
    return next(c for c in manifest["calculators"] if c["id"] == calc_id)


@pytest.mark.parametrize("name", OTHER_PUBLISHED)
def test_other_parameter_counts_follow_from_their_configs(name: str) -> None:
    assert decoder_parameters(*OTHER_PUBLISHED[name]) == OTHER_PARAMETERS[name]


def test_gpu_memory_is_the_datasheet_figure() -> None:
    assert kv.GPU_MEMORY == {gpu: gb * 10**9 for gpu, gb in DATASHEET_GB.items()}


def test_calculator_gpu_choices_are_the_starters_table() -> None:
    gpu = next(i for i in calculator()["inputs"] if i["name"] == "gpu")
    assert gpu["choices"] == kv.GPU_MEMORY


def test_calculator_presets_match_the_starters_tables_and_the_published_configs() -> None:
    calc = calculator()
    defaults = {i["name"]: i["default"] for i in calc["inputs"]}
    presets = {p["label"]: {**defaults, **p["values"]} for p in calc["presets"]}
    assert set(presets) == {*kv.REFERENCE_MODELS, *OTHER_PUBLISHED}
    for name, values in presets.items():
        shape = (values["layers"], values["kv_heads"], values["head_dim"])
        if name in kv.REFERENCE_MODELS:  # the Llama-2 presets repeat the starter's tables
            assert shape == kv.REFERENCE_MODELS[name]
            assert values["params"] == kv.REFERENCE_WEIGHTS[name][0]
        else:
            hidden, heads, kv_heads, layers, _, _ = OTHER_PUBLISHED[name]
            assert shape == (layers, kv_heads, hidden // heads)
            assert values["params"] == OTHER_PARAMETERS[name]
    # The defaults are Llama-2-7B in bf16 at 4,096 tokens.
    assert presets["Llama-2-7B"] == defaults
    assert (defaults["cache_dtype"], defaults["weight_dtype"], defaults["context"]) == ("bf16", "bf16", 4096)


@pytest.mark.parametrize("gpu, weights, sequence, fit",
                         [(10, 4, 3, 2), (10, 4, 2, 3), (10, 10, 1, 0), (10, 11, 1, 0), (10, 0, 11, 0)])
def test_sequences_that_fit_floors_the_free_memory(gpu: int, weights: int, sequence: int, fit: int) -> None:
    assert kv.sequences_that_fit(gpu, weights, sequence) == fit


@pytest.mark.parametrize(
    "name, fits",
    [("Llama-2-7B", {"A100 40GB": 12, "A100 80GB": 30, "H100 80GB": 30, "H200 141GB": 59}),
     ("Llama-2-70B", {"A100 40GB": 0, "A100 80GB": 0, "H100 80GB": 0, "H200 141GB": 2})],
)
def test_4096_token_bf16_sequences_that_fit_beside_the_llama_2_weights(name: str, fits: dict) -> None:
    weights = kv.held_weight_bytes(kv.REFERENCE_WEIGHTS[name][0], 2)
    sequence = kv.kv_bytes_per_sequence(kv.kv_bytes_per_token(*kv.REFERENCE_MODELS[name], 2), 4096)
    assert {gpu: kv.sequences_that_fit(memory, weights, sequence) for gpu, memory in kv.GPU_MEMORY.items()} == fits


def test_llama_2_fit_figures_by_hand() -> None:
    assert 80 * 10**9 - 13_476_831_232 == 66_523_168_768
    assert 30 * 2_147_483_648 <= 66_523_168_768 < 31 * 2_147_483_648
    assert 137_953_296_384 == 68_976_648_192 * 2 > 80 * 10**9  # the 70B weights alone overflow 80 GB
    assert 141 * 10**9 - 137_953_296_384 == 3_046_703_616
    assert 2 * 1_342_177_280 <= 3_046_703_616 < 3 * 1_342_177_280


def test_fit_report_prints_the_tested_figures(capsys) -> None:
    kv.print_sequences_that_fit()
    out = capsys.readouterr().out
    assert "Llama-2-7B: weights 13,476,831,232 bytes, one sequence's cache 2,147,483,648 bytes" in out
    assert "A100 80GB     80,000,000,000 bytes:  30 sequences (66,523,168,768 bytes free)" in out
    assert "H100 80GB     80,000,000,000 bytes:   0 sequences (the weights alone are 57,953,296,384 bytes too large)" in out
    assert "H200 141GB   141,000,000,000 bytes:   2 sequences (3,046,703,616 bytes free)" in out
