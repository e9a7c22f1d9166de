"""Paged KV cache: a block pool with per-request block tables, against contiguous reservation.

A pool of fixed-size physical blocks holds K and V for every request. Each request owns a block
table (logical block -> physical block) and takes a new block only when its last one is full, so
at most one partly filled block per request is wasted. Requests whose prompts start with the
same tokens share those full blocks, counted by reference. A seeded simulation compares this
with contiguous allocation, which reserves `max_seq_len` slots per request up front, and checks
that attention read through the block tables equals attention over contiguous caches.
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Config:
    """Workload and cache shape; the defaults run in a few seconds."""

    num_requests: int = 64
    block_size: int = 16  # tokens per block, vLLM's default on GPUs
    max_seq_len: int = 2048  # what contiguous allocation reserves for every request
    shared_prefix: int = 100  # a system prompt that every other request starts with
    arrival_gap: int = 8  # decode steps between two arrivals
    budget_tokens: int = 16384  # the fixed memory budget, in token slots
    kv_heads: int = 2
    head_dim: int = 16
    vocab_size: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        sizes = (self.num_requests, self.block_size, self.kv_heads, self.head_dim,
                 self.vocab_size, self.budget_tokens)
        if min(sizes) < 1 or min(vars(self).values()) < 0:
            raise ValueError("sizes must be positive")
        if self.max_seq_len % self.block_size or self.shared_prefix + 1 >= self.max_seq_len // 2:
            raise ValueError("max_seq_len must be a multiple of block_size and leave room "
                             "for prompts longer than shared_prefix")


@dataclass(frozen=True)
class Request:
    rid: int
    arrival: int  # the decode step at which it is admitted
    prompt_len: int
    tokens: tuple[int, ...]  # the prompt, then the output a model would generate


class OutOfBlocks(Exception):
    """The pool has no free block left."""


# region allocator
class PagedKVCache:
    """Fixed-size K/V blocks, a free list, refcounts and one block table per request."""

    def __init__(self, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 share_prefixes: bool = True) -> None:
        # pool[0] holds K, pool[1] holds V: each (num_blocks, block_size, kv_heads, head_dim).
        self.pool = torch.zeros(2, num_blocks, block_size, kv_heads, head_dim)
        self.num_blocks, self.block_size = num_blocks, block_size
        self.share_prefixes = share_prefixes
        self.free = list(range(num_blocks - 1, -1, -1))  # pop() hands out block 0 first
        self.refcount = [0] * num_blocks
        self.tables: dict[int, list[int]] = {}  # request -> physical block per logical block
        self.tokens: dict[int, list[int]] = {}  # request -> token ids stored so far
        # A full block is found by the whole prefix it ends, not by its own tokens alone:
        # K and V depend on position and on everything before them.
        self.prefix_index: dict[tuple[int, ...], int] = {}
        self.block_key: dict[int, tuple[int, ...]] = {}

    def allocate(self) -> int:
        if not self.free:
            raise OutOfBlocks
        block = self.free.pop()
        self.refcount[block] = 1
        return block

    def add_request(self, rid: int, prompt: list[int]) -> int:
        """Admit a request with the cached full blocks of its prompt; return their token count."""
        table = self.tables[rid] = []
        # Only full blocks are shared. A partial block is still being written, so sharing it
        # would need copy-on-write; a shared prompt's tail is recomputed into a private block.
        for end in range(self.block_size, len(prompt) + 1, self.block_size):
            block = self.prefix_index.get(tuple(prompt[:end])) if self.share_prefixes else None
            if block is None:
                break
            self.refcount[block] += 1
            table.append(block)
        self.tokens[rid] = list(prompt[:len(table) * self.block_size])
        return len(self.tokens[rid])

    def append_token(self, rid: int, token: int, kv: Tensor) -> None:
        """Store one token's K and V, (2, kv_heads, head_dim); a new block only when needed."""
        table, tokens = self.tables[rid], self.tokens[rid]
        slot = len(tokens) % self.block_size
        if slot == 0:
            table.append(self.allocate())
        block = table[-1]
        assert self.refcount[block] == 1, "shared blocks are full, so no write reaches one"
        self.pool[:, block, slot] = kv
        tokens.append(token)
        if slot == self.block_size - 1 and self.share_prefixes:  # just filled: shareable
            key = tuple(tokens)
            if key not in self.prefix_index:
                self.prefix_index[key], self.block_key[block] = block, key

    def free_request(self, rid: int) -> None:
        """Drop a finished request; a block is free again once no table holds it."""
        for block in self.tables.pop(rid):
            self.refcount[block] -= 1
            if self.refcount[block] == 0:
                # vLLM keeps such blocks as an evictable cache; this sketch forgets them.
                key = self.block_key.pop(block, None)
                if key is not None:
                    del self.prefix_index[key]
                self.free.append(block)
        del self.tokens[rid]

    def check_invariants(self) -> None:
        holders = Counter(block for table in self.tables.values() for block in table)
        used = {block for block, count in enumerate(self.refcount) if count > 0}
        # A block sits in two tables only if its refcount says it is shared.
        assert holders == Counter({b: self.refcount[b] for b in used}), "refcounts"
        assert len(set(self.free)) == len(self.free), "a block is twice in the free list"
        assert used.isdisjoint(self.free), "a block is both free and in use"
        assert len(self.free) + len(used) == self.num_blocks, "free + used must be the pool"
        for rid, table in self.tables.items():
            n = len(self.tokens[rid])
            assert len(table) == blocks_per_sequence(n, self.block_size), "one per started block"
            assert n % self.block_size == 0 or self.refcount[table[-1]] == 1, "shared partial"

    def wasted_slots(self) -> int:
        """Empty slots in allocated blocks: only in each request's last, unshared block."""
        return sum(-len(tokens) % self.block_size for tokens in self.tokens.values())

    def gather(self, rid: int) -> Tensor:
        """Read K and V through the block table, in token order: (2, tokens, heads, head_dim)."""
        blocks, n = torch.tensor(self.tables[rid]), len(self.tokens[rid])
        return self.pool[:, blocks].flatten(1, 2)[:, :n]
# endregion


# What the page's calculator computes, for sequences that all have the same length. The report
# checks each function against the block tables the simulation held when a request finished.
def blocks_per_sequence(seq_len: int, block_size: int) -> int:
    """Blocks a sequence holds: one per started block, ceil(seq_len / block_size)."""
    return -(-seq_len // block_size)


def slots_wasted(seq_len: int, block_size: int) -> int:
    """Empty token slots in the sequence's last block, the only partly filled one."""
    return blocks_per_sequence(seq_len, block_size) * block_size - seq_len


def paged_waste_fraction(seq_len: int, block_size: int) -> float:
    """The fraction of a paged sequence's allocated slots that hold no token."""
    slots = blocks_per_sequence(seq_len, block_size) * block_size
    return slots_wasted(seq_len, block_size) / slots


def contiguous_waste_fraction(seq_len: int, max_seq_len: int) -> float:
    """The fraction of a max_seq_len reservation that a sequence of seq_len tokens leaves empty."""
    if not 1 <= seq_len <= max_seq_len:
        raise ValueError("a contiguous reservation holds between 1 and max_seq_len tokens")
    return (max_seq_len - seq_len) / max_seq_len


def bytes_freed_by_paging(seq_len: int, block_size: int, max_seq_len: int,
                          kv_bytes_per_token: int, num_seqs: int = 1) -> int:
    """Bytes that reserving max_seq_len per sequence holds beyond the sequences' paged blocks."""
    contiguous_waste_fraction(seq_len, max_seq_len)  # the sequences must fit their reservation
    slots = max_seq_len - blocks_per_sequence(seq_len, block_size) * block_size
    return num_seqs * slots * kv_bytes_per_token


class StandInModel:
    """K and V for a token at a position, from fixed random tables.

    A real model's K and V at position p depend on all tokens up to p; these depend on the token
    and p only. Either way equal prefixes give equal K and V, which is all prefix sharing needs.
    """

    def __init__(self, config: Config) -> None:
        g = torch.Generator().manual_seed(config.seed)
        shape = (2, config.kv_heads, config.head_dim)  # K and V
        self.by_token = torch.randn(config.vocab_size, *shape, generator=g)
        self.by_position = torch.randn(config.max_seq_len, *shape, generator=g)

    def kv(self, tokens: list[int], positions: list[int]) -> Tensor:
        """Return (len(tokens), 2, kv_heads, head_dim): one K and one V per token."""
        return self.by_token[tokens] + self.by_position[positions]

    def contiguous_cache(self, tokens: list[int], max_seq_len: int) -> Tensor:
        """Build the reference: a (2, max_seq_len, kv_heads, head_dim) slab, filled in front."""
        slab = torch.zeros(2, max_seq_len, *self.by_token.shape[2:])
        slab[:, :len(tokens)] = self.kv(tokens, list(range(len(tokens)))).transpose(0, 1)
        return slab


def prefill(cache: PagedKVCache, model: StandInModel, rid: int, tokens: list[int]) -> None:
    """Compute K and V for tokens after those already cached, and store them one by one."""
    start = len(cache.tokens[rid])
    for token, kv in zip(tokens, model.kv(tokens, list(range(start, start + len(tokens))))):
        cache.append_token(rid, token, kv)


def attention(q: Tensor, kv: Tensor) -> Tensor:
    """One decode query per KV head, q (heads, head_dim), over kv (2, tokens, heads, head_dim)."""
    scores = torch.einsum("hd,nhd->hn", q, kv[0]) / q.shape[-1] ** 0.5
    return torch.einsum("hn,nhd->hd", torch.softmax(scores, dim=-1), kv[1])


def make_requests(config: Config) -> list[Request]:
    """Draw prompt and output lengths from long-tailed distributions; half share a prefix."""
    c, rng = config, random.Random(config.seed)
    system = [rng.randrange(c.vocab_size) for _ in range(c.shared_prefix)]
    requests = []
    for rid in range(c.num_requests):
        prefix = system if rid % 2 == 0 else []
        body = max(1, min(round(rng.lognormvariate(math.log(200), 0.8)), c.max_seq_len // 2))
        prompt_len = min(len(prefix) + body, c.max_seq_len - 1)
        output_len = round(rng.lognormvariate(math.log(200), 0.8))
        output_len = max(1, min(output_len, c.max_seq_len - prompt_len))
        drawn = [rng.randrange(c.vocab_size) for _ in range(prompt_len + output_len - len(prefix))]
        requests.append(Request(rid, rid * c.arrival_gap, prompt_len, tuple(prefix + drawn)))
    return requests


def simulate(config: Config, requests: list[Request], model: StandInModel) -> Counter:
    """Admit requests as they arrive, decode one token per live request per step, free them.

    Measures both schemes after every step and checks attention parity for each finished request.
    """
    c = config
    cache = PagedKVCache(c.num_requests * c.max_seq_len // c.block_size, c.block_size,
                         c.kv_heads, c.head_dim)
    q = torch.randn(c.kv_heads, c.head_dim, generator=torch.Generator().manual_seed(c.seed + 1))
    pending, live, s = list(reversed(requests)), {}, Counter()
    while pending or live:
        while pending and pending[-1].arrival <= s["steps"]:
            r = pending.pop()
            prompt = list(r.tokens[:r.prompt_len])
            cached = cache.add_request(r.rid, prompt)
            prefill(cache, model, r.rid, prompt[cached:])  # cached blocks are not recomputed
            s["prompt tokens cached"] += cached
            live[r.rid] = r
            cache.check_invariants()
        for rid, r in list(live.items()):
            n = len(cache.tokens[rid])
            if n < len(r.tokens):
                continue
            # Finished: attention through the block table must equal it over a contiguous slab.
            paged, full = cache.gather(rid), model.contiguous_cache(list(r.tokens), c.max_seq_len)
            assert torch.equal(paged, full[:, :n])
            assert torch.equal(attention(q, paged), attention(q, full[:, :n]))
            s["parity checked"] += 1
            s["parity read shared"] += any(cache.refcount[b] > 1 for b in cache.tables[rid])
            s["tokens at end", rid], s["blocks at end", rid] = n, len(cache.tables[rid])
            cache.free_request(rid)
            del live[rid]
            cache.check_invariants()
        # One decode step: every live request appends its next token, K and V as one batch.
        positions = [len(cache.tokens[rid]) for rid in live]
        tokens = [r.tokens[n] for r, n in zip(live.values(), positions)]
        for rid, token, kv in zip(live, tokens, model.kv(tokens, positions)):
            cache.append_token(rid, token, kv)
        s["steps"] += 1
        stored = sum(map(len, cache.tokens.values()))
        blocks, waste = cache.num_blocks - len(cache.free), cache.wasted_slots()
        reserved = len(live) * c.max_seq_len  # contiguous: max_seq_len slots from admission on
        assert waste <= (c.block_size - 1) * len(live), "paged waste < block_size per request"
        s["live"] += len(live)
        s["paged slots"] += blocks * c.block_size
        s["paged waste"] += waste
        s["reserved slots"] += reserved
        s["contiguous waste"] += reserved - stored
        for key, value in (("peak live", len(live)), ("peak stored", stored),
                           ("peak blocks", blocks), ("peak reserved", reserved)):
            s[key] = max(s[key], value)
    assert len(cache.free) == cache.num_blocks and not cache.prefix_index, "a block leaked"
    return s


def requests_that_fit(config: Config, requests: list[Request], model: StandInModel,
                      share_prefixes: bool) -> int:
    """Admit requests in arrival order, each at its full length, until the budget runs out."""
    cache = PagedKVCache(config.budget_tokens // config.block_size, config.block_size,
                         config.kv_heads, config.head_dim, share_prefixes)
    for admitted, r in enumerate(requests):
        try:
            cached = cache.add_request(r.rid, list(r.tokens[:r.prompt_len]))
            prefill(cache, model, r.rid, list(r.tokens[cached:]))  # prompt and whole output
        except OutOfBlocks:
            cache.free_request(r.rid)  # roll back the request that did not fit
            cache.check_invariants()
            return admitted
    return len(requests)


def print_report(config: Config) -> None:
    """Simulate the workload, assert the claims and print the figures."""
    c = config
    requests, model = make_requests(c), StandInModel(c)
    lengths = {"prompt": [r.prompt_len for r in requests],
               "output": [len(r.tokens) - r.prompt_len for r in requests]}
    block_bytes = 2 * c.block_size * c.kv_heads * c.head_dim * 4
    print(f"config: {c.num_requests} requests, block_size {c.block_size}, "
          f"max_seq_len {c.max_seq_len:,}, {c.kv_heads} KV heads x head_dim {c.head_dim} "
          f"in float32, seed {c.seed}")
    print(f"block: {c.block_size} tokens x {c.kv_heads} x {c.head_dim} x 2 (K and V) x 4 bytes"
          f" = {block_bytes:,} bytes")
    for name, values in lengths.items():
        print(f"{name} tokens: mean {sum(values) / len(values):.1f}, min {min(values)}, "
              f"max {max(values):,}")
    print(f"shared prefix: {c.shared_prefix} tokens in every other request = "
          f"{c.shared_prefix // c.block_size} full blocks shareable "
          f"+ {c.shared_prefix % c.block_size} tokens")

    s = simulate(c, requests, model)
    paged_waste = s["paged waste"] / s["paged slots"]
    contiguous_waste = s["contiguous waste"] / s["reserved slots"]
    print(f"\nsimulation: one arrival every {c.arrival_gap} steps, "
          f"one token per live request per step")
    print(f"  steps: {s['steps']:,}, peak live requests: {s['peak live']}, "
          f"peak tokens stored: {s['peak stored']:,}")
    print(f"  paged peak: {s['peak blocks']:,} blocks = "
          f"{s['peak blocks'] * c.block_size:,} token slots")
    print(f"  contiguous peak: {s['peak reserved']:,} token slots reserved")
    print(f"  paged waste: {paged_waste:.2%} of allocated slots, {s['paged waste'] / s['live']:.2f}"
          f" slots per live request (always < {c.block_size})")
    print(f"  contiguous waste: {contiguous_waste:.2%} of reserved slots, "
          f"{s['contiguous waste'] / s['live']:,.2f} slots per live request")
    print(f"  prefix sharing: {s['prompt tokens cached']:,} prompt tokens read from shared "
          f"blocks, not recomputed")
    assert paged_waste * 10 < contiguous_waste, "paged waste must be far below contiguous"
    assert s["parity checked"] == c.num_requests
    print(f"  attention parity: {s['parity checked']} of {c.num_requests} requests torch.equal "
          f"to contiguous, {s['parity read shared']} of them reading shared blocks")

    # The calculator's functions, request by request, against what the run's tables held at the end.
    full, bs = {r.rid: s["tokens at end", r.rid] for r in requests}, c.block_size
    for rid, n in full.items():
        held = s["blocks at end", rid] * bs
        assert held == blocks_per_sequence(n, bs) * bs and slots_wasted(n, bs) == held - n
        assert paged_waste_fraction(n, bs) == (held - n) / held
    blocks = sum(blocks_per_sequence(n, bs) for n in full.values())
    empty = sum(slots_wasted(n, bs) for n in full.values())
    reserved, token_bytes = c.num_requests * c.max_seq_len, block_bytes // bs
    waste = [contiguous_waste_fraction(n, c.max_seq_len) for n in full.values()]
    assert math.isclose(sum(waste) / len(waste), (reserved - sum(full.values())) / reserved)
    freed = sum(bytes_freed_by_paging(n, bs, c.max_seq_len, token_bytes) for n in full.values())
    assert freed == (reserved - blocks * bs) * token_bytes
    n = full[0]
    print("\nat full length, without sharing: the calculator's arithmetic, for each request")
    print(f"  block tables: {blocks:,} blocks for {sum(full.values()):,} tokens, "
          f"ceil(tokens / {bs}) each")
    print(f"  last blocks: {empty:,} empty slots, {empty / len(full):.2f} per request, "
          f"paged waste {empty / (blocks * bs):.2%} of {blocks * bs:,} slots")
    print(f"  contiguous waste: {sum(waste) / len(waste):.2%} of {reserved:,} reserved slots")
    print(f"  paging frees {freed:,} of {reserved * token_bytes:,} bytes "
          f"({token_bytes} bytes per token)")
    print(f"  request 0: {n:,} tokens in {blocks_per_sequence(n, bs)} blocks, "
          f"{slots_wasted(n, bs)} empty slots, paged waste {paged_waste_fraction(n, bs):.2%}, "
          f"contiguous {contiguous_waste_fraction(n, c.max_seq_len):.2%}")

    contiguous_fit = c.budget_tokens // c.max_seq_len
    paged_fit = requests_that_fit(c, requests, model, share_prefixes=True)
    unshared_fit = requests_that_fit(c, requests, model, share_prefixes=False)
    budget_blocks = c.budget_tokens // c.block_size
    print(f"\nbudget: {c.budget_tokens:,} token slots ({budget_blocks:,} blocks, "
          f"{budget_blocks * block_bytes:,} bytes), every request at full length")
    print(f"  contiguous fits: {contiguous_fit} requests "
          f"({c.budget_tokens:,} // {c.max_seq_len:,})")
    print(f"  paged fits: {unshared_fit} requests without prefix sharing, {paged_fit} with it")
    # No request needs more than max_seq_len / block_size blocks, so paging never fits fewer.
    assert paged_fit >= unshared_fit >= contiguous_fit


def parse_config(argv: list[str] | None = None) -> Config:
    """Turn command-line flags into a Config, reporting bad values as usage errors."""
    defaults = Config()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in defaults.__dataclass_fields__:
        flag = "--" + field.replace("_", "-")
        parser.add_argument(flag, type=int, default=getattr(defaults, field))
    try:
        return Config(**vars(parser.parse_args(argv)))
    except ValueError as error:
        parser.error(str(error))


if __name__ == "__main__":
    # The tensors are tiny; on a busy machine a spinning thread pool only slows each operator.
    torch.set_num_threads(1)
    print_report(parse_config())
