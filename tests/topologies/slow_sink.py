"""A fast unreliable spout feeding a slow bolt (about 2 ms a tuple): backpressure must pace the spout."""

from __future__ import annotations

import time

from nstorm import Bolt, Spout, TopologyBuilder


class Fast(Spout):
    outputs = ("n",)

    def open(self, conf, context):
        self.n = 0

    def next_tuple(self):
        self.n += 1
        self.emit((self.n,))


class Slow(Bolt):
    def process(self, tup):
        time.sleep(0.002)


builder = TopologyBuilder("slowsink")
builder.set_spout("fast", Fast)
builder.set_bolt("slow", Slow).shuffle_grouping("fast")
topology = builder.build(workers=2, conf={"topology.acker.executors": 0})
