"""A tiled matrix multiply in Triton: each program computes one BLOCK_M x BLOCK_N tile of C,
walking K in BLOCK_K steps, and the tile sizes decide how often each element of A and B is read.

On a CPU the kernel runs under Triton's interpreter (TRITON_INTERPRET=1, which `infralens check`
sets for the cpu run): the same kernel code, executed with NumPy, checked against torch.matmul.
On an NVIDIA GPU (`--device cuda`) it is compiled by Triton and timed against torch.matmul.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import triton
import triton.language as tl


# region kernel
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[tile] = A[rows, :] @ B[:, cols] for the tile of C this program owns."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # the tile stays in registers for all of K
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k + ks)[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + ks)[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        # BLOCK_M x BLOCK_K times BLOCK_K x BLOCK_N: 2 * BM * BN * BK FLOPs, in full fp32 (a GPU's
        # default for fp32 inputs would be TF32, whose 10-bit mantissa the fp64 check would catch)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor, block_m: int, block_n: int, block_k: int) -> torch.Tensor:
    """Launch one program per tile of C: a grid of ceil(M / BLOCK_M) x ceil(N / BLOCK_N)."""
    (m, k), (_, n) = a.shape, b.shape
    c = torch.empty((m, n), dtype=torch.float32, device=a.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return c
# endregion


# region arithmetic
def tile_arithmetic(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int, element: int = 4) -> dict[str, float]:
    """What one tile of C costs: the elements it loads, its FLOPs, its arithmetic intensity against
    global memory, and the on-chip bytes one K step holds; and the whole product's loads."""
    tile_loads = (block_m + block_n) * k  # a BLOCK_M x K strip of A and a K x BLOCK_N strip of B
    tile_flops = 2 * block_m * block_n * k
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    return {
        "tile_loads": tile_loads,
        "tile_flops": tile_flops,
        "intensity": tile_flops / (tile_loads * element),  # = 2 * BM * BN / ((BM + BN) * element)
        "sram_bytes": (block_m * block_k + block_k * block_n) * element,
        "total_loads": tiles * tile_loads,
        "reads_per_element": tiles * tile_loads / (m * k + k * n),  # how often each input element is read
    }
# endregion


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--size", type=int, default=128, help="M = N = K")
    args = parser.parse_args()
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if args.device == "cpu" and not interpreted:
        raise SystemExit("on the CPU the kernel runs under Triton's interpreter: set TRITON_INTERPRET=1")
    size = args.size
    print(f"triton {triton.__version__}, {'interpreter (TRITON_INTERPRET=1)' if interpreted else 'compiled'} on {args.device}; M = N = K = {size}, fp32")

    print(f"{'tile':>11} {'loads/tile':>11} {'FLOP/B':>7} {'SRAM/step':>10} {'total loads':>12} {'reads/elem':>10}")
    for block in (16, 32, 64, 128):
        t = tile_arithmetic(4096, 4096, 4096, block, block, 32)
        print(f"{block:>4} x {block:<4} {t['tile_loads']:>11,} {t['intensity']:>7.1f} {t['sram_bytes']:>10,} {t['total_loads']:>12,} {t['reads_per_element']:>10.1f}")
    print("(for a 4096 x 4096 x 4096 product, BLOCK_K = 32; an untiled product reads each element 4,096 times)")

    torch.manual_seed(0)
    a = torch.randn(size, size, device=args.device)
    b = torch.randn(size, size, device=args.device)
    reference = (a.double() @ b.double()).float()
    for block_m, block_n, block_k in ((32, 32, 32), (64, 32, 16)):
        c = matmul(a, b, block_m, block_n, block_k)
        error = (c - reference).abs().max().item()
        tiles = triton.cdiv(size, block_m) * triton.cdiv(size, block_n)
        print(f"tiles {block_m}x{block_n}x{block_k}: {tiles} programs, max |C - A@B| = {error:.1e} (fp64 reference)")
        assert error < 1e-3, error

    if args.device == "cuda":
        big_a, big_b = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
        for name, run in (("triton 128x128x32", lambda: matmul(big_a, big_b, 128, 128, 32)), ("torch.matmul", lambda: big_a @ big_b)):
            run()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(10):
                run()
            torch.cuda.synchronize()
            seconds = (time.perf_counter() - start) / 10
            print(f"{name}: {seconds * 1e3:.2f} ms, {2 * 4096**3 / seconds / 1e12:.1f} TFLOP/s at 4096, fp32 (no TF32)")


if __name__ == "__main__":
    main()
