"""Shards: a deterministic split of a site's labs into N parts, for N CI jobs to check one each.

Pure: (lab id, recorded seconds or None) pairs and N → N lists of lab ids, disjoint and together
complete. A lab is never split: its claims, calculators and questions are judged across all its
starters' runs at once. With no recorded durations, labs go round-robin in id order. With some, the
longest go first, each to the shard with the least work so far (ties to the lower shard); a lab
without a record counts as the median of those with one. Durations are rounded up to whole seconds,
so run-to-run jitter of a fraction of a second does not move a lab. Every job must see the same
durations (the same result store, or none) to compute the same split.
"""

from __future__ import annotations

import math
import re


def parse_shard(text: str) -> tuple[int, int] | None:
    """Read 'K/N' (1 <= K <= N), or None when it is not that."""
    match = re.fullmatch(r"\s*(\d{1,4})\s*/\s*(\d{1,4})\s*", text)
    if not match:
        return None
    k, n = int(match.group(1)), int(match.group(2))
    return (k, n) if 1 <= k <= n else None


def split(labs: list[tuple[str, float | None]], count: int) -> list[list[str]]:
    """Split labs into `count` shards; each shard's ids in id order."""
    ids = sorted(lab_id for lab_id, _ in labs)
    known = sorted(math.ceil(seconds) for _, seconds in labs if seconds is not None)
    shards: list[list[str]] = [[] for _ in range(count)]
    if not known:
        for at, lab_id in enumerate(ids):
            shards[at % count].append(lab_id)
        return shards
    typical = known[len(known) // 2]
    cost = {lab_id: math.ceil(seconds) if seconds is not None else typical for lab_id, seconds in labs}
    load = [0] * count
    for lab_id in sorted(ids, key=lambda i: (-cost[i], i)):
        lightest = min(range(count), key=lambda s: (load[s], s))
        shards[lightest].append(lab_id)
        load[lightest] += cost[lab_id]
    return [sorted(shard) for shard in shards]
