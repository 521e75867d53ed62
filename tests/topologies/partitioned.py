"""A partitioned spout rescaled live: every record of every partition must come out.

``offsets`` (a spout) reads ``test.partitions`` partitions of ``test.records`` records each; a
partition's position and the records to send again are its state in ``self.keyed_state[p]``,
so a live rescale of the spout hands partitions over with their positions. A spout claims the
partitions it owns (``context.owns``) in ``open`` and when a rescale gives it more
(``on_key_groups``), and emits ``(partition, offset)`` for the partitions in its
``keyed_state``, at ``test.rate`` records/s in all. ``record`` (2 bolts, shuffle) writes the
records it saw to ``record-<index>.json`` in ``test.output.dir``.
"""

from __future__ import annotations

import time

from nstorm import Bolt, Spout, TopologyBuilder

from _output import Snapshots


class Offsets(Spout):
    outputs = ("partition", "offset")

    def open(self, conf, context):
        self.partitions = int(conf.get("test.partitions", 16))
        self.records = int(conf.get("test.records", 500))
        self.rate = float(conf.get("test.rate", 2000))
        self.started = time.monotonic()
        self.sent = 0
        self.claim()

    def claim(self):
        for p in range(self.partitions):
            if self.context.owns(p):
                self.keyed_state.setdefault(p, {"next": 0, "replay": []})

    def on_key_groups(self, assigned, released):
        self.claim()

    def next_tuple(self):
        parallelism = self.context.parallelism["offsets"]
        if self.sent > (time.monotonic() - self.started) * self.rate / parallelism:
            return
        for p, st in list(self.keyed_state.items()):
            if st["replay"]:
                offset = st["replay"].pop()
            elif st["next"] < self.records:
                offset = st["next"]
                st["next"] = offset + 1
            else:
                continue
            self.keyed_state.touch(p)
            self.sent += 1
            self.emit((p, offset), msg_id=[p, offset])

    def fail(self, msg_id):
        p, offset = msg_id
        if p in self.keyed_state:
            self.keyed_state[p]["replay"].append(offset)
            self.keyed_state.touch(p)


class Record(Bolt):
    tick_secs = 0.2

    def prepare(self, conf, context):
        self.seen = {}
        self.out = Snapshots(conf["test.output.dir"], f"record-{context.task_index}", lambda: self.seen, every=0)

    def process(self, tup):
        if tup.is_tick:
            self.out.maybe()
            return
        key = f"{tup['partition']}:{tup['offset']}"
        self.seen[key] = self.seen.get(key, 0) + 1
        self.out.changed()


builder = TopologyBuilder("partitioned")
builder.set_spout("offsets", Offsets, parallelism=2)
builder.set_bolt("record", Record, parallelism=2).shuffle_grouping("offsets")
topology = builder.build(workers=2)
