"""Latency histograms: log-spaced buckets that workers count into and benchmarks read.

Spouts count the complete latency (emit -> fully acked) of a sample of their tracked
tuples into cumulative bucket counts and report them in heartbeats. A reader takes
two snapshots, subtracts them, and gets percentiles over exactly that window; the
resolution is one bucket (bounds grow by :data:`GROWTH`, about 10%).

Example::

    >>> counts = {}
    >>> for ms in (1.0, 2.0, 3.0, 40.0):
    ...     add(counts, ms / 1000)
    >>> round(percentile(counts, 0.5) * 1000, 1) >= 2.0
    True
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["BASE_SECS", "GROWTH", "add", "bucket", "merge", "percentile", "subtract", "upper_bound"]

BASE_SECS = 50e-6  # the first bucket holds everything up to 50 µs
GROWTH = 1.1  # each bucket's upper bound is 10% above the previous one
_LOG_GROWTH = math.log(GROWTH)
_MAX_BUCKET = 200  # 50 µs * 1.1**200 is about 10 days: nothing is cut off


def bucket(secs: float) -> int:
    """The bucket of a latency in seconds: the smallest ``i`` with ``secs <= upper_bound(i)``."""
    if secs <= BASE_SECS:
        return 0
    return min(_MAX_BUCKET, math.ceil(math.log(secs / BASE_SECS) / _LOG_GROWTH - 1e-9))


def upper_bound(index: int) -> float:
    """The largest latency (seconds) counted in bucket ``index``."""
    return BASE_SECS * GROWTH**index


def add(counts: dict[int, int], secs: float) -> None:
    """Count one latency into ``counts`` (bucket index -> count)."""
    i = bucket(secs)
    counts[i] = counts.get(i, 0) + 1


def merge(*hists: Mapping[int | str, int]) -> dict[int, int]:
    """Sum histograms (keys may be strings, as they come out of JSON heartbeats)."""
    out: dict[int, int] = {}
    for hist in hists:
        for key, n in hist.items():
            i = int(key)
            out[i] = out.get(i, 0) + int(n)
    return out


def subtract(later: Mapping[int, int], earlier: Mapping[int, int]) -> dict[int, int]:
    """The counts of a window: ``later - earlier`` (cumulative snapshots), negatives dropped."""
    out = {}
    for i, n in later.items():
        d = n - earlier.get(i, 0)
        if d > 0:
            out[i] = d
    return out


def percentile(counts: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile (0..1) in seconds, as the upper bound of its bucket; None if empty."""
    total = sum(counts.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for i in sorted(counts):
        seen += counts[i]
        if seen >= rank:
            return upper_bound(i)
    return upper_bound(max(counts))
