"""One spout, one recording bolt per grouping: tests check where every tuple landed.

conf: ``test.output.dir`` (required), ``test.keys`` per spout executor (default 300).
"""

from __future__ import annotations

from nstorm import Bolt, Spout, TopologyBuilder

from _output import dump

FIELDS = ("key", "spout", "worker")


class Keys(Spout):
    outputs = {"default": FIELDS, "direct": FIELDS}

    def open(self, conf, context):
        self.n = int(conf.get("test.keys", 300))
        self.i = 0
        self.index = context.task_index
        self.worker = context.worker_id
        self.dir = conf["test.output.dir"]
        self.acked = 0

    def next_tuple(self):
        if self.i < self.n:
            values = (self.i, self.index, self.worker)
            self.emit(values, msg_id=(self.index, self.i))
            self.emit_direct(self.i % 3, values, stream="direct")
            self.i += 1

    def ack(self, msg_id):
        self.acked += 1
        if self.acked == self.n:
            dump(self.dir, f"spout-{self.index}", {"acked": self.acked})


class Recorder(Bolt):
    tick_secs = 0.2

    def prepare(self, conf, context):
        self.dir = conf["test.output.dir"]
        self.name = f"{context.component}-{context.task_index}"
        self.worker = context.worker_id
        self.seen: list[list] = []
        self.dirty = True

    def process(self, tup):
        if tup.is_tick:
            if self.dirty:
                dump(self.dir, self.name, {"worker": self.worker, "seen": self.seen})
                self.dirty = False
            return
        self.seen.append([tup["key"], tup["spout"], tup["worker"], tup.stream])
        self.dirty = True


builder = TopologyBuilder("groupings")
builder.set_spout("src", Keys, parallelism=2)
builder.set_bolt("shuf", Recorder, parallelism=3).shuffle_grouping("src")
builder.set_bolt("fld", Recorder, parallelism=3).fields_grouping("src", ["key"])
builder.set_bolt("al", Recorder, parallelism=3).all_grouping("src")
builder.set_bolt("glob", Recorder, parallelism=3).global_grouping("src")
builder.set_bolt("loc", Recorder, parallelism=3).local_or_shuffle_grouping("src")
builder.set_bolt("non", Recorder, parallelism=3).none_grouping("src")
builder.set_bolt("dir", Recorder, parallelism=3).direct_grouping("src", stream="direct")
topology = builder.build(workers=2)
