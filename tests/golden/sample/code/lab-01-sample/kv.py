"""Tiny starter for the golden site: KV-cache bytes per token."""

import argparse


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes one token adds to the KV cache."""
    # region formula
    per_layer = 2 * kv_heads * head_dim  # one K and one V vector per KV head
    total = layers * per_layer * dtype_bytes
    # endregion
    return total


@staticmethod
def unused() -> None:
    pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=32)
    args = parser.parse_args()
    print(f"kv bytes per token: {kv_bytes_per_token(args.layers, 32, 128, 2):,}")
