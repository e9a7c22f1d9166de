"""The cache a decode loop appends to: one K and one V row per token."""


class KVCache:
    def __init__(self) -> None:
        self.keys: list[float] = []
        self.values: list[float] = []

    def append(self, key: float, value: float) -> int:
        self.keys.append(key)
        self.values.append(value)
        return len(self.keys)
