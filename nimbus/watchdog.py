"""Nimbus's stall watchdog: logs a stalled topology once a minute (see :mod:`nstorm.stall`).

``nstorm status`` shows a stall to whoever looks; the watchdog makes sure the cluster's log
says so too, with the executors to look at, without anybody asking.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from nstorm.records import Heartbeat
from nstorm.stall import find_stall

__all__ = ["StallWatchdog"]

log = logging.getLogger(__name__)

CHECK_SECS = 5.0  # how often a topology's heartbeats are read for this
LOG_SECS = 60.0  # a stall is logged at most this often per topology


class StallWatchdog:
    """Called from Nimbus's loop for every topology; reads heartbeats every ``CHECK_SECS`` at most."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._checked: dict[str, float] = {}
        self._logged: dict[str, float] = {}

    def check(self, name: str, read: Callable[[], tuple[float, Mapping[str, Heartbeat]]]) -> \
            dict[str, Any] | None:
        """The stall of ``name`` if one was found now (and logged, once a minute), else None.

        :arg read: returns the topology's message timeout and its workers' heartbeats (called
            only when a check is due).
        """
        now = self.clock()
        if now - self._checked.get(name, float("-inf")) < CHECK_SECS:
            return None
        self._checked[name] = now
        timeout_secs, beats = read()
        stall = find_stall(beats, timeout_secs, time.time())
        if stall is None:
            self._logged.pop(name, None)
            return None
        if now - self._logged.get(name, float("-inf")) >= LOG_SECS:
            self._logged[name] = now
            log.warning("topology %s stalled: no ack for %.0fs with %d tuples pending; holding input: %s; "
                        "waiting for a state: %s; holding tuples in open windows: %s", name,
                        time.time() - stall["since"], stall["pending"], ", ".join(stall["holding_input"]) or "-",
                        ", ".join(stall["waiting_for_state"]) or "-", ", ".join(stall["holding_windows"]) or "-")
        return stall

    def forget(self, name: str) -> None:
        """``name`` is gone (killed)."""
        self._checked.pop(name, None)
        self._logged.pop(name, None)
