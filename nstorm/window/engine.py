"""The window engine: which windows a tuple goes in, when they fire and close, what they hold.

Pure and in-process (no threads, no clock, no I/O): the windowed bolt's executor
(:mod:`worker.windowed`) feeds it tuples with :meth:`WindowEngine.add` and the watermark with
:meth:`WindowEngine.advance`, and the engine calls ``on_fire`` for each firing. Property tests
drive it directly against a brute-force reference (``tests/unit/test_window_engine.py``).

Semantics (Flink's, with Storm's names):

- The watermark ``W`` only grows. A time or session window ``[start, end)`` fires once when
  ``W >= end`` (on time), and *closes* when ``W >= end + lateness``: until then a tuple that
  belongs to it is still added, and it fires again (``late``) at the end of that
  :meth:`advance`. A closed window is gone: its tuples are released.
- A tuple is *late* (:data:`LATE`, nothing kept) when every window it belongs to has closed;
  one that still fits some of its windows goes into those (Flink's rule).
- Count windows: a key's tuples are numbered in order (in event time, in timestamp order
  once the watermark passed them: a tuple behind the watermark is late); the window at
  position ``c`` (every ``slide`` tuples) holds tuples ``c - count`` to ``c - 1`` and fires
  when the ``c``-th tuple comes.
- Each firing hands out the window's tuples (or its accumulator, in incremental mode),
  ``new`` and ``expired``: for an on-time firing, the tuples not in the key's preceding
  window and those of the preceding window not in this one (Storm's ``getNew`` and
  ``getExpired``); for a late firing, the tuples added since the window last fired, and none.

Acks (``hold_acks``, the ``memory`` state provider with acking on): a tuple is acked when it
has left every window it belongs to. The engine does that without a record per tuple: tuples
that leave together (their last window is the same) share a *bucket* ``{root: edge}``; the
first tuple of a root in a bucket draws the edge and acks it as its child at once
(:attr:`to_ack`), and the bucket is acked when it is released, so each tree stays open
exactly as long as the bucket. Emits of a firing anchor to the window's roots and their edges
XOR into one bucket of each root (:attr:`Firing.ackval`). Everything kept is plain msgpack
data (:meth:`export`, :meth:`load`): it moves with a live migration and goes into checkpoints.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

from nstorm.window.spec import COUNT, SESSION, Window, count_windows, last_time_window

__all__ = ["ADDED", "FULL", "LATE", "UNWINDOWED", "Firing", "WindowEngine"]

ADDED = 0  # the tuple is in at least one window
LATE = 1  # every window of the tuple has closed: nothing kept
FULL = 2  # ``max_tuples`` held already: nothing kept (the caller fails it)
UNWINDOWED = 3  # the tuple falls in no window (a gap of a slide longer than the length)

FIRE, CLOSE, PURGE = 0, 1, 2  # timer kinds, in the order they run at one time

_ts = itemgetter(0)
_ts_seq = itemgetter(0, 1)
_getrandbits = random.Random().getrandbits


def _edge() -> int:
    e = 0
    while not e:
        e = _getrandbits(64)
    return e


def _as_key(key: Any) -> Any:
    """A key back from msgpack: arrays were tuples."""
    return tuple(_as_key(k) for k in key) if isinstance(key, list) else key


class Firing:
    """One firing of one window, as the engine hands it to ``on_fire``.

    :ivar key: the window's key (None without key fields).
    :ivar start: the window's start; :ivar end: its end (exclusive for time and session
        windows; for count windows the smallest and largest timestamp of its tuples).
    :ivar late: fired again, or for the first time, because late tuples came.
    :ivar items: the window's items, in timestamp order (tuple mode; None in incremental mode).
    :ivar new: / :ivar expired: see the module docstring (tuple mode).
    :ivar acc: the accumulator (incremental mode).
    :ivar roots: the tuple-tree roots of its tuples (``hold_acks``): what emits anchor to.
    :ivar ackval: set by ``on_fire``: the XOR of the edges of the children anchored to ``roots``.
    """

    __slots__ = ("key", "start", "end", "late", "items", "new", "expired", "acc", "roots", "ackval")

    def __init__(self, key: Any, start: float, end: float, late: bool) -> None:
        self.key = key
        self.start = start
        self.end = end
        self.late = late
        self.items: list[Any] | None = None
        self.new: list[Any] | None = None
        self.expired: list[Any] | None = None
        self.acc: Any = None
        self.roots: list[int] = []
        self.ackval = 0

    def __repr__(self) -> str:
        return f"Firing(key={self.key!r}, [{self.start}, {self.end}), late={self.late})"


class _Win:
    """An open time window or session: how often it fired, and (sessions) its items and acks."""

    __slots__ = ("start", "end", "fired", "fire_seq", "acc", "tie", "dirty", "entries", "holds")

    def __init__(self, start: float, end: float, tie: int) -> None:
        self.start = start
        self.end = end
        self.fired = 0
        self.fire_seq = 0  # the engine's seq at its last firing: later tuples are new to the next one
        self.acc: Any = None
        self.tie = tie
        self.dirty = False  # took a tuple while its end was behind the watermark: fires late
        self.entries: list[list[Any]] | None = None  # sessions: [ts, seq, item, shown]
        self.holds: dict[int, int] | None = None  # sessions: their one bucket

    def export(self) -> list[Any]:
        return [self.start, self.end, self.fired, self.fire_seq, self.acc, self.tie, self.dirty, self.entries,
                [[r, p] for r, p in self.holds.items()] if self.holds is not None else None]

    @classmethod
    def load(cls, data: list[Any]) -> _Win:
        w = cls(float(data[0]), float(data[1]), int(data[5]))
        w.fired, w.fire_seq, w.acc, w.dirty = int(data[2]), int(data[3]), data[4], bool(data[6])
        w.entries = [list(e) for e in data[7]] if data[7] is not None else None
        w.holds = {int(r): int(p) for r, p in data[8]} if data[8] is not None else None
        return w


class _Key:
    """What one key holds: time windows by index, or sessions by tie, or a count sequence."""

    __slots__ = ("entries", "wins", "holds", "n", "accs", "bounds")

    def __init__(self) -> None:
        self.entries: list[list[Any]] = []  # time: [ts, seq, item] by ts; count: [i, ts, seq, item]
        self.wins: dict[int, _Win] = {}  # time: k -> window; session: tie -> session
        # bucket -> {root: edge}; count: a position; time: (last, first) window of its tuples,
        # so that a firing anchors to the tuples in its window only.
        self.holds: dict[Any, dict[int, int]] = {}
        self.n = 0  # count: tuples numbered so far
        self.accs: dict[int, Any] = {}  # count, incremental: position -> accumulator
        self.bounds: dict[int, list[float]] = {}  # count, incremental: position -> [min ts, max ts]

    def empty(self) -> bool:
        return not self.entries and not self.wins and not self.holds and not self.accs and not self.n

    def export(self) -> list[Any]:
        return [self.entries, [[k, w.export()] for k, w in self.wins.items()],
                [[b, [[r, p] for r, p in h.items()]] for b, h in self.holds.items()], self.n,
                [[c, a] for c, a in self.accs.items()], [[c, b] for c, b in self.bounds.items()]]

    @classmethod
    def load(cls, data: list[Any]) -> _Key:
        ks = cls()
        ks.entries = [list(e) for e in data[0]]
        ks.wins = {int(k): _Win.load(wd) for k, wd in data[1]}
        ks.holds = {(int(b[0]), int(b[1])) if isinstance(b, list | tuple) else int(b): {int(r): int(p) for r, p in h}
                    for b, h in data[2]}
        ks.n = int(data[3])
        ks.accs = {int(c): a for c, a in data[4]}
        ks.bounds = {int(c): [float(x) for x in b] for c, b in data[5]}
        return ks


class WindowEngine:
    """Windows of one executor (see the module docstring).

    :arg window: the window definition.
    :arg event_time: timestamps are event time (tuples may be late); else processing time
        (the caller's clock is both the timestamps and the watermark).
    :arg lateness: a window closes this long (in its time) after it fired.
    :arg keep_tuples: keep each window's items (``process_window``); False: an accumulator
        per window (``init``, ``add``, ``merge`` for sessions).
    :arg hold_acks: keep acks until the tuples leave their windows (see :attr:`to_ack`).
    :arg max_tuples: the most items kept at once (0: no bound); more are refused (:data:`FULL`).
    :arg on_fire: called with each :class:`Firing`.
    """

    def __init__(self, window: Window, on_fire: Callable[[Firing], None], *, event_time: bool = True,
                 lateness: float = 0.0, keep_tuples: bool = True, hold_acks: bool = False, max_tuples: int = 0,
                 init: Callable[[], Any] | None = None, add: Callable[[Any, Any], Any] | None = None,
                 merge: Callable[[Any, Any], Any] | None = None) -> None:
        self.window = window
        self.kind = window.kind
        self.length = window.length
        self.slide = window.slide
        self.on_fire = on_fire
        self.event_time = event_time
        self.lateness = float(lateness)
        self.keep = keep_tuples
        self.hold = hold_acks
        self.max_tuples = int(max_tuples or 0)
        self.init = init
        self.add_to = add
        self.merge = merge
        self.watermark = -math.inf
        self.keys: dict[Any, _Key] = {}
        self.timers: list[tuple[float, int, int, Any, int]] = []  # (time, kind, tie, key, window)
        self.dirty: list[tuple[Any, int]] = []  # (key, window or session tie) to fire late
        self.pending: list[tuple[float, int, Any, Any, dict[int, int] | None]] = []  # count, event time
        self.seq = 0  # tuples taken (orders them, tells which are new to a late firing)
        self.tie = 0  # windows made (orders firings of equal ends)
        self.tuples = 0  # items kept now
        self.open_windows = 0
        self.fired = 0
        self.late = 0
        self.to_ack: dict[int, int] = {}  # root -> XOR to send to the acker now (drained by the caller)
        # time windows: how many windows below the last one may hold a timestamp (plus one)
        self.span = int(math.ceil(window.length / window.slide)) + 1 if window.kind not in (COUNT, SESSION) else 0
        if event_time:  # no clock to clamp to: straight to the kind's method (once per tuple)
            self.add = {COUNT: self._add_count, SESSION: self._add_session}.get(self.kind, self._add_time)  # type: ignore[method-assign]

    # -- acks ------------------------------------------------------------------------------
    def _hold(self, bucket: dict[int, int], roots: Iterable[int]) -> None:
        to_ack = self.to_ack
        for r in roots:
            if r not in bucket:
                p = bucket[r] = _edge()
                to_ack[r] = to_ack.get(r, 0) ^ p

    def _release(self, bucket: dict[int, int] | None) -> None:
        if bucket:
            to_ack = self.to_ack
            for r, p in bucket.items():
                to_ack[r] = to_ack.get(r, 0) ^ p

    @staticmethod
    def _merge_holds(into: dict[int, int], other: dict[int, int]) -> None:
        for r, p in other.items():
            into[r] = into.get(r, 0) ^ p

    @staticmethod
    def _anchor(buckets: Iterable[dict[int, int]], f: Firing) -> None:
        """The firing's children anchored to its roots: XOR their edges into one bucket per root."""
        x = f.ackval
        if not x:
            return
        todo = set(f.roots)
        for bucket in buckets:
            for r in bucket:
                if r in todo:
                    bucket[r] ^= x
                    todo.discard(r)
            if not todo:
                return

    @staticmethod
    def _roots(buckets: Iterable[dict[int, int]]) -> list[int]:
        seen: dict[int, None] = {}
        for bucket in buckets:
            for r in bucket:
                seen[r] = None
        return list(seen)

    # -- input -------------------------------------------------------------------------------
    def add(self, key: Any, ts: float, item: Any, roots: Iterable[int] | None = None) -> int:
        """Take one tuple (``item``, opaque) at timestamp ``ts``: :data:`ADDED`, :data:`LATE`,
        :data:`FULL` or :data:`UNWINDOWED`. With ``hold_acks``, ``roots`` are its tuple trees."""
        if not self.event_time and ts < self.watermark:
            ts = self.watermark  # a clock that stepped back: never late in processing time
        if self.kind == COUNT:
            return self._add_count(key, ts, item, roots)
        if self.kind == SESSION:
            return self._add_session(key, ts, item, roots)
        return self._add_time(key, ts, item, roots)

    def _full(self) -> bool:
        return bool(self.max_tuples) and self.tuples >= self.max_tuples

    def _key(self, key: Any) -> _Key:
        ks = self.keys.get(key)
        if ks is None:
            ks = self.keys[key] = _Key()
        return ks

    def _new_tie(self) -> int:
        self.tie += 1
        return self.tie

    def _add_time(self, key: Any, ts: float, item: Any, roots: Iterable[int] | None = None) -> int:
        length, slide, wm = self.length, self.slide, self.watermark
        # The windows k with k * slide <= ts < k * slide + length (spec.time_windows, inlined:
        # this runs once per tuple).
        hi = int(ts // slide)
        if hi * slide > ts:
            hi -= 1
        elif (hi + 1) * slide <= ts:
            hi += 1
        lo = int((ts - length) // slide)  # one below the first, give or take a rounding
        while lo <= hi and lo * slide + length <= ts:
            lo += 1
        while lo > hi - self.span and (lo - 1) * slide + length > ts:
            lo -= 1
        if lo > hi:  # in a gap between windows (a slide longer than the length)
            if self.event_time and ts + self.lateness <= wm:
                self.late += 1
                return LATE  # behind the watermark as well: late, as Flink has it (its late output)
            return UNWINDOWED
        due = lo * slide + length <= wm  # the first window's end is behind the watermark
        if due and lo * slide + length + self.lateness <= wm:  # the first has closed: maybe all have
            while lo <= hi and lo * slide + length + self.lateness <= wm:
                lo += 1
            if lo > hi:
                self.late += 1
                return LATE
        if self.keep and self.max_tuples and self.tuples >= self.max_tuples:
            return FULL
        ks = self.keys.get(key)
        if ks is None:
            ks = self.keys[key] = _Key()
        wins = ks.wins
        seq = self.seq
        self.seq = seq + 1
        keep = self.keep
        add = self.add_to
        for k in range(lo, hi + 1):
            w = wins.get(k)
            if w is None:
                start = k * slide
                w = wins[k] = _Win(start, start + length, self._new_tie())
                self.open_windows += 1
                if not keep:
                    w.acc = self.init() if self.init else None
                if w.end > wm:
                    heapq.heappush(self.timers, (w.end, FIRE, w.tie, key, k))
            if not keep and add is not None:
                w.acc = add(w.acc, item)
            if due and w.end <= wm and not w.dirty:
                w.dirty = True
                self.dirty.append((key, k))
        if keep:
            entries = ks.entries
            entry = [ts, seq, item]
            if not entries or entries[-1][0] <= ts:
                entries.append(entry)
            else:
                bisect.insort_right(entries, entry, key=_ts)
            self.tuples += 1
        if roots and self.hold:
            bucket = ks.holds.get((hi, lo))
            if bucket is None:
                bucket = ks.holds[hi, lo] = {}
            self._hold(bucket, roots)
        return ADDED

    def _add_session(self, key: Any, ts: float, item: Any, roots: Iterable[int] | None = None) -> int:
        gap, wm = self.length, self.watermark
        end = ts + gap
        ks = self.keys.get(key)
        over = [w for w in ks.wins.values() if w.start < end and ts < w.end] if ks is not None else []
        if not over and end + self.lateness <= wm:
            self.late += 1
            return LATE
        if self.keep and self._full():
            return FULL
        ks = self._key(key)
        seq = self.seq
        self.seq = seq + 1
        if not over:
            w = _Win(ts, end, self._new_tie())
            ks.wins[w.tie] = w
            self.open_windows += 1
            w.entries = [] if self.keep else None
            w.holds = {}
            if not self.keep:
                w.acc = self.init() if self.init else None
            old_end = None
        else:
            over.sort(key=lambda s: s.tie)
            w = over[0]  # the oldest session takes the others in (their timers go stale)
            old_end = w.end
            for other in over[1:]:
                del ks.wins[other.tie]
                self.open_windows -= 1
                w.start = min(w.start, other.start)
                w.end = max(w.end, other.end)
                w.fired = max(w.fired, other.fired)
                if self.keep:
                    w.entries = sorted(w.entries + other.entries, key=_ts_seq)  # type: ignore[operator]
                elif self.merge is not None:
                    w.acc = self.merge(w.acc, other.acc)
                self._merge_holds(w.holds, other.holds or {})  # type: ignore[arg-type]
            w.start = min(w.start, ts)
            w.end = max(w.end, end)
        if self.keep:
            entries = w.entries
            entries.append([ts, seq, item, 0])  # type: ignore[union-attr]
            if len(entries) > 1 and entries[-2][0] > ts:  # type: ignore[arg-type,index]
                entries.sort(key=_ts_seq)  # type: ignore[union-attr]
            self.tuples += 1
        else:
            w.acc = self.add_to(w.acc, item) if self.add_to else w.acc
        if w.end <= wm:
            if not w.dirty:
                w.dirty = True
                self.dirty.append((key, w.tie))
        else:
            w.dirty = False
            if w.end != old_end:  # a session whose end is ahead has a FIRE timer at that end
                heapq.heappush(self.timers, (w.end, FIRE, w.tie, key, w.tie))
        if self.hold and roots:
            self._hold(w.holds, roots)  # type: ignore[arg-type]
        return ADDED

    def _add_count(self, key: Any, ts: float, item: Any, roots: Iterable[int] | None = None) -> int:
        if not self.event_time:
            if self.keep and self._full():
                return FULL
            hold: dict[int, int] | None = None
            if self.hold and roots:
                hold = {}
                self._hold(hold, roots)
            self._number(key, ts, self.seq, item, hold)
            self.seq += 1
            return ADDED
        if ts < self.watermark:
            self.late += 1
            return LATE
        if self._full():
            return FULL
        hold = None
        if self.hold and roots:
            hold = {}
            self._hold(hold, roots)
        heapq.heappush(self.pending, (ts, self.seq, key, item, hold))
        self.seq += 1
        self.tuples += 1
        return ADDED

    def _number(self, key: Any, ts: float, seq: int, item: Any, hold: dict[int, int] | None) -> None:
        """A key's next tuple in count order: into its count windows; fire at a slide's end."""
        ks = self._key(key)
        i = ks.n
        positions = count_windows(i, self.length, self.slide)
        if not positions:
            self._release(hold)
        else:
            if self.keep:
                ks.entries.append([i, ts, seq, item])
                self.tuples += 1
            else:
                for c in positions:
                    if c not in ks.accs:
                        ks.accs[c] = self.init() if self.init else None
                        ks.bounds[c] = [ts, ts]
                        self.open_windows += 1
                    ks.accs[c] = self.add_to(ks.accs[c], item) if self.add_to else ks.accs[c]
                    b = ks.bounds[c]
                    b[0], b[1] = min(b[0], ts), max(b[1], ts)
            if hold:
                bucket = ks.holds.get(positions[-1])
                if bucket is None:
                    ks.holds[positions[-1]] = hold
                else:
                    self._merge_holds(bucket, hold)
        ks.n = i + 1
        if ks.n % self.slide == 0:
            self._fire_count(key, ks, ks.n)

    # -- time --------------------------------------------------------------------------------
    def advance(self, watermark: float) -> None:
        """Move the watermark (never back) and fire, close and release what it passed; the
        windows that took late tuples since the last call fire (again) first."""
        if watermark > self.watermark:
            self.watermark = watermark
        wm = self.watermark
        if self.dirty:
            self._fire_dirty()
        if self.kind == COUNT:
            pending = self.pending
            while pending and pending[0][0] < wm:
                ts, seq, key, item, hold = heapq.heappop(pending)
                self.tuples -= 1
                self._number(key, ts, seq, item, hold)
            return
        timers = self.timers
        lateness = self.lateness
        while timers and timers[0][0] <= wm:
            at, kind, tie, key, k = heapq.heappop(timers)
            ks = self.keys.get(key)
            if ks is None:
                continue
            if kind == PURGE:
                self._purge(key, ks, k)
                if ks.empty():
                    del self.keys[key]
                continue
            w = ks.wins.get(k)
            if w is None or w.tie != tie:
                continue  # stale: the window closed, or (a session) was merged into another
            if kind == FIRE:
                if w.end == at and not w.dirty and (self.kind == SESSION or not w.fired):
                    self._fire(key, ks, k, w, late=bool(w.fired))
            elif w.end + lateness == at:  # else a session that grew since: a later CLOSE is its
                self._close(key, ks, k, w)

    def next_due(self) -> float | None:
        """The watermark at which something is due next (None: nothing is)."""
        if self.kind == COUNT:
            return self.pending[0][0] if self.pending else None
        return self.timers[0][0] if self.timers else None

    def _fire_dirty(self) -> None:
        dirty, self.dirty = self.dirty, []
        todo = []
        for key, k in dirty:
            ks = self.keys.get(key)
            w = ks.wins.get(k) if ks is not None else None
            if w is not None and w.dirty:
                todo.append((w.end, w.tie, key, k, ks, w))
        todo.sort(key=lambda t: (t[0], t[1]))
        for _end, _tie, key, k, ks, w in todo:
            self._fire(key, ks, k, w, late=True)

    def _fire(self, key: Any, ks: _Key, k: int, w: _Win, late: bool) -> None:
        f = Firing(key, w.start, w.end, late)
        if self.keep:
            if self.kind == SESSION:
                inside = w.entries or []
                f.items = [e[2] for e in inside]
                f.new = [e[2] for e in inside if not e[3]]
                f.expired = []
                for e in inside:
                    e[3] = 1
            else:
                entries = ks.entries
                inside = entries[bisect.bisect_left(entries, w.start, key=_ts):
                                 bisect.bisect_left(entries, w.end, key=_ts)]
                f.items = [e[2] for e in inside]
                if late:
                    since = w.fire_seq if w.fired else -1
                    f.new = [e[2] for e in inside if e[1] >= since]
                    f.expired = []
                else:  # against the preceding window, k - 1
                    prev_start = (k - 1) * self.slide
                    prev_end = prev_start + self.length
                    f.new = [e[2] for e in inside if not prev_start <= e[0] < prev_end]
                    lo = bisect.bisect_left(entries, prev_start, key=_ts)
                    hi = bisect.bisect_left(entries, min(w.start, prev_end), key=_ts)
                    f.expired = [e[2] for e in entries[lo:hi]]
        else:
            f.acc = w.acc
        w.fired += 1
        w.fire_seq = self.seq
        w.dirty = False
        self.fired += 1
        buckets = self._window_buckets(ks, k, w)
        if self.hold:
            f.roots = self._roots(buckets)
        self.on_fire(f)
        if self.hold:
            self._anchor(buckets, f)
        close_at = w.end + self.lateness
        if close_at <= self.watermark:
            self._close(key, ks, k, w)
        else:
            heapq.heappush(self.timers, (close_at, CLOSE, w.tie, key, k))

    def _window_buckets(self, ks: _Key, k: int, w: _Win) -> list[dict[int, int]]:
        """The buckets whose tuples are in window ``k`` (its first window is ``k`` or earlier, its last ``k`` or later)."""
        if self.kind == SESSION:
            return [w.holds] if w.holds else []
        return [h for (last, first), h in ks.holds.items() if first <= k <= last]

    def _close(self, key: Any, ks: _Key, k: int, w: _Win) -> None:
        """Window ``k`` takes nothing more: release the tuples whose last window it is."""
        del ks.wins[k]
        self.open_windows -= 1
        if self.kind == SESSION:
            self._release(w.holds)
            if w.entries:
                self.tuples -= len(w.entries)
        else:
            holds = ks.holds
            for b in [b for b in holds if b[0] == k]:
                self._release(holds.pop(b))
            if self.keep and ks.entries:
                # Kept for the next window's ``expired``: a timer, so that it runs after the FIRE
                # of that window even when both are due in this very advance.
                at = max(w.end + self.lateness, (k + 1) * self.slide + self.length)  # the next one's end
                heapq.heappush(self.timers, (at, PURGE, self._new_tie(), key, k))
        if ks.empty():
            del self.keys[key]

    def _purge(self, key: Any, ks: _Key, k: int) -> None:
        """Drop the items whose last window is ``k`` or earlier (closed; not needed as expired)."""
        entries = ks.entries
        slide = self.slide
        n = 0
        for e in entries:
            if last_time_window(e[0], slide) > k:
                break
            n += 1
        if n:
            del entries[:n]
            self.tuples -= n

    def _fire_count(self, key: Any, ks: _Key, c: int) -> None:
        count, slide = self.length, self.slide
        lo = max(0, c - count)
        f = Firing(key, 0.0, 0.0, False)
        if self.keep:
            entries = ks.entries
            inside = [e for e in entries if lo <= e[0] < c]
            f.items = [e[3] for e in inside]
            new_lo = max(lo, c - slide)
            f.new = [e[3] for e in inside if e[0] >= new_lo]
            exp_lo, exp_hi = max(0, c - slide - count), max(0, min(c - slide, c - count))
            f.expired = [e[3] for e in entries if exp_lo <= e[0] < exp_hi]
            if inside:
                f.start, f.end = min(e[1] for e in inside), max(e[1] for e in inside)
        else:
            f.acc = ks.accs.pop(c, None)
            bounds = ks.bounds.pop(c, None)
            if bounds is not None:
                f.start, f.end = bounds
                self.open_windows -= 1
        buckets = [ks.holds[b] for b in range(c, c + count + slide, slide) if b in ks.holds]
        if self.hold:
            f.roots = self._roots(buckets)
        self.fired += 1
        self.on_fire(f)
        if self.hold:
            self._anchor(buckets, f)
        self._release(ks.holds.pop(c, None))
        if self.keep:
            entries = ks.entries
            n = 0
            for e in entries:
                if e[0] >= lo:
                    break
                n += 1
            if n:
                del entries[:n]
                self.tuples -= n

    # -- status and state --------------------------------------------------------------------
    def open_count(self) -> int:
        """Windows that hold a tuple and have not closed (count windows: not fired yet)."""
        if self.kind != COUNT or not self.keep:
            return self.open_windows
        count, slide = self.length, self.slide
        total = 0
        for ks in self.keys.values():
            n = ks.n
            if n:
                total += (n + count - 1) // slide - n // slide
        return total

    def export(self) -> dict[str, Any]:
        """Everything as msgpack data (keys as ``[key, ...]`` pairs; timers are rebuilt on load)."""
        return {
            "v": 1, "kind": self.kind, "watermark": self.watermark, "seq": self.seq, "tie": self.tie,
            "tuples": self.tuples, "open": self.open_windows, "fired": self.fired, "late": self.late,
            "keys": [[key, ks.export()] for key, ks in self.keys.items()],
            "pending": [list(p[:4]) + [[[r, e] for r, e in p[4].items()] if p[4] else None] for p in self.pending],
        }

    def load(self, data: dict[str, Any]) -> None:
        """Take what :meth:`export` wrote (a moved copy's or a checkpoint's windows)."""
        if data.get("kind") != self.kind:
            msg = f"windows of kind {data.get('kind')!r} cannot be loaded into a {self.kind} window"
            raise ValueError(msg)
        self.watermark = float(data["watermark"])
        self.seq, self.tie = int(data["seq"]), int(data["tie"])
        self.tuples, self.open_windows = int(data["tuples"]), int(data["open"])
        self.fired, self.late = int(data["fired"]), int(data["late"])
        self.keys = {}
        self.timers = []
        self.dirty = []
        for raw_key, kd in data["keys"]:
            key = _as_key(raw_key)
            ks = self.keys[key] = _Key.load(kd)
            if self.kind != COUNT and self.kind != SESSION:
                # An export before buckets had their first window: every window it may be in.
                ks.holds = {(b, b - self.span + 1) if type(b) is int else b: h for b, h in ks.holds.items()}
            for k, w in ks.wins.items():
                if w.dirty:
                    self.dirty.append((key, k))
                elif w.end > self.watermark:
                    heapq.heappush(self.timers, (w.end, FIRE, w.tie, key, k))
                if w.fired:
                    heapq.heappush(self.timers, (w.end + self.lateness, CLOSE, w.tie, key, k))
            if self.kind != COUNT and self.kind != SESSION and self.keep and ks.entries:
                seen: set[int] = set()
                for e in ks.entries:  # items of closed windows kept for the next ``expired``
                    hi = last_time_window(e[0], self.slide)
                    if hi in ks.wins:
                        break
                    if hi not in seen:
                        seen.add(hi)
                        at = max(hi * self.slide + self.length + self.lateness,
                                 (hi + 1) * self.slide + self.length)
                        heapq.heappush(self.timers, (at, PURGE, self._new_tie(), key, hi))
        self.pending = []
        for ts, seq, raw_key, item, hold in data.get("pending") or ():
            heapq.heappush(self.pending, (ts, int(seq), _as_key(raw_key), item,
                                          {int(r): int(e) for r, e in hold} if hold else None))
