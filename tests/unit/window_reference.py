"""A brute-force reference of the window semantics, for the property tests of the engine.

It keeps every tuple of every window forever and decides everything from the definitions
(README "Windows", ``nstorm/window/engine.py``'s docstring), with none of the engine's
bookkeeping: window membership by enumerating indexes and comparing ``start <= ts < end``;
sessions as the connected components (gaps shorter than the gap) of a key's open tuples,
recomputed from scratch; count windows by slicing each key's tuples. The property tests feed
the engine and this reference the same steps (a batch of tuples, then a watermark) and compare
every firing, every late tuple and when each tuple's tree completes.

An input tuple is ``(key, ts, item)``; ``item`` is a unique int (also the tuple's root).
A firing is recorded as ``(key, start, end, late, items, new, expired)`` (items in order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from nstorm.window.spec import COUNT, SESSION, Window


@dataclass
class _RWin:
    key: Any
    k: int
    start: float
    end: float
    tie: int
    items: list[tuple[float, int]] = field(default_factory=list)  # (ts, item), in arrival order
    fired: int = 0
    shown: set[int] = field(default_factory=set)
    dirty: bool = False
    closed: bool = False


class Reference:
    def __init__(self, window: Window, lateness: float = 0.0, event_time: bool = True) -> None:
        self.window = window
        self.lateness = lateness
        self.event_time = event_time
        self.w = -math.inf
        self.tie = 0
        self.firings: list[list[tuple[Any, ...]]] = []  # per step
        self.late: list[int] = []  # items
        self.released: set[int] = set()  # items whose tuple left every window (acked)
        self.wins: dict[tuple[Any, int], _RWin] = {}
        # sessions: per key the open tuples (ts, item, tie or None, shown, fired) and closed items
        self.open: dict[Any, list[list[Any]]] = {}
        self.session_dirty: set[int] = set()  # items whose session must fire late
        self.session_fired_at: dict[int, float] = {}  # item -> end of the session firing that showed it
        # count windows: per key the numbered items; pending (ts, seq, key, item)
        self.numbered: dict[Any, list[tuple[float, int]]] = {}
        self.pending: list[tuple[float, int, Any, int]] = []
        self.seq = 0
        self.step_firings: list[tuple[Any, ...]] = []

    # -- steps ------------------------------------------------------------------------------
    def step(self, batch: list[tuple[Any, float, int]], watermark: float) -> None:
        self.step_firings = []
        for key, ts, item in batch:
            if not self.event_time and ts < self.w:
                ts = self.w
            self.seq += 1
            if self.window.kind == COUNT:
                self._add_count(key, ts, item)
            elif self.window.kind == SESSION:
                self._add_session(key, ts, item)
            else:
                self._add_time(key, ts, item)
        self.w = max(self.w, watermark)
        if self.window.kind == COUNT:
            self._release_count()
        elif self.window.kind == SESSION:
            self._advance_sessions()
        else:
            self._advance_time()
        self.firings.append(self.step_firings)

    # -- time windows ------------------------------------------------------------------------
    def _bounds(self, k: int) -> tuple[float, float]:
        start = k * self.window.slide
        return start, start + self.window.length

    def _windows_of(self, ts: float) -> list[int]:
        slide, length = self.window.slide, self.window.length
        base = math.floor(ts / slide)
        span = int(math.ceil(length / slide)) + 3
        out = []
        for k in range(base - span, base + 3):
            start, end = self._bounds(k)
            if start <= ts < end:
                out.append(k)
        return out

    def _add_time(self, key: Any, ts: float, item: int) -> None:
        ks = self._windows_of(ts)
        if not ks:  # in a gap: late if behind the watermark (Flink's late output), else dropped
            if self.event_time and ts + self.lateness <= self.w:
                self.late.append(item)
            self.released.add(item)
            return
        open_ks = [k for k in ks if self._bounds(k)[1] + self.lateness > self.w]
        if not open_ks:
            self.late.append(item)
            self.released.add(item)
            return
        for k in open_ks:
            win = self.wins.get((key, k))
            if win is None:
                self.tie += 1
                start, end = self._bounds(k)
                win = self.wins[(key, k)] = _RWin(key, k, start, end, self.tie)
            win.items.append((ts, item))
            if win.end <= self.w:
                win.dirty = True

    def _record(self, win: _RWin, late: bool, items: list[tuple[float, int]], new: list[int],
                expired: list[int]) -> None:
        self.step_firings.append((win.key, win.start, win.end, late, [i for _, i in items], new, expired))

    def _fire_time(self, win: _RWin, late: bool) -> None:
        items = sorted(win.items, key=lambda p: p[0])  # stable: arrival order within a timestamp
        if late:
            new = [i for _, i in items if i not in win.shown]
            expired: list[int] = []
        else:
            prev = self.wins.get((win.key, win.k - 1))
            p_start, p_end = self._bounds(win.k - 1)
            new = [i for ts, i in items if not p_start <= ts < p_end]
            prev_items = sorted(prev.items, key=lambda p: p[0]) if prev is not None else []
            expired = [i for ts, i in prev_items if not win.start <= ts < win.end]
        self._record(win, late, items, new, expired)
        win.shown.update(i for _, i in items)
        win.fired += 1
        win.dirty = False

    def _advance_time(self) -> None:
        live = [w for w in self.wins.values() if not w.closed]
        for win in sorted((w for w in live if w.dirty), key=lambda w: (w.end, w.tie)):
            self._fire_time(win, late=True)
        for win in sorted((w for w in live if not w.fired and w.end <= self.w), key=lambda w: (w.end, w.tie)):
            self._fire_time(win, late=False)
        for win in live:
            if win.fired and win.end + self.lateness <= self.w:
                win.closed = True
        # a tuple is released when every window that took it has closed
        for win in self.wins.values():
            for _ts, item in win.items:
                if item not in self.released and all(
                        self.wins[(win.key, k)].closed for k in self._windows_of(_ts) if (win.key, k) in self.wins):
                    self.released.add(item)

    # -- sessions ---------------------------------------------------------------------------
    def _components(self, key: Any) -> list[list[list[Any]]]:
        """The key's open tuples split where the next one is at least ``gap`` later."""
        gap = self.window.length
        rows = sorted(self.open.get(key, []), key=lambda r: (r[0], r[4]))
        comps: list[list[list[Any]]] = []
        for row in rows:
            if comps and row[0] < max(r[0] for r in comps[-1]) + gap:
                comps[-1].append(row)
            else:
                comps.append([row])
        return comps

    def _add_session(self, key: Any, ts: float, item: int) -> None:
        gap = self.window.length
        rows = self.open.get(key, [])
        # The same comparison as _components (a later tuple joins if later < earlier + gap), so that
        # rounding cannot make a tuple touch a session it is then split from (1.0 - 1.0 < 5e-251, but
        # 5e-251 + 1.0 == 1.0).
        touching = [r for r in rows if r[0] < ts + gap and ts < r[0] + gap]
        if not touching and ts + gap + self.lateness <= self.w:
            self.late.append(item)
            self.released.add(item)
            return
        tie = None
        if not touching:
            self.tie += 1
            tie = self.tie
        row = [ts, item, tie, False, self.seq]  # ts, item, creation tie, shown, arrival
        self.open.setdefault(key, []).append(row)
        comp = next(c for c in self._components(key) if row in c)
        end = max(r[0] for r in comp) + gap
        if end <= self.w:
            self.session_dirty.add(item)
        else:
            for r in comp:
                self.session_dirty.discard(r[1])

    def _advance_sessions(self) -> None:
        gap = self.window.length
        dirty: list[tuple[float, int, Any, list[list[Any]]]] = []
        due: list[tuple[float, int, Any, list[list[Any]]]] = []
        for key in list(self.open):
            for comp in self._components(key):
                start = min(r[0] for r in comp)
                end = max(r[0] for r in comp) + gap
                tie = min(r[2] for r in comp if r[2] is not None)
                unshown = [r for r in comp if not r[3]]
                if any(r[1] in self.session_dirty for r in comp):
                    dirty.append((end, tie, key, comp))
                elif unshown and end <= self.w:
                    due.append((end, tie, key, comp))
        for group, late_always in ((dirty, True), (due, False)):
            for end, _tie, key, comp in sorted(group, key=lambda t: (t[0], t[1])):
                start = min(r[0] for r in comp)
                fired_before = any(r[3] for r in comp)
                items = sorted(comp, key=lambda r: (r[0], r[4]))
                new = [r[1] for r in items if not r[3]]
                self.step_firings.append((key, start, end, late_always or fired_before,
                                          [r[1] for r in items], new, []))
                for r in comp:
                    r[3] = True
                    self.session_dirty.discard(r[1])
        for key in list(self.open):
            for comp in self._components(key):
                end = max(r[0] for r in comp) + gap
                if all(r[3] for r in comp) and end + self.lateness <= self.w:
                    for r in comp:
                        self.open[key].remove(r)
                        self.released.add(r[1])
            if not self.open[key]:
                del self.open[key]

    # -- count windows ------------------------------------------------------------------------
    def _add_count(self, key: Any, ts: float, item: int) -> None:
        if self.event_time:
            if ts < self.w:
                self.late.append(item)
                self.released.add(item)
                return
            self.pending.append((ts, self.seq, key, item))
            return
        self._number(key, ts, item)

    def _release_count(self) -> None:
        if not self.event_time:
            return
        ready = sorted(p for p in self.pending if p[0] < self.w)
        self.pending = [p for p in self.pending if p[0] >= self.w]
        for ts, _seq, key, item in ready:
            self._number(key, ts, item)

    def _number(self, key: Any, ts: float, item: int) -> None:
        count, slide = self.window.length, self.window.slide
        seq = self.numbered.setdefault(key, [])
        seq.append((ts, item))
        c = len(seq)
        i = c - 1
        if not any(c2 - count <= i < c2 for c2 in range(slide, i + count + slide + 1, slide)):
            self.released.add(item)  # in no window
        if c % slide:
            return
        window = seq[max(0, c - count):c]
        prev = seq[max(0, c - slide - count):max(0, c - slide)] if c > slide else []
        in_prev = {it for _, it in prev}
        in_now = {it for _, it in window}
        new = [it for _, it in window if it not in in_prev]
        expired = [it for _, it in prev if it not in in_now]
        start = min(t for t, _ in window)
        end = max(t for t, _ in window)
        self.step_firings.append((key, start, end, False, [it for _, it in window], new, expired))
        # released: tuples no later window (a multiple of slide above c) will hold
        for j, (_t, it) in enumerate(seq):
            if it in self.released:
                continue
            if not any(c2 - count <= j < c2 for c2 in range(c + slide, j + count + slide + 1, slide)):
                self.released.add(it)
