"""Lab 14's figures checked against the papers and configs they come from, and its exact identities.

Published references: ALiBi's slopes (Press et al., arXiv 2108.12409, section 3): 1/2, 1/4, ...,
1/256 for 8 heads, and 1/2^0.5, 1/2^1, ..., 1/2^8 for 16 heads; for other head counts, the
`get_slopes` function of the paper's reference code (ofirpress/attention_with_linear_biases).
Sinusoidal encoding (Vaswani et al., arXiv 1706.03762, section 3.5): PE(pos, 2i) = sin(pos /
10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)). RoPE (Su et al., arXiv 2104.09864):
theta_i = 10000^(-2i/d). Shapes from Hugging Face config.json: Llama-2-7b-hf hidden_size 4096,
num_attention_heads 32, num_key_value_heads 32, num_hidden_layers 32, max_position_embeddings
4096; gpt2 n_positions 1024, n_embd 768.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-14-positional-encodings/positional_encodings.py"
lab = load_starter(STARTER)

F64 = torch.float64


def reference_alibi_slopes(n: int) -> list[float]:
    """The slope rule of the ALiBi paper's reference code, written the way that code writes it."""
    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + reference_alibi_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize(
    "heads, published",
    [(8, [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]),
     (16, [1 / 2 ** (h / 2) for h in range(1, 17)])],
    ids=["8-heads", "16-heads"],
)
def test_alibi_slopes_are_the_papers(heads: int, published: list[float]) -> None:
    torch.testing.assert_close(lab.alibi_slopes(heads), torch.tensor(published, dtype=F64),
                               rtol=1e-15, atol=0)


@pytest.mark.parametrize("heads", [1, 2, 4, 6, 12, 20, 32, 40, 112])
def test_alibi_slopes_follow_the_reference_code_for_any_head_count(heads: int) -> None:
    torch.testing.assert_close(lab.alibi_slopes(heads),
                               torch.tensor(reference_alibi_slopes(heads), dtype=F64),
                               rtol=1e-14, atol=0)


def test_alibi_bias_is_minus_slope_times_distance() -> None:
    bias, slopes = lab.alibi_bias(4, 9), lab.alibi_slopes(4)
    for h in range(4):
        for i in range(9):
            for j in range(i + 1):
                assert bias[h, i, j].item() == -slopes[h].item() * (i - j)


def test_sinusoidal_table_is_vaswanis_formula() -> None:
    d = 16
    table = lab.sinusoidal_table(50, d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-14)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-14)


def test_rope_frequencies_use_base_10000() -> None:
    theta = lab.inverse_frequencies(8)
    expected = [10000 ** (-2 * i / 8) for i in range(4)]
    torch.testing.assert_close(theta, torch.tensor(expected, dtype=F64), rtol=1e-15, atol=0)


def test_rope_score_depends_only_on_the_offset_and_keeps_norms() -> None:
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 1, 32, dtype=F64, generator=gen)
    q, k = q / q.norm(), k / k.norm()
    for i, j in [(0, 0), (3, 11), (40, 2), (300, 299)]:
        score = (lab.apply_rope(q, torch.tensor([i])) * lab.apply_rope(k, torch.tensor([j]))).sum()
        for shift in (1, 13, 500, 2000):
            shifted = (lab.apply_rope(q, torch.tensor([i + shift]))
                       * lab.apply_rope(k, torch.tensor([j + shift]))).sum()
            assert abs((shifted - score).item()) <= 1e-12
    x = torch.randn(64, 32, dtype=F64, generator=gen)
    rotated = lab.apply_rope(x, torch.arange(64) * 37)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1), rtol=1e-13, atol=0)
    assert (rotated - x).abs().max() > 0.1  # it really rotates


def test_rope_layouts_are_one_rotation_up_to_a_permutation() -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(20, 16, dtype=F64, generator=gen)
    positions = torch.arange(20) * 5
    perm = torch.cat((torch.arange(0, 16, 2), torch.arange(1, 16, 2)))
    assert torch.equal(lab.apply_rope(x[:, perm], positions),
                       lab.apply_rope_interleaved(x, positions)[:, perm])
    # Pair (x[2i], x[2i+1]) turns like the complex number x[2i] + i x[2i+1] times e^(i pos theta_i).
    pairs = torch.view_as_complex(x.reshape(20, 8, 2))
    angles = positions[:, None].to(F64) * lab.inverse_frequencies(16)
    expected = torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(1)
    torch.testing.assert_close(lab.apply_rope_interleaved(x, positions), expected, rtol=0, atol=1e-14)


def test_learned_table_has_max_len_rows_and_no_more() -> None:
    table = lab.learned_table(10, 4)
    assert sum(p.numel() for p in table.parameters()) == 40
    table(torch.tensor([9]))
    with pytest.raises(IndexError):
        table(torch.tensor([10]))


def test_published_shapes() -> None:
    assert lab.LLAMA2_7B == (4096, 32, 32, 32, 4096)
    assert lab.LLAMA2_7B.head_dim == 128
    assert lab.GPT2_WPE == (1024, 768)
    assert lab.BASE == 10000


def test_costs_for_llama_2_7b_shape() -> None:
    costs = {c.scheme: c for c in lab.position_costs(lab.LLAMA2_7B, context=4096)}
    assert costs["learned"].params == 4096 * 4096 == 16_777_216
    assert costs["sinusoidal"].params == costs["rope"].params == costs["alibi"].params == 0
    assert costs["rope"].cached == 2 * 4096 * 64 == 524_288  # cos and sin, head_dim / 2 wide
    # 2 multiplies + 1 add per element of 32 query and 32 key heads of width 128, in 32 layers.
    assert costs["rope"].flops_per_token == 3 * 64 * 128 * 32 == 786_432
    assert costs["alibi"].flops_per_token == 32 * 4096 * 32 == 4_194_304
    assert costs["alibi"].cached == 32


def test_the_printed_report_carries_the_published_figures(capsys: pytest.CaptureFixture[str]) -> None:
    lab.main(lab.parse_args([]))  # in-process: the default run, without a second torch import
    out = capsys.readouterr().out
    assert "alibi slopes, 8 heads: 1/2 1/4 1/8 1/16 1/32 1/64 1/128 1/256\n" in out
    assert "alibi slopes, 16 heads: " + " ".join(f"2^-{h / 2:g}" for h in range(1, 17)) + "\n" in out
    assert "learned       16,777,216" in out
    assert "rope                   0          524,288      2,097,152            786,432" in out
    assert "alibi                  0               32            128          4,194,304" in out
    assert "heads x N x N 2,147,483,648 bytes" in out
    assert "GPT-2 (124M) learned table wpe: 1,024 x 768 = 786,432 parameters" in out
