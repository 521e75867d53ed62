"""Seeded event-time readings summed per sensor in sliding windows, for the cluster tests of windows.

``readings`` (1 spout) emits ``test.readings`` readings ``(sensor, value, ts)`` at about
``test.rate`` a second: reading ``i`` is taken at event time ``i * 0.01`` s, out of order by up
to 0.5 s (``lag_secs`` is 1), and one in ``test.straggle.every`` is a straggler 100 s behind
(late for every window: it goes to the late stream); then one reading of value 0 per sensor
100 s after the last, untracked (its windows never close, so nothing would ack it), which
moves every executor's watermark past every window. The spout keeps its position and what is
in flight in ``self.state``: a restore (durable state) puts it back, a failure (memory) replays.
``totals`` (2 executors, fields grouping on the sensor) sums values over 4 s windows sliding
every 2 s (an accumulator per window with ``test.incremental``, else ``process_window`` over the
window's tuples). ``collect`` keeps, in its ``self.state``, every window's total and how often
it came, and the late readings; it writes them to ``collect.json`` in ``test.output.dir``.

:func:`expected` computes the windows a run must end with, by brute force.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

from nstorm import Bolt, Context, Spout, TopologyBuilder, Tuple, Window, WindowedBolt

from _output import Snapshots

LENGTH, SLIDE, LAG, STEP = 4.0, 2.0, 1.0, 0.01
SENSORS = 5


def reading(i: int, seed: int, straggle_every: int, n: int) -> tuple[str, int, float]:
    """Reading ``i`` of the seeded stream of ``n`` (then the closing ones)."""
    if i >= n:
        return f"s{i - n}", 0, round(n * STEP + 100.0, 4)
    rng = random.Random(seed * 1_000_003 + i)
    ts = round(i * STEP - rng.uniform(0, 0.5), 4)
    if straggle_every and i % straggle_every == straggle_every - 1:
        ts = round(ts - 100.0, 4)
    return f"s{rng.randrange(SENSORS)}", rng.randint(1, 100), ts


def expected(n: int, seed: int, straggle_every: int) -> tuple[dict[str, int], int]:
    """``({"sensor|start|end": total}, stragglers)``: every window of the readings (the closing
    readings move the watermark past them all), with the sum of its readings."""
    totals: dict[str, int] = {}
    stragglers = 0
    readings = [reading(i, seed, straggle_every, n) for i in range(n)]
    final = n * STEP + 100.0 - LAG
    for i, (sensor, value, ts) in enumerate(readings):
        if straggle_every and i % straggle_every == straggle_every - 1:
            stragglers += 1
            continue
        k = int(ts // SLIDE) + 1
        while True:
            k -= 1
            start = k * SLIDE
            end = start + LENGTH
            if end <= ts:
                break
            if start <= ts < end and end <= final:
                key = f"{sensor}|{start}|{end}"
                totals[key] = totals.get(key, 0) + value
    return totals, stragglers


class Readings(Spout):
    outputs = ("sensor", "value", "ts")

    def open(self, conf: Mapping[str, Any], context: Context) -> None:
        self.total = int(conf.get("test.readings", 10000))
        self.rate = float(conf.get("test.rate", 1500))
        self.seed = int(conf.get("test.seed", 1))
        self.straggle = int(conf.get("test.straggle.every", 500))
        self.state.setdefault("next", 0)
        self.state.setdefault("in_flight", {})
        self.state.setdefault("replay", [])
        self.opened = time.monotonic()
        self.emitted = 0
        self.snapshots = Snapshots(conf["test.output.dir"], "readings", lambda: {
            "next": self.state["next"], "in_flight": len(self.state["in_flight"]), "replayed": self.replayed})
        self.replayed = 0

    def next_tuple(self) -> None:
        now = time.monotonic()
        self.snapshots.maybe(now)
        state = self.state
        if state["replay"]:
            i = state["replay"].pop()
            self.replayed += 1
            self.emit(reading(i, self.seed, self.straggle, self.total), msg_id=i)
            return
        i = state["next"]
        if i < self.total + SENSORS and self.emitted <= (now - self.opened) * self.rate:
            state["next"] = i + 1
            self.emitted += 1
            if i >= self.total:  # a closing reading: untracked (its windows never close, nothing would ack it)
                self.emit(reading(i, self.seed, self.straggle, self.total))
            else:
                state["in_flight"][i] = 1
                self.emit(reading(i, self.seed, self.straggle, self.total), msg_id=i)
            self.snapshots.changed()

    def ack(self, msg_id: Any) -> None:
        self.state["in_flight"].pop(msg_id, None)
        self.snapshots.changed()

    def fail(self, msg_id: Any) -> None:
        if msg_id in self.state["in_flight"]:
            self.state["replay"].append(msg_id)


class _Windowed(WindowedBolt):
    outputs = ("sensor", "total", "start", "end")
    window = Window.sliding(length=LENGTH, slide=SLIDE)
    timestamp_field = "ts"
    lag_secs = LAG
    late_stream = "late"
    key_fields = ("sensor",)


class Totals(_Windowed):
    def process_window(self, window: Any) -> None:
        self.emit((window.key, sum(t["value"] for t in window.tuples), window.start, window.end))


class IncrementalTotals(_Windowed):
    def init_window(self) -> int:
        return 0

    def add_to_window(self, acc: int, tup: Tuple) -> int:
        return acc + tup["value"]

    def fire_window(self, acc: int, window: Any) -> None:
        self.emit((window.key, acc, window.start, window.end))


class Collect(Bolt):
    tick_secs = 0.2

    def prepare(self, conf: Mapping[str, Any], context: Context) -> None:
        self.state.setdefault("windows", {})
        self.state.setdefault("late", 0)
        self.snapshots = Snapshots(conf["test.output.dir"], "collect", lambda: dict(self.state), every=0)

    def process(self, tup: Tuple) -> None:
        if tup.is_tick:
            self.snapshots.maybe()
            return
        if tup.stream == "late":
            self.state["late"] += 1
        else:
            sensor, total, start, end = tup.values
            key = f"{sensor}|{float(start)}|{float(end)}"
            seen = self.state["windows"].get(key)
            self.state["windows"][key] = [total, (seen[1] if seen else 0) + 1]
        self.snapshots.changed()


def make_topology(conf: Mapping[str, Any]) -> Any:
    builder = TopologyBuilder("windowedsums")
    builder.set_spout("readings", Readings)
    totals = IncrementalTotals if conf.get("test.incremental") else Totals
    builder.set_bolt("totals", totals, parallelism=2).fields_grouping("readings", ["sensor"])
    builder.set_bolt("collect", Collect).global_grouping("totals").global_grouping("totals", stream="late")
    return builder.build(workers=3)
