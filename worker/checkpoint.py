"""An executor's side of checkpoints: snapshot at a barrier, align barriers, restore.

A spout takes checkpoint ``cid`` when its worker passes on the coordinator's order
(CHECKPOINT): it snapshots ``self.state`` and its tracked tuples, writes them, and sends the
barrier to every downstream task behind what it sent before. A bolt *aligns*
(:class:`BarrierAligner`): once the barrier came from one upstream task, that task's later
batches are held until every upstream task's barrier is in; then it snapshots, writes, sends
the barrier on and takes the held batches. This is the hand-over's "markers on every input,
then the state" (worker.migration), with the state going to the store instead of a new copy.

What is written (:class:`Snapshotter`): per executor one msgpack blob (``state``, a spout's
``pending`` trees, the checkpoint id) and, for ``self.keyed_state``, per key group either the
keys changed since the executor's last write (a delta) or all of the group's keys (a full
entry: after a start or a restore, and once a group's deltas outweigh its last full entry).
An executor that lost data in this epoch (:attr:`worker.host.Checkpoints.tainted`) writes
nothing: no checkpoint may commit without what it lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nstorm.state.keyed import (
    KeyedState,
    TrackedKeyedState,
    apply_entries,
    changed_keys,
    key_group,
    owned_groups,
)
from nstorm.state.store import ChainLostError, StateError, unpack_snapshot
from worker import wire
from worker.chaining import ChainMark
from worker.qos import Traced

__all__ = ["BarrierAligner", "Snapshotter"]

log = logging.getLogger(__name__)

_TRACK_FROM_KEYS = 10_000  # below this a pass over the state costs too little to be worth avoiding


def _bad_key(state: Mapping[Any, Any]) -> str:
    """The first key of ``state`` whose value msgpack refuses (for the error message)."""
    for key, value in state.items():
        try:
            wire.pack([key, value])
        except (TypeError, ValueError, OverflowError):
            return repr(key)
    return "?"


class ForeignKeyError(Exception):
    """A key in ``self.keyed_state`` that fields grouping does not send to this executor."""

    def __init__(self, key: Any, group: int, owned: int) -> None:
        super().__init__(f"self.keyed_state key {key!r} is in key group {group}, which this executor does not own "
                         f"(it owns {owned}): keyed_state holds the keys a bolt's input is fields-grouped on")


class Snapshotter:
    """Writes one executor's part of each checkpoint, and reads it back on a restore."""

    def __init__(self, executor: Any) -> None:
        """``executor``: a :class:`worker.executor.UserExecutor` (its instance, host, ids, routing)."""
        self.executor = executor
        self.last = 0  # the last checkpoint this executor wrote (or was restored from)
        self.need_full = True  # every owned group's next entry is full (after a start or restore)
        self.previous: dict[Any, Any] = {}  # keyed_state as the last checkpoint wrote it (a shallow copy)
        self.executed_at = 0  # the executor's tuples processed at the last checkpoint
        self.full_bytes: dict[int, int] = {}  # key group -> size of its last full entry
        self.delta_bytes: dict[int, int] = {}  # key group -> deltas written since
        self.written = 0  # checkpoints written
        self.last_bytes = 0
        self.last_error: str | None = None

    # -- writing -------------------------------------------------------------------------
    def _owned(self) -> tuple[list[int], int]:
        """The key groups this executor owns in its routing table's layout (by its position among
        the component's executors, nstorm.state.keyed)."""
        ex = self.executor
        groups = ex.host.checkpoints.groups
        routing = ex.routing
        if routing is None:
            return [], groups
        tasks = routing.component_tasks.get(ex.component, ())
        if ex.task not in tasks:
            return [], groups  # removed by a rescale: it owns nothing any more
        return owned_groups(tasks.index(ex.task), len(tasks), groups), groups

    def _group_entries(self, keyed: KeyedState) -> dict[int, tuple[bool, bytes]]:
        owned, groups = self._owned()
        mine = set(owned)
        if self.need_full:
            changed: set[Any] = set()
        elif type(keyed) is TrackedKeyedState:
            changed = set(keyed.touched)
        else:
            changed = changed_keys(keyed, self.previous, keyed.touched)
        by_group: dict[int, list[list[Any]]] = {}
        for key in changed:
            g = key_group(key, groups)
            if g not in mine:
                if key not in keyed:
                    continue  # a foreign key deleted again: nothing of it to write
                raise ForeignKeyError(key, g, len(owned))
            by_group.setdefault(g, []).append([key, keyed[key]] if key in keyed else [key])
        full_now = set(owned) if self.need_full else {
            g for g, size in self.delta_bytes.items() if size > max(self.full_bytes.get(g, 0), 4096)}
        out: dict[int, tuple[bool, bytes]] = {}
        if full_now:
            everything: dict[int, list[list[Any]]] = {g: [] for g in full_now}
            for key, value in keyed.items():
                g = key_group(key, groups)
                if g in everything:
                    everything[g].append([key, value])
                elif g not in mine:
                    raise ForeignKeyError(key, g, len(owned))
            for g, pairs in everything.items():
                data = wire.pack(pairs)
                out[g] = (True, data)
        for g, pairs in by_group.items():
            if g not in out:
                out[g] = (False, wire.pack(pairs))
        return out

    def take(self, cid: int) -> bool:
        """Write this executor's part of ``cid`` (after ``on_checkpoint``); False if it could not."""
        ex = self.executor
        checkpoints = ex.host.checkpoints
        if checkpoints is None or cid <= self.last:
            return False
        if ex.routing is not None and ex.routing.rescales:
            return False  # a rescale changes who owns which key group: no checkpoint until it is done
        self.last = cid
        instance = ex.instance
        try:
            instance.on_checkpoint(cid)
        except Exception as exc:  # noqa: BLE001 - the user's hook: this checkpoint fails
            ex.record_error("on_checkpoint", exc)
            self.last_error = f"{ex.executor_id}: on_checkpoint: {exc}"
            return False
        if checkpoints.tainted:
            return False
        state = instance.state if isinstance(getattr(instance, "state", None), dict) else {}
        keyed = getattr(instance, "keyed_state", None)
        try:
            blob = wire.pack({"cid": cid, "state": state})
        except (TypeError, ValueError, OverflowError) as exc:
            self._refuse(cid, f"self.state key {_bad_key(state)}", exc)
            return False
        extra = ex.checkpoint_extra()
        if extra:
            try:
                blob = wire.pack({"cid": cid, "state": state, **extra})
            except (TypeError, ValueError, OverflowError) as exc:
                self._refuse(cid, getattr(ex, "extra_what", "a tracked tuple's message id"), exc)
                return False
        groups: dict[tuple[str, int], tuple[bool, bytes]] = {}
        if isinstance(keyed, KeyedState):
            try:
                entries = self._group_entries(keyed)
            except ForeignKeyError as exc:
                self.last_error = f"{ex.executor_id}: {exc}"
                ex.record_error("checkpoint", exc)
                self.need_full = True
                return False
            except (TypeError, ValueError, OverflowError) as exc:
                self._refuse(cid, f"self.keyed_state key {_bad_key(keyed)}", exc)
                return False
            groups = {(ex.component, g): entry for g, entry in entries.items()}
        try:
            size = checkpoints.write(cid, ex.executor_id, blob, groups)
        except StateError as exc:
            self.last_error = str(exc)
            ex.record_error("checkpoint", exc)
            if isinstance(exc, ChainLostError):
                self.need_full = True  # the store lost what the deltas build on: whole entries next
            return False  # what changed is still found next time: compared with the same copy
        for (_c, g), (full, data) in groups.items():
            if full:
                self.full_bytes[g] = len(data)
                self.delta_bytes[g] = 0
            else:
                self.delta_bytes[g] = self.delta_bytes.get(g, 0) + len(data)
        if isinstance(keyed, KeyedState):
            keyed.touched.clear()
            self._choose_tracking(keyed)
        self.need_full = False
        self.written += 1
        self.last_bytes = size
        self.last_error = None
        return True

    def _choose_tracking(self, keyed: KeyedState) -> None:
        """How the next checkpoint finds what changed: a bolt that processed fewer tuples since the
        last checkpoint than its state has keys notes each assignment (TrackedKeyedState); else it
        is compared with a copy taken now (nstorm.state.keyed). The same object either way."""
        executed = self.executor.executed
        processed, self.executed_at = executed - self.executed_at, executed
        if len(keyed) >= _TRACK_FROM_KEYS and processed < len(keyed):
            keyed.__class__ = TrackedKeyedState
            self.previous = {}
        else:
            keyed.__class__ = KeyedState
            self.previous = dict(keyed)  # what the next checkpoint compares with

    def _refuse(self, cid: int, where: str, exc: Exception) -> None:
        ex = self.executor
        self.last_error = f"{ex.executor_id}: {where} is not msgpack data: {exc}"
        ex.record_error("checkpoint", ValueError(f"checkpoint {cid}: {where} is not msgpack data ({exc})"))
        self.need_full = True

    # -- restoring ----------------------------------------------------------------------
    def restore(self, cid: int, read: Callable[[int, str], bytes | None],
                chain: Callable[[str, int, int], list[tuple[int, bool, bytes]]]) -> dict[str, Any]:
        """Install checkpoint ``cid`` (0: the empty start): ``self.state``, ``self.keyed_state``
        of the groups this executor owns now; the snapshot's other entries (a spout's pending
        trees) are returned. ValueError if the snapshot is damaged, StateError if unreadable."""
        ex = self.executor
        instance = ex.instance
        self.last = cid
        self.need_full = True
        self.previous = {}
        if cid <= 0:
            instance.state = {}
            instance.keyed_state = KeyedState()
            return {}
        blob = read(cid, ex.executor_id)
        data = unpack_snapshot(blob) if blob is not None else {"state": {}}
        instance.state = data["state"]
        keyed = KeyedState()
        owned, _groups = self._owned()
        for g in owned:
            entries = chain(ex.component, g, cid)
            decoded: list[tuple[bool, Any]] = []
            for _c, full, raw in entries:
                try:
                    decoded.append((full, wire.unpack_state(raw)))
                except Exception as exc:  # noqa: BLE001
                    msg = f"damaged key group {ex.component}:{g}: {exc}"
                    raise ValueError(msg) from None
            apply_entries(keyed, decoded)
        instance.keyed_state = keyed
        return data


class BarrierAligner:
    """A bolt's barriers: which upstream tasks sent checkpoint ``cid``'s, and what they sent after it.

    :ivar cid: the checkpoint being aligned (0: none).
    :ivar seen: upstream tasks whose barrier for ``cid`` came.
    :ivar held: ``(src, batch)`` that came after a barrier, in arrival order, until alignment.
    """

    def __init__(self) -> None:
        self.cid = 0
        self.highest = 0  # the newest checkpoint whose barrier came (older ones are stale)
        self.seen: set[int] = set()
        self.held: list[tuple[int, Any]] = []
        self.started_at = 0.0

    @property
    def aligning(self) -> bool:
        return self.cid != 0

    def on_barrier(self, src: int, cid: int, expected: Iterable[int]) -> tuple[bool, list[tuple[int, Any]]]:
        """A barrier came from ``src``: (aligned now, batches released because a newer checkpoint
        replaces an unfinished one). Barriers of older checkpoints are ignored."""
        released: list[tuple[int, Any]] = []
        if cid < self.highest or (cid == self.highest and not self.aligning):
            return False, released  # an abandoned checkpoint's, or one done already
        if cid > self.cid:
            if self.aligning:
                log.info("checkpoint %d replaced by %d before it was aligned", self.cid, cid)
                released = self.release()
            self.cid = self.highest = cid
            self.seen = set()
            self.started_at = time.monotonic()
        self.seen.add(src)
        return set(expected) <= self.seen, released

    def holds(self, src: int) -> bool:
        return src in self.seen

    def release(self) -> list[tuple[int, Any]]:
        """End the alignment: the held batches, to be taken in order."""
        held, self.held = self.held, []
        self.cid = 0
        self.seen = set()
        return held

    def export(self) -> dict[str, Any] | None:
        """The alignment in progress, for a hand-over (held batches as wire bytes)."""
        if not self.aligning:
            return None
        held = []
        for src, batch in self.held:
            if type(batch) is Traced:
                batch = batch.batch  # the trace stays behind (worker.qos)
            elif type(batch) is ChainMark:
                continue  # a chain is not moved with its executor (worker.chaining)
            if batch is not None and type(batch) is not bytes and type(batch) is not int:
                batch = wire.pack(batch)
            held.append([src, batch])
        return {"cid": self.cid, "seen": sorted(self.seen), "held": held}

    def adopt(self, data: Mapping[str, Any] | None) -> None:
        """Continue an alignment the old copy of a moved executor had begun."""
        if not data:
            return
        self.cid = self.highest = int(data["cid"])
        self.seen = set(data.get("seen") or ())
        self.held = [(int(src), batch) for src, batch in data.get("held") or ()]
        self.started_at = time.monotonic()
