"""Fencing: a worker cut off from ZooKeeper for longer than its session pauses its spouts.

Once a worker's ZooKeeper session can have expired, Nimbus may have given its
executors to other nodes (it does so when the worker's heartbeat node and its
supervisor's registration are gone). Its spouts must then stop emitting, or a
node cut off from the cluster would keep running executors that now also run
elsewhere. Bolts only finish what is already queued; no state is dropped,
so if the cut ends and the plan is unchanged (ZooKeeper itself was away, say)
the worker simply resumes. If the plan moved on, the supervisor mirrors the new
plan and the worker stops as usual.

States: ``CONNECTED`` -> ``DISCONNECTED`` (kazoo SUSPENDED or LOST) ->
``FENCED`` after ``fence_after`` seconds -> ``CONNECTED`` once ZooKeeper is back
*and* the plan in ZooKeeper is the one this worker runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooState

__all__ = ["Fence"]

log = logging.getLogger(__name__)


class Fence:
    """Tracks the worker's ZooKeeper connection and decides when its spouts must pause."""

    def __init__(self, worker_id: str, fence_after: float) -> None:
        self.worker_id = worker_id
        self.fence_after = fence_after
        self.fenced = False
        self._down_since: float | None = None
        self._lock = threading.Lock()

    def on_state(self, state: str) -> None:
        """kazoo listener: runs in kazoo's thread, so it only records the time."""
        with self._lock:
            if state in (KazooState.SUSPENDED, KazooState.LOST):
                if self._down_since is None:
                    self._down_since = time.monotonic()
            else:
                self._down_since = None

    def check(self, plan_is_current: Callable[[], bool]) -> bool:
        """Called every worker cycle; returns True while fenced.

        ``plan_is_current`` reads the plan's version in ZooKeeper and compares it
        with the one applied; it is only called when ZooKeeper is reachable.
        """
        with self._lock:
            down_since = self._down_since
        if down_since is not None:
            if not self.fenced and time.monotonic() - down_since >= self.fence_after:
                self.fenced = True
                log.warning("worker %s cut off from ZooKeeper for %.1fs: spouts paused (fenced)",
                            self.worker_id, time.monotonic() - down_since)
            return self.fenced
        if self.fenced:
            try:
                current = plan_is_current()
            except Exception:  # noqa: BLE001 - ZooKeeper flapping: stay fenced, ask again next cycle
                current = False
            if current:
                self.fenced = False
                log.info("worker %s reconnected and its plan is current: spouts resume", self.worker_id)
        return self.fenced
