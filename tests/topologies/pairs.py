"""Executors that talk in fixed pairs: ``src:i`` sends only to ``dst:i`` (direct grouping).

With 3 pairs over 2 workers the round-robin plan splits every pair across the workers;
OTD should bring each pair together. conf: ``test.rate`` tuples/s per spout (default 200),
``test.count`` tuples per spout then quiet (default 0: endless).
"""

from __future__ import annotations

import time

from nstorm import Bolt, Spout, TopologyBuilder


class Src(Spout):
    outputs = ("n", "payload")

    def open(self, conf, context):
        self.rate = float(conf.get("test.rate", 200))
        self.count = int(conf.get("test.count", 0))
        self.index = context.task_index
        self.started = time.monotonic()
        self.state.setdefault("n", 0)

    def next_tuple(self):
        n = self.state["n"]
        if self.count and n >= self.count:
            return
        if n >= self.rate * (time.monotonic() - self.started):
            return
        self.state["n"] = n + 1
        self.emit_direct(self.index, (n, "x" * 64), msg_id=n)


class Dst(Bolt):
    def process(self, tup):
        self.state["seen"] = self.state.get("seen", 0) + 1


builder = TopologyBuilder("pairs")
builder.set_spout("src", Src, parallelism=3)
builder.set_bolt("dst", Dst, parallelism=3).direct_grouping("src")
topology = builder.build(workers=2)
