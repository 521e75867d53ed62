"""Integers 1..N summed by key (``n % 7``) with durable state: a replayable spout, keyed sums.

``numbers`` (1 spout) keeps its position in ``self.state`` (what a replayable spout must do:
a restore puts it back there) and the ids it has not seen acked yet; it emits ``(n,)`` with
``msg_id=n`` at about ``test.rate`` tuples/s. ``mod`` (2 bolts, shuffle) emits
``(n % 7, n)``; ``sum`` (3 bolts, fields grouping on ``key``) adds ``n`` into
``self.keyed_state[key]`` and counts its tuples in ``self.state``. The spout writes its
position and pending ids to ``numbers.json`` in ``test.output.dir``, each ``sum`` its totals
to ``sum-<index>.json``; ``commits.json`` lists the checkpoints ``on_commit`` heard of.

conf: ``test.output.dir`` (required), ``test.numbers`` (default 20000), ``test.rate``
(default 2000 a second), ``test.bad.state`` (``sum:0`` keeps a set in ``self.state``),
``test.poison`` (``mod`` raises on that number, on every replay too).
"""

from __future__ import annotations

import time

from nstorm import Bolt, Spout, TopologyBuilder

from _output import Snapshots


class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf, context):
        self.total = int(conf.get("test.numbers", 20000))
        self.rate = float(conf.get("test.rate", 2000))
        self.state.setdefault("next", 1)
        self.state.setdefault("pending", {})
        self.opened = time.monotonic()
        self.emitted = 0
        self.snapshots = Snapshots(conf["test.output.dir"], "numbers", lambda: {
            "next": self.state["next"], "pending": sorted(self.state["pending"])[:20],
            "pending_n": len(self.state["pending"])})

    def next_tuple(self):
        now = time.monotonic()
        self.snapshots.maybe(now)
        n = self.state["next"]
        if n <= self.total and self.emitted <= (now - self.opened) * self.rate:
            self.state["next"] = n + 1
            self.state["pending"][n] = 1
            self.emitted += 1
            self.emit((n,), msg_id=n)
            self.snapshots.changed()

    def ack(self, msg_id):
        self.state["pending"].pop(msg_id, None)
        self.snapshots.changed()


class Mod(Bolt):
    outputs = ("key", "n")

    def prepare(self, conf, context):
        self.poison = int(conf.get("test.poison", 0))

    def process(self, tup):
        if tup["n"] == self.poison:
            raise ValueError(f"poison tuple {self.poison}")
        self.emit((tup["n"] % 7, tup["n"]))


class Sum(Bolt):
    tick_secs = 0.2

    def prepare(self, conf, context):
        self.snapshots = Snapshots(conf["test.output.dir"], f"sum-{context.task_index}", lambda: {
            "totals": {str(k): v for k, v in self.keyed_state.items()}, "count": self.state.get("count", 0),
            "worker": context.worker_id}, every=0)
        self.commits = Snapshots(conf["test.output.dir"], f"commits-{context.task_index}",
                                 lambda: {"last": self.last_commit}, every=0)
        self.last_commit = 0
        if conf.get("test.bad.state") and context.task_index == 0:
            self.state["bad"] = {1, 2}  # a set is not msgpack data: every checkpoint of this executor fails

    def process(self, tup):
        if tup.is_tick:
            self.snapshots.maybe()
            self.commits.maybe()
            return
        key = tup["key"]
        self.keyed_state[key] = self.keyed_state.get(key, 0) + tup["n"]
        self.state["count"] = self.state.get("count", 0) + 1
        self.snapshots.changed()

    def on_key_groups(self, assigned, released):
        self.snapshots.changed()  # a live rescale moved totals here or away: written at once
        self.snapshots.maybe()

    def on_commit(self, checkpoint_id):
        self.last_commit = checkpoint_id
        self.commits.changed()


builder = TopologyBuilder("durablesum")
builder.set_spout("numbers", Numbers, parallelism=1)
builder.set_bolt("mod", Mod, parallelism=2).shuffle_grouping("numbers")
builder.set_bolt("sum", Sum, parallelism=3).fields_grouping("mod", ["key"])
topology = builder.build(workers=4)
