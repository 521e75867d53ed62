"""Per-key sliding sums at full speed, for ``benchmarks.windows``: a WindowedBolt or the same by hand.

``readings`` (``windows.spouts`` executors) emit ``(key, value, ts)`` as fast as they can (or
``windows.rate`` a second each): ``windows.keys`` keys, ``ts`` the wall clock less up to 0.5 s
(out of order, within the lag), drawn once from a seeded pool and cycled. ``sums`` sums each
key's values over 4 s windows sliding every 2 s in event time (lag 1 s) and emits
``(key, total, end)`` when a window fires; ``windows.variant`` picks how:

- ``windowed``: :class:`WindowSums`, a :class:`~nstorm.WindowedBolt` with an accumulator per
  window (``init_window`` / ``add_to_window`` / ``fire_window``);
- ``hand``: :class:`HandSums`, a plain bolt with ``process_batch`` that keeps the sums, the
  watermark (per upstream task, the minimum) and a heap of window ends itself, for exactly
  this window (what a user writes without windows).

``sink`` records each result's latency: the wall clock when it arrives less the moment its
window could fire at the earliest (its end plus the lag), and writes samples to
``sink.json`` in ``windows.output.dir`` twice a second.
"""

from __future__ import annotations

import heapq
import json
import math
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nstorm import Batch, Bolt, Context, Spout, TopologyBuilder, Tuple, Window, WindowedBolt

LENGTH, SLIDE, LAG = 4.0, 2.0, 1.0
POOL = 50_000
EMITS_PER_CALL = 64


def pool(seed: int, keys: int, size: int = POOL) -> list[tuple[str, int, float]]:
    """``(key, value, offset)``: the reading's key and value, and how far behind the clock its ts is."""
    rng = random.Random(seed)
    names = [f"k{i}" for i in range(keys)]
    return [(rng.choice(names), rng.randint(0, 100), round(rng.uniform(0, 0.5), 3)) for _ in range(size)]


class Readings(Spout):
    outputs = ("key", "value", "ts")

    def open(self, conf: Mapping[str, Any], context: Context) -> None:
        self.pool = pool(int(conf.get("windows.seed", 42)) + context.task_index, int(conf.get("windows.keys", 1000)))
        self.rate = float(conf.get("windows.rate", 0))
        self.reliable = bool(conf.get("windows.reliable", False))
        self.started = time.monotonic()
        self.i = 0

    def next_tuple(self) -> None:
        n = EMITS_PER_CALL
        if self.rate:
            n = min(n, int(self.rate * (time.monotonic() - self.started)) - self.i)
            if n <= 0:
                return
        pool_, size, emit, i = self.pool, len(self.pool), self.emit, self.i
        now = time.time()
        for j in range(i, i + n):
            key, value, offset = pool_[j % size]
            if self.reliable:
                emit((key, value, now - offset), msg_id=j)
            else:
                emit((key, value, now - offset))
        self.i = i + n


class WindowSums(WindowedBolt):
    outputs = ("key", "total", "end")
    window = Window.sliding(length=LENGTH, slide=SLIDE)
    timestamp_field = "ts"
    lag_secs = LAG
    key_fields = ("key",)

    def init_window(self) -> int:
        return 0

    def add_to_window(self, acc: int, tup: Tuple) -> int:
        return acc + tup.values[1]

    def fire_window(self, acc: int, window: Any) -> None:
        self.emit((window.key, acc, window.end))


class HandSums(Bolt):
    """The same sliding sums by hand: windows ``[k * SLIDE, k * SLIDE + LENGTH)``, two per reading."""

    outputs = ("key", "total", "end")
    tick_secs = 0.1  # the watermark moves with idle upstream tasks too: look at it now and then

    def prepare(self, conf: Mapping[str, Any], context: Context) -> None:
        self.sums: dict[tuple[str, float], int] = {}
        self.due: list[tuple[float, str, float]] = []  # (end, key, start)
        self.largest: dict[int, float] = {}
        self.watermark = -math.inf

    def process_batch(self, batch: Batch) -> None:
        sums, due, wm = self.sums, self.due, self.watermark
        largest = self.largest.get(batch.source_task, -math.inf)
        for key, value, ts in batch.values:
            if ts > largest:
                largest = ts
            start = math.floor(ts / SLIDE) * SLIDE
            for s in (start, start - SLIDE):
                end = s + LENGTH
                if end <= wm:
                    continue  # late
                k = (key, s)
                total = sums.get(k)
                if total is None:
                    heapq.heappush(due, (end, key, s))
                    sums[k] = value
                else:
                    sums[k] = total + value
        self.largest[batch.source_task] = largest
        self._fire()

    def process_tick(self, tup: Tuple) -> None:
        self._fire()

    def _fire(self) -> None:
        if not self.largest:
            return
        self.watermark = wm = max(self.watermark, min(self.largest.values()) - LAG)
        due, sums, emit = self.due, self.sums, self.emit
        while due and due[0][0] <= wm:
            end, key, start = heapq.heappop(due)
            emit((key, sums.pop((key, start)), end))


class Sink(Bolt):
    tick_secs = 0.5

    def prepare(self, conf: Mapping[str, Any], context: Context) -> None:
        self.out = Path(conf["windows.output.dir"]) / f"sink-{context.task_index}.json"
        self.samples: list[tuple[float, float]] = []  # (arrival wall clock, latency s)
        self.results = 0

    def process(self, tup: Tuple) -> None:
        if tup.is_tick:
            self.samples = self.samples[-50_000:]
            tmp = self.out.with_suffix(".tmp")
            tmp.write_text(json.dumps({"results": self.results, "samples": self.samples}))
            tmp.replace(self.out)
            return
        now = time.time()
        self.results += 1
        self.samples.append((now, now - (tup.values[2] + LAG)))


def make_topology(conf: Mapping[str, Any]) -> Any:
    variant = str(conf.get("windows.variant", "windowed"))
    builder = TopologyBuilder(f"sensor-{variant}")
    builder.set_spout("readings", Readings, parallelism=int(conf.get("windows.spouts", 2)))
    sums = {"windowed": WindowSums, "hand": HandSums}[variant]
    builder.set_bolt("sums", sums, parallelism=int(conf.get("windows.sums", 2))).fields_grouping("readings", ["key"])
    builder.set_bolt("sink", Sink).global_grouping("sums")
    return builder.build(workers=int(conf.get("windows.workers", 2)))
