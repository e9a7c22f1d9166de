"""A toy decode loop: prefill the prompt into the cache, then one token per step."""

from cache import KVCache


def prefill(cache: KVCache, prompt: list[float]) -> int:
    for token in prompt:
        length = cache.append(token * 2.0, token * 3.0)
    return length


def decode_step(cache: KVCache, token: float) -> float:
    length = cache.append(token * 2.0, token * 3.0)
    attended = sum(cache.values) / length
    return attended


if __name__ == "__main__":
    cache = KVCache()
    print(f"prefilled: {prefill(cache, [1.0, 2.0, 3.0])} tokens")
    print(f"decoded: {decode_step(cache, 4.0):.2f}")
