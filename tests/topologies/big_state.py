"""A bolt whose ``self.state`` holds more than a network frame may (``wire.MAX_FRAME_BYTES``).

conf: ``test.output.dir`` (required), ``test.count`` numbers the spout emits (default 2000),
``test.rate`` per second (default 200), ``test.ballast.mb`` bytes of ballast in the bolt's
state (default 80). The bolt fills its ballast once, from random bytes, when its state has
none: a copy that got the state handed over reports the same digest; one that started empty
reports another.
"""

from __future__ import annotations

import hashlib
import os
import time

from nstorm import Bolt, Spout, TopologyBuilder

from _output import Snapshots


class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf, context):
        self.count = int(conf.get("test.count", 2000))
        self.rate = float(conf.get("test.rate", 200))
        self.next = 0
        self.acked: set[int] = set()
        self.fails = 0
        self.started = time.monotonic()
        self.out = Snapshots(conf["test.output.dir"], "spout",
                             lambda: {"acked": len(self.acked), "fails": self.fails, "emitted": self.next})

    def next_tuple(self):
        self.out.maybe()
        if self.next < self.count and self.next < (time.monotonic() - self.started) * self.rate:
            self.emit((self.next,), msg_id=self.next)
            self.next += 1

    def ack(self, msg_id):
        self.acked.add(msg_id)
        self.out.changed()

    def fail(self, msg_id):
        self.fails += 1
        self.emit((msg_id,), msg_id=msg_id)
        self.out.changed()


class Hold(Bolt):
    """Sums what it gets, next to a ballast that makes its state larger than a frame."""

    tick_secs = 0.2

    def prepare(self, conf, context):
        self.out = Snapshots(conf["test.output.dir"], f"hold-{context.task_index}", self._observe)
        if "ballast" not in self.state:
            size = int(float(conf.get("test.ballast.mb", 80)) * 2**20)
            self.state["ballast"] = os.urandom(64) * (size // 64)
            self.state.update(n=0, total=0)
        self.digest = hashlib.sha1(self.state["ballast"]).hexdigest()

    def _observe(self):
        return {"n": self.state["n"], "total": self.state["total"], "bytes": len(self.state["ballast"]),
                "digest": hashlib.sha1(self.state["ballast"]).hexdigest(), "first_digest": self.digest}

    def process(self, tup):
        if tup.is_tick:
            self.out.maybe()
            return
        self.state["n"] += 1
        self.state["total"] += tup["n"]
        self.out.changed()


builder = TopologyBuilder("bigstate")
builder.set_spout("numbers", Numbers, parallelism=1)
builder.set_bolt("hold", Hold, parallelism=1).shuffle_grouping("numbers")
topology = builder.build(workers=2)
