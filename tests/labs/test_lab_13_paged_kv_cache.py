"""Lab 13's paged KV cache checked for exact parity with contiguous caches and for its invariants.

No published figures here: the lab's numbers come from a seeded simulation, so these tests pin the
allocator's behaviour on small hand-traceable cases and the default run's printed figures.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-13-paged-kv-cache/paged_kv_cache.py"
paged = load_starter(STARTER)

SMALL = paged.Config(num_requests=6, block_size=4, max_seq_len=64, shared_prefix=10, vocab_size=50)



def admit(cache, model, rid: int, prompt: list[int]) -> int:
    """Admit a request the way the simulation does: attach cached blocks, prefill the rest."""
    cached = cache.add_request(rid, prompt)
    paged.prefill(cache, model, rid, prompt[cached:])
    cache.check_invariants()
    return cached


def test_a_block_is_taken_only_when_the_last_one_is_full() -> None:
    cache, model = paged.PagedKVCache(8, 4, 2, 16), paged.StandInModel(SMALL)
    admit(cache, model, 0, [])
    for n in range(1, 14):
        paged.prefill(cache, model, 0, [n % 50])
        assert len(cache.tables[0]) == math.ceil(n / 4)
        assert cache.wasted_slots() == -n % 4
        assert len(cache.free) + len(cache.tables[0]) == 8
        cache.check_invariants()


def test_full_prefix_blocks_are_shared_with_refcounts_and_freed_last() -> None:
    cache, model = paged.PagedKVCache(16, 4, 2, 16), paged.StandInModel(SMALL)
    prompt = list(range(10))  # two full blocks and two tokens
    assert admit(cache, model, 0, prompt) == 0
    assert admit(cache, model, 1, prompt + [40, 41]) == 8  # the two full blocks, not the partial one
    first, second = cache.tables[0], cache.tables[1]
    assert second[:2] == first[:2] and second[2] != first[2]
    assert [cache.refcount[b] for b in first] == [2, 2, 1]
    assert len(cache.free) == 16 - 4  # 3 blocks for request 0, 1 private block for request 1

    cache.free_request(0)
    cache.check_invariants()
    assert [cache.refcount[b] for b in second] == [1, 1, 1]
    assert not set(second) & set(cache.free)  # the shared blocks stay with request 1
    cache.free_request(1)
    cache.check_invariants()
    assert sorted(cache.free) == list(range(16)) and not cache.prefix_index


def test_without_sharing_nothing_is_reused() -> None:
    cache, model = paged.PagedKVCache(16, 4, 2, 16, share_prefixes=False), paged.StandInModel(SMALL)
    assert admit(cache, model, 0, list(range(10))) == 0
    assert admit(cache, model, 1, list(range(10))) == 0
    assert not set(cache.tables[0]) & set(cache.tables[1])


def test_the_invariant_check_catches_a_wrong_refcount_and_a_leaked_block() -> None:
    cache, model = paged.PagedKVCache(8, 4, 2, 16), paged.StandInModel(SMALL)
    admit(cache, model, 0, list(range(6)))
    cache.refcount[cache.tables[0][0]] += 1
    with pytest.raises(AssertionError, match="refcounts"):
        cache.check_invariants()
    cache.refcount[cache.tables[0][0]] -= 1
    cache.free.pop()  # a block that is neither free nor in any table
    with pytest.raises(AssertionError, match="free"):
        cache.check_invariants()


def test_out_of_blocks_is_raised_and_the_request_rolls_back() -> None:
    cache, model = paged.PagedKVCache(3, 4, 2, 16), paged.StandInModel(SMALL)
    admit(cache, model, 0, list(range(8)))
    with pytest.raises(paged.OutOfBlocks):
        admit(cache, model, 1, list(range(20, 30)))
    cache.free_request(1)
    cache.check_invariants()
    assert len(cache.free) == 1


def test_attention_through_block_tables_equals_contiguous_including_shared_prefixes() -> None:
    cache, model = paged.PagedKVCache(32, 4, 2, 16), paged.StandInModel(SMALL)
    system = [7, 3, 9, 1, 4, 4, 8, 2, 6]
    prompts = {0: system + [11, 12], 1: system + [13], 2: [5, 6, 7], 3: system[:8]}
    for rid, prompt in prompts.items():
        admit(cache, model, rid, prompt)
        paged.prefill(cache, model, rid, [30 + rid] * 5)  # decoded tokens after the prompt
    assert cache.refcount[cache.tables[0][0]] == 3  # requests 0, 1 and 3 share the first block
    q = torch.randn(2, 16, generator=torch.Generator().manual_seed(0))
    for rid, prompt in prompts.items():
        tokens = prompt + [30 + rid] * 5
        full = model.contiguous_cache(tokens, SMALL.max_seq_len)[:, :len(tokens)]
        assert torch.equal(cache.gather(rid), full)
        assert torch.equal(paged.attention(q, cache.gather(rid)), paged.attention(q, full))


def test_attention_matches_a_plain_softmax_reference() -> None:
    g = torch.Generator().manual_seed(1)
    q, kv = torch.randn(2, 8, generator=g, dtype=torch.float64), torch.randn(2, 5, 2, 8, generator=g, dtype=torch.float64)
    for h in range(2):
        weights = torch.softmax(kv[0, :, h] @ q[h] / 8 ** 0.5, dim=0)
        assert torch.allclose(paged.attention(q, kv)[h], weights @ kv[1, :, h], atol=1e-12)


def test_the_calculator_functions_agree_with_a_real_cache_at_every_length() -> None:
    cache, model = paged.PagedKVCache(8, 4, 2, 16, share_prefixes=False), paged.StandInModel(SMALL)
    admit(cache, model, 0, [])
    for n in range(1, 30):
        paged.prefill(cache, model, 0, [n % 50])
        held = len(cache.tables[0]) * 4
        assert paged.blocks_per_sequence(n, 4) * 4 == held
        assert paged.slots_wasted(n, 4) == held - n == cache.wasted_slots()
        assert paged.paged_waste_fraction(n, 4) == (held - n) / held
        assert paged.bytes_freed_by_paging(n, 4, 32, 256, num_seqs=3) == 3 * (32 - held) * 256


def test_the_calculator_functions_at_its_defaults_and_presets() -> None:
    # The checkpoint's 100-token prompt: 6 full blocks of 16 and one holding 4 tokens.
    assert (paged.blocks_per_sequence(100, 16), paged.slots_wasted(100, 16)) == (7, 12)
    assert paged.paged_waste_fraction(100, 16) == 12 / 112
    assert (paged.blocks_per_sequence(100, 32), paged.slots_wasted(100, 32)) == (4, 28)
    assert paged.slots_wasted(1900, 16) == 4 and paged.slots_wasted(1900, 32) == 20
    assert paged.slots_wasted(2048, 16) == 0 and paged.paged_waste_fraction(2048, 16) == 0
    # Request 0 of the default run, the calculator's defaults.
    assert paged.blocks_per_sequence(406, 16) == 26 and paged.slots_wasted(406, 16) == 10
    assert paged.contiguous_waste_fraction(406, 2048) == 1642 / 2048
    assert paged.bytes_freed_by_paging(406, 16, 2048, 256, 64) == 64 * (2048 - 416) * 256
    with pytest.raises(ValueError):
        paged.contiguous_waste_fraction(2049, 2048)
    with pytest.raises(ValueError):
        paged.bytes_freed_by_paging(2049, 16, 2048, 256)


@pytest.mark.parametrize("block_size", [4, 8])
def test_small_simulation_keeps_waste_below_one_block_per_request(block_size: int, one_thread) -> None:
    config = paged.Config(num_requests=8, block_size=block_size, max_seq_len=512, shared_prefix=20,
                          arrival_gap=3, budget_tokens=1024, vocab_size=100, seed=5)
    stats = paged.simulate(config, paged.make_requests(config), paged.StandInModel(config))
    assert stats["parity checked"] == 8
    assert stats["paged waste"] <= (block_size - 1) * stats["live"]
    assert stats["paged waste"] / stats["paged slots"] < stats["contiguous waste"] / stats["reserved slots"]


def test_default_report_prints_the_figures_the_page_states(capsys, one_thread) -> None:
    paged.print_report(paged.Config())
    out = capsys.readouterr().out
    for line in [
        "block: 16 tokens x 2 x 16 x 2 (K and V) x 4 bytes = 4,096 bytes",
        "paged peak: 1,116 blocks = 17,856 token slots",
        "contiguous peak: 75,776 token slots reserved",
        "paged waste: 1.36% of allocated slots, 7.50 slots per live request (always < 16)",
        "contiguous waste: 71.40% of reserved slots, 1,462.33 slots per live request",
        "prefix sharing: 2,976 prompt tokens read from shared blocks, not recomputed",
        "attention parity: 64 of 64 requests torch.equal to contiguous, 31 of them reading shared blocks",
        "contiguous fits: 8 requests (16,384 // 2,048)",
        "block tables: 2,621 blocks for 41,458 tokens, ceil(tokens / 16) each",
        "last blocks: 478 empty slots, 7.47 per request, paged waste 1.14% of 41,936 slots",
        "contiguous waste: 68.37% of 131,072 reserved slots",
        "paging frees 22,818,816 of 33,554,432 bytes (256 bytes per token)",
        "request 0: 406 tokens in 26 blocks, 10 empty slots, paged waste 2.40%, contiguous 80.18%",
        "paged fits: 23 requests without prefix sharing, 24 with it",
    ]:
        assert line in out
