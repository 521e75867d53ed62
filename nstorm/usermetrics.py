"""User metrics, in the spirit of Storm's metrics v2: counters and gauges a component registers.

A component registers them on its context in ``open``/``prepare``::

    def prepare(self, conf, context):
        self.words = context.register_counter("words")
        context.register_gauge("cache_size", lambda: len(self.cache))

    def process(self, tup):
        self.words.inc()            # or .inc(n)

The worker reports every executor's values in its heartbeat (a gauge's callable is read then,
from the heartbeat thread, so it should only read), and they reach ``nstorm status --json``
(per component: counters summed, gauges per executor) and the UI's ``/metrics`` (Prometheus:
``nstorm_user_<name>_total`` for a counter, ``nstorm_user_<name>`` for a gauge, labelled with the
topology, component, executor, worker and node). A counter moves with its executor in a live
migration, as the executor's own counters do.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Counter", "UserMetrics", "valid_name"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,99}$")


def valid_name(name: str) -> str:
    """``name`` if it is a metric name (letters, digits, ``_ . : -``; a letter or ``_`` first), else ValueError."""
    if not isinstance(name, str) or not _NAME.match(name):
        msg = f"metric name {name!r}: use letters, digits, '_', '.', ':' or '-', starting with a letter or '_'"
        raise ValueError(msg)
    return name


class Counter:
    """A number that only goes up: ``inc(n=1)``. Owned by one executor thread (no lock)."""

    __slots__ = ("name", "value")

    def __init__(self, name: str) -> None:
        self.name = name
        self.value = 0

    def inc(self, n: int | float = 1) -> None:
        """Add ``n`` (>= 0 and finite: a NaN or an infinity would make every report of it
        unreadable JSON)."""
        if not 0 <= n < math.inf:
            msg = (f"counter {self.name!r}: inc({n}) would go down; use a gauge" if n < 0
                   else f"counter {self.name!r}: inc({n}): expected a finite number")
            raise ValueError(msg)
        self.value += n

    def __repr__(self) -> str:
        return f"Counter({self.name!r}, {self.value})"


class UserMetrics:
    """One executor's registered counters and gauges."""

    def __init__(self) -> None:
        self.counters: dict[str, Counter] = {}
        self.gauges: dict[str, Callable[[], Any]] = {}
        self._carried: dict[str, float] = {}  # values of counters a moved-away copy had

    def __bool__(self) -> bool:
        return bool(self.counters or self.gauges)

    def register_counter(self, name: str) -> Counter:
        """The counter ``name`` (registering it again returns the same one)."""
        valid_name(name)
        if name in self.gauges:
            msg = f"metric {name!r} is registered as a gauge already"
            raise ValueError(msg)
        counter = self.counters.get(name)
        if counter is None:
            counter = self.counters[name] = Counter(name)
            counter.value += self._carried.pop(name, 0)
        return counter

    def register_gauge(self, name: str, fn: Callable[[], Any]) -> None:
        """Report ``fn()`` as gauge ``name`` at each heartbeat (re-registering replaces ``fn``)."""
        valid_name(name)
        if not callable(fn):
            msg = f"gauge {name!r}: expected a callable, got {type(fn).__name__}"
            raise TypeError(msg)
        if name in self.counters:
            msg = f"metric {name!r} is registered as a counter already"
            raise ValueError(msg)
        self.gauges[name] = fn

    def carry(self, counters: Mapping[str, Any]) -> None:
        """Add the counter values a moved-away copy handed over (to counters registered later too)."""
        for name, value in counters.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or (
                    isinstance(value, float) and not math.isfinite(value)):
                continue
            if name in self.counters:
                self.counters[name].value += value
            else:
                self._carried[name] = self._carried.get(name, 0) + value

    def counter_values(self) -> dict[str, float]:
        return {name: c.value for name, c in self.counters.items()}

    def snapshot(self) -> dict[str, dict[str, float]]:
        """``{"counters": {name: value}, "gauges": {name: value}}``; a gauge whose callable raises or
        returns something that is not a finite number is left out (logged once per name)."""
        gauges = {}
        for name, fn in list(self.gauges.items()):
            try:
                value = fn()
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    msg = f"returned {value!r}, not a number"
                    raise TypeError(msg)
            except Exception as exc:  # noqa: BLE001 - user code must not stop the heartbeat
                _warn_once(name, exc)
                continue
            gauges[name] = value
        counters = {name: value for name, value in self.counter_values().items()
                    if isinstance(value, int) or math.isfinite(value)}
        return {"counters": counters, "gauges": gauges}


_warned: set[str] = set()


def _warn_once(name: str, exc: BaseException) -> None:
    if name not in _warned:
        _warned.add(name)
        log.warning("gauge %r cannot be read (%s: %s); left out of the reports", name, type(exc).__name__, exc)
