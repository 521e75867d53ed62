"""User code that raises: ``flaky`` raises in process() for every 10th tuple, ``broken`` in prepare().

conf: ``test.numbers`` tuples to emit (default 100,000); with ``test.output.dir`` the spout
writes which of them were acked and which failed, so a test can check none went missing.
"""

from __future__ import annotations

import time

from nstorm import Bolt, Spout, TopologyBuilder

from _output import dump


class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf, context):
        self.n = 0
        self.limit = int(conf.get("test.numbers", 100_000))
        self.dir = conf.get("test.output.dir")
        self.acked: list[int] = []
        self.failed: list[int] = []
        self.dumped = 0.0

    def next_tuple(self):
        if self.dir and time.monotonic() - self.dumped > 0.2:
            dump(self.dir, "numbers", {"emitted": self.n, "acked": self.acked, "failed": self.failed})
            self.dumped = time.monotonic()
        if self.n < self.limit:
            self.n += 1
            self.emit((self.n,), msg_id=self.n)

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)


class Flaky(Bolt):
    def process(self, tup):
        if tup.values[0] % 10 == 0:
            raise ValueError(f"bad tuple {tup.values[0]}")


class Broken(Bolt):
    def prepare(self, conf, context):
        raise RuntimeError("cannot connect to the database")

    def process(self, tup):
        pass


builder = TopologyBuilder("faulty")
builder.set_spout("numbers", Numbers)
builder.set_bolt("flaky", Flaky, parallelism=2).shuffle_grouping("numbers")
builder.set_bolt("broken", Broken).shuffle_grouping("numbers")
topology = builder.build(workers=2, conf={"topology.message.timeout.secs": 5})
