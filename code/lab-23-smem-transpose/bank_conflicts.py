"""Count what a warp does to memory in a matrix transpose: shared-memory bank conflicts of a tile
read by columns, and global-memory transactions of strided and contiguous accesses.

A CPU model of the hardware rules, so the counts are exact and the same on every machine; the CUDA
starter beside this file (transpose.cu) runs the three kernels these counts describe and times them
where there is a GPU.

Rules modelled (CUDA C++ Programming Guide, "Shared Memory" and "Device Memory Accesses", compute
capability 5.x and later): shared memory has 32 banks, each 4 bytes wide, and successive 4-byte
words go to successive banks; a warp's request is served in as many passes as the most distinct
4-byte words it asks of one bank (threads reading the same word share it: a broadcast). Global
memory is read and written in 32-byte sectors: a warp's access costs one transaction per distinct
sector it touches.
"""

from __future__ import annotations

import argparse

WARP = 32
BANKS = 32
WORD = 4  # bytes per bank word, and per float
SECTOR = 32  # bytes per global-memory transaction


# region model
def bank_passes(word_addresses: list[int]) -> int:
    """Passes the shared-memory request of one warp needs: the most distinct words asked of one bank."""
    words_per_bank: dict[int, set[int]] = {}
    for word in word_addresses:
        words_per_bank.setdefault(word % BANKS, set()).add(word)
    return max(len(words) for words in words_per_bank.values())


def column_read(tile: int, row_stride: int, column: int) -> list[int]:
    """The words a warp reads when thread x reads element [x][column] of a tile stored row by row
    with `row_stride` words a row (tile for the plain tile, tile + 1 for the padded one)."""
    return [x * row_stride + column for x in range(tile)]


def sectors(byte_addresses: list[int]) -> int:
    """Global-memory transactions of one warp's access: the distinct 32-byte sectors it touches."""
    return len({address // SECTOR for address in byte_addresses})


def transpose_traffic(n: int, tile: int) -> dict[str, tuple[int, int]]:
    """Transactions per warp (reads, writes) of the three kernels on an n x n float matrix: the
    naive one reads rows and writes columns; the tiled ones read rows into shared memory and write
    rows of the transpose out of it."""
    row = [(0 * n + x) * WORD for x in range(WARP)]  # thread x touches element [0][x]: consecutive
    column = [(x * n + 0) * WORD for x in range(WARP)]  # thread x touches element [x][0]: n floats apart
    return {
        "naive": (sectors(row), sectors(column)),
        "tiled": (sectors(row), sectors(row)),
        "tiled+pad": (sectors(row), sectors(row)),
    }
# endregion


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="matrix size (n x n floats)")
    parser.add_argument("--tile", type=int, default=32, help="tile size (a warp is 32 threads)")
    args = parser.parse_args()
    n, tile = args.n, args.tile

    plain = bank_passes(column_read(tile, tile, column=0))
    padded = bank_passes(column_read(tile, tile + 1, column=0))
    rows = bank_passes([0 * tile + x for x in range(tile)])
    print(f"shared memory: {BANKS} banks of {WORD} bytes; a warp of {WARP} threads")
    print(f"tile[{tile}][{tile}], read by rows:     {rows} pass per warp request")
    print(f"tile[{tile}][{tile}], read by columns:  {plain} passes per warp request ({plain}-way bank conflict)")
    print(f"tile[{tile}][{tile + 1}], read by columns:  {padded} pass per warp request (the padding word shifts each row by one bank)")
    assert rows == 1 and padded == 1 and plain == tile

    traffic = transpose_traffic(n, tile)
    floats = n * n
    print(f"global memory, {n} x {n} floats ({floats * WORD:,} bytes each way), {SECTOR}-byte sectors:")
    for kernel, (reads, writes) in traffic.items():
        useful = WARP * WORD / SECTOR
        print(f"  {kernel:<10} reads {reads:>2} sectors a warp, writes {writes:>2} ({useful / writes:.1%} of each written sector used)")
    reads, writes = traffic["naive"]
    warps = floats // WARP
    print(f"naive: {warps * writes:,} write transactions against {warps * reads:,} for the tiled kernels: {writes // reads}x")
    smem_per_block = tile * (tile + 1) * WORD
    print(f"padding costs {tile * WORD} bytes of shared memory per {tile}x{tile} tile ({smem_per_block:,} bytes instead of {tile * tile * WORD:,})")


if __name__ == "__main__":
    main()
