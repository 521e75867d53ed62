"""A computation-intensive topology (paper 5.3.1): work per tuple depends on a shifting key.

keys -> harmonic (fields grouping on the key; computes the harmonic number H(n) with n
proportional to the key's weight) -> sink. Every ``compute.shift.secs`` the hot key range
moves, so the busiest ``harmonic`` executors change during the run and a static placement
ends up unbalanced. Settings (``-c key=value``): ``compute.rate`` tuples/s per spout
(default 2000), ``compute.cost`` (default 2000: n of H(n) for the hottest key),
``compute.keys`` (default 64), ``compute.shift.secs`` (default 30), ``compute.spouts``,
``compute.bolts`` (default 2 and 8), ``compute.workers`` (default 8).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

from nstorm import Bolt, Context, Spout, Topology, TopologyBuilder, Tuple


class Keys(Spout):
    outputs = ("key",)

    def open(self, conf: Mapping[str, Any], context: Context) -> None:
        self.rate = float(conf.get("compute.rate", 2000))
        self.keys = int(conf.get("compute.keys", 64))
        self.shift = float(conf.get("compute.shift.secs", 30))
        self.rng = random.Random(int(conf.get("compute.seed", 7)) + context.task_index)
        self.started = time.monotonic()
        self.state.setdefault("n", 0)

    def next_tuple(self) -> None:
        elapsed = time.monotonic() - self.started
        n = self.state["n"]
        if n >= self.rate * elapsed:
            return
        # A hot range of a quarter of the keys gets 80% of the tuples; it moves every `shift` s.
        phase = int(elapsed // self.shift) if self.shift else 0
        quarter = max(1, self.keys // 4)
        if self.rng.random() < 0.8:
            key = (phase * quarter + self.rng.randrange(quarter)) % self.keys
        else:
            key = self.rng.randrange(self.keys)
        self.state["n"] = n + 1
        self.emit((key,), msg_id=n)


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
    builder.set_bolt("harmonic", Harmonic, parallelism=int(conf.get("compute.bolts", 8))).fields_grouping(
        "keys", ["key"])
    builder.set_bolt("sink", Sink, parallelism=2).shuffle_grouping("harmonic")
    return builder.build(workers=int(conf.get("compute.workers", 8)))
