"""The peers benchmark's workload and measures, shared by every system it runs.

The word count of ``topologies/wordcount.py``: ``STREAMS`` sentence streams (one per
spout executor in nstorm, one per source partition in bytewax, interleaved rows in
Spark), stream ``i`` drawn from ``topologies.sentences`` with seed ``SEED + i``. An
endless run cycles the first ``POOL`` sentences of each stream, as nstorm's spout does;
a fixed run of ``n`` sentences takes the first ``n / STREAMS`` of each stream, so its
expected word counts are a plain :class:`collections.Counter`.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from topologies.sentences import sentences

__all__ = [
    "POOL",
    "SAMPLE_EVERY",
    "SEED",
    "STREAMS",
    "WORDS_PER_SENTENCE",
    "RunResult",
    "check_counts",
    "downsample",
    "expected_counts",
    "per_stream",
    "percentile",
    "stream",
]

SEED = 42  # stream i uses SEED + i, like the spout executor i of topologies/wordcount.py
STREAMS = 2  # two spout executors, two source partitions: one per core
POOL = 50_000  # sentences per stream cycled by endless runs (wordcount.pool's default)
WORDS_PER_SENTENCE = 10
SAMPLE_EVERY = 16  # bytewax: one sentence in 16 carries its emit time (nstorm stamps about one a ms)


def stream(index: int, count: int = POOL) -> list[str]:
    """The first ``count`` sentences of stream ``index``."""
    return sentences(count, seed=SEED + index)


def per_stream(total: int) -> int:
    """Sentences each stream gives to a fixed run of ``total`` sentences."""
    return total // STREAMS


def expected_counts(total: int) -> collections.Counter[str]:
    """Word counts of a fixed run of ``total`` sentences, by a plain Python loop."""
    counts: collections.Counter[str] = collections.Counter()
    for index in range(STREAMS):
        for sentence in stream(index, per_stream(total)):
            counts.update(sentence.split())
    return counts


def check_counts(got: dict[str, int], total: int) -> dict[str, Any]:
    """Compare a system's final counts with :func:`expected_counts`: equal, and how they differ."""
    expected = expected_counts(total)
    wrong = [w for w in expected.keys() | got.keys() if got.get(w, 0) != expected.get(w, 0)]
    return {"correct": not wrong, "words_expected": sum(expected.values()), "words_counted": sum(got.values()),
            "distinct_expected": len(expected), "distinct_counted": len(got), "words_differing": len(wrong)}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by the nearest-rank rule, None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def downsample(values: Iterable[float], limit: int, seed: int = 0) -> list[float]:
    """At most ``limit`` of ``values``, drawn uniformly (seeded: the same input gives the same output)."""
    values = list(values)
    if len(values) <= limit:
        return values
    return random.Random(seed).sample(values, limit)


@dataclass
class RunResult:
    """One run of one system; None where a figure does not apply or could not be measured."""

    system: str
    run: str  # "peak", "half" (fixed rate at half of nstorm's peak) or "fixed" (fixed count, checked)
    sentences_per_sec: float | None = None
    words_per_sec: float | None = None
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_kind: str = ""
    offered_sentences_per_sec: float | None = None
    correct: bool | None = None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        return cls(**data)
