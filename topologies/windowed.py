"""Per-sensor sliding sums over event-time readings that arrive out of order.

Run it: ``nstorm local topologies/windowed.py --duration 60``.

``readings`` (2 spout executors) emit ``(sensor, value, ts)``: ``ts`` is when the reading was
taken (the wall clock), but readings reach the topology out of order, up to
``windowed.jitter`` seconds (default 1.5) behind the newest one, and one in
``windowed.straggler.every`` (default 200) comes 30 s late. ``totals`` (a
:class:`~nstorm.WindowedBolt`, fields-grouped on the sensor) sums each sensor's values over
10-second windows sliding every 5 seconds, in event time: its watermark is the largest
timestamp seen less ``lag_secs = 2``, so the out-of-order readings still count in the right
windows, and the stragglers, too late for every window they belong to, go to its ``late``
stream. ``report`` logs each window's total as it fires (in the worker's log) and keeps the
latest per sensor in its state; ``late`` counts the stragglers.

Settings (``-c key=value``): ``windowed.rate`` (readings per second per spout, default 200),
``windowed.sensors`` (default 8), ``windowed.jitter``, ``windowed.straggler.every``,
``windowed.seed`` (default 7), ``windowed.output.dir`` (write ``report.json`` there).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nstorm import Bolt, Context, Spout, TopologyBuilder, Tuple, Window, WindowedBolt


class Readings(Spout):
    """Sensor readings stamped with when they were taken, delivered out of order; failed ones replayed."""

    outputs = ("sensor", "value", "ts")

    def open(self, conf: Mapping[str, Any], context: Context) -> None:
        self.rate = float(conf.get("windowed.rate", 200))
        self.sensors = int(conf.get("windowed.sensors", 8))
        self.jitter = float(conf.get("windowed.jitter", 1.5))
        self.straggle = int(conf.get("windowed.straggler.every", 200))
        self.rng = random.Random(int(conf.get("windowed.seed", 7)) + context.task_index)
        self.started = time.monotonic()
        self.sent = 0
        self.state.setdefault("in_flight", {})  # msg id -> the reading, replayed if it fails
        self.state.setdefault("replay", [])
        self.state.setdefault("next", 0)

    def next_tuple(self) -> None:
        state = self.state
        if state["replay"]:
            msg_id = state["replay"].pop()
            self.emit(tuple(state["in_flight"][msg_id]), msg_id=msg_id)
            return
        if self.sent > self.rate * (time.monotonic() - self.started):
            return
        n = state["next"]
        state["next"] = n + 1
        self.sent += 1
        ts = time.time() - self.rng.uniform(0, self.jitter)  # out of order, within the lag
        if self.straggle and n % self.straggle == self.straggle - 1:
            ts -= 30.0  # a straggler: too late for every window it belongs to
        reading = [f"s{self.rng.randrange(self.sensors)}", self.rng.randint(0, 100), round(ts, 3)]
        state["in_flight"][n] = reading
        self.emit(tuple(reading), msg_id=n)

    def ack(self, msg_id: Any) -> None:
        self.state["in_flight"].pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        if msg_id in self.state["in_flight"]:
            self.state["replay"].append(msg_id)


class Totals(WindowedBolt):
    """Each sensor's sum and count over 10 s windows every 5 s, in event time."""

    outputs = ("sensor", "total", "readings", "start", "end")
    window = Window.sliding(length=10.0, slide=5.0)
    timestamp_field = "ts"
    lag_secs = 2.0
    late_stream = "late"
    key_fields = ("sensor",)

    def init_window(self) -> list[int]:
        return [0, 0]

    def add_to_window(self, acc: list[int], tup: Tuple) -> list[int]:
        acc[0] += tup["value"]
        acc[1] += 1
        return acc

    def fire_window(self, acc: list[int], window: Any) -> None:
        self.emit((window.key, acc[0], acc[1], window.start, window.end))


class Report(Bolt):
    """Logs every window total and keeps each sensor's latest one in its state."""

    def prepare(self, conf: Mapping[str, Any], context: Context) -> None:
        self.out = conf.get("windowed.output.dir")

    def process(self, tup: Tuple) -> None:
        sensor, total, n, start, end = tup.values
        self.log("%s [%s, %s): total %d over %d readings", sensor, time.strftime("%H:%M:%S", time.localtime(start)),
                 time.strftime("%H:%M:%S", time.localtime(end)), total, n)
        self.state[sensor] = {"total": total, "readings": n, "start": start, "end": end}
        self.state["windows"] = self.state.get("windows", 0) + 1
        if self.out:  # one total per sensor and slide: a file write each is cheap
            path = Path(self.out) / "report.json"
            path.with_suffix(".tmp").write_text(json.dumps(self.state))
            path.with_suffix(".tmp").replace(path)


class Late(Bolt):
    """Counts the readings that came too late for their windows, per sensor."""

    def process(self, tup: Tuple) -> None:
        self.state[tup["sensor"]] = self.state.get(tup["sensor"], 0) + 1


builder = TopologyBuilder("windowed")
builder.set_spout("readings", Readings, parallelism=2)
builder.set_bolt("totals", Totals, parallelism=2).fields_grouping("readings", ["sensor"])
builder.set_bolt("report", Report).global_grouping("totals")
builder.set_bolt("late", Late).global_grouping("totals", stream="late")
# A reading is acked when its last window fires, up to about 12 s (length + lag) after it came:
# the spouts' pending cap must cover that (200 a second x 12 s = 2,400 a spout), or each spout
# waits at the cap for windows that wait for its next readings (the default 2,000 stalled the
# example after its first slide). Five thousand leaves room for a faster rate or a late watermark.
topology = builder.build(workers=2, conf={"topology.max.spout.pending": 5000})
