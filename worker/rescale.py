"""Live rescaling: an executor's side of a parallelism change, in one place.

A plan that changes a component's executors carries the step (:class:`worker.routing.RescaleStep`):
key group ``g`` goes from ``old[g % len(old)]`` to ``new[g % len(new)]``. Every executor of the
component, old or new, derives from the step what it gives and what it takes
(:class:`KeyGroupShift`); nobody else coordinates it. Each upstream executor, when it switches
to the new routing table, sends every old executor of the component a marker (SHIFT_MARK) behind
what it sent under the old layout (:class:`UpstreamShifts`, per-sender FIFO as a move's markers),
but only once every executor of the new layout has said (READY) that it holds the key groups it
takes: a new owner never sees a tuple of a group before it knows the group is coming.

The states of one executor's shift (one transition method, :meth:`KeyGroupShift._set`)::

    ACTIVE -> DONE      it gave what it gives (RELEASING done) and has what it takes
                        (ACQUIRING done); either part may be empty

- **Releasing** (it loses groups, or all of them: it is retiring). A bolt keeps processing until
  every upstream task's SHIFT_MARK is in (nothing of those groups can come after it), a spout
  stops calling ``next_tuple`` until the trees it had open when the step came are acked or
  failed (their ``ack``/``fail`` may still change those groups' state). Then it sends each new
  owner its groups' keyed state in one GROUPS message, forgets them and calls the component's
  ``on_key_groups([], released)``. A bolt that lacks a marker after ``worker.lazy.kill.ms``
  gives the groups anyway; what of them comes later is failed (replayed; with durable state,
  a rollback).
- **Acquiring** (it takes groups over). A bolt holds the tuples of those groups, split out of
  their batches (:func:`split_batch`: the rest of a batch goes on, so no other key stalls),
  until each group's state came, then installs it and takes the held tuples in order; a
  spout's ``context.owns`` says False for them until then. A group whose state has not come
  after ``worker.state.wait.ms`` starts empty (with durable state: a rollback).

Both parts may run at once (4 -> 5 executors: most give and take); neither waits for the other,
so no cycle stalls. The new owner reports each shift to the rescale's migration record.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nstorm.state.keyed import key_group
from worker.routing import RescaleStep, RoutingTable

__all__ = ["KeyGroupShift", "ShiftState", "UpstreamShifts", "split_batch"]

log = logging.getLogger(__name__)

_getrandbits = random.Random().getrandbits


class ShiftState(enum.Enum):
    """Where one executor is in one rescale step (see the module docstring)."""

    ACTIVE = "ACTIVE"
    DONE = "DONE"


Batch = tuple[list[Any], Any, Any]


def split_batch(values: Sequence[Any], runs: Any, streams: Mapping[int, str] | None,
                hold: Sequence[bool]) -> tuple[Batch | None, Batch | None]:
    """``(kept, held)``: the tuples of a batch with ``hold[i]`` false, and those with it true, each
    a batch of its own (None when empty), in their order.

    A run (tuples sharing one anchor entry, acked once) split in two gets an anchor entry in
    each part with the same roots: each edge ``e`` becomes ``e ^ x`` in one part and ``x`` in the
    other, ``x`` random. The acker sees the same XOR once both parts are acked, and, with ``x``
    unknown to it, never a complete tree while one part is still held.
    """
    kept_v: list[Any] = []
    held_v: list[Any] = []
    kept_s: dict[int, str] | None = None
    held_s: dict[int, str] | None = None
    for i, v in enumerate(values):
        stream = streams.get(i) if streams else None
        if hold[i]:
            if stream is not None:
                held_s = held_s or {}
                held_s[len(held_v)] = stream
            held_v.append(v)
        else:
            if stream is not None:
                kept_s = kept_s or {}
                kept_s[len(kept_v)] = stream
            kept_v.append(v)
    kept_r: list[Any] | None = None
    held_r: list[Any] | None = None
    if runs is not None:
        kept_r, held_r = [], []
        i = 0
        for k in range(0, len(runs), 2):
            n, a = runs[k], runs[k + 1]
            h = sum(1 for j in range(i, i + n) if hold[j])
            i += n
            if h == 0:
                kept_r += [n, a]
            elif h == n:
                held_r += [n, a]
            elif not a:
                kept_r += [n - h, a]
                held_r += [h, a]
            else:
                ka: list[int] = []
                ha: list[int] = []
                for q in range(0, len(a), 2):
                    x = _getrandbits(64)
                    ka += [a[q], a[q + 1] ^ x]
                    ha += [a[q], x]
                kept_r += [n - h, ka]
                held_r += [h, ha]
    kept = (kept_v, kept_r, kept_s) if kept_v else None
    held = (held_v, held_r, held_s) if held_v else None
    return kept, held


class UpstreamShifts:
    """An upstream executor's side of rescales: keep routing a rescaled component by its old layout
    until every executor of the new layout has said it holds the key groups it takes (READY, sent
    when its own part of the step starts), then switch: what it buffered for the old executors
    leaves first, then a SHIFT_MARK to each of them on the same pipe, and the groupings are
    compiled for the new layout. Switching before a new owner knows the step would let it process
    a tuple of a group whose state is still on its way, which the state would then overwrite.

    A new copy of an upstream executor marks the open steps too: an old executor cannot tell it
    from the incarnation that sent under the old layout, and a second marker is harmless. If a
    READY does not come within ``patience`` seconds (its worker is gone), it switches anyway.
    """

    def __init__(self, subscribers: Iterable[str], patience: float) -> None:
        self.subscribers = list(subscribers)
        self.patience = patience
        self.seen: dict[str, int] = {}  # component -> the newest step switched to
        self.held: dict[str, tuple[RescaleStep, set[int], float]] = {}  # component -> step, READY from, since
        self.early: dict[int, set[int]] = {}  # version -> READY that came before the step did

    def note(self, routing: RoutingTable, now: float) -> None:
        """A routing table: hold the components with a step not switched to yet."""
        for component in self.subscribers:
            step = routing.rescales.get(component)
            if step is None or self.seen.get(component, 0) >= step.version or component in self.held:
                continue
            early = {src for src in self.early.get(step.version, ()) if src in step.new}
            self.held[component] = (step, early, now)
        low = min((self.seen.get(c, 0) for c in self.subscribers), default=0)
        for version in [v for v in self.early if v <= low]:
            del self.early[version]  # every component switched to it or past it

    def ended(self, routing: RoutingTable) -> list[str]:
        """The held components whose step ``routing`` no longer has: it completed while this
        executor waited for a READY (its old owners' drain deadline is shorter than the
        patience). Routing by the old layout would go on for ever: they switch at once."""
        return [c for c, (step, _r, _s) in self.held.items()
                if (current := routing.rescales.get(c)) is None or current.version != step.version]

    def layout(self, component: str) -> tuple[int, ...] | None:
        """The tasks to route ``component`` to while its step is held (None: the routing table's)."""
        held = self.held.get(component)
        return held[0].old if held is not None else None

    def ready(self, src: int, version: int) -> None:
        """A READY from task ``src`` of the new layout of a step of ``version``. The steps of one
        request share their version: it counts for the held step whose new layout has ``src``
        (or, not held yet, for whichever step of that version takes it later)."""
        credited = False
        for step, readies, _since in self.held.values():
            if step.version == version and src in step.new:
                readies.add(src)
                credited = True
        if not credited and version > min((self.seen.get(c, 0) for c in self.subscribers), default=0):
            self.early.setdefault(version, set()).add(src)

    def due(self, now: float) -> list[str]:
        """The held components that may switch now (every READY in, or out of patience)."""
        out = []
        for component, (step, readies, since) in self.held.items():
            if set(step.new) <= readies:
                out.append(component)
            elif now - since > self.patience:
                log.warning("rescale v%d of %s: no READY from %s after %.1fs: switching anyway", step.version,
                            component, sorted(set(step.new) - readies), now - since)
                out.append(component)
        return out

    def switch(self, component: str, routing: RoutingTable, buffers: Mapping[int, Any],
               flush: Callable[[Any], None], courier: Any) -> None:
        step = self.held.pop(component)[0]
        self.seen[component] = step.version
        for dst in step.old:
            buf = buffers.get(dst)
            if buf:
                flush(buf)
            wid = routing.location[dst]
            if wid:
                courier.shift_mark(dst, wid, step.version)


class KeyGroupShift:
    """One executor's side of one rescale step (see the module docstring).

    :ivar lost: key group -> the task that takes it.
    :ivar gained: key group -> the task that gives it.
    :ivar awaiting: gained groups whose state has not come.
    :ivar marks: upstream tasks whose SHIFT_MARK came (a releasing bolt waits for all of them).
    """

    def __init__(self, step: RescaleStep, task: int, groups: int, upstream: Iterable[int], now: float,
                 drain_secs: float, wait_secs: float) -> None:
        self.step = step
        self.version = step.version
        self.task = task
        self.groups = groups
        self.lost: dict[int, int] = {}
        self.gained: dict[int, int] = {}
        for g in range(groups):
            before, after = step.old_owner(g), step.new_owner(g)
            if before == after:
                continue
            if before == task:
                self.lost[g] = after
            elif after == task:
                self.gained[g] = before
        self.retiring = task not in step.new
        self.awaiting = set(self.gained)
        self.upstream = set(upstream)
        self.marks: set[int] = set()
        self.released = not self.lost and not self.retiring
        self.forced: set[int] = set()  # groups given away before every marker came
        self.started = now
        self.drain_until = now + drain_secs
        self.wait_until = now + wait_secs
        self.held_since: float | None = None
        self.stall = 0.0
        self.lost_state = False
        self.roots: set[int] | None = None  # a releasing spout: the trees open when the step came
        self.state = ShiftState.ACTIVE
        self._check_done()

    @property
    def done(self) -> bool:
        return self.state is ShiftState.DONE

    @property
    def acquiring(self) -> bool:
        return bool(self.awaiting)

    def _set(self, new: ShiftState, why: str) -> None:
        if new is self.state:
            return
        log.info("task %d, rescale v%d: %s -> %s (%s)", self.task, self.version, self.state.value, new.value, why)
        self.state = new

    def _check_done(self) -> None:
        if self.released and not self.awaiting and not self.forced_pending:
            self._set(ShiftState.DONE, f"gave {len(self.lost)} key groups, took {len(self.gained)}")

    @property
    def forced_pending(self) -> bool:
        """Groups given away before every marker came: their late tuples are still failed."""
        return bool(self.forced) and not self.marks_complete

    @property
    def marks_complete(self) -> bool:
        return self.upstream <= self.marks

    # -- releasing ----------------------------------------------------------------------------
    def on_mark(self, src: int) -> None:
        self.marks.add(src)
        if self.released:
            self._check_done()

    def may_release(self, now: float, input_empty: bool) -> bool:
        """A releasing bolt: every marker is in and what came before them is processed (or the drain
        deadline passed)."""
        if self.released:
            return False
        if self.marks_complete and input_empty:
            return True
        if now > self.drain_until:
            missing = sorted(self.upstream - self.marks)
            log.warning("task %d, rescale v%d: no marker from %s after %.1fs; key groups given away, "
                        "what of them comes later is failed", self.task, self.version, missing, now - self.started)
            self.forced = set(self.lost) if not self.retiring else set(range(self.groups))
            return True
        return False

    def spout_may_release(self, now: float, pending: Iterable[int], timeout_secs: float) -> tuple[bool, set[int]]:
        """A releasing spout: (give now, trees to fail first). It waits for the trees it had open
        when the step came, at most a message timeout."""
        if self.released:
            return False, set()
        if self.roots is None:
            self.roots = set(pending)
        open_now = self.roots & set(pending)
        if not open_now:
            return True, set()
        if now - self.started > timeout_secs:
            return True, open_now
        return False, set()

    def outgoing(self, keyed: Mapping[Any, Any]) -> dict[int, tuple[list[int], list[list[Any]]]]:
        """What goes to each new owner: its groups and their ``[key, value]`` pairs."""
        groups = self.groups
        targets: dict[int, tuple[list[int], list[list[Any]]]] = {}
        for g, to in sorted(self.lost.items()):
            targets.setdefault(to, ([], []))[0].append(g)
        if not targets:
            return targets
        where = {g: to for g, to in self.lost.items()}
        for key, value in keyed.items():
            to = where.get(key_group(key, groups))
            if to is not None:
                targets[to][1].append([key, value])
        return targets

    def released_now(self) -> None:
        self.released = True
        self._check_done()

    # -- acquiring ----------------------------------------------------------------------------
    def holds(self, group: int) -> bool:
        return group in self.awaiting or group in self.forced

    def took(self, groups: Iterable[int], now: float, sent_at: float | None) -> None:
        """The state of ``groups`` came and is installed."""
        for g in groups:
            self.awaiting.discard(g)
        if not self.awaiting:
            began = self.held_since if self.held_since is not None else now
            self.stall = max(self.stall, now - began, 0.0)
            self._check_done()

    def give_up_waiting(self, now: float) -> list[int]:
        """The wait's deadline passed: the groups still awaited start empty."""
        if not self.awaiting or now <= self.wait_until:
            return []
        missing = sorted(self.awaiting)
        log.warning("task %d, rescale v%d: the state of key groups %s did not come within %.1fs; they start empty",
                    self.task, self.version, missing[:10], now - self.started)
        self.awaiting.clear()
        self.lost_state = True
        self.stall = max(self.stall, now - (self.held_since or self.started))
        self._check_done()
        return missing

    def note_held(self, now: float) -> None:
        if self.held_since is None:
            self.held_since = now
