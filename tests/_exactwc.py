"""Checks shared by tests that run ``tests/topologies/exact_wordcount.py`` to the end."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from topologies.sentences import sentences

from conftest import read_outputs, wait_until


def expected_counts(per_spout: int) -> collections.Counter[str]:
    """The word counts of the two spouts' fixed sentences."""
    expected: collections.Counter[str] = collections.Counter()
    for i in range(2):
        for s in sentences(per_spout, seed=100 + i):
            expected.update(s.split())
    return expected


def wait_finished(client: Any, out_dir: Path, name: str, per_spout: int, extra: int = 0) -> dict[str, Any]:
    """Wait until every word is counted and every sentence acked; check the counts and acks."""
    total = sum(expected_counts(per_spout).values()) + extra

    def done() -> dict[str, Any] | None:
        out = read_outputs(out_dir)
        counted = sum(sum(v.values()) for k, v in out.items() if k.startswith("count-"))
        acked = sum(len(v["acks"]) for k, v in out.items() if k.startswith("spout-"))
        return out if counted >= total and acked >= 2 * per_spout else None

    out = wait_until(done, timeout=120, what="all words counted and all sentences acked")
    for i in range(2):
        spout = out[f"spout-{i}"]
        assert sorted(int(k) for k in spout["acks"]) == list(range(per_spout))
        assert set(spout["acks"].values()) == {1}, "a spout tuple was acked more than once"
    status = wait_until(lambda: (st := client.status(name))["spouts"]["acked"] >= 2 * per_spout and st, 15,
                        what="heartbeats to report the acks")
    assert status["spouts"]["acked"] == 2 * per_spout and status["spouts"]["failed"] == 0
    return out


def counts_of(out: dict[str, Any]) -> collections.Counter[str]:
    """Every count executor's dump, added up."""
    counts: collections.Counter[str] = collections.Counter()
    for key, value in out.items():
        if key.startswith("count-"):
            counts.update(value)
    return counts
