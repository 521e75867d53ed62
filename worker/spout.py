"""The spout executor: calls ``next_tuple`` in a loop and tracks the tuples emitted with a ``msg_id``.

Tracked tuples a spout emits in a row share one tuple tree (a :class:`~worker.runs.SpoutGroup`,
up to ``topology.acking.group.size``): the acker answers per group, the spout calls ``ack`` /
``fail`` per tuple. Whatever holds the spout back (the topology inactive, backpressure or a
fence, ``topology.max.spout.pending``, a peer whose pipe is full), its loop goes on handling
acks, fails and timeouts: a tuple not fully acked within ``topology.message.timeout.secs`` is
failed, as in Storm. A moved spout's tracked tuples move with its state.
"""

from __future__ import annotations

import logging
import queue
import random
import time
from collections.abc import Mapping
from typing import Any

from nstorm import latency
from nstorm.component import Spout
from nstorm.state.keyed import as_key
from worker import wire
from worker.chaining import tend_guests
from worker.executor import UserExecutor
from worker.host import Host
from worker.runs import SpoutGroup
from worker.timeouts import Timeouts

__all__ = ["SpoutExecutor"]

log = logging.getLogger(__name__)
_getroot = random.Random().getrandbits  # root ids of spout tuples
STAMPED = latency.STAMPED  # roots at or above carry their spout emit time (nstorm.latency)
_ROOT_TASK_BITS = wire.ROOT_TASK_BITS
_STAMP_ACKER_CHOICES = 1 << 7  # a stamped root has 7 bits to pick its acker with
_SPOUT_CALLS = 256  # next_tuple calls per spout loop iteration at most
_HELD_WHILE_AWAITING = (wire.ACKED, wire.FAILED, wire.CHECKPOINT, wire.COMMITTED)
_FAILED_IDS_MAX = 100_000  # failed msg ids remembered for the replayed count
_NOT_FAILED = object()


class SpoutExecutor(UserExecutor):
    """Calls ``next_tuple`` in a loop; tracks tuples emitted with a ``msg_id``."""

    kind = "spout"

    def __init__(self, host: Host, executor_id: str, task: int, cls: type, definition: Mapping[str, Any]) -> None:
        super().__init__(host, executor_id, task, cls, definition)
        self.acker_pick: tuple[int, int] | None = None  # (ackers, index of this spout's acker)
        self.pending: dict[int, list[Any]] = {}  # root -> the msg ids of its group
        self.pending_n = 0  # tracked tuples not acked yet (topology.max.spout.pending counts these)
        self.group: SpoutGroup | None = None  # the open group: tracked emits join its tree
        # Per-tuple sending (topology.batch.size 1) sends every tuple alone: groups of one.
        self.group_size = 1 if self.outbox.policy.cap == 1 else max(1, int(self.conf.get("topology.acking.group.size") or 1))
        self.timeout = float(self.conf["topology.message.timeout.secs"])
        self.timeouts = Timeouts(self.timeout)
        max_pending = self.conf.get("topology.max.spout.pending")
        self.max_pending = int(max_pending) if max_pending else 0
        self.replayed = 0
        self.failed_ids: dict[Any, None] = {}  # failed msg ids not emitted again yet, oldest first
        self.immediate_acks: list[Any] = []
        self.ack_buckets: dict[int, int] = {}
        self.held_control: list[tuple[int, Any]] = []
        self.last_acked_at: float | None = None  # wall clock of the last ack (stall detection)
        self.next_stamp = 0.0  # the next tracked tuple from then on gets a stamped root
        self.complete = latency.Recorder()  # emit -> tree fully acked, of the stamped tuples
        self.now = time.monotonic()  # of the current loop iteration: deadlines need no finer clock
        self.emit_calls = 0
        self.active = False  # as the spout was told last (activate / deactivate)

    def setup(self) -> None:
        self.refresh_routing()
        spout: Spout = self.instance
        spout.emit = self._emit  # type: ignore[method-assign]
        spout.emit_direct = self._emit_direct  # type: ignore[method-assign]
        self.init_state()
        spout.open(self.conf, self.context)

    def _emit(self, values: Any, stream: str = "default", msg_id: Any = None) -> None:
        outbox = self.outbox
        self.emit_calls += 1
        if msg_id is None or not outbox.acking:
            outbox.emit(values, stream)
            if msg_id is not None:
                self.immediate_acks.append(msg_id)  # acking off: acked at once, as in Storm
            return
        group = self.group or self._open_group()
        outbox.emit_tracked(values, stream, group)
        # _track inlined: a call fewer a tracked tuple
        if self.failed_ids:
            self._count_replay(msg_id)
        ids = group.msg_ids
        ids.append(msg_id)
        self.pending_n += 1
        if len(ids) >= self.group_size:
            self._close_group()

    def _emit_direct(self, task: int, values: Any, stream: str = "default", msg_id: Any = None) -> None:
        outbox = self.outbox
        self.emit_calls += 1
        if msg_id is None or not outbox.acking:
            outbox.emit_direct(task, values, stream)
            if msg_id is not None:
                self.immediate_acks.append(msg_id)
            return
        group = self.group or self._open_group()
        outbox.emit_direct_tracked(task, values, stream, group)
        self._track(msg_id, group)

    def refresh_routing(self) -> None:
        routing = self.routing
        super().refresh_routing()
        if self.routing is not routing:
            self._pick_acker()

    def _pick_acker(self) -> None:
        """Choose the acker of this spout's new trees: one in this worker if there is one, so
        that its answers never cross processes (and, with the bolts here, neither do the acks).
        Trees already open keep theirs: the choice is written in each root's bits."""
        routing = self.routing
        ackers = routing.ackers if routing is not None else []
        me = self.host.worker_id
        local = [i for i, task in enumerate(ackers) if routing.location[task] == me]  # type: ignore[union-attr]
        self.acker_pick = (len(ackers), local[self.index % len(local)]) if local and len(ackers) > 1 else None

    def _root(self) -> int:
        """A new root id: random, this spout's task in the low bits (the acker answers it from
        them), the bits above them chosen so that :func:`wire.acker_index` gives the acker of
        :meth:`_pick_acker`, and every millisecond or so a stamped one (nstorm.latency)."""
        pick = self.acker_pick
        if self.now >= self.next_stamp:
            self.next_stamp = self.now + latency.STAMP_INTERVAL_SECS
            if pick is None or pick[0] > _STAMP_ACKER_CHOICES:
                return latency.stamped_root(_getroot(7) << _ROOT_TASK_BITS | self.task)
            root = latency.stamped_root(self.task)  # bits 16..22 are free: they pick the acker
            n, index = pick
            return root | ((index - (root >> _ROOT_TASK_BITS)) % n) << _ROOT_TASK_BITS
        r = _getroot(46)
        if pick is not None:
            n, index = pick
            r += (index - r) % n
        return r << _ROOT_TASK_BITS | self.task

    def _open_group(self) -> SpoutGroup:
        group = self.group = SpoutGroup(self._root())
        return group

    def _track(self, msg_id: Any, group: SpoutGroup) -> None:
        if self.failed_ids:
            self._count_replay(msg_id)
        ids = group.msg_ids
        ids.append(msg_id)
        self.pending_n += 1
        if len(ids) >= self.group_size:
            self._close_group()

    def _close_group(self) -> None:
        """The open group's tree is complete: track its root (or ack it at once if none of its
        tuples had a subscriber)."""
        group = self.group
        if group is None:
            return
        self.group = None
        outbox = self.outbox
        if not outbox.close_group(group):
            self.pending_n -= len(group.msg_ids)
            self.immediate_acks.extend(group.msg_ids)  # nobody subscribes: complete at once
            return
        if outbox.acks:
            outbox.ctl_deadline.worked(self.now)  # the group's XOR for the acker (its last run had left)
        root = group.root
        self.pending[root] = group.msg_ids
        timeouts = self.timeouts
        if self.now >= timeouts.open_until:
            timeouts.add(root, self.now)
        else:
            timeouts.open.append(root)

    def _handle_control(self) -> None:
        get = self.ctl_q.get_nowait
        while True:
            try:
                kind, _src, entries = get()
            except queue.Empty:
                break
            try:
                self._control(kind, entries, _src)
            except (TypeError, ValueError):
                if wire.control_entries_ok(kind, entries):
                    raise  # not the message's fault
                log.warning("executor %s dropped a control message %d of the wrong shape", self.executor_id, kind)
        if self.immediate_acks:
            ids, self.immediate_acks = self.immediate_acks, []
            self.acked += len(ids)
            self._ack_ids(ids)
            self._count_acks(len(ids))

    def _count_acks(self, n: int) -> None:
        """Acks per wall-clock second (the last few go into heartbeats): exact per-second throughput."""
        if n:
            self.last_acked_at = wall = time.time()
            sec = int(wall)
            buckets = self.ack_buckets
            buckets[sec] = buckets.get(sec, 0) + n
            if len(buckets) > 30:
                for old in sorted(buckets)[:-20]:
                    del buckets[old]

    def _control(self, kind: int, entries: Any, src: int = -1) -> None:
        if kind in _HELD_WHILE_AWAITING and self.handover.awaiting:
            # Acks for tuples the old copy emitted: their msg ids come with the state; a
            # checkpoint is taken of the state that comes.
            self.held_control.append((kind, entries))
            return
        self._apply_control(kind, entries, src)

    def _apply_control(self, kind: int, entries: Any, src: int = -1) -> None:
        if kind == wire.ACKED:
            before = self.acked
            for root in entries:
                ids = self.pending.pop(root, None)
                if ids is not None:
                    self.pending_n -= len(ids)
                    self.acked += len(ids)
                    self._ack_ids(ids)
                    if root >= STAMPED:
                        self.complete.add_stamp(root)
            self._count_acks(self.acked - before)
        elif kind == wire.FAILED:
            for root in entries:
                self._fail_root(root)
        elif kind == wire.CHECKPOINT:
            self._take_checkpoint(int(entries))
        elif kind == wire.COMMITTED:
            self.committed(int(entries))
        elif kind == wire.GROUPS:
            self.on_groups(-1, entries)
        elif kind == wire.SHIFT_READY:
            self.on_shift_ready(src, int(entries))
        elif not self.handover.on_control(kind, entries):
            log.warning("executor %s: unexpected control message %d ignored", self.executor_id, kind)

    def _fail(self, msg_id: Any) -> None:
        self.failed += 1
        failed = self.failed_ids
        try:
            failed[msg_id] = None
        except TypeError:  # an unhashable msg id: not counted when replayed
            pass
        else:
            if len(failed) > _FAILED_IDS_MAX:  # a spout that never replays (or under new ids)
                del failed[next(iter(failed))]
        self._call(self.instance.fail, msg_id)

    def _count_replay(self, msg_id: Any) -> None:
        """Count an emit of a msg id that failed before as a replay (``replayed``)."""
        try:
            if self.failed_ids.pop(msg_id, _NOT_FAILED) is not _NOT_FAILED:
                self.replayed += 1
        except TypeError:  # unhashable: never recorded as failed
            pass

    def _fail_root(self, root: int) -> None:
        """Every tuple of the root's group failed (one failed or timed out): replay them all; with
        durable state, roll the topology back instead (some of the tree took effect)."""
        ids = self.pending.pop(root, None)
        if ids is not None:
            self.pending_n -= len(ids)
            if self.host.checkpoints is not None:
                self.failed += len(ids)
                self.taint("a tuple tree failed or timed out")
                return
            for msg_id in ids:
                self._fail(msg_id)

    # -- live rescaling (worker.rescale) --------------------------------------------------------
    def try_release(self, now: float) -> None:
        """Give key groups away once the trees open when the step came are acked or failed (their
        ``ack``/``fail`` may still change those groups' state): ``next_tuple`` waits meanwhile."""
        shift = self.shift
        if shift is None or shift.released:
            return
        self._close_group()
        ready, overdue = shift.spout_may_release(now, self.pending, self.timeout)
        if not ready:
            return
        for root in overdue:
            self._fail_root(root)
        self.give_groups()

    # -- checkpoints (worker.checkpoint) ------------------------------------------------------
    def _take_checkpoint(self, cid: int) -> None:
        """Snapshot ``self.state`` and the tracked trees, write them, send the barrier downstream."""
        if cid <= self.checkpoint.last:
            return  # taken by the old copy of this moved spout, or restored from a later one
        if self.routing is not None and self.routing.rescales:
            return  # a rescale changes the layout: no checkpoint until it is done (the coordinator waits)
        if self.tainted:
            # Data was lost here and the rollback is on its way; no barrier either. A restarted
            # worker's spout finds a part of ``cid`` its killed copy may have written (with trees
            # pending whose tuples died with it): its barrier would let the bolts complete ``cid``
            # around that part, and a restore from it would ack tuples nobody processed.
            return
        self._close_group()
        self.checkpoint.take(cid)
        self.outbox.send_barrier(cid)

    def checkpoint_extra(self) -> dict[str, Any]:
        """The trees pending now: their tuples are all ahead of the barrier, so a restore of this
        checkpoint finds their effects in it and acks them."""
        return {"pending": [[root, ids] for root, ids in self.pending.items()]}

    def restore_checkpoint_extra(self, data: Mapping[str, Any]) -> None:
        """After ``open``: the trees pending at the checkpoint are complete; ``ack`` each tuple."""
        spout: Spout = self.instance
        n = 0
        for _root, ids in data.get("pending") or ():
            for msg_id in ids:
                n += 1
                self._call(spout.ack, as_key(msg_id))  # a tuple id came back as a list
        self.acked += n
        self._count_acks(n)

    def _expire(self, now: float) -> None:
        for root in self.timeouts.expire(now):
            self._fail_root(root)

    def _ack_ids(self, ids: Any) -> None:
        """``ack`` each of ``ids`` (once a tracked tuple: no call of :meth:`_call` for each)."""
        ack = self.instance.ack
        for msg_id in ids:
            try:
                ack(msg_id)
            except Exception as exc:
                self.record_error("ack", exc)

    def _call(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            self.record_error(fn.__name__, exc)

    def loop(self) -> None:
        spout: Spout = self.instance
        outbox = self.outbox
        next_tuple = spout.next_tuple
        # next_tuple calls per iteration (1 with per-tuple sending): deadlines are checked between
        # iterations, so an iteration must stay short whatever topology.batch.size is.
        calls = min(outbox.policy.cap, _SPOUT_CALLS)
        deadline, ctl_deadline = outbox.deadline, outbox.ctl_deadline
        courier = outbox.courier
        clock = time.monotonic
        idle = 0.0
        handover = self.handover
        handover.announce()
        qos = self.qos if self.qos is not None and self.qos.starts else None  # this spout starts a constrained path
        while self._running:
            self.refresh_routing()
            if handover.awaiting:
                handover.wait(self._control)
                continue
            if handover.sealing:  # an old copy whose seals are out: nothing runs until they are answered
                if handover.wait_sealed():  # (it handed over)
                    break
                continue
            self.now = now = clock()
            before = self.emit_calls
            if not self.ctl_q.empty() or self.immediate_acks:
                self._handle_control()  # ``ack``/``fail`` may emit too
                self._close_group()
            if handover.draining and handover.drained(input_empty=True):
                # The new copy is set up: it continues exactly where this one stops.
                if self.immediate_acks:  # acks due now (a group nobody subscribes to): not lost
                    self._handle_control()
                    self._close_group()
                handover.hand_over()
                break
            if handover.sealing:
                continue
            shift = self.shift
            if shift is not None:
                self.shift_step()
                if self.retired:
                    break
            if self.routing is not None and self.routing.rescales:
                self.rescale_tick()
            active = self.host.active
            if active != self.active:
                self.active = active
                self._call(spout.activate if active else spout.deactivate)
            if self.timeouts.due(now):
                self._expire(now)
            # Whatever holds the spout back (inactive, backpressure or a fence, the pending cap, a
            # peer that takes nothing), acks, fails and timeouts above go on on every pass.
            blocked = (not active or self.host.throttled or (self.max_pending and self.pending_n >= self.max_pending)
                       or (courier.backlog and not courier.drain())
                       or (self.shift is not None and not self.shift.released))  # giving key groups away
            if not blocked:
                if qos is not None and qos.sample_due(now):
                    qos.start()  # a latency constraint's sample: the first tuple this iteration emits
                for _ in range(calls):
                    last = self.emit_calls
                    try:
                        next_tuple()
                    except Exception as exc:
                        self.record_error("next_tuple", exc)
                        break
                    if self.max_pending and self.pending_n >= self.max_pending:
                        blocked = True
                        break
                    if self.emit_calls == last:
                        break
                if qos is not None and qos.pending:
                    qos.resolve()
            if self.group is not None:
                self._close_group()
            emitted = self.emit_calls != before
            if emitted and deadline.at is None and outbox.holding():
                deadline.worked(now)  # something waits in a buffer (at low rates each tuple left at once)
            if blocked:
                # Nothing more may be emitted until acks arrive (or the topology resumes):
                # holding tuples back would only stall the topology.
                outbox.flush()
            else:
                now = clock()
                if deadline.due(now):
                    outbox.flush()
                elif ctl_deadline.due(now):
                    outbox.flush_control()
            guests = outbox.guest_inboxes
            if emitted and not blocked:
                if guests:  # executors chained to this one: their deadlines are kept here
                    tend_guests(guests, self.task, clock(), 0.0)
                idle = 0.0
                continue
            # Nothing to emit right now: what is buffered stays until its batch is full or
            # its deadline passes (a rate-limited source keeps its batches); wait for acks
            # or a short back-off, never past a deadline.
            idle = min(max(idle * 2, 0.0005), 0.01)
            now = clock()
            wait = ctl_deadline.wait(now, deadline.wait(now, idle))
            if guests:
                wait = tend_guests(guests, self.task, now, wait)
            try:
                item = self.ctl_q.get(timeout=wait)
            except queue.Empty:
                pass
            else:
                self.ctl_q.put(item)
        self._close_group()
        outbox.flush()

    def snapshot_extra(self) -> dict[str, Any]:
        """Tracked tuples move too: the new copy gets their acks and calls ``ack``/``fail``."""
        now = time.monotonic()
        expiry = {root: at for at, root in self.timeouts.items()}
        pending = []
        lost = 0
        for root, ids in self.pending.items():
            entry = [root, ids, max(0.0, expiry.get(root, now) - now)]
            try:
                wire.pack(entry)
            except (TypeError, ValueError, OverflowError):
                lost += len(ids)  # this group's ids cannot travel; the others still do
                continue
            pending.append(entry)
        if lost:
            log.warning("executor %s: message ids that are not msgpack data; %d tracked tuples will not be "
                        "acked or failed by the new copy", self.executor_id, lost)
        # Acks per second move too: the hand-over second is counted by both copies.
        return {"pending": pending, "ack_buckets": [[sec, n] for sec, n in self.ack_buckets.items()]}

    def restore_extra(self, entry: Mapping[str, Any]) -> None:
        self.now = time.monotonic()  # ``ack``/``fail`` below may emit: timeouts count from now
        for sec, n in entry.get("ack_buckets") or ():
            self.ack_buckets[int(sec)] = self.ack_buckets.get(int(sec), 0) + int(n)
        now = time.monotonic()
        adopted = sorted(((now + float(left), root, ids) for root, ids, left in entry.get("pending") or ()),
                         key=lambda x: x[0])
        for _at, root, ids in adopted:
            self.pending[root] = [as_key(i) for i in ids]  # tuple ids came back as lists
            self.pending_n += len(ids)
        self.timeouts.rebuild([*self.timeouts.items(), *((at, root) for at, root, _ in adopted)])
        held, self.held_control = self.held_control, []
        for kind, entries in held:
            self._apply_control(kind, entries)

    def teardown(self) -> None:
        spout: Spout = self.instance
        self.close_if_leaving()
        if self.active:
            self._call(spout.deactivate)
        self._call(spout.close)
        self.outbox.close()

    def counters(self) -> dict[str, Any]:
        data = super().counters()
        data["pending"] = self.pending_n  # tuples, not groups
        data["replayed"] = self.replayed
        data["started_at"] = self.started_at
        data["last_acked_at"] = self.last_acked_at
        buckets = dict(self.ack_buckets)
        data["acked_per_sec"] = {str(sec): n for sec, n in sorted(buckets.items())[-15:]}
        complete = self.complete
        if complete.hist:
            data["latency_hist"] = dict(complete.hist)
            data["latency_ms"] = complete.summary()
        return data
