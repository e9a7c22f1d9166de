"""KV cache: greedy decoding with and without a cache, checked to agree, with the work each one does.

One tiny random-weight decoder, two ways to generate from it. The naive decoder pushes the whole
sequence through every layer at each step, as a model without a cache must. The cached decoder runs
the prompt through once (prefill), then pushes only the newest token and reuses each layer's stored
keys and values. Same weights and same forward code, so the logits must agree to rounding error.
Last, it prices one cached decode step of Llama-2 in bytes read: the weights once for the whole
batch, plus every sequence's cache, which outweighs the weights only once batch * context is large;
and it counts how many sequences' caches fit beside the weights in one GPU's memory.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import dataclass

import torch
from torch import Tensor

DTYPES = {"float64": torch.float64, "float32": torch.float32}
# Both paths add up the same products, but a one-row matmul and a many-row matmul may take
# different kernels and summation orders, so the logits may differ by rounding error and no more.
LOGIT_TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-4}
# Published configs (layers, KV heads, head_dim) whose bf16 cache the report prices.
REFERENCE_MODELS = {"Llama-2-7B": (32, 32, 128), "Llama-2-70B": (80, 8, 128)}
# Their weights: (parameters, vocab_size, hidden_size), from the same configs (tests check the counts).
REFERENCE_WEIGHTS = {"Llama-2-7B": (6_738_415_616, 32_000, 4_096),
                     "Llama-2-70B": (68_976_648_192, 32_000, 8_192)}
# GPU memory as the vendor datasheets state it, GB read as 10**9 bytes (tests cite the sheets). The
# CUDA context, the allocator and activations take a share of it that this budget leaves out.
GPU_MEMORY = {"A100 40GB": 40 * 10**9, "A100 80GB": 80 * 10**9, "H100 80GB": 80 * 10**9,
              "H200 141GB": 141 * 10**9}


@dataclass(frozen=True)
class Config:
    """Shape of the toy decoder and of the generation; defaults run in about a second."""

    vocab_size: int = 512
    hidden_dim: int = 128
    num_layers: int = 2
    num_heads: int = 4
    kv_heads: int = 4  # fewer than num_heads means GQA: a smaller cache
    prompt_len: int = 16
    new_tokens: int = 32
    dtype: str = "float64"
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.vocab_size, self.hidden_dim, self.num_layers, self.num_heads, self.kv_heads,
               self.prompt_len, self.new_tokens) < 1:
            raise ValueError("sizes and token counts must be positive")
        if self.hidden_dim % self.num_heads or self.num_heads % self.kv_heads:
            raise ValueError("num_heads must divide hidden_dim, kv_heads must divide num_heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_dim // self.num_heads


def kv_bytes_per_token(num_layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Return the cache cost of one token: a K and a V vector per layer and per KV head."""
    return 2 * num_layers * kv_heads * head_dim * dtype_bytes


def kv_bytes_per_sequence(kv_per_token: int, context: int) -> int:
    """Return one sequence's cache at `context` tokens: every cached token costs the same."""
    return context * kv_per_token


def held_weight_bytes(parameters: int, dtype_bytes: int) -> int:
    """Return the bytes the weights hold in memory: every parameter at the given precision."""
    return parameters * dtype_bytes


def sequences_that_fit(gpu_bytes: int, weight_bytes: int, sequence_bytes: int) -> int:
    """Return how many whole sequence caches fit in the memory the weights leave free (0 if they do not fit)."""
    return max(0, gpu_bytes - weight_bytes) // sequence_bytes


def naive_projection_rows(prompt_len: int, new_tokens: int) -> int:
    """Rows one projection of one layer sees without a cache: step i re-reads prompt_len + i tokens."""
    return new_tokens * prompt_len + new_tokens * (new_tokens - 1) // 2


def cached_projection_rows(prompt_len: int, new_tokens: int) -> int:
    """Rows with a cache: the prompt once, then each generated token but the last, once."""
    return prompt_len + new_tokens - 1


class TinyDecoder:
    """A pre-norm decoder with random weights: causal self-attention and an MLP per layer."""

    def __init__(self, config: Config) -> None:
        self.config = config
        g = torch.Generator().manual_seed(config.seed)
        dtype = DTYPES[config.dtype]
        d, kv_width = config.hidden_dim, config.kv_heads * config.head_dim

        def matrix(rows: int, cols: int) -> Tensor:
            return torch.randn(rows, cols, generator=g, dtype=dtype) / rows ** 0.5

        self.embed = torch.randn(config.vocab_size, d, generator=g, dtype=dtype)
        # Learned absolute positions: a cached step must know it sits at position len(cache).
        self.positions = torch.randn(config.prompt_len + config.new_tokens, d, generator=g, dtype=dtype)
        shapes = {"q_proj": (d, d), "k_proj": (d, kv_width), "v_proj": (d, kv_width),
                  "o_proj": (d, d), "up_proj": (d, 4 * d), "down_proj": (4 * d, d)}
        self.layers = [{name: matrix(*shape) for name, shape in shapes.items()}
                       for _ in range(config.num_layers)]
        self.lm_head = matrix(d, config.vocab_size)

    def forward(self, tokens: Tensor, start: int, cache: KVCache | None, rows: Counter) -> Tensor:
        """Run `tokens`, which sit at positions start.. in the sequence; return the last logits."""
        c = self.config
        n, heads, kv_heads, hd = len(tokens), c.num_heads, c.kv_heads, c.head_dim
        x = self.embed[tokens] + self.positions[start:start + n]
        # A query at position start + i may see keys 0 .. start + i: mask the keys after it.
        mask = torch.arange(start + n)[None, :] > torch.arange(start, start + n)[:, None]
        for layer, w in enumerate(self.layers):
            def project(h: Tensor, name: str) -> Tensor:
                rows[name] += h.shape[0]  # the instrument: every row through every projection
                return h @ w[name]

            h = rms_norm(x)
            # region attention
            q = project(h, "q_proj").view(n, heads, hd).transpose(0, 1)
            k = project(h, "k_proj").view(n, kv_heads, hd).transpose(0, 1)
            v = project(h, "v_proj").view(n, kv_heads, hd).transpose(0, 1)
            if cache is not None:
                k, v = cache.append(layer, k, v)  # now every token so far, new ones last
            # GQA: each K/V head serves heads // kv_heads query heads.
            k = k.repeat_interleave(heads // kv_heads, dim=0)
            v = v.repeat_interleave(heads // kv_heads, dim=0)
            scores = (q @ k.transpose(1, 2)) / hd ** 0.5  # (heads, n, start + n)
            # endregion
            attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
            x = x + project(attn.transpose(0, 1).reshape(n, c.hidden_dim), "o_proj")
            x = x + project(torch.nn.functional.gelu(project(rms_norm(x), "up_proj")), "down_proj")
        # Only the last position's logits pick the next token, in both decoders.
        return rms_norm(x[-1]) @ self.lm_head


def rms_norm(x: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)


# region decoders
class KVCache:
    """K and V of every token so far, per layer, each (kv_heads, tokens, head_dim)."""

    def __init__(self, num_layers: int) -> None:
        self.keys: list[Tensor | None] = [None] * num_layers
        self.values: list[Tensor | None] = [None] * num_layers

    def append(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new tokens' k and v to the layer's cache; return all it holds now."""
        if self.keys[layer] is not None:
            # cat copies the whole cache every step; servers preallocate or page it.
            k = torch.cat([self.keys[layer], k], dim=1)
            v = torch.cat([self.values[layer], v], dim=1)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def __len__(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[1]

    def nbytes(self) -> int:
        tensors = [t for t in self.keys + self.values if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)


@dataclass(frozen=True)
class Decode:
    """What one greedy generation produced and what it cost."""

    token_ids: list[int]
    logits: Tensor  # (new_tokens, vocab): the logits each token was picked from
    rows: Counter  # rows through each projection, summed over layers
    cache_bytes: list[int]  # cache size as each token was picked (naive: empty)


def decode_naive(model: TinyDecoder, prompt: Tensor, new_tokens: int) -> Decode:
    """Generate greedily, re-running the whole sequence, prompt included, every step."""
    rows, sequence, picked = Counter(), prompt.tolist(), []
    for _ in range(new_tokens):
        logits = model.forward(torch.tensor(sequence), start=0, cache=None, rows=rows)
        picked.append(logits)
        sequence.append(int(logits.argmax()))
    return Decode(sequence[len(prompt):], torch.stack(picked), rows, [])


def decode_cached(model: TinyDecoder, prompt: Tensor, new_tokens: int) -> Decode:
    """Generate greedily: prefill the prompt once, then feed only the newest token."""
    rows, generated, picked, sizes = Counter(), [], [], []
    cache = KVCache(model.config.num_layers)
    logits = model.forward(prompt, start=0, cache=cache, rows=rows)  # prefill
    for step in range(new_tokens):
        picked.append(logits)
        sizes.append(cache.nbytes())
        generated.append(int(logits.argmax()))
        if step + 1 < new_tokens:  # the last token is returned, never fed back
            token = torch.tensor([generated[-1]])
            logits = model.forward(token, start=len(cache), cache=cache, rows=rows)
    return Decode(generated, torch.stack(picked), rows, sizes)


def decode_step_bytes(weight_bytes: int, kv_per_token: int, batch: int, context: int) -> tuple[int, int]:
    """Return (weight bytes, KV cache bytes) one step reads for `batch` sequences of `context` tokens."""
    # One row per sequence: the batch shares a single pass over the weights, but every
    # sequence's query must read that sequence's own cached keys and values.
    return weight_bytes, batch * context * kv_per_token
# endregion


def kv_crossover_tokens(weight_bytes: int, kv_per_token: int) -> float:
    """Return the batch * context at which one step's cache read equals its weight read."""
    return weight_bytes / kv_per_token


def sequences_to_outweigh(weight_bytes: int, sequence_bytes: int) -> int:
    """Return the fewest sequences whose caches together hold more bytes than the weights."""
    return weight_bytes // sequence_bytes + 1


def race(model: TinyDecoder, prompt: Tensor, repeats: int) -> tuple[Decode, Decode, float, float]:
    """Run both decoders `repeats` times, alternating so a busy machine slows both alike; keep the best."""
    best = {decode_naive: float("inf"), decode_cached: float("inf")}
    results = {}
    for _ in range(repeats):
        for decode in best:
            began = time.perf_counter()
            results[decode] = decode(model, prompt, model.config.new_tokens)
            best[decode] = min(best[decode], time.perf_counter() - began)
    return results[decode_naive], results[decode_cached], best[decode_naive], best[decode_cached]


def print_report(config: Config, repeats: int) -> None:
    """Decode both ways, assert they agree and cost what the formulas say, and print the figures."""
    model = TinyDecoder(config)
    prompt = torch.randint(config.vocab_size, (config.prompt_len,),
                           generator=torch.Generator().manual_seed(config.seed + 1))
    P, T, L = config.prompt_len, config.new_tokens, config.num_layers
    dtype_bytes = model.embed.element_size()
    print(f"model: {L} layers, d={config.hidden_dim}, {config.num_heads} heads, "
          f"{config.kv_heads} KV heads, head_dim {config.head_dim}, vocab {config.vocab_size}, "
          f"{config.dtype}, seed {config.seed}")
    print(f"prompt: {P} tokens; generating {T} greedily")

    naive, cached, naive_s, cached_s = race(model, prompt, repeats)

    per_token = kv_bytes_per_token(L, config.kv_heads, config.head_dim, dtype_bytes)
    print(f"\ncache when each token is picked (prefill stored the {P} prompt tokens)")
    for step, (token, size) in enumerate(zip(cached.token_ids, cached.cache_bytes), start=1):
        print(f"  step {step:>2}: next token {token:>4}, cache {P + step - 1:>3} tokens, {size:,} bytes")
        assert size == (P + step - 1) * per_token
    assert all(b - a == per_token for a, b in zip(cached.cache_bytes, cached.cache_bytes[1:]))
    print(f"  growth per token: {per_token:,} bytes = 2 (K and V) * {L} layers * "
          f"{config.kv_heads} KV heads * {config.head_dim} head_dim * {dtype_bytes} bytes")

    tolerance = LOGIT_TOLERANCE[DTYPES[config.dtype]]
    max_diff = (naive.logits - cached.logits).abs().max().item()
    assert naive.token_ids == cached.token_ids, "the two decoders picked different tokens"
    assert max_diff <= tolerance, max_diff
    print("\nparity")
    print(f"  generated token ids: identical ({T} of {T})")
    print(f"  max |logit difference|: {max_diff:.1e} (tolerance {tolerance:.0e} for {config.dtype})")

    naive_rows, cached_rows = L * naive_projection_rows(P, T), L * cached_projection_rows(P, T)
    # Every projection sees the same rows: the naive loop re-runs the whole forward pass.
    assert set(naive.rows.values()) == {naive_rows}, naive.rows
    assert set(cached.rows.values()) == {cached_rows}, cached.rows
    # Two matrices (K and V) of d x kv_width, 2 FLOPs per multiply-add, for every row.
    kv_flops_per_row = 2 * (2 * config.hidden_dim * config.kv_heads * config.head_dim)
    naive_flops, cached_flops = naive_rows * kv_flops_per_row, cached_rows * kv_flops_per_row
    print(f"\nprojection work over {T} steps (rows counted in forward, summed over layers)")
    print(f"  naive rows per projection: {naive_rows:,} = {L} * ({T}*{P} + {T}*{T - 1}/2), quadratic in T")
    print(f"  cached rows per projection: {cached_rows:,} = {L} * ({P} + {T} - 1), linear in T")
    print(f"  k/v projection FLOPs: naive {naive_flops:,}, cached {cached_flops:,} "
          f"({naive_flops / cached_flops:.2f}x fewer)")

    print("\nwall time (this machine)")
    print(f"  naive decode: {naive_s * 1e3:.1f} ms")
    print(f"  cached decode: {cached_s * 1e3:.1f} ms")
    print(f"  speedup: {naive_s / cached_s:.1f}x")

    print("\nreference: KV cache of Llama-2 models in bf16 (2 bytes)")
    for name, (layers, kv_heads, head_dim) in REFERENCE_MODELS.items():
        per = kv_bytes_per_token(layers, kv_heads, head_dim, 2)
        print(f"  {name} ({layers} layers, {kv_heads} KV heads, head_dim {head_dim}): "
              f"{per:,} bytes per token")
        for context in (2048, 4096):
            sequence = kv_bytes_per_sequence(per, context)
            print(f"    {context:,} tokens: {sequence:,} bytes ({sequence / 2**30:.2f} GiB)")
    print_decode_step_reads()
    print_sequences_that_fit()


def print_decode_step_reads(batches: tuple[int, ...] = (1, 8, 32),
                            contexts: tuple[int, ...] = (2048, 4096)) -> None:
    """Price one bf16 decode step of the Llama-2 models in bytes read, and assert the closed forms."""
    print("\nreference: bytes one bf16 decode step reads (each weight and cached byte once; "
          "activations and the new token's K/V write left out)")
    for name, (params, vocab, hidden) in REFERENCE_WEIGHTS.items():
        per = kv_bytes_per_token(*REFERENCE_MODELS[name], 2)
        held = held_weight_bytes(params, 2)
        # The input embedding is a lookup: a step gathers one row per sequence, not the whole table.
        weights = (params - vocab * hidden) * 2
        print(f"  {name}: weights held {held:,} bytes ({held / 2**30:.2f} GiB); read per step "
              f"{weights:,} (all but the {vocab:,} x {hidden:,} input embedding)")
        print(f"    {'batch':>5} {'context':>7} {'tokens':>7} {'KV read':>16} {'step total':>16} "
              f"{'KV share':>8}")
        crossover = kv_crossover_tokens(weights, per)
        for batch in batches:
            for context in contexts:
                weight_read, kv_read = decode_step_bytes(weights, per, batch, context)
                assert weight_read == weights and kv_read == batch * context * per
                share = kv_read / (weight_read + kv_read)
                assert (share > 0.5) == (batch * context > crossover)
                print(f"    {batch:>5} {context:>7,} {batch * context:>7,} {kv_read:>16,} "
                      f"{weight_read + kv_read:>16,} {share:>8.1%}")
        first = int(crossover) + 1  # the smallest batch * context whose cache read is the larger
        assert (first - 1) * per <= weights < first * per
        print(f"    the KV read overtakes the weights at batch * context = {weights:,} / {per:,} "
              f"= {crossover:,.2f} tokens, i.e. from {first:,} tokens on")
        if name == "Llama-2-7B":
            sequence = kv_bytes_per_sequence(per, 4096)
            n = sequences_to_outweigh(held, sequence)
            assert (n - 1) * sequence <= held < n * sequence
            print(f"    4,096-token sequences whose caches outweigh the weights held: {n} "
                  f"({n} * {sequence:,} = {n * sequence:,} > {held:,} > "
                  f"{(n - 1) * sequence:,} = {n - 1} * {sequence:,})")


def print_sequences_that_fit(context: int = 4096) -> None:
    """Count the sequences whose bf16 caches fit beside the bf16 Llama-2 weights on each GPU."""
    print(f"\nreference: {context:,}-token sequences whose bf16 caches fit beside the bf16 weights "
          "(datasheet GB = 10^9 bytes; CUDA context and activations left out)")
    for name, (params, _, _) in REFERENCE_WEIGHTS.items():
        weights = held_weight_bytes(params, 2)
        sequence = kv_bytes_per_sequence(kv_bytes_per_token(*REFERENCE_MODELS[name], 2), context)
        print(f"  {name}: weights {weights:,} bytes, one sequence's cache {sequence:,} bytes")
        for gpu, memory in GPU_MEMORY.items():
            n, free = sequences_that_fit(memory, weights, sequence), memory - weights
            if free < 0:
                assert n == 0
                why = f"the weights alone are {-free:,} bytes too large"
            else:
                assert n * sequence <= free < (n + 1) * sequence
                why = f"{free:,} bytes free"
            print(f"    {gpu:<10} {memory:>17,} bytes: {n:>3} sequences ({why})")


def parse_args(argv: list[str] | None = None) -> tuple[Config, int]:
    """Turn command-line flags into a Config and a repeat count, reporting bad shapes as usage errors."""
    defaults = Config()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in ("vocab_size", "hidden_dim", "num_layers", "num_heads", "kv_heads",
                  "prompt_len", "new_tokens", "seed"):
        parser.add_argument("--" + field.replace("_", "-"), type=int, default=getattr(defaults, field))
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=defaults.dtype)
    parser.add_argument("--repeats", type=int, default=3, help="time each decoder this often, keep the best")
    args = vars(parser.parse_args(argv))
    repeats = max(1, args.pop("repeats"))
    try:
        return Config(**args), repeats
    except ValueError as error:
        parser.error(str(error))


if __name__ == "__main__":
    # Matmuls this small gain nothing from a thread pool, and on a busy machine its spinning
    # workers slow every operator down; one thread keeps both timings honest.
    torch.set_num_threads(1)
    print_report(*parse_args())
