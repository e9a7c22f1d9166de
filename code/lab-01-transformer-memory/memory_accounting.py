"""Memory ledger of a decoder-only transformer: a rough estimate checked against an exact count.

The rough estimate is back-of-envelope arithmetic (4d^2 attention + m*d^2 MLP per layer, plus the
embedding). The exact count builds a Llama-style decoder on PyTorch's `meta` device, where tensors
have shapes but no storage. Training state is priced by a recipe, bytes per parameter for each copy
kept: the default is mixed-precision Adam (16 B/param, ZeRO paper sec. 3.1), printed next to a 12 B
recipe without an fp32 master copy and an 18 B one with fp32 gradients. Defaults describe Llama-2-7B.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
from torch import nn

# Llama rounds the SwiGLU width up to a multiple of 256 (its `multiple_of`).
FFN_ROUNDING = 256
PRECISION_NAMES = {1: "8-bit", 2: "bf16", 4: "fp32"}


@dataclass(frozen=True)
class Recipe:
    """What training keeps for every parameter, in bytes, and the total the recipe is known by."""

    total: int  # bytes per parameter; the parts below must add up to it
    weights: int  # the 16-bit copy that forward and backward read
    grads: int  # one gradient per weight, held until the optimizer step
    master: int  # fp32 copy of the weights that the optimizer updates; 0 means none
    moments: int  # Adam's exp_avg and exp_avg_sq, 4 bytes each in fp32
    keeps: str  # the recipe in words

    def parts(self) -> dict[str, int]:
        """Return bytes per parameter of each copy kept, labelled with its precision."""
        return {f"weights ({PRECISION_NAMES[self.weights]})": self.weights,
                f"gradients ({PRECISION_NAMES[self.grads]})": self.grads,
                "master weights (fp32)": self.master,
                "Adam moments (fp32)": self.moments}


RECIPES = {
    "bf16-no-master": Recipe(12, weights=2, grads=2, master=0, moments=8, keeps=(
        "pure-bf16 training with fp32 optimizer state: with no master copy, every update is "
        "rounded to bf16 and small ones are lost (see below)")),
    "mixed-precision": Recipe(16, weights=2, grads=2, master=4, moments=8, keeps=(
        "mixed-precision Adam (ZeRO paper, sec. 3.1): 16-bit weights 2 + grads 2 + optimizer "
        "K = 12 (fp32 master weights, momentum, variance)")),
    "fp32-grads": Recipe(18, weights=2, grads=4, master=4, moments=8, keeps=(
        "mixed-precision Adam with gradients accumulated in fp32, Megatron-LM's 18 bytes")),
}


# Published shapes (each model's config.json): `--model` starts from one; the page's calculator
# offers them as presets.
PUBLISHED = {
    "Llama-2-7B": dict(hidden_dim=4096, num_layers=32, num_heads=32, kv_heads=32, vocab_size=32000, ffn_dim=11008),
    "Llama-3-8B": dict(hidden_dim=4096, num_layers=32, num_heads=32, kv_heads=8, vocab_size=128256, ffn_dim=14336),
    "Mistral-7B": dict(hidden_dim=4096, num_layers=32, num_heads=32, kv_heads=8, vocab_size=32000, ffn_dim=14336),
    "Llama-2-70B": dict(hidden_dim=8192, num_layers=80, num_heads=64, kv_heads=8, vocab_size=32000, ffn_dim=28672),
}


@dataclass(frozen=True)
class Config:
    """Model shape and workload; the defaults are Llama-2-7B with mixed-precision Adam."""

    hidden_dim: int = 4096
    num_layers: int = 32
    num_heads: int = 32
    kv_heads: int = 32  # fewer than num_heads means grouped-query attention (GQA)
    vocab_size: int = 32000
    ffn_multiplier: float = 8.0  # the "m" in m * d^2 for the MLP of one layer
    ffn_dim: int | None = None  # exact SwiGLU width; None derives it from ffn_multiplier
    tied_embeddings: bool = False  # Llama-2 keeps a separate lm_head
    seq_len: int = 4096
    batch_size: int = 1
    recipe: str = "mixed-precision"  # a key of RECIPES: what training keeps per parameter
    precision_bytes: int = 2  # each KV cache element (2 = bf16)

    def __post_init__(self) -> None:
        sizes = (self.hidden_dim, self.num_layers, self.num_heads, self.kv_heads, self.vocab_size,
                 self.seq_len, self.batch_size, self.precision_bytes)
        if min(sizes) < 1:
            raise ValueError("sizes, counts and precision_bytes must be positive")
        if self.recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {', '.join(RECIPES)}")
        if self.hidden_dim % self.num_heads:
            raise ValueError("hidden_dim must be divisible by num_heads")
        if self.num_heads % self.kv_heads:
            raise ValueError("num_heads must be a multiple of kv_heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_dim // self.num_heads

    @property
    def intermediate_dim(self) -> int:
        """Return the SwiGLU width: the explicit one, or Llama's rule applied to the multiplier."""
        if self.ffn_dim is not None:
            return self.ffn_dim
        # Three d x f matrices hold m * d^2 weights when f = m * d / 3; Llama then rounds f up.
        width = int(self.ffn_multiplier * self.hidden_dim / 3)
        return -(-width // FFN_ROUNDING) * FFN_ROUNDING


@dataclass(frozen=True)
class Ledger:
    """The rough estimate: parameter counts per piece and the bytes they turn into."""

    attention_per_layer: int  # parameters in Q, K, V and O of one layer
    ffn_per_layer: int  # parameters in the MLP of one layer
    embedding_params: int  # token embedding table
    total_params: int
    param_bytes: int  # weights in training precision
    grad_bytes: int  # one gradient per weight
    master_bytes: int  # fp32 master copy of the weights, if the recipe keeps one
    adam_bytes: int  # optimizer moments
    kv_bytes_per_token: int  # K and V for one token across all layers
    kv_cache_bytes: int  # KV cache for the whole batch at full sequence length

    @property
    def training_bytes(self) -> int:
        return self.param_bytes + self.grad_bytes + self.master_bytes + self.adam_bytes


def estimate_memory(config: Config) -> Ledger:
    """Return the back-of-envelope ledger for one unsharded model replica."""
    # region ledger
    d, layers = config.hidden_dim, config.num_layers
    # Q, K, V and O: four d x d matrices whatever the head split (assumes kv_heads == heads).
    attention_per_layer = 4 * d * d
    # The MLP folded into one multiplier: m = 8 for a 4d-wide MLP or its SwiGLU equivalent.
    ffn_per_layer = round(config.ffn_multiplier * d * d)
    embedding_params = config.vocab_size * d
    total_params = layers * (attention_per_layer + ffn_per_layer) + embedding_params

    # Training state is a price per parameter, one term per copy the recipe keeps.
    recipe = RECIPES[config.recipe]
    param_bytes = total_params * recipe.weights
    # Backward produces one gradient per weight, held until the optimizer step.
    grad_bytes = total_params * recipe.grads
    # The optimizer updates an fp32 copy of each weight, so small steps are not rounded away.
    master_bytes = total_params * recipe.master
    # Adam keeps two running moments per weight, in fp32 even when the weights are bf16.
    adam_bytes = total_params * recipe.moments

    # Every cached token keeps one K and one V vector per layer and per KV head.
    kv_bytes_per_token = 2 * layers * config.kv_heads * config.head_dim * config.precision_bytes
    kv_cache_bytes = config.batch_size * config.seq_len * kv_bytes_per_token
    return Ledger(attention_per_layer, ffn_per_layer, embedding_params, total_params,
                  param_bytes, grad_bytes, master_bytes, adam_bytes, kv_bytes_per_token,
                  kv_cache_bytes)


def exact_parameter_count(config: Config) -> int:
    """Return the exact number of parameters; a tied weight is counted once."""
    # The real module tree, built on the meta device: every tensor it would allocate, counted.
    return sum(p.numel() for p in build_decoder(config).parameters())
# endregion


class DecoderLayer(nn.Module):
    """One Llama block: RMSNorm, attention, RMSNorm, SwiGLU MLP, all projections bias-free."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        d, f = config.hidden_dim, config.intermediate_dim
        # With GQA, K and V project to fewer heads than Q; this is where they shrink.
        kv_width = config.kv_heads * config.head_dim
        self.input_norm = nn.RMSNorm(d)
        self.self_attn = nn.ModuleDict({
            "q_proj": nn.Linear(d, d, bias=False),
            "k_proj": nn.Linear(d, kv_width, bias=False),
            "v_proj": nn.Linear(d, kv_width, bias=False),
            "o_proj": nn.Linear(d, d, bias=False),
        })
        self.post_attention_norm = nn.RMSNorm(d)
        # SwiGLU has three matrices where a classic MLP has two: gate and up widen, down narrows.
        self.mlp = nn.ModuleDict({
            "gate_proj": nn.Linear(d, f, bias=False),
            "up_proj": nn.Linear(d, f, bias=False),
            "down_proj": nn.Linear(f, d, bias=False),
        })


class Decoder(nn.Module):
    """Parameter skeleton of a Llama-style decoder; no forward(), since only shapes matter here."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        # Wrapping an empty table skips nn.Embedding's random init, the one slow step on meta.
        table = torch.empty(config.vocab_size, config.hidden_dim)
        self.embed_tokens = nn.Embedding.from_pretrained(table, freeze=False)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = nn.RMSNorm(config.hidden_dim)
        self.lm_head = nn.Linear(config.hidden_dim, config.vocab_size, bias=False)
        if config.tied_embeddings:
            self.lm_head.weight = self.embed_tokens.weight


def build_decoder(config: Config) -> Decoder:
    """Build the decoder on the meta device, so a 7B model costs no memory at all."""
    with torch.device("meta"):
        return Decoder(config)


def parameter_breakdown(config: Config) -> dict[str, int]:
    """Return exact parameter counts grouped into embedding, attention, mlp, norms and lm_head."""
    module_groups = {"embed_tokens": "embedding", "self_attn": "attention", "mlp": "mlp",
                      "lm_head": "lm_head"}
    groups = dict.fromkeys(["embedding", "attention", "mlp", "norms", "lm_head"], 0)
    # named_parameters() skips a tied lm_head.weight, so lm_head reads 0 when tied.
    for name, param in build_decoder(config).named_parameters():
        path = name.split(".")
        group = next((g for module, g in module_groups.items() if module in path), "norms")
        groups[group] += param.numel()
    return groups


def explain_gap(config: Config, ledger: Ledger, parts: dict[str, int]) -> dict[str, int]:
    """Return exact minus rough for each piece the rough estimate simplifies."""
    layers = config.num_layers
    # No embedding term: both counts use vocab * d, and the caller's assert checks they agree.
    return {
        "lm_head (the rough count has none)": parts["lm_head"],
        "attention (K/V narrower than d under GQA)":
            parts["attention"] - layers * ledger.attention_per_layer,
        "SwiGLU 3 * d * ffn_dim vs m * d^2": parts["mlp"] - layers * ledger.ffn_per_layer,
        "RMSNorm weights (the rough count has none)": parts["norms"],
    }


def print_report(config: Config) -> None:
    """Print the rough ledger next to the exact count and say where they disagree."""
    ledger = estimate_memory(config)
    exact = exact_parameter_count(config)
    parts = parameter_breakdown(config)
    gap_terms = explain_gap(config, ledger, parts)
    gap = exact - ledger.total_params
    assert exact == sum(parts.values()), "the breakdown must cover every parameter"
    assert gap == sum(gap_terms.values()), "the gap terms must explain the whole gap"

    dtype = PRECISION_NAMES.get(config.precision_bytes, f"{config.precision_bytes}-byte")
    rounding = f"m * d / 3 rounded up to a multiple of {FFN_ROUNDING}"
    print(f"model: d={config.hidden_dim}, layers={config.num_layers}, heads={config.num_heads}, "
          f"kv_heads={config.kv_heads}, head_dim={config.head_dim}, vocab={config.vocab_size}, "
          f"{'tied' if config.tied_embeddings else 'untied'} lm_head")
    print(f"  ffn_dim={config.intermediate_dim} "
          f"({'given' if config.ffn_dim is not None else rounding})")
    print("\nparameters")
    print(f"  rough estimate, (4 + {config.ffn_multiplier:g}) * d^2 per layer + vocab * d: "
          f"{ledger.total_params:,}")
    print(f"  exact parameters: {exact:,}")
    print(f"  exact - rough: {gap:+,} ({gap / exact:+.2%} of exact), made of:")
    for label, value in gap_terms.items():
        print(f"    {label}: {value:+,}")
    print("  exact breakdown: " + ", ".join(f"{k} {v:,}" for k, v in parts.items()))

    print_training_state(config, ledger, exact)
    print_recipes(exact, config.recipe)
    print_master_copy_demo()

    print(f"\ninference KV cache ({dtype})")
    print(f"  kv cache per token: {ledger.kv_bytes_per_token:,} bytes")
    total = ledger.kv_cache_bytes
    print(f"  kv cache for {config.batch_size} x {config.seq_len:,} tokens: {total:,} bytes "
          f"({total / 1e9:.2f} GB, {total / 2**30:.2f} GiB)")


def print_training_state(config: Config, ledger: Ledger, exact: int) -> None:
    """Print the recipe's bytes for each copy it keeps, at the exact and at the rough count."""
    recipe = RECIPES[config.recipe]
    rough = (ledger.param_bytes, ledger.grad_bytes, ledger.master_bytes, ledger.adam_bytes)
    rows = [(*part, bytes_) for part, bytes_ in zip(recipe.parts().items(), rough)]
    rows.append(("total training state", recipe.total, ledger.training_bytes))
    assert ledger.training_bytes == recipe.total * ledger.total_params
    print(f"\ntraining state, recipe {config.recipe}: {recipe.total} B/param")
    print(f"{'':<24}{'B/param':>8}{'exact':>12}{'rough':>12}")
    for label, per_param, rough_bytes in rows:
        print(f"  {label:<22}{per_param:>8}{exact * per_param / 1e9:>9.2f} GB"
              f"{rough_bytes / 1e9:>9.2f} GB")
    print("  not counted: activations, temporary buffers, communication buckets, fragmentation")


def print_recipes(params: int, chosen: str) -> None:
    """Print every recipe side by side: what it keeps per parameter and what that costs here."""
    print(f"\ntraining-state recipes at the exact count, {params:,} parameters")
    for name, recipe in RECIPES.items():
        parts = recipe.parts()
        assert sum(parts.values()) == recipe.total, f"{name}: the parts must add up to {recipe.total}"
        total = params * recipe.total
        kept = " + ".join(f"{label} {per_param}" for label, per_param in parts.items() if per_param)
        print(f"  {recipe.total} B/param, {name}{' (used above)' if name == chosen else ''}: {kept}")
        print(f"    = {total:,} bytes ({total / 1e9:.2f} GB, {total / 2**30:.2f} GiB)")
        print(f"    {recipe.keeps}")


def print_master_copy_demo(steps: int = 10, step: float = 1e-3) -> None:
    """Show why recipes keep an fp32 master copy: small updates to a bf16 weight round away."""
    in_bf16 = torch.ones((), dtype=torch.bfloat16)  # a weight of 1.0, where RMSNorm gains start
    master = torch.ones((), dtype=torch.float32)
    for _ in range(steps):
        in_bf16 += step  # under half of bf16's spacing at 1.0, so it rounds back to 1.0
        master += step
    spacing = torch.finfo(torch.bfloat16).eps  # gap between 1.0 and the next bf16 value
    print(f"\nwhy the fp32 master copy: {steps} updates of +{step:g} to a weight of 1.0")
    print(f"  applied to the bf16 weight (no master copy): {in_bf16.item()} "
          f"(bf16 spacing above 1.0 is {spacing})")
    print(f"  applied to an fp32 master copy: {master.item():.4f}, "
          f"whose bf16 copy reads {master.to(torch.bfloat16).item()}")
    assert in_bf16.item() == 1.0 and abs(master.item() - (1 + steps * step)) < 1e-6


def parse_config(argv: list[str] | None = None) -> Config:
    """Turn command-line flags into a Config, reporting bad shapes as usage errors."""
    defaults = Config()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=PUBLISHED, help="start from a published config; other flags still apply")
    parser.add_argument("--hidden-dim", type=int, default=defaults.hidden_dim)
    parser.add_argument("--num-layers", type=int, default=defaults.num_layers)
    parser.add_argument("--num-heads", type=int, default=defaults.num_heads)
    parser.add_argument("--kv-heads", type=int, default=defaults.kv_heads,
                        help="K/V heads; below --num-heads means GQA, 1 means MQA")
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size)
    parser.add_argument("--ffn-multiplier", type=float, default=defaults.ffn_multiplier,
                        help="m in the rough m * d^2 MLP estimate")
    parser.add_argument("--ffn-dim", type=int, default=None,
                        help="exact SwiGLU width (default: m * d / 3 rounded up to 256)")
    parser.add_argument("--tied-embeddings", action="store_true",
                        help="share the embedding table with the lm_head")
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--recipe", choices=RECIPES, default=defaults.recipe,
                        help="training state kept per parameter: 12, 16 or 18 bytes")
    parser.add_argument("--precision-bytes", type=int, default=defaults.precision_bytes,
                        help="bytes per KV cache element (2 = bf16)")
    model = parser.parse_known_args(argv)[0].model
    if model:  # the model's shape replaces the defaults, and flags given with it still win
        parser.set_defaults(**PUBLISHED[model])
    try:
        return Config(**{k: v for k, v in vars(parser.parse_args(argv)).items() if k != "model"})
    except ValueError as error:
        parser.error(str(error))


if __name__ == "__main__":
    print_report(parse_config())
