"""Starter for invalid-input cases."""


def kv_bytes(layers: int, heads: int) -> int:
    # region formula
    per_layer = 2 * heads  # K and V
    total = layers * per_layer
    # endregion
    return total


print(kv_bytes(2, 4))
