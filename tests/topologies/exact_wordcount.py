"""Word count over a fixed input, writing counts and acks to files so a test can check them.

conf: ``test.output.dir`` (required), ``test.sentences`` per spout executor (default 2000),
``test.rate`` new sentences per second per spout executor (default: as fast as it goes),
``test.after.go``: when set, the input runs until the test creates the file ``go`` in the
output directory and ends ``test.after.go`` sentences after the spout first sees it
(``test.sentences`` is then only a cap): a test's fault, however long it takes, lands while the
spouts still emit. Each spout writes ``total`` (the sentences it emits in all; null until it
has seen ``go``) next to its acks. ``test.movable``: the spouts keep their position, acks and
replays in ``self.state``, so that a live move hands them over (else a moved spout starts over).
"""

from __future__ import annotations

import time
from pathlib import Path

from nstorm import Bolt, Spout, TopologyBuilder
from topologies.sentences import sentences
from topologies.wordcount import Split

from _output import dump


class FixedSentences(Spout):
    outputs = ("sentence",)

    def open(self, conf, context):
        self.dir = conf["test.output.dir"]
        self.name = f"spout-{context.task_index}"
        self.todo = sentences(int(conf.get("test.sentences", 2000)), seed=100 + context.task_index)
        self.movable = bool(conf.get("test.movable"))
        self.own: dict = {}
        for key, empty in (("next", 0), ("acks", {}), ("fails", 0), ("replay", [])):
            self.book.setdefault(key, empty)
        self.dumped = 0.0
        self.dirty = True
        self.rate = float(conf.get("test.rate") or 0)
        self.started = time.monotonic()
        more = conf.get("test.after.go")
        self.more = None if more is None else int(more)
        self.go = Path(self.dir) / "go"
        self.looked = 0.0
        self.total = len(self.todo) if self.more is None else None  # known once "go" is seen

    @property
    def book(self) -> dict:
        return self.state if self.movable else self.own  # (a hand-over replaces self.state: never cached)

    next = property(lambda self: self.book["next"], lambda self, v: self.book.__setitem__("next", v))
    fails = property(lambda self: self.book["fails"], lambda self, v: self.book.__setitem__("fails", v))
    acks = property(lambda self: self.book["acks"])
    replay = property(lambda self: self.book["replay"])

    def next_tuple(self):
        now = time.monotonic()
        if self.total is None and now - self.looked > 0.1:
            self.looked = now
            if self.go.exists():
                self.total = min(self.next + self.more, len(self.todo))
                self.dirty = True
        if self.dirty and now - self.dumped > 0.2:
            dump(self.dir, self.name, {"acks": self.acks, "fails": self.fails, "emitted": self.next,
                                       "total": self.total})
            self.dumped, self.dirty = now, False
        end = len(self.todo) if self.total is None else self.total
        if self.replay:
            i = self.replay.pop()
            self.emit((self.todo[i],), msg_id=i)
        elif self.next < end and (not self.rate or self.next < (now - self.started) * self.rate):
            self.emit((self.todo[self.next],), msg_id=self.next)
            self.next += 1

    def ack(self, msg_id):
        self.acks[msg_id] = self.acks.get(msg_id, 0) + 1
        self.dirty = True

    def fail(self, msg_id):
        self.fails += 1
        self.replay.append(msg_id)
        self.dirty = True


class DumpingCount(Bolt):
    outputs = ("word", "count")
    tick_secs = 0.2

    def prepare(self, conf, context):
        self.dir = conf["test.output.dir"]
        self.name = f"count-{context.task_index}"
        self.dirty = True

    def process(self, tup):
        if tup.is_tick:
            if self.dirty:
                dump(self.dir, self.name, self.keyed_state)
                self.dirty = False
            return
        word = tup["word"]
        self.keyed_state[word] = self.keyed_state.get(word, 0) + 1
        self.dirty = True

    def on_key_groups(self, assigned, released):
        dump(self.dir, self.name, self.keyed_state)  # a live rescale moved counts here or away: at once


builder = TopologyBuilder("exactwc")
builder.set_spout("sentences", FixedSentences, parallelism=2)
builder.set_bolt("split", Split, parallelism=3).shuffle_grouping("sentences")
builder.set_bolt("count", DumpingCount, parallelism=4).fields_grouping("split", ["word"])
topology = builder.build(workers=2)
