"""The paper's linear template: spout -> bolt_1 -> ... -> bolt_k, each with a per-tuple cost.

Settings (``-c key=value``): ``linear.stages`` (bolts, default 3), ``linear.parallelism``
(executors per component, default 2), ``linear.cost.us`` (busy-loop microseconds per
tuple in each bolt, default 0), ``linear.workers`` (default 2), ``linear.rate``
(tuples/s per spout executor, default 0: unlimited), ``linear.payload`` (bytes per tuple,
default 32).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from nstorm import Bolt, Context, Spout, Topology, TopologyBuilder, Tuple


class Source(Spout):
    outputs = ("seq", "payload")

    def open(self, conf: Mapping[str, Any], context: Context) -> None:
        self.seq = 0
        self.rate = float(conf.get("linear.rate", 0))
        self.payload = "x" * int(conf.get("linear.payload", 32))
        self.started = time.monotonic()

    def next_tuple(self) -> None:
        if self.rate and self.seq >= self.rate * (time.monotonic() - self.started):
            return
        self.seq += 1
        self.emit((self.seq, self.payload), msg_id=self.seq)


class Stage(Bolt):
    outputs = ("seq", "payload")

    def prepare(self, conf: Mapping[str, Any], context: Context) -> None:
        self.cost = float(conf.get("linear.cost.us", 0)) / 1e6

    def process(self, tup: Tuple) -> None:
        if self.cost:
            end = time.perf_counter() + self.cost
            while time.perf_counter() < end:
                pass
        self.emit(tup.values)


def make_topology(conf: Mapping[str, Any]) -> Topology:
    stages = int(conf.get("linear.stages", 3))
    par = int(conf.get("linear.parallelism", 2))
    builder = TopologyBuilder("linear")
    builder.set_spout("source", Source, parallelism=par)
    previous = "source"
    for i in range(1, stages + 1):
        builder.set_bolt(f"stage{i}", Stage, parallelism=par).shuffle_grouping(previous)
        previous = f"stage{i}"
    return builder.build(workers=int(conf.get("linear.workers", 2)))
