"""A keyed load whose bolt's parallelism can change: keys -> work (fields grouping on the key).

``benchmarks.rescale`` runs it to measure live rescaling. The spouts emit ``(key, ts)`` over
``keyed.keys`` keys (uniform), ``ts`` the wall-clock emit time, at a rate that follows
``keyed.schedule`` (``[[from_second, tuples/s per spout], ...]``, default ``[[0, 500]]``); each
``work`` executor does ``keyed.cost`` units of work per tuple (a sum over ``range(cost)``),
counts the tuple in ``self.keyed_state[key]`` and records how late it came: per key group
(``topology.max.parallelism`` groups, the unit a rescale moves) the largest delay (processing
time - ``ts``) in each ``keyed.bucket.secs`` bucket, and the tuples processed. It appends those
records to ``<keyed.output.dir>/work-<task>.jsonl`` (JSON lines ``{"t", "n", "groups": {g: max
delay}}``) when ``keyed.output.dir`` is set.

The spout keeps its position and its tuples in flight in ``self.state`` and replays failed ones:
with a durable state provider it is replayable, and counts survive a stop-and-restore.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

from nstorm import Bolt, Context, Spout, Topology, TopologyBuilder, Tuple


class Keys(Spout):
    """Emits ``(key, ts)`` at the scheduled rate; tracked, replayed when failed."""

    outputs = ("key", "ts")

    def open(self, conf: Mapping[str, Any], context: Context) -> None:
        self.keys = int(conf.get("keyed.keys", 512))
        schedule = conf.get("keyed.schedule") or [[0, 500]]
        if isinstance(schedule, str):
            schedule = json.loads(schedule)
        self.schedule = sorted((float(at), float(rate)) for at, rate in schedule)
        self.state.setdefault("n", 0)
        self.state.setdefault("in_flight", {})
        self.state.setdefault("replay", [])
        self.state.setdefault("started", time.time())
        self.sent_at_rate = (0.0, 0)  # (when the current rate began, tuples sent by then)
        self.index = context.task_index
        self.emitted_here = 0
        self.clock_start = time.time()

    def _due(self, now: float) -> int:
        """Tuples this spout should have sent by ``now`` since it opened (piecewise-constant rates)."""
        elapsed = now - self.state["started"]
        due = 0.0
        for i, (at, rate) in enumerate(self.schedule):
            end = self.schedule[i + 1][0] if i + 1 < len(self.schedule) else float("inf")
            if elapsed <= at:
                break
            due += (min(elapsed, end) - at) * rate
        return int(due)

    def next_tuple(self) -> None:
        state = self.state
        if state["replay"]:
            msg_id = state["replay"].pop()
            key = state["in_flight"].get(msg_id)
            if key is not None:
                self.emit((key, time.time()), msg_id=msg_id)
            return
        now = time.time()
        n = state["n"]
        if n >= self._due(now):
            return
        key = f"k{(n * 7919 + self.index * 104729) % self.keys}"
        state["n"] = n + 1
        msg_id = n * 1000 + self.index
        state["in_flight"][msg_id] = key
        self.emit((key, now), msg_id=msg_id)

    def ack(self, msg_id: Any) -> None:
        self.state["in_flight"].pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        if msg_id in self.state["in_flight"]:
            self.state["replay"].append(msg_id)


class Work(Bolt):
    """``keyed.cost`` units of work per tuple; counts per key; records delays per key group."""

    def prepare(self, conf: Mapping[str, Any], context: Context) -> None:
        self.cost = int(conf.get("keyed.cost", 2000))
        self.groups = int(conf.get("topology.max.parallelism", 128))
        self.bucket = float(conf.get("keyed.bucket.secs", 0.1))
        directory = conf.get("keyed.output.dir")
        self.path = os.path.join(str(directory), f"work-{context.task_index}.jsonl") if directory else None
        self.current = 0.0
        self.delays: dict[int, float] = {}
        self.n = 0

    def process(self, tup: Tuple) -> None:
        key, ts = tup.values
        sum(range(self.cost))
        self.keyed_state[key] = self.keyed_state.get(key, 0) + 1
        now = time.time()
        bucket = now - now % self.bucket
        if bucket != self.current:
            self._flush()
            self.current = bucket
        g = hash(key) % self.groups
        delay = now - ts
        if delay > self.delays.get(g, -1.0):
            self.delays[g] = delay
        self.n += 1

    def _flush(self) -> None:
        if self.path and self.n:
            with open(self.path, "a") as out:
                out.write(json.dumps({"t": self.current, "n": self.n,
                                      "groups": {str(g): round(d, 4) for g, d in self.delays.items()}}) + "\n")
        self.delays = {}
        self.n = 0

    def cleanup(self) -> None:
        self._flush()


def make_topology(conf: Mapping[str, Any]) -> Topology:
    """``keyed.spouts`` spouts (2), ``keyed.bolts`` work executors (4), ``keyed.workers`` workers (2)."""
    builder = TopologyBuilder("keyedwork")
    builder.set_spout("keys", Keys, parallelism=int(conf.get("keyed.spouts", 2)))
    builder.set_bolt("work", Work, parallelism=int(conf.get("keyed.bolts", 4))).fields_grouping("keys", ["key"])
    return builder.build(workers=int(conf.get("keyed.workers", 2)))
