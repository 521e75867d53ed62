"""A computation-intensive topology (paper 5.3.1): work per tuple depends on a shifting key.

keys -> harmonic (fields grouping on the key; computes the harmonic number H(n)) -> sink.
The keys are skewed: key weights follow a Zipf law, and every ``compute.shift.secs`` the
weights are dealt to the keys anew (the same random permutation in every spout: seeded by
``compute.seed`` and the phase), so the busiest ``harmonic`` executors change during the run
and a static placement ends up unbalanced ("randomly making the distribution of the
calculation in the key domain change"). Settings (``-c key=value``): ``compute.rate``
tuples/s per spout (default 2000), ``compute.cost`` (n of H(n), default 2000),
``compute.keys`` (default 64), ``compute.skew`` (Zipf exponent, default 1.0),
``compute.shift.secs`` (default 30), ``compute.spouts``, ``compute.bolts`` (default 2 and
12, the paper's Bolt 1), ``compute.workers`` (default 8).
"""

from __future__ import annotations

import bisect
import itertools
import random
import time
from collections.abc import Mapping
from typing import Any

from nstorm import Bolt, Context, Spout, Topology, TopologyBuilder, Tuple


class Keys(Spout):
    """Emits keys at ``compute.rate`` with a skew that moves every ``compute.shift.secs``.

    Its position and its clock live in ``self.state``, so a moved spout keeps its pace and
    its phase.
    """

    outputs = ("key",)

    def open(self, conf: Mapping[str, Any], context: Context) -> None:
        self.rate = float(conf.get("compute.rate", 2000))
        self.keys = int(conf.get("compute.keys", 64))
        self.shift = float(conf.get("compute.shift.secs", 30))
        self.seed = int(conf.get("compute.seed", 7))
        skew = float(conf.get("compute.skew", 1.0))
        self.cumulative = list(itertools.accumulate(1.0 / (rank + 1) ** skew for rank in range(self.keys)))
        self.rng = random.Random(self.seed * 1000 + context.task_index)
        self.phase = -1
        self.ranked: list[int] = []
        now = time.time()
        self.state.setdefault("n", 0)
        self.state.setdefault("epoch", now)  # phases count from here, in every copy of this spout
        self.state.setdefault("started", now)  # the pace counts from here

    def _deal(self, phase: int) -> None:
        """The keys by weight for ``phase``: one permutation, the same in every spout."""
        self.ranked = list(range(self.keys))
        random.Random(self.seed * 7919 + phase).shuffle(self.ranked)
        self.phase = phase

    def next_tuple(self) -> None:
        state = self.state
        now = time.time()
        n = state["n"]
        expected = self.rate * (now - state["started"])
        if n >= expected:
            return
        if expected - n > self.rate:  # more than a second behind (backpressure): re-anchor, no burst
            state["started"] = now - n / self.rate
        phase = int((now - state["epoch"]) // self.shift) if self.shift else 0
        if phase != self.phase:
            self._deal(phase)
        rank = bisect.bisect_left(self.cumulative, self.rng.random() * self.cumulative[-1])
        state["n"] = n + 1
        self.emit((self.ranked[min(rank, self.keys - 1)],), msg_id=n)


class Harmonic(Bolt):
    outputs = ("key", "value")

    def prepare(self, conf: Mapping[str, Any], context: Context) -> None:
        self.cost = int(conf.get("compute.cost", 2000))

    def process(self, tup: Tuple) -> None:
        total = 0.0
        for i in range(1, self.cost + 1):
            total += 1.0 / i
        self.emit((tup.values[0], total))


class Sink(Bolt):
    def process(self, tup: Tuple) -> None:
        self.state[tup.values[0]] = self.state.get(tup.values[0], 0) + 1


def make_topology(conf: Mapping[str, Any]) -> Topology:
    builder = TopologyBuilder("compute")
    builder.set_spout("keys", Keys, parallelism=int(conf.get("compute.spouts", 2)))
    builder.set_bolt("harmonic", Harmonic, parallelism=int(conf.get("compute.bolts", 12))).fields_grouping(
        "keys", ["key"])
    builder.set_bolt("sink", Sink, parallelism=2).shuffle_grouping("harmonic")
    return builder.build(workers=int(conf.get("compute.workers", 8)))
