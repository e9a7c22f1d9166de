"""Lab 16's layout facts checked against PyTorch's documentation, the BLAS interface and closed forms.

Published references:
- torch.Tensor.stride (https://docs.pytorch.org/docs/stable/generated/torch.Tensor.stride.html):
  a 2 x 5 tensor has strides (5, 1); the stride is the jump from one element to the next in a
  dimension.
- Tensor Views (https://docs.pytorch.org/docs/stable/tensor_view.html): `t.view(2, 8)` of a 4 x 4
  tensor shares its storage; `transpose` returns a non-contiguous view; `contiguous()` returns the
  tensor itself when it is already contiguous and copies otherwise.
- torch.Tensor.view (https://docs.pytorch.org/docs/stable/generated/torch.Tensor.view.html): a view
  may merge dimensions d..d+k only when stride[i] = stride[i+1] * size[i+1] for each i in d..d+k-1.
- Channels Last Memory Format tutorial
  (https://docs.pytorch.org/tutorials/intermediate/memory_format_tutorial.html): a 10 x 3 x 32 x 32
  tensor has strides (3072, 1024, 32, 1) contiguous and (3072, 1, 96, 3) channels_last; a
  10 x 3 x 16 x 16 batch in channels_last has strides (768, 1, 48, 3).
- Reference BLAS sgemm (netlib): C := alpha*op(A)*op(B) + beta*C with op(X) = X or X**T chosen by
  TRANSA / TRANSB, and LDA >= max(1, m) for 'N', max(1, k) otherwise. ATen's addmm_impl_cpu_
  (aten/src/ATen/native/LinearAlgebra.cpp) passes an operand with one unit stride and a large
  enough other stride straight to gemm, choosing the trans flag, and clones anything else.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import REPO, load_starter

pytestmark = pytest.mark.starters

STARTER = REPO / "code/lab-16-memory-layout/memory_layout.py"
layout = load_starter(STARTER)

BASE = torch.arange(120, dtype=torch.float32)
VIEWS = {
    "contiguous": BASE.view(2, 3, 4, 5),
    "transpose": BASE.view(2, 3, 4, 5).transpose(0, 3),
    "permute": BASE.view(2, 3, 4, 5).permute(3, 1, 0, 2),
    "step slices": BASE.view(2, 3, 4, 5)[1:, ::2, 1::3, ::4],
    "expand": BASE[7:12].expand(4, 3, 5),
    "as_strided overlapping": BASE.as_strided((6, 6), (3, 1), 2),
    "row of a matrix": BASE.view(12, 10)[5],
}


@pytest.mark.parametrize("name", VIEWS)
def test_address_formula_holds_for_every_element(name: str) -> None:
    t = VIEWS[name]
    assert layout.check_address_formula(t) == t.numel()
    # BASE holds 0..119, so each element's value is its slot in the storage.
    for index in [(0,) * t.dim(), tuple(n - 1 for n in t.shape)]:
        assert t[index].item() == layout.storage_index(t, index)


def test_storage_index_of_a_transpose_is_not_the_row_major_position() -> None:
    x = BASE.view(10, 12)
    t = x.T  # (12, 10), strides (1, 12)
    for i, j in [(0, 1), (3, 7), (10, 9)]:
        assert layout.storage_index(t, (i, j)) == j * 12 + i != i * 10 + j
    sliced = x[2:, 3::4]  # offset 2 * 12 + 3, strides (12, 4)
    assert layout.storage_index(sliced, (0, 0)) == 27 and layout.storage_index(sliced, (1, 2)) == 27 + 12 + 8


def test_contiguity_ignores_the_stride_of_a_size_one_dimension() -> None:
    t = BASE[:12].as_strided((3, 1, 4), (4, 99, 1))
    assert t.is_contiguous() and t.view(12).stride() == (1,)


def test_elementwise_output_follows_the_first_operand_layout() -> None:
    """x + y.T into a fresh tensor is row-major, so y.T is the operand read across; y.T alone keeps its layout."""
    x, y = torch.randn(6, 6), torch.randn(6, 6)
    assert (x + y.T).stride() == (6, 1)
    assert (y.T * 2).stride() == (1, 6) and (x.T + y.T).stride() == (1, 6)


def test_stride_matches_the_documented_example() -> None:
    x = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    assert x.stride() == (5, 1) and x.stride(0) == 5 and x.stride(-1) == 1


def test_tensor_view_doc_examples() -> None:
    t = torch.rand(4, 4)
    b = t.view(2, 8)
    assert layout.shares_storage(t, b)
    base = torch.tensor([[0, 1], [2, 3]])
    transposed = base.transpose(0, 1)
    assert base.is_contiguous() and not transposed.is_contiguous()
    assert layout.shares_storage(transposed, base)
    assert base.contiguous() is base
    packed = transposed.contiguous()
    assert not layout.shares_storage(packed, base) and packed.is_contiguous()


@pytest.mark.parametrize(
    "shape, make, new_shape, copied",
    [
        ((2, 3, 4), lambda x: x, (24,), False),
        ((2, 3, 4), lambda x: x[:, :, ::2], (12,), False),  # strides (12, 4, 2): 12 = 3*4, 4 = 2*2
        ((2, 4, 3), lambda x: x[:, ::2, :], (12,), True),  # strides (12, 6, 1): 6 != 3*1
        ((2, 4, 3), lambda x: x[:, ::2, :], (4, 3), False),  # merges only dims 0 and 1: 12 = 2*6
        ((2, 3, 4), lambda x: x.transpose(1, 2), (24,), True),
        ((2, 3, 4), lambda x: x.transpose(1, 2), (2, 2, 2, 3), False),  # splitting a dim is always a view
        ((6, 4), lambda x: x.T, (2, 2, 6), False),  # (4, 6) strides (1, 4): dim 0 splits
        ((6, 4), lambda x: x.T, (6, 4), True),
    ],
)
def test_view_or_copy_follows_the_documented_condition(shape, make, new_shape, copied) -> None:
    t = make(torch.arange(math.prod(shape), dtype=torch.float32).view(shape))
    out, was_copied = layout.view_or_copy(t, new_shape)
    assert was_copied == copied
    assert torch.equal(out, t.contiguous().view(new_shape))  # same values either way
    if copied:
        assert out.untyped_storage().nbytes() == t.numel() * t.element_size()


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
@pytest.mark.parametrize("stride", [1, 2, 3, 4, 8, 16, 17, 64, 2000])
def test_lines_touched_closed_forms(itemsize: int, stride: int) -> None:
    count = 4096
    touched = layout.lines_touched(stride, count, itemsize)
    step = stride * itemsize
    if step >= 64:
        assert touched == count
    else:
        assert touched == math.ceil(((count - 1) * step + 1) / 64)
    if 64 % step == 0 or step % 64 == 0:  # evenly packed lines: the per-element closed form is exact
        assert touched / count == layout.lines_per_element(stride, itemsize)


def test_fp32_row_and_column_walks_of_a_2000_wide_matrix() -> None:
    assert layout.lines_touched(1, 2000) == 125 and layout.lines_per_element(1) == 0.0625
    assert layout.lines_touched(2000, 2000) == 2000 and layout.lines_per_element(2000) == 1.0
    assert 2000 * 2000 * 4 == 16_000_000 and 2 * 16_000_000 == 32_000_000


@pytest.mark.parametrize(
    "operand, copies, copied_by",
    [
        (lambda b, w: b.T, 0, []),
        (lambda b, w: b, 0, []),
        (lambda b, w: w[:, : b.shape[1]], 0, []),  # row stride 2n > n: a leading dimension handles it
        (lambda b, w: w[:, : b.shape[1]].T, 0, []),
        (lambda b, w: b.T.contiguous(), 1, ["aten::contiguous"]),
        (lambda b, w: w[:, ::2], 1, ["aten::mm"]),  # no unit stride: mm clones it
        (lambda b, w: w[:, ::2].T, 1, ["aten::mm"]),
    ],
    ids=["b.T", "b", "column slice", "column slice .T", "b.T.contiguous()", "step slice", "step slice .T"],
)
def test_mm_copies_only_operands_gemm_cannot_describe(operand, copies, copied_by, one_thread) -> None:
    n = 48
    g = torch.Generator().manual_seed(0)
    a, b, wide = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g), torch.randn(n, 2 * n, generator=g)
    p = layout.profile_matmul(a, b, lambda m: operand(m, wide))
    assert p.copies == copies and p.copied_by == copied_by
    given = operand(b, wide)  # mm sees the copy .contiguous() made, or else the operand itself
    expected = given.contiguous().stride() if copied_by == ["aten::contiguous"] else given.stride()
    assert p.mm_strides[1] == list(expected)


def test_transposed_matmul_agrees_with_the_copied_one() -> None:
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    assert torch.allclose(a @ b.T, a @ b.T.contiguous(), atol=1e-5)


@pytest.mark.parametrize(
    "copy_s, strided_s, contiguous_s, uses",
    [(3.0, 5.0, 1.0, 0.75), (8.0, 3.0, 1.0, 4.0), (1.0, 1.0, 1.0, math.inf), (1.0, 0.5, 1.0, math.inf)],
)
def test_break_even_uses(copy_s, strided_s, contiguous_s, uses) -> None:
    assert layout.break_even_uses(copy_s, strided_s, contiguous_s) == uses


@pytest.mark.parametrize(
    "shape, contiguous, channels_last",
    [((10, 3, 32, 32), (3072, 1024, 32, 1), (3072, 1, 96, 3)), ((10, 3, 16, 16), (768, 256, 16, 1), (768, 1, 48, 3))],
)
def test_channels_last_strides_match_the_tutorial(shape, contiguous, channels_last) -> None:
    x = torch.empty(*shape)
    assert x.stride() == contiguous
    assert x.to(memory_format=torch.channels_last).stride() == channels_last
    assert torch.empty(*shape, memory_format=torch.channels_last).stride() == channels_last


def test_config_rejects_degenerate_sizes() -> None:
    with pytest.raises(ValueError):
        layout.Config(size=1)
    with pytest.raises(ValueError):
        layout.Config(repeats=0)


def test_small_report_prints_the_asserted_figures(capsys, one_thread) -> None:
    layout.main(layout.Config(size=64, matmul_size=32, batch=1, channels=4, image=8, repeats=1))
    out = capsys.readouterr().out
    assert "address formula offset + sum(index * stride) checked on 128 elements" in out
    assert "x[:, :, ::2] to (12,)        contiguous False -> view, stride (2,)" in out
    assert "x.transpose(1, 2) to (24,)   contiguous False -> copy, new storage of 96 bytes" in out
    assert "new storage of 16,384 bytes (n^2 * 4, asserted); the copy moves 32,768" in out
    assert "stride    64:    64 lines, 1.0000 lines per element" in out
    assert "a @ b.T                aten::mm received strides [[32, 1], [1, 32]]; copies 0" in out
    assert "copies 1, made by aten::contiguous" in out and "copies 1, made by aten::mm" in out
    assert "channels_last (NHWC) strides (3072, 1, 96, 3)" in out
