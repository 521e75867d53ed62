"""What a window is: :class:`Window` (sliding, tumbling, session; by time or by count) and its arithmetic.

Time windows are aligned to multiples of their slide from timestamp 0, as in Flink:
window ``k`` of a sliding window covers ``[k * slide, k * slide + length)`` and a tumbling
window is a sliding one whose slide is its length, so ``Window.tumbling(1.0)`` covers
``[k, k + 1)`` for every integer ``k``, negative ones included. Whether a timestamp is in a
window is decided by exactly that half-open comparison on those two floats (and nothing
else), so the engine and any reference that uses :func:`window_bounds` agree at the edges.

A count window holds a key's last ``count`` tuples and fires every ``slide_count`` of them
(Storm's and Flink's count windows: the window fired at the key's ``c``-th tuple holds its
tuples ``c - count`` to ``c - 1``, fewer for the first ones). A session window holds a key's
tuples closer than ``gap`` to the next: it covers ``[first, last + gap)`` and merges with any
session it overlaps.

A :class:`Window` is made where the bolt class is defined, so its constructors never raise:
:meth:`Window.problem` says what is wrong, and ``TopologyBuilder.build`` turns that into a
``TopologyError`` naming the bolt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["COUNT", "SESSION", "TIME", "Window", "count_windows", "time_windows", "window_bounds"]

TIME = "time"
COUNT = "count"
SESSION = "session"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Window:
    """A window definition: make one with :meth:`sliding`, :meth:`tumbling` or :meth:`session`.

    :ivar kind: ``"time"``, ``"count"`` or ``"session"``.
    :ivar length: seconds (time), tuples (count) or the gap in seconds (session).
    :ivar slide: seconds or tuples between two firings (the length for a tumbling window;
        the gap for a session).
    """

    kind: str
    length: Any
    slide: Any
    error: str | None = None  # what the arguments got wrong (reported by ``build``)

    @classmethod
    def sliding(cls, length: float | None = None, slide: float | None = None, *,
                count: int | None = None, slide_count: int | None = None) -> Window:
        """A sliding window: ``Window.sliding(length=10.0, slide=5.0)`` (seconds) or
        ``Window.sliding(count=100, slide_count=10)`` (tuples)."""
        if count is not None or slide_count is not None:
            if length is not None or slide is not None:
                return cls(COUNT, count, slide_count, "give either length and slide (seconds) or count and "
                                                      "slide_count (tuples), not both")
            return cls(COUNT, count, slide_count)
        return cls(TIME, length, slide)

    @classmethod
    def tumbling(cls, length: float | None = None, *, count: int | None = None) -> Window:
        """A tumbling window: ``Window.tumbling(10.0)`` (seconds) or ``Window.tumbling(count=100)``."""
        if count is not None:
            if length is not None:
                return cls(COUNT, count, count, "give either a length (seconds) or a count (tuples), not both")
            return cls(COUNT, count, count)
        return cls(TIME, length, length)

    @classmethod
    def session(cls, gap: float | None = None) -> Window:
        """A session window: a key's tuples until ``gap`` seconds pass without one."""
        return cls(SESSION, gap, gap)

    @property
    def is_time(self) -> bool:
        return self.kind == TIME

    @property
    def is_count(self) -> bool:
        return self.kind == COUNT

    @property
    def is_session(self) -> bool:
        return self.kind == SESSION

    def problem(self) -> str | None:
        """What is wrong with this window (None: nothing)."""
        if self.error:
            return self.error
        if self.kind == COUNT:
            for name, value in (("count", self.length), ("slide_count", self.slide)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    return f"{name} must be a positive integer, got {value!r}"
            return None
        names = ("gap", "gap") if self.kind == SESSION else ("length", "slide")
        for name, value in zip(names, (self.length, self.slide), strict=True):
            if not _number(value) or value <= 0:
                return f"{name} must be a positive number of seconds, got {value!r}"
        return None

    def as_json(self) -> dict[str, Any]:
        """The window in a topology's JSON definition."""
        return {"kind": self.kind, "length": self.length, "slide": self.slide}

    def __str__(self) -> str:
        if self.kind == COUNT:
            return f"Window.sliding(count={self.length}, slide_count={self.slide})"
        if self.kind == SESSION:
            return f"Window.session(gap={self.length})"
        return f"Window.sliding(length={self.length}, slide={self.slide})"


def window_bounds(k: int, length: float, slide: float) -> tuple[float, float]:
    """``(start, end)`` of time window ``k``: ``[k * slide, k * slide + length)``."""
    start = k * slide
    return start, start + length


def time_windows(ts: float, length: float, slide: float) -> range:
    """The indexes ``k`` of the time windows that hold ``ts`` (empty when ``ts`` falls in a gap
    between windows, a slide longer than the length): exactly those with
    ``k * slide <= ts < k * slide + length``."""
    hi = math.floor(ts / slide)
    while hi * slide > ts:
        hi -= 1
    while (hi + 1) * slide <= ts:
        hi += 1
    lo = math.floor((ts - length) / slide) + 1
    while lo <= hi and lo * slide + length <= ts:
        lo += 1
    while (lo - 1) * slide + length > ts and lo - 1 <= hi:
        lo -= 1
    return range(lo, hi + 1)


def last_time_window(ts: float, slide: float) -> int:
    """The index of the last window that can hold ``ts`` (the largest ``k`` with ``k * slide <= ts``)."""
    hi = math.floor(ts / slide)
    while hi * slide > ts:
        hi -= 1
    while (hi + 1) * slide <= ts:
        hi += 1
    return hi


def count_windows(i: int, count: int, slide: int) -> range:
    """The firing positions ``c`` (multiples of ``slide``) of the count windows that hold a key's
    ``i``-th tuple (0-based): those with ``c - count <= i < c``; empty in a gap (slide > count)."""
    first = (i // slide + 1) * slide
    last = ((i + count) // slide) * slide
    return range(first, last + 1, slide) if first <= last else range(0)
