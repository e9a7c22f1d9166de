"""Starter of the calculator tests: the KV cache bytes of a toy model."""


def kv_bytes(layers: int, heads: int, dtype: int) -> int:
    # region formula
    per_layer = 2 * heads * dtype  # K and V
    total = layers * per_layer
    # endregion
    return total


if __name__ == "__main__":
    print(f"kv bytes: {kv_bytes(2, 4, 2)}")
