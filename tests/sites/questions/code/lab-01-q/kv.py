"""Starter of the question tests: the KV cache of a toy model, per token and for a context."""


def kv_bytes(layers: int, heads: int, dtype: int) -> int:
    # region formula
    per_layer = 2 * heads * dtype  # K and V
    total = layers * per_layer
    # endregion
    return total


if __name__ == "__main__":
    per_token = kv_bytes(32, 8, 2)
    print(f"kv bytes per token: {per_token:,}")
    print(f"kv cache of 4096 tokens: {per_token * 4096 / 2**20:.2f} MiB")
