"""Latency stamps and histograms: log-spaced buckets that workers count into and benchmarks read.

A spout stamps a tracked tuple with its emit time at most every
:data:`STAMP_INTERVAL_SECS` (so a thousand samples a second whatever the rate), in the
tuple's root id itself (:func:`stamped_root`), so the stamp travels to every
descendant at no cost per tuple. Each bolt counts the time from that emit to the
moment it processes a descendant (*emit-to-process latency*; for the last bolt of a
topology, the end-to-end latency), and each spout the time to the tree's last ack
(*complete latency*), into cumulative bucket counts reported in heartbeats. A reader
takes two snapshots, subtracts them, and gets percentiles over exactly that window;
the resolution is one bucket (bounds grow by :data:`GROWTH`, about 4.7%: fifty buckets a decade,
so that 0.5, 5 and 50 ms are bounds of buckets and a 5 ms bound is judged as stated).

Stamps are wall-clock microseconds: exact between the processes of one machine, as
good as the clock synchronisation (NTP) between machines.

Example::

    >>> counts = {}
    >>> for ms in (1.0, 2.0, 3.0, 40.0):
    ...     add(counts, ms / 1000)
    >>> round(percentile(counts, 0.5) * 1000, 1) >= 2.0
    True
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping

__all__ = ["BASE_SECS", "GROWTH", "STAMPED", "STAMP_INTERVAL_SECS", "Recorder", "add", "bucket", "merge", "percentile", "stamp_age",
           "stamped_root", "subtract", "upper_bound"]

STAMP_INTERVAL_SECS = 0.001  # a spout stamps a tracked tuple at most this often
STAMPED = 1 << 63  # roots at or above this carry an emit time
_STAMP_SHIFT = 23  # bits 23..62: emit time in µs (wraps every 12.7 days); bits 0..22: the caller's
_STAMP_MASK = (1 << 40) - 1


def stamped_root(low: int) -> int:
    """A root id that carries the current time: ``STAMPED | time_us << 23 | low`` (``low`` < 2**23:
    the worker puts its spout task and a few random bits there, see :mod:`worker.wire`)."""
    return STAMPED | ((time.time_ns() // 1000) & _STAMP_MASK) << _STAMP_SHIFT | low


def stamp_age(root: int, now_ns: int | None = None) -> float:
    """Seconds since a stamped root was made (0 if the clocks disagree by a negative amount)."""
    now_us = (time.time_ns() if now_ns is None else now_ns) // 1000
    age = (now_us - (root >> _STAMP_SHIFT)) & _STAMP_MASK
    return age / 1e6 if age < 1 << 39 else 0.0

BASE_SECS = 50e-6  # the first bucket holds everything up to 50 µs
# Each bucket's upper bound is 4.7% above the previous one (fifty a decade). It was 10%: a p99 is
# read as its bucket's upper bound, and a 5 ms bound was judged at 4.85 ms (windows at 4.9 ms
# counted as broken) while a reading could be 10% above the truth.
BUCKETS_PER_DECADE = 50
GROWTH = 10 ** (1 / BUCKETS_PER_DECADE)
_LOG_GROWTH = math.log(GROWTH)
_MAX_BUCKET = 11 * BUCKETS_PER_DECADE  # 50 µs * 10**11 is about 58 days: nothing is cut off


def bucket(secs: float) -> int:
    """The bucket of a latency in seconds: the smallest ``i`` with ``secs <= upper_bound(i)``."""
    if secs <= BASE_SECS:
        return 0
    return min(_MAX_BUCKET, math.ceil(math.log(secs / BASE_SECS) / _LOG_GROWTH - 1e-9))


def upper_bound(index: int) -> float:
    """The largest latency (seconds) counted in bucket ``index``."""
    return BASE_SECS * 10 ** (index / BUCKETS_PER_DECADE)  # (exact at whole decades: 5 ms is index 100)


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


class Recorder:
    """What an executor keeps of one latency: cumulative bucket counts (for exact windows) and
    the last ``keep`` samples (for a rolling p50/p99 in heartbeats)."""

    __slots__ = ("hist", "recent")

    def __init__(self, keep: int = 2000) -> None:
        self.hist: dict[int, int] = {}
        self.recent: deque[float] = deque(maxlen=keep)

    def add(self, secs: float) -> None:
        self.recent.append(secs)
        add(self.hist, secs)

    def add_stamp(self, root: int) -> None:
        """Count the age of a stamped root (see :func:`stamped_root`)."""
        self.add(stamp_age(root))

    def summary(self) -> dict[str, float] | None:
        """``{"p50", "p99", "mean"}`` in ms and the sample count, over the last samples; None if none."""
        lat = sorted(self.recent)
        if not lat:
            return None
        return {"p50": round(1000 * lat[len(lat) // 2], 3),
                "p99": round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 3), "samples": len(lat),
                "mean": round(1000 * sum(lat) / len(lat), 3)}
