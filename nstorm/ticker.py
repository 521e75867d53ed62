"""A daemon's loop: one pass every interval, or at once when woken, until stopped.

Nimbus, the supervisor and the worker each own one loop in one thread (STYLE: kazoo's
``zk_loop``), driven by two events: ``wake`` (a ZooKeeper watch fired, a frame was stashed)
and ``stop`` (SIGTERM, SIGINT).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

__all__ = ["passes"]


def passes(stop: threading.Event, wake: threading.Event, interval: float,
           also_until: Callable[[], bool] | None = None) -> Iterator[None]:
    """Yield once per pass: after ``interval`` seconds, or as soon as ``wake`` is set; end when
    ``stop`` is set (or ``also_until()`` is true)."""
    while not stop.is_set() and not (also_until is not None and also_until()):
        wake.wait(interval)
        wake.clear()
        if stop.is_set():
            return
        yield
