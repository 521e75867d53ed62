"""Integers 1..N summed by key (``n % 7``): a small stateful topology for fault tests.

``numbers`` (1 spout) emits ``(n,)`` with ``msg_id=n`` at ``test.rate`` tuples/s and replays
what fails; ``mod`` (2 bolts, shuffle) emits ``(n % 7, n)``; ``sum`` (3 bolts, fields grouping
on ``key``) adds ``n`` into ``self.state``. The spout writes the ids acked so far (and how
often) to ``numbers.json`` in ``test.output.dir``, each ``sum`` its totals to ``sum-<index>.json``.

conf: ``test.output.dir`` (required), ``test.numbers`` (default 20000), ``test.rate``
(default 2000 a second; 0 = as fast as it goes).
"""

from __future__ import annotations

import time
from pathlib import Path

from nstorm import Bolt, Spout, TopologyBuilder

from _output import Snapshots


class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf, context):
        self.dir = conf["test.output.dir"]
        self.total = int(conf.get("test.numbers", 20000))
        self.rate = float(conf.get("test.rate", 2000))
        self.next = 1
        self.acked: dict[int, int] = {}
        self.fails = 0
        self.replay: list[int] = []
        self.started = time.monotonic()
        self.snapshots = Snapshots(self.dir, "numbers", lambda: {"acked": self.acked, "fails": self.fails,
                                                                  "emitted": self.next - 1})

    def next_tuple(self):
        now = time.monotonic()
        self.snapshots.maybe(now)
        if self.replay:
            n = self.replay.pop()
            self.emit((n,), msg_id=n)
        elif self.next <= self.total and (not self.rate or self.next <= (now - self.started) * self.rate):
            self.emit((self.next,), msg_id=self.next)
            self.next += 1

    def ack(self, msg_id):
        self.acked[msg_id] = self.acked.get(msg_id, 0) + 1
        self.snapshots.changed()

    def fail(self, msg_id):
        self.fails += 1
        self.replay.append(msg_id)
        self.snapshots.changed()


class Mod(Bolt):
    outputs = ("key", "n")

    def process(self, tup):
        self.emit((tup["n"] % 7, tup["n"]))


class Sum(Bolt):
    """Writes its totals to ``sum-<index>.json`` every 0.2 s. ``prepare`` waits while the file
    ``hold-sum-<index>`` exists in the output directory (at most 60 s): a test holds a moved-in
    copy there, between its start and the moment it asks for its state."""

    tick_secs = 0.2

    def prepare(self, conf, context):
        self.dir = conf["test.output.dir"]
        self.name = f"sum-{context.task_index}"
        self.worker = context.worker_id
        hold = Path(self.dir) / f"hold-{self.name}"
        deadline = time.monotonic() + 60
        while hold.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.snapshots = Snapshots(self.dir, self.name, lambda: {"state": self.state, "worker": self.worker}, every=0)

    def process(self, tup):
        if tup.is_tick:
            self.snapshots.maybe()
            return
        key = str(tup["key"])
        self.state[key] = self.state.get(key, 0) + tup["n"]
        self.snapshots.changed()


builder = TopologyBuilder("keyedsum")
builder.set_spout("numbers", Numbers, parallelism=1)
builder.set_bolt("mod", Mod, parallelism=2).shuffle_grouping("numbers")
builder.set_bolt("sum", Sum, parallelism=3).fields_grouping("mod", ["key"])
topology = builder.build(workers=4)
