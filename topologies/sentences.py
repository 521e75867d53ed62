"""A deterministic sentence source: seeded, Zipf-skewed words, comparable across runs.

The workload of ``../shared/MEASUREMENTS.md``: sentences of 10 words drawn from
``w0`` .. ``w9999`` with weights ``1/(rank+1)`` from ``random.Random(seed)``.
The same seed gives the same sequence of sentences in every process, so a
spout's output can be checked against a plain Python ``Counter``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

__all__ = ["sentence_stream", "sentences"]


def sentence_stream(
    seed: int = 42, vocabulary: int = 10_000, words_per_sentence: int = 10, chunk: int = 1000
) -> Iterator[str]:
    """An endless iterator of sentences; equal arguments give equal sequences."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocabulary)]
    cum = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(vocabulary)))
    while True:
        drawn = rng.choices(words, cum_weights=cum, k=chunk * words_per_sentence)
        for i in range(0, len(drawn), words_per_sentence):
            yield " ".join(drawn[i : i + words_per_sentence])


def sentences(count: int, seed: int = 42, vocabulary: int = 10_000, words_per_sentence: int = 10) -> list[str]:
    """The first ``count`` sentences of :func:`sentence_stream`."""
    return list(itertools.islice(sentence_stream(seed, vocabulary, words_per_sentence), count))
