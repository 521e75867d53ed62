"""A small topology for the UI's tests: user metrics, an error with a stack trace, two workers.

``numbers`` emits about ``test.rate`` tracked numbers a second (default 200); ``square``
registers a counter (``squares``) and a gauge (``last_n``) and logs each number at DEBUG
(logger ``metered.square``: silent until ``nstorm set-log-level`` turns it on); ``sink`` raises
for every 97th number, so the component has a last error with its trace.
"""

from __future__ import annotations

import logging
import time

from nstorm import Bolt, Spout, TopologyBuilder

log = logging.getLogger("metered.square")


class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf, context):
        self.n = 0
        self.rate = float(conf.get("test.rate", 200))
        self.started = time.monotonic()
        self.emitted = context.register_counter("numbers")

    def next_tuple(self):
        if self.n >= self.rate * (time.monotonic() - self.started):
            return
        self.n += 1
        self.emitted.inc()
        self.emit((self.n,), msg_id=self.n)


class Square(Bolt):
    outputs = ("n", "square")

    def prepare(self, conf, context):
        self.last = 0
        self.squares = context.register_counter("squares")
        context.register_gauge("last_n", lambda: self.last)

    def process(self, tup):
        n = tup["n"]
        self.last = n
        self.squares.inc()
        log.debug("squared %d", n)
        self.emit((n, n * n))


class Sink(Bolt):
    def process(self, tup):
        if tup["n"] % 97 == 0:
            raise ValueError(f"unlucky number {tup['n']}")


builder = TopologyBuilder("metered")
builder.set_spout("numbers", Numbers, parallelism=1)
builder.set_bolt("square", Square, parallelism=2).shuffle_grouping("numbers")
builder.set_bolt("sink", Sink, parallelism=2).fields_grouping("square", ["n"])
topology = builder.build(workers=2)
