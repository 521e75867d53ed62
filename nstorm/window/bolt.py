"""The windowed bolt API: :class:`WindowedBolt` and the :class:`TupleWindow` it is handed.

A windowed bolt declares a :class:`~nstorm.window.spec.Window` and either ``process_window``
(the window's tuples at each firing) or the incremental trio ``init_window`` /
``add_to_window`` / ``fire_window`` (one accumulator per window, no tuples kept; session
windows also need ``merge_windows``). The engine (:mod:`nstorm.window.engine`, run by
``worker.windowed``) assigns tuples to windows, computes the watermark, fires, routes late
tuples and acks; the bolt never sees a single tuple outside a window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from nstorm.component import Bolt, Tuple
from nstorm.window.spec import Window

__all__ = ["TupleWindow", "WindowedBolt"]


class TupleWindow:
    """One firing of one window, as ``process_window`` and ``fire_window`` see it.

    :ivar key: the values of ``key_fields`` (one value for one field, a tuple for several;
        None without key fields: one window per executor, as in Storm).
    :ivar start: / :ivar end: the window's bounds, in its time (event time, or the wall clock
        for processing time): ``[start, end)`` for time and session windows; for count windows
        the smallest and largest timestamp of its tuples.
    :ivar late: this firing is due to late tuples (within ``allowed_lateness_secs``), after
        the window had fired already or the watermark had passed its end.
    """

    __slots__ = ("key", "start", "end", "late", "_firing", "_make")

    def __init__(self, key: Any, start: float, end: float, late: bool, firing: Any = None,
                 make: Callable[[list[Any]], list[Tuple]] | None = None) -> None:
        self.key = key
        self.start = start
        self.end = end
        self.late = late
        self._firing = firing
        self._make = make

    def _tuples(self, items: list[Any] | None, what: str) -> list[Tuple]:
        if items is None:
            msg = f"window.{what}: an incremental windowed bolt (fire_window) keeps no tuples"
            raise AttributeError(msg)
        return self._make(items) if self._make is not None else list(items)

    @property
    def tuples(self) -> list[Tuple]:
        """Every tuple in the window, in timestamp order (Storm's ``get()``)."""
        return self._tuples(self._firing.items if self._firing else None, "tuples")

    @property
    def new(self) -> list[Tuple]:
        """On time: the tuples not in the key's preceding window; late: those added since this
        window last fired (Storm's ``getNew()``)."""
        return self._tuples(self._firing.new if self._firing else None, "new")

    @property
    def expired(self) -> list[Tuple]:
        """On time: the tuples of the key's preceding window that are not in this one; none for a
        late firing or a session (Storm's ``getExpired()``)."""
        return self._tuples(self._firing.expired if self._firing else None, "expired")

    def __len__(self) -> int:
        items = self._firing.items if self._firing else None
        return len(items) if items is not None else 0

    def __repr__(self) -> str:
        late = ", late" if self.late else ""
        return f"TupleWindow(key={self.key!r}, [{self.start}, {self.end}){late})"


class WindowedBolt(Bolt):
    """A bolt that works on windows of its input, not on single tuples (Storm's ``BaseWindowedBolt``).

    :ivar window: ``Window.sliding(length=10.0, slide=5.0)``, ``Window.tumbling(10.0)``,
        ``Window.sliding(count=100, slide_count=10)``, ``Window.tumbling(count=100)`` or
        ``Window.session(gap=30.0)``.
    :ivar timestamp_field: event time in seconds from this field of every input stream; None:
        processing time (the wall clock when the tuple arrives).
    :ivar lag_secs: how far out of order tuples may come: the watermark is the largest
        timestamp seen less this (per upstream task; the smallest over the tasks).
    :ivar late_stream: tuples too late for every window they belong to are emitted on this
        stream (declared by the engine with the input's fields); None: counted and dropped.
    :ivar allowed_lateness_secs: a window still takes late tuples, and fires again with them,
        this long after its end (time and session windows).
    :ivar key_fields: windows per key (the values of these fields); subscribe with a fields
        grouping on them so that each key's tuples meet in one executor. Empty: one window per
        executor, as in Storm.

    Emits from a firing are anchored to the window's tuples, and on a stream that declares
    ``timestamp_field`` they carry the window's end there (their event time), so a windowed
    bolt downstream can window the results. With the ``memory`` state provider a tuple is acked
    once it has left every window it belongs to (so ``topology.message.timeout.secs`` must
    exceed the window's length, slide, lag and allowed lateness); with a durable provider on
    arrival, since the open windows are in the checkpoints.

    Example::

        class Totals(WindowedBolt):
            outputs = ("key", "total", "start", "end")
            window = Window.sliding(length=10.0, slide=5.0)
            timestamp_field = "ts"
            lag_secs = 2.0
            key_fields = ("key",)

            def init_window(self):
                return 0

            def add_to_window(self, acc, tup):
                return acc + tup["value"]

            def fire_window(self, acc, window):
                self.emit((window.key, acc, window.start, window.end))
    """

    window: ClassVar[Window | None] = None
    timestamp_field: ClassVar[str | None] = None
    lag_secs: ClassVar[float] = 0.0
    late_stream: ClassVar[str | None] = None
    allowed_lateness_secs: ClassVar[float] = 0.0
    key_fields: ClassVar[Sequence[str]] = ()

    def process_window(self, window: TupleWindow) -> None:
        """Handle one firing of a window: ``window.tuples``, ``.new``, ``.expired``, ``.start``,
        ``.end``, ``.key``, ``.late``."""
        msg = f"{type(self).__name__} must implement process_window(window) or fire_window(acc, window)"
        raise NotImplementedError(msg)

    def init_window(self) -> Any:
        """Incremental: a new window's accumulator (msgpack data: it moves and is checkpointed)."""
        return None

    def add_to_window(self, acc: Any, tup: Tuple) -> Any:
        """Incremental: the accumulator with ``tup`` added (once per window the tuple is in)."""
        return acc

    def fire_window(self, acc: Any, window: TupleWindow) -> None:
        """Incremental: handle one firing with the window's accumulator (instead of ``process_window``)."""
        msg = f"{type(self).__name__} must implement process_window(window) or fire_window(acc, window)"
        raise NotImplementedError(msg)

    def merge_windows(self, acc: Any, other: Any) -> Any:
        """Incremental session windows: the accumulator of two sessions that merged."""
        msg = f"{type(self).__name__} must implement merge_windows(acc, other) for incremental session windows"
        raise NotImplementedError(msg)

    def process(self, tup: Tuple) -> None:
        msg = "a WindowedBolt gets windows (process_window), not tuples"
        raise NotImplementedError(msg)

    @classmethod
    def incremental(cls) -> bool:
        """True if the bolt keeps an accumulator per window (defines ``fire_window``)."""
        return cls.fire_window is not WindowedBolt.fire_window
