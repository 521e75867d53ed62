"""User code that raises: ``flaky`` raises in process() for every 10th tuple, ``broken`` in prepare()."""

from __future__ import annotations

from nstorm import Bolt, Spout, TopologyBuilder


class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf, context):
        self.n = 0

    def next_tuple(self):
        if self.n < 100_000:
            self.n += 1
            self.emit((self.n,), msg_id=self.n)


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
