"""Event-time watermarks computed inside the windowed bolt, with no watermark messages.

For every upstream task the bolt knows the largest timestamp it has received from it; that
task's watermark is that timestamp less the lag (``lag_secs``). The bolt's watermark is the
smallest over the upstream tasks, so one slow or out-of-order task holds windows open until
its tuples are in. A task that has sent nothing for ``topology.watermark.idle.secs`` (of the
wall clock) stops holding it back (a finished or idle source), until it sends again; a task
that never sent anything counts as sending since the bolt started. With every task idle the
watermark is the largest timestamp seen less the lag. The watermark never goes back.

Pure: the caller passes the wall clock. :meth:`Watermarks.export` is msgpack data (wall-clock
times, so it means the same in a moved copy), part of the windowed bolt's state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = ["Watermarks"]


class Watermarks:
    """Per upstream task ``[largest timestamp, wall-clock time of its last tuple]``."""

    def __init__(self, lag: float, idle_secs: float) -> None:
        self.lag = float(lag)
        self.idle = float(idle_secs)
        self.tasks: dict[int, list[float]] = {}
        self.value = -math.inf

    def expect(self, tasks: Iterable[int], now: float) -> None:
        """The upstream tasks (from the routing table): new ones count from ``now``; gone ones go."""
        tasks = set(tasks)
        for t in tasks:
            if t not in self.tasks:
                self.tasks[t] = [-math.inf, now]
        for t in [t for t in self.tasks if t not in tasks]:
            del self.tasks[t]

    def observe(self, task: int, largest: float | None, now: float) -> None:
        """``task`` sent tuples at ``now``; ``largest`` is their largest timestamp (None: none had one)."""
        mark = self.tasks.get(task)
        if mark is None:
            mark = self.tasks[task] = [-math.inf, now]
        if largest is not None and largest > mark[0]:
            mark[0] = largest
        mark[1] = now

    def current(self, now: float) -> float:
        """The watermark at wall-clock ``now`` (never smaller than before)."""
        idle = self.idle
        active = [m for m, seen in self.tasks.values() if now - seen < idle]
        if active:
            candidate = min(active) - self.lag
        elif self.tasks:
            candidate = max(m for m, _ in self.tasks.values()) - self.lag
        else:
            candidate = -math.inf
        if candidate > self.value:
            self.value = candidate
        return self.value

    def next_idle(self, now: float) -> float | None:
        """Wall-clock time at which the next active task turns idle (the watermark may move then)."""
        times = [seen + self.idle for _m, seen in self.tasks.values() if now - seen < self.idle]
        return min(times) if times else None

    def restart(self, now: float) -> None:
        """Every task counts as sending from ``now`` (a restored or moved copy: input stood still
        meanwhile, and a task must not pass for idle, and let the watermark past its tuples, for it)."""
        for mark in self.tasks.values():
            mark[1] = now

    def export(self) -> dict[str, Any]:
        return {"value": self.value, "tasks": [[t, m, seen] for t, (m, seen) in self.tasks.items()]}

    def load(self, data: dict[str, Any]) -> None:
        self.value = float(data.get("value", -math.inf))
        self.tasks = {int(t): [float(m), float(seen)] for t, m, seen in data.get("tasks") or ()}
