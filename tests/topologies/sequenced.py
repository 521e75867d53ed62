"""Sequence-numbered tuples through a relay to a checking bolt: order per executor pair, exact acks.

``seq`` (2 spouts) emits ``(lane, seq)`` with ``msg_id=seq``, every ``test.side_every``-th tuple on
the ``side`` stream; ``relay`` (2 bolts, shuffle) passes each tuple on, on the stream it came on;
``check`` (2 bolts, fields grouping on ``lane``) subscribes to both streams of both, so every
(sender executor, checker) pair carries two interleaved streams. The checker records every
tuple whose ``seq`` is not above the last one it saw from the same sender and lane.

conf: ``test.output.dir`` (required), ``test.tuples`` per spout executor (default 2000),
``test.rate`` tuples/s per spout executor (default 0: as fast as it can), ``test.side_every``
(default 7).
"""

from __future__ import annotations

import time

from nstorm import Bolt, Spout, TopologyBuilder

from _output import Snapshots, dump

FIELDS = ("lane", "seq")


class Sequence(Spout):
    outputs = {"default": FIELDS, "side": FIELDS}

    def open(self, conf, context):
        self.dir = conf["test.output.dir"]
        self.lane = context.task_index
        self.n = int(conf.get("test.tuples", 2000))
        self.rate = float(conf.get("test.rate", 0))
        self.every = int(conf.get("test.side_every", 7))
        self.seq = 0
        self.acks: dict[int, int] = {}
        self.fails = 0
        self.started = time.monotonic()
        self.snapshots = Snapshots(self.dir, f"spout-{self.lane}", lambda: {"acks": self.acks, "fails": self.fails,
                                                                            "emitted": self.seq})

    def next_tuple(self):
        now = time.monotonic()
        self.snapshots.maybe(now)
        if self.seq >= self.n or (self.rate and self.seq >= self.rate * (now - self.started)):
            return
        stream = "side" if self.seq % self.every == self.every - 1 else "default"
        self.emit((self.lane, self.seq), stream=stream, msg_id=self.seq)
        self.seq += 1

    def ack(self, msg_id):
        self.acks[msg_id] = self.acks.get(msg_id, 0) + 1
        self.snapshots.changed()

    def fail(self, msg_id):
        self.fails += 1  # no replay: a replayed tuple would look reordered to the checker
        self.snapshots.changed()


class Relay(Bolt):
    outputs = {"default": FIELDS, "side": FIELDS}

    def process(self, tup):
        self.emit(tup.values, stream=tup.stream)


class Check(Bolt):
    tick_secs = 0.2

    def prepare(self, conf, context):
        self.dir = conf["test.output.dir"]
        self.name = f"check-{context.task_index}"
        self.last: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.streams: dict[str, int] = {}
        self.violations: list[list] = []
        self.dirty = True

    def process(self, tup):
        if tup.is_tick:
            if self.dirty:
                dump(self.dir, self.name, {"counts": self.counts, "violations": self.violations,
                                           "streams": self.streams})
                self.dirty = False
            return
        lane, seq = tup["lane"], tup["seq"]
        pair = f"{tup.source}:{tup.source_task}/{lane}"
        last = self.last.get(pair, -1)
        if seq <= last:
            self.violations.append([pair, last, seq])
        self.last[pair] = seq
        key = f"{tup.source}/{lane}"
        self.counts[key] = self.counts.get(key, 0) + 1
        self.streams[tup.stream] = self.streams.get(tup.stream, 0) + 1
        self.dirty = True


builder = TopologyBuilder("sequenced")
builder.set_spout("seq", Sequence, parallelism=2)
relay = builder.set_bolt("relay", Relay, parallelism=2)
relay.shuffle_grouping("seq").shuffle_grouping("seq", stream="side")
check = builder.set_bolt("check", Check, parallelism=2)
for source in ("seq", "relay"):
    check.fields_grouping(source, ["lane"]).fields_grouping(source, ["lane"], stream="side")
topology = builder.build(workers=2)
