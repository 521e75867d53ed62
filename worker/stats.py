"""Windowed executor statistics for heartbeats: rates, Storm's capacity and execute latency.

Executors keep cumulative counters only (``executed``, ``emitted``, a bolt's ``busy_secs``:
the time its loop spent taking input, read off clock reads the loop makes anyway). At each
heartbeat the worker hands them to a :class:`StatsWindow`, which keeps a few samples per
executor and adds, over the last ``worker.stats.window.secs``:

- ``executed_rate`` and ``emitted_rate``: tuples per second;
- ``capacity`` (bolts): Storm's "executed x execute latency / window", that is the share of
  the window the executor was busy (1.0: it cannot keep up);
- ``execute_ms`` (bolts): busy time per executed tuple, Storm's execute latency.

So every reader (``status --json``, the UI, ``/metrics``) gets the same numbers without
keeping state of its own. Counters that go down (a rollback made new executors) restart the
window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["StatsWindow"]


class StatsWindow:
    """Samples per executor over a sliding window (see the module docstring)."""

    def __init__(self, window_secs: float = 10.0) -> None:
        self.window = max(0.5, float(window_secs))
        self._samples: dict[str, deque[tuple[float, int, int, float]]] = {}

    def apply(self, now: float, executors: Mapping[str, MutableMapping[str, Any]]) -> None:
        """Add the windowed fields to each executor's counters (in place); ``now`` is monotonic."""
        for eid, counters in executors.items():
            counters.update(self.update(now, eid, counters))
        for gone in set(self._samples) - set(executors):
            del self._samples[gone]

    def update(self, now: float, eid: str, counters: Mapping[str, Any]) -> dict[str, Any]:
        executed = int(counters.get("executed") or 0)
        emitted = int(counters.get("emitted") or 0)
        busy = counters.get("busy_secs")
        sample = (now, executed, emitted, float(busy or 0.0))
        samples = self._samples.get(eid)
        if samples is None or (samples and (executed < samples[-1][1] or emitted < samples[-1][2])):
            samples = self._samples[eid] = deque()
        samples.append(sample)
        while len(samples) > 2 and now - samples[1][0] >= self.window:
            samples.popleft()  # keep one sample at or before the window's start
        first = samples[0]
        span = now - first[0]
        if span <= 0:
            return {"executed_rate": None, "emitted_rate": None,
                    **({"capacity": None, "execute_ms": None} if busy is not None else {})}
        d_exec = executed - first[1]
        out: dict[str, Any] = {"executed_rate": round(d_exec / span, 3), "emitted_rate": round((emitted - first[2]) / span, 3)}
        if busy is not None:
            d_busy = max(0.0, sample[3] - first[3])
            out["capacity"] = round(min(d_busy / span, 1.0), 4)
            out["execute_ms"] = round(1000.0 * d_busy / d_exec, 4) if d_exec > 0 else None
        return out
