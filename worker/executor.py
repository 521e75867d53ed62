"""Executors: one thread per spout, bolt or acker instance, run inside a worker process.

Each executor owns a bounded data queue (batches of records from one upstream
executor), an unbounded control queue (acker traffic, never blocks), an
:class:`~worker.outbox.Outbox`, and its counters. The thread is named after the
executor id, so every log line it writes names it.

States: ``NEW -> RUNNING`` when the thread starts; ``RUNNING -> STOPPING`` when
:meth:`Executor.stop` is called (lazy kill or shutdown); ``STOPPING -> STOPPED``
when the loop has returned and the component's ``close``/``cleanup`` has run.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nstorm import latency
from nstorm.component import (
    TICK_STREAM,
    Batch,
    Bolt,
    Context,
    Spout,
    Tuple,
    TupleMeta,
    delivered_tuple_class,
)
from worker import wire
from worker.outbox import InputRun, Outbox, SpoutGroup
from worker.timeouts import Timeouts

if TYPE_CHECKING:
    from worker.process import Worker

__all__ = ["AckerExecutor", "BoltExecutor", "Executor", "SpoutExecutor"]

log = logging.getLogger(__name__)
_getroot = random.Random().getrandbits  # root ids of spout tuples
STAMPED = latency.STAMPED  # roots at or above carry their spout emit time (nstorm.latency)
_ROOT_TASK_BITS = wire.ROOT_TASK_BITS
_STAMP_ACKER_CHOICES = 1 << 7  # a stamped root has 7 bits to pick its acker with
_SPOUT_CALLS = 256  # next_tuple calls per spout loop iteration at most
_ACKER_EXPIRY_SECS = 0.25  # how often an acker's thread drops entries past the message timeout
_READY_RESEND_SECS = 0.5  # a copy waiting for its state asks the old place again this often


class Executor:
    """What every executor has: a thread, queues, an outbox, counters."""

    kind = "executor"

    def __init__(self, worker: Worker, executor_id: str, task: int) -> None:
        self.worker = worker
        self.executor_id = executor_id
        self.task = task
        self.component, _, index = executor_id.rpartition(":")
        self.index = int(index)
        # Unbounded: flow control is topology-wide backpressure at the spouts (worker/backpressure.py).
        self.data_q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.ctl_q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.executed = 0
        self.acked = 0
        self.failed = 0
        self.errors = 0
        self.last_error: str | None = None
        self.bad_batches = 0  # data batches from the network that did not decode
        # Tuples per input batch (decaying average, starts at a full batch): backpressure counts
        # queued tuples, not messages, so that small batches at low rates never look like congestion.
        self.batch_avg = float(max(1, int(worker.conf["topology.batch.size"])))
        self.in_size = 0  # tuples in the batch put on the queue last (written by the senders)
        self.state = "NEW"
        self.started_at = time.time()  # wall clock (stall detection: no ack since at most this)
        self._running = True
        self.thread = threading.Thread(target=self._run, name=executor_id, daemon=True)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.state = "RUNNING"
        self.started_at = time.time()
        self.thread.start()

    def stop(self) -> None:
        """Ask the loop to end; the thread finishes its current batch first."""
        if self.state == "RUNNING":
            self.state = "STOPPING"
        self._running = False

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _run(self) -> None:
        try:
            self.setup()
        except Exception as exc:  # open/prepare raised: report it, keep the worker
            self.record_error("open/prepare", exc)
            self.broken()
            self.state = "STOPPED"
            return
        try:
            self.loop()
        except Exception as exc:
            self.record_error("executor loop", exc)
        finally:
            try:
                self.teardown()
            except Exception:
                log.exception("executor %s failed to stop cleanly", self.executor_id)
            self.state = "STOPPED"

    def setup(self) -> None:
        pass

    def broken(self) -> None:
        """After a failed ``open``/``prepare``: keep draining input (failing tracked tuples) so
        nothing piles up or pauses the topology, until the executor is stopped."""
        outbox = getattr(self, "outbox", None)
        while self._running:
            try:
                _src, batch = self.data_q.get(timeout=0.1)
            except queue.Empty:
                continue
            if batch is None or outbox is None or outbox.routing is None:
                continue
            decoded = self.decode(batch)
            runs = decoded[1] if decoded else None
            for anchor in runs[1::2] if runs else ():
                outbox.fail_anchors(anchor)
            outbox.flush()

    def loop(self) -> None:
        raise NotImplementedError

    def decode(self, batch: Any) -> tuple[Any, Any, Any] | None:
        """``(values, runs, streams)`` of a queued batch; None (counted, logged) for garbage."""
        if type(batch) is not bytes:
            return batch  # type: ignore[no-any-return]  # from this worker: built by an outbox
        try:
            return wire.decode_batch(batch)
        except Exception as exc:  # noqa: BLE001 - garbage from the network is dropped, never raised
            self.bad_batches += 1
            if self.bad_batches <= 10 or self.bad_batches % 1000 == 0:
                log.warning("executor %s dropped a batch that does not decode (%s); %d so far",
                            self.executor_id, exc, self.bad_batches)
            return None

    def teardown(self) -> None:
        pass

    def record_error(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = f"{where}: {type(exc).__name__}: {exc}"
        log.exception("executor %s: error in %s", self.executor_id, where)

    def counters(self) -> dict[str, Any]:
        outbox = getattr(self, "outbox", None)
        data = {
            "kind": self.kind,
            "emitted": getattr(outbox, "emitted", 0),
            "batches": getattr(outbox, "batches", 0),
            "control_messages": getattr(outbox, "control_messages", 0),
            "executed": self.executed,
            "acked": self.acked,
            "failed": self.failed,
            "queue": self.data_q.qsize(),
            "errors": self.errors,
            "last_error": self.last_error,
        }
        if getattr(outbox, "undelivered", 0):
            data["undelivered"] = outbox.undelivered  # type: ignore[union-attr]
        if getattr(self, "awaiting_until", None) is not None:
            data["awaiting_state"] = True
        return data


class _UserExecutor(Executor):
    """An executor running user code: a spout or a bolt."""

    def __init__(self, worker: Worker, executor_id: str, task: int, cls: type, definition: Mapping[str, Any]) -> None:
        super().__init__(worker, executor_id, task)
        self.definition = definition
        self.spec = definition["components"][self.component]
        self.instance = cls()
        self.outbox = Outbox(worker, task, self.component, definition)
        self.routing = None
        comps = definition["components"]
        self.context = Context(
            component=self.component,
            task_index=self.index,
            executor_id=executor_id,
            topology=definition["name"],
            worker_id=worker.worker_id,
            parallelism={n: int(c["parallelism"]) for n, c in comps.items()},
        )
        self.conf = {**worker.conf, **(self.spec.get("conf") or {})}
        tick = self.spec.get("tick_secs")
        self.tick_secs = float(tick) if tick else None
        self.next_tick = time.monotonic() + (self.tick_secs or 0)
        self.markers_seen: set[int] = set()
        self.ready_seen = False  # the new copy of this executor is set up and waits for the state
        self.ready_copy: int | None = None  # ... and which copy it is (the state goes to that one)
        self.copy_id = random.getrandbits(48)  # this copy, told from a later one of a restarted worker

    def refresh_routing(self) -> None:
        """Pick up a swapped routing table (checked once per loop, never per tuple)."""
        routing = self.worker.routing
        if routing is not self.routing:
            self.routing = routing
            self.outbox.rebuild(routing)
            self.bind_emit()

    def bind_emit(self) -> None:
        """Point the component's ``emit`` at the outbox's compiled emit (rebuilt per routing)."""

    # -- migration (thread mode) -------------------------------------------------------------
    # A moved executor exists twice for a moment: the old copy drains (processes what its
    # upstream executors sent before they switched, known from their markers) and then
    # hands its state over; the new copy holds its input until that state arrives.
    awaiting_until: float | None = None
    draining = False
    migration: Mapping[str, Any] | None = None

    def await_state(self, timeout: float, migration: Mapping[str, Any]) -> None:
        """This copy replaces one on another worker: hold input until its state arrives."""
        self.awaiting_until = time.monotonic() + timeout
        self.migration = migration
        self.held_since: float | None = None
        self.ready_sent_at = float("-inf")

    def begin_drain(self, upstream: set[int], timeout: float) -> None:
        """This copy moved away: finish what upstream sent here, then hand the state over."""
        self.drain_deadline = time.monotonic() + timeout
        self.markers_needed = set(upstream)
        self.draining = True

    def _drain_done(self) -> bool:
        raise NotImplementedError

    def announce_ready(self) -> None:
        """Tell the old copy this one is set up (``open``/``prepare`` done): it may hand over now.

        Repeated every ``_READY_RESEND_SECS`` while this copy waits: a READY lost with a worker
        that restarted is asked again, and the old place answers GONE once it holds no copy
        that could send a state (see :meth:`Worker.answer_ready <worker.process.Worker.answer_ready>`).
        """
        if self.awaiting_until is not None and self.migration:
            self.ready_sent_at = time.monotonic()
            self.outbox.send_control_to(self.migration["from"], wire.READY, self.task,
                                        {"worker": self.worker.worker_id, "copy": self.copy_id})

    def note_ready(self, entries: Any) -> None:
        """The new copy announced itself: hand over once drained, to that copy."""
        self.ready_seen = True
        if isinstance(entries, Mapping):
            self.ready_copy = entries.get("copy")

    def hand_over(self) -> None:
        """Send ``state`` to the executor's current location, then stop this copy."""
        self.refresh_routing()
        self.outbox.flush()
        state = getattr(self.instance, "state", None)
        if not isinstance(state, dict):
            state = {}
        try:
            payload = wire.pack(state)
            error = None
        except (TypeError, ValueError, OverflowError) as exc:
            payload, error = wire.pack({}), f"state of {self.executor_id} is not msgpack data: {exc}"
            self.record_error("hand_over", exc)
        counters = {"executed": self.executed, "emitted": self.outbox.emitted, "acked": self.acked,
                    "failed": self.failed, "errors": self.errors}
        to = self.routing.location[self.task]  # type: ignore[union-attr]
        entry = {"state": payload, "sent_at": time.time(), "from": self.worker.worker_id, "error": error,
                 "counters": counters, "copy": self.ready_copy, **self._handover_extra()}
        self.outbox.send_control_to(to, wire.STATE, self.task, entry)
        self.worker.handed_over(self.task, to, self.ready_copy)
        log.info("executor %s handed its state over (%d bytes) to %s", self.executor_id, len(payload), to)
        self._running = False

    def _handover_extra(self) -> dict[str, Any]:
        return {}

    def _adopt_extra(self, entry: Mapping[str, Any]) -> None:
        pass

    def _take_state(self, entry: Mapping[str, Any]) -> None:
        now = time.monotonic()
        try:
            self.instance.state = wire.unpack_state(entry["state"])
        except Exception as exc:  # noqa: BLE001 - a broken hand-over starts empty, loudly
            self.record_error("state", exc)
            self.instance.state = {}
        # After the state: held acks and fails call ``ack``/``fail``, which update that state.
        self._adopt_extra(entry)
        carried = entry.get("counters") or {}
        self.executed += int(carried.get("executed", 0))
        self.outbox.emitted += int(carried.get("emitted", 0))
        self.acked += int(carried.get("acked", 0))
        self.failed += int(carried.get("failed", 0))
        self.errors += int(carried.get("errors", 0))
        # The executor stood still from the old copy's last tuple (it sent its state then)
        # or from the first tuple held here, whichever came first, until now.
        stall = max(time.time() - float(entry.get("sent_at") or time.time()),
                    now - self.held_since if self.held_since is not None else 0.0, 0.0)
        self.awaiting_until = None
        self.worker.migration_done(self, stall, lost=False)

    def _give_up_waiting(self, why: str) -> None:
        log.warning("executor %s: %s; starting empty", self.executor_id, why)
        self.awaiting_until = None
        self.worker.migration_done(self, 0.0, lost=True)

    def _wait_for_state(self, handle_other: Any = None) -> bool:
        """One wait step while holding; True once the state is in (or given up).

        The deadline is checked on every step, whatever arrives on the control queue.
        """
        now = time.monotonic()
        if self.held_since is None and not self.data_q.empty():
            self.held_since = now
        if now > self.awaiting_until:  # type: ignore[operator]
            self._give_up_waiting("no state arrived in time")
            return True
        if now - self.ready_sent_at >= _READY_RESEND_SECS:
            self.announce_ready()
        try:
            kind, _src, entries = self.ctl_q.get(timeout=0.01)
        except queue.Empty:
            return False
        if kind == wire.STATE:
            self._take_state(entries)
            return True
        if kind == wire.GONE:
            where = self.migration.get("from") if self.migration else "?"
            self._give_up_waiting(f"its old place {where} holds no copy to hand a state over")
            return True
        if handle_other is not None:
            handle_other(kind, entries)
        return False


class SpoutExecutor(_UserExecutor):
    """Calls ``next_tuple`` in a loop; tracks tuples emitted with a ``msg_id``."""

    kind = "spout"

    def setup(self) -> None:
        self.acker_pick: tuple[int, int] | None = None  # (ackers, index of this spout's acker)
        self.refresh_routing()
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
        self.failed_ids: set[Any] = set()
        self.immediate_acks: list[Any] = []
        self.ack_buckets: dict[int, int] = {}
        self.held_control: list[tuple[int, Any]] = []
        self.last_acked_at: float | None = None  # wall clock of the last ack (stall detection)
        self.next_stamp = 0.0  # the next tracked tuple from then on gets a stamped root
        self.complete = latency.Recorder()  # emit -> tree fully acked, of the stamped tuples
        self.now = time.monotonic()  # of the current loop iteration: deadlines need no finer clock
        self.emit_calls = 0
        spout: Spout = self.instance
        spout.emit = self._emit  # type: ignore[method-assign]
        spout.emit_direct = self._emit_direct  # type: ignore[method-assign]
        if not isinstance(getattr(spout, "state", None), dict):
            spout.state = {}  # type: ignore[attr-defined]
        spout.open(self.conf, self.context)
        self.active = False

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
        self._track(msg_id, group)

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
        me = self.worker.worker_id
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
        if self.failed_ids and msg_id in self.failed_ids:
            self.failed_ids.discard(msg_id)
            self.replayed += 1
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
            self._control(kind, entries)
        if self.immediate_acks:
            spout: Spout = self.instance
            ids, self.immediate_acks = self.immediate_acks, []
            for msg_id in ids:
                self.acked += 1
                self._call(spout.ack, msg_id)
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

    def _control(self, kind: int, entries: Any) -> None:
        spout: Spout = self.instance
        if kind in (wire.ACKED, wire.FAILED) and self.awaiting_until is not None:
            # Acks for tuples the old copy emitted: their msg ids come with the state.
            self.held_control.append((kind, entries))
            return
        if kind == wire.ACKED:
            before = self.acked
            for root in entries:
                ids = self.pending.pop(root, None)
                if ids is not None:
                    self.pending_n -= len(ids)
                    self.acked += len(ids)
                    for msg_id in ids:
                        self._call(spout.ack, msg_id)
                    if root >= STAMPED:
                        self.complete.add_stamp(root)
            self._count_acks(self.acked - before)
        elif kind == wire.FAILED:
            for root in entries:
                self._fail_root(root)
        elif kind == wire.READY:
            self.note_ready(entries)
        elif kind == wire.STATE:
            log.warning("executor %s: a state hand-over came after this copy had started; ignored", self.executor_id)

    def _fail(self, msg_id: Any) -> None:
        self.failed += 1
        try:
            self.failed_ids.add(msg_id)
        except TypeError:
            pass
        self._call(self.instance.fail, msg_id)

    def _fail_root(self, root: int) -> None:
        """Every tuple of the root's group failed (one failed or timed out): replay them all."""
        ids = self.pending.pop(root, None)
        if ids is not None:
            self.pending_n -= len(ids)
            for msg_id in ids:
                self._fail(msg_id)

    def _expire(self, now: float) -> None:
        for root in self.timeouts.expire(now):
            self._fail_root(root)

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
        clock = time.monotonic
        idle = 0.0
        self.announce_ready()
        while self._running:
            self.refresh_routing()
            if self.awaiting_until is not None:
                self._wait_for_state(self._control)
                continue
            self.now = now = clock()
            before = self.emit_calls
            if not self.ctl_q.empty() or self.immediate_acks:
                self._handle_control()  # ``ack``/``fail`` may emit too
                self._close_group()
            if self.draining and self._drain_done():
                # The new copy is set up: it continues exactly where this one stops.
                if self.immediate_acks:  # acks due now (a group nobody subscribes to): not lost
                    self._handle_control()
                    self._close_group()
                outbox.flush()
                self.hand_over()
                break
            active = self.worker.active
            if active != self.active:
                self.active = active
                self._call(spout.activate if active else spout.deactivate)
            if self.timeouts.due(now):
                self._expire(now)
            # Whatever holds the spout back (inactive, backpressure or a fence, the pending cap, a
            # peer that takes nothing), acks, fails and timeouts above go on on every pass.
            blocked = (not active or self.worker.throttled or (self.max_pending and self.pending_n >= self.max_pending)
                       or (outbox.backlog and not outbox.drain_backlog()))
            if not blocked:
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
            if emitted and not blocked:
                idle = 0.0
                continue
            # Nothing to emit right now: what is buffered stays until its batch is full or
            # its deadline passes (a rate-limited source keeps its batches); wait for acks
            # or a short back-off, never past a deadline.
            idle = min(max(idle * 2, 0.0005), 0.01)
            now = clock()
            try:
                item = self.ctl_q.get(timeout=ctl_deadline.wait(now, deadline.wait(now, idle)))
            except queue.Empty:
                pass
            else:
                self.ctl_q.put(item)
        self._close_group()
        outbox.flush()

    def _drain_done(self) -> bool:
        """A moved spout keeps emitting until its new copy is set up, then hands over (pending
        tuples included); at the latest after DK."""
        return self.ready_seen or time.monotonic() > self.drain_deadline

    def _handover_extra(self) -> dict[str, Any]:
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

    def _adopt_extra(self, entry: Mapping[str, Any]) -> None:
        self.awaiting_until = None
        self.now = time.monotonic()  # ``ack``/``fail`` below may emit: timeouts count from now
        for sec, n in entry.get("ack_buckets") or ():
            self.ack_buckets[int(sec)] = self.ack_buckets.get(int(sec), 0) + int(n)
        now = time.monotonic()
        adopted = sorted(((now + float(left), root, ids) for root, ids, left in entry.get("pending") or ()),
                         key=lambda x: x[0])
        for _at, root, ids in adopted:
            self.pending[root] = list(ids)
            self.pending_n += len(ids)
        self.timeouts.rebuild([*self.timeouts.items(), *((at, root) for at, root, _ in adopted)])
        held, self.held_control = self.held_control, []
        for kind, entries in held:
            self._control(kind, entries)

    def teardown(self) -> None:
        spout: Spout = self.instance
        if getattr(self, "active", False):
            self._call(spout.deactivate)
        self._call(spout.close)
        self.outbox.close()

    def counters(self) -> dict[str, Any]:
        data = super().counters()
        data["pending"] = getattr(self, "pending_n", 0)  # tuples, not groups
        data["replayed"] = getattr(self, "replayed", 0)
        data["started_at"] = self.started_at
        data["last_acked_at"] = getattr(self, "last_acked_at", None)
        buckets = dict(getattr(self, "ack_buckets", {}))
        data["acked_per_sec"] = {str(sec): n for sec, n in sorted(buckets.items())[-15:]}
        complete = getattr(self, "complete", None)
        if complete is not None and complete.hist:
            data["latency_hist"] = dict(complete.hist)
            data["latency_ms"] = complete.summary()
        return data


class BoltExecutor(_UserExecutor):
    """Takes batches from the data queue and calls ``process`` for each tuple."""

    kind = "bolt"

    def setup(self) -> None:
        bolt: Bolt = self.instance
        self.outbox.auto_anchor = bool(bolt.auto_anchor)
        self.refresh_routing()
        bolt.emit_direct = self.outbox.emit_direct  # type: ignore[method-assign]
        bolt.ack = self._ack  # type: ignore[method-assign]
        bolt.fail = self._fail  # type: ignore[method-assign]
        if not isinstance(getattr(bolt, "state", None), dict):
            bolt.state = {}
        self.fields: dict[tuple[str, str], dict[str, int]] = {}
        for name, comp in self.definition["components"].items():
            for stream, fields in comp["outputs"].items():
                self.fields[(name, stream)] = {f: i for i, f in enumerate(fields)}
        self.tuple_classes: dict[int, dict[str, type[Tuple]]] = {}
        # A bolt that defines process_batch gets whole batches.
        self.batched = type(bolt).process_batch is not Bolt.process_batch
        self.arrival = latency.Recorder()  # spout emit -> processed here, of the stamped tuples
        bolt.prepare(self.conf, self.context)

    def bind_emit(self) -> None:
        outbox = self.outbox
        self.instance.emit = outbox.emit_anchored if outbox.acking else outbox.emit  # type: ignore[method-assign]
        self.instance.emit_many = outbox.emit_many  # type: ignore[method-assign]

    def _ack(self, tup: Tuple | Batch) -> None:
        if type(tup) is Batch:
            self.acked += len(tup.values)
            if self.outbox.acking:
                self._ack_batch(tup)
            return
        self.acked += 1
        if self.outbox.acking:
            self.outbox.ack_tuple(tup)

    def _fail(self, tup: Tuple | Batch) -> None:
        if type(tup) is Batch:
            self.failed += len(tup.values)
            if self.outbox.acking:
                self.outbox.fail_anchors(tup.anchors)
            return
        self.failed += 1
        if self.outbox.acking:
            self.outbox.fail_tuple(tup)

    def _classes(self, src: int) -> dict[str, type[Tuple]]:
        """Per-stream tuple classes of one upstream executor (metadata as class attributes), built once."""
        classes = self.tuple_classes.get(src)
        if classes is None:
            routing = self.routing
            source, index = routing.task_component[src], routing.task_index[src]
            anchored = self.outbox.acking
            classes = {
                stream: delivered_tuple_class(TupleMeta(source, index, stream, self.fields[(source, stream)]), anchored)
                for (comp, stream) in self.fields if comp == source
            }
            self.tuple_classes[src] = classes
        return classes

    def _process_batch(self, src: int, batch: Any) -> None:
        """Run ``process`` over one batch (or ``process_batch`` once); the per-tuple hot path, so
        kept to a few bytecodes a tuple."""
        if batch is None:  # a marker: ``src`` sends no more to this copy (it may come
            self.markers_seen.add(src)  # before this worker itself learns of the move)
            return
        decoded = self.decode(batch) if type(batch) is bytes else batch
        if decoded is None:
            return
        values, runs, streams = decoded
        self.batch_avg += (len(values) - self.batch_avg) * 0.125
        classes = self._classes(src)
        if self.batched:
            self._process_as_batches(classes, values, runs, streams)
            return
        cls = classes.get("default")
        if streams is not None or cls is None:
            self._process_general(classes, values, runs, streams)
            return
        process = self.instance.process
        new = Tuple.__new__
        outbox = self.outbox
        if not outbox.acking:
            for v in values:
                tup = new(cls)
                tup.values = v
                try:
                    process(tup)
                except Exception as exc:
                    self.record_error("process", exc)
            self.executed += len(values)
            return
        bolt: Bolt = self.instance
        if runs is None or not bolt.auto_ack:
            self._process_general(classes, values, runs, streams)
            return
        auto_fail = bolt.auto_fail
        acks = outbox.acks
        stamp = self.arrival.add_stamp
        acked = 0
        i = 0
        # One anchor entry per run: the tuples of a run share it, and the run (its edge) is
        # acked once, with the XOR of its tuples' children, when all of them went through.
        # Emits anchor to the run (an InputRun), not to each tuple: a run's tuples would
        # share the children's runs anyway, and this way a continued child run costs an
        # emit no more than an identity check.
        for k in range(0, len(runs), 2):
            n = runs[k]
            a = runs[k + 1]
            j = i + n
            own = outbox.current = InputRun(a)
            if a is None:
                for v in values[i:j]:
                    tup = new(cls)
                    tup.values = v
                    tup.anchors = None
                    tup._ackval = 0
                    try:
                        process(tup)
                    except Exception as exc:
                        self.record_error("process", exc)
                i = j
                continue
            if a[0] >= STAMPED:
                stamp(a[0])
            x = 0
            ok = n
            for v in (values[i],) if n == 1 else values[i:j]:
                tup = new(cls)
                tup.values = v
                tup.anchors = a
                tup._ackval = 0
                try:
                    process(tup)
                except Exception as exc:
                    self.record_error("process", exc)
                    if auto_fail:
                        self._fail(tup)
                    ok -= 1
                    continue
                x ^= tup._ackval  # the children of emits anchored to it by hand
            i = j
            if ok != n:  # a tuple of the run was not acked: neither is the run
                acked += ok
                continue
            acked += n
            x ^= own._ackval
            if len(a) == 2:
                r = a[0]
                x ^= a[1]
                run = outbox.last_run
                if run is not None and run.owner is own:
                    # The ack rides with a child: XORed into the edge of the run this input run
                    # opened last (still in its buffer); the receiver's ack of that run carries it.
                    ra = run.run_anchor
                    run.run_anchor = (ra[0], ra[1] ^ x)
                else:
                    acks[r] = acks.get(r, 0) ^ x
            else:
                for q in range(0, len(a), 2):
                    r = a[q]
                    acks[r] = acks.get(r, 0) ^ a[q + 1] ^ x
        outbox.current = None
        self.acked += acked
        self.executed += len(values)

    def _process_general(self, classes: Mapping[str, type[Tuple]], values: Any, runs: Any, streams: Any) -> None:
        """Any batch: tuples on named streams, manual acking, unknown streams."""
        bolt: Bolt = self.instance
        outbox = self.outbox
        acking = outbox.acking
        anchors = wire.expand_runs(runs, len(values)) if acking else None
        new = Tuple.__new__
        for i, v in enumerate(values):
            stream = streams.get(i, "default") if streams else "default"
            cls = classes.get(stream)
            if cls is None:
                self.record_error("process", ValueError(f"a tuple on unknown stream {stream!r}"))
                if anchors is not None:
                    outbox.fail_anchors(anchors[i])
                continue
            tup = new(cls)
            tup.values = v
            if acking:
                tup.anchors = anchors[i]  # type: ignore[index]
                tup._ackval = 0
                outbox.current = tup
            try:
                bolt.process(tup)
            except Exception as exc:
                self.record_error("process", exc)
                if acking and bolt.auto_fail:
                    self._fail(tup)
                continue
            if acking and bolt.auto_ack and tup.anchors:
                self.acked += 1
                outbox.ack_tuple(tup)
        outbox.current = None
        self.executed += len(values)

    def _process_as_batches(self, classes: Mapping[str, type[Tuple]], values: Any, runs: Any, streams: Any) -> None:
        """``process_batch`` once per run of tuples on one stream (once per batch, usually)."""
        outbox = self.outbox
        acking = outbox.acking
        if streams is None:
            segments = [("default", 0, len(values))]
        else:
            segments = []
            for i in range(len(values)):
                stream = streams.get(i, "default")
                if segments and segments[-1][0] == stream:
                    segments[-1] = (stream, segments[-1][1], i + 1)
                else:
                    segments.append((stream, i, i + 1))
        whole = len(segments) == 1
        per = None if whole or not acking else wire.expand_runs(runs, len(values))
        for stream, i, j in segments:
            cls = classes.get(stream)
            if cls is None:
                self.record_error("process_batch", ValueError(f"tuples on unknown stream {stream!r}"))
                if per is not None:
                    for a in per[i:j]:
                        outbox.fail_anchors(a)
                elif acking and runs is not None:
                    for a in runs[1::2]:
                        outbox.fail_anchors(a)
                continue
            if whole:
                batch = Batch(values, cls.meta, cls, runs=runs if acking else None, outbox=outbox if acking else None,
                              expand=wire.expand_runs)
            else:
                batch = Batch(values[i:j], cls.meta, cls, per_tuple=per[i:j] if per is not None else None,
                              outbox=outbox if acking else None)
            self._run_batch(batch)

    def _run_batch(self, batch: Batch) -> None:
        bolt: Bolt = self.instance
        outbox = self.outbox
        acking = outbox.acking
        if acking:
            outbox.current = batch
            runs = batch._runs  # noqa: SLF001 - the executor owns the batch's bookkeeping
            if runs is not None:
                stamp = self.arrival.add_stamp
                for a in runs[1::2]:
                    if a and a[0] >= STAMPED:
                        stamp(a[0])
        try:
            bolt.process_batch(batch)
        except Exception as exc:
            self.record_error("process_batch", exc)
            if acking and bolt.auto_fail:
                self.failed += len(batch.values)
                outbox.fail_anchors(batch.anchors)
            return
        finally:
            outbox.current = None
        self.executed += len(batch.values)
        if acking and bolt.auto_ack:
            self.acked += len(batch.values)
            self._ack_batch(batch)

    def _ack_batch(self, batch: Batch) -> None:
        """Ack every tuple of ``batch``: each run's (or tuple's) edge once, the children of the
        tuples handed out by iteration, and the children anchored to the whole batch."""
        acks = self.outbox.acks
        runs = batch._runs  # noqa: SLF001
        entries = runs[1::2] if runs is not None else batch._per  # noqa: SLF001
        prev = None
        for a in entries or ():
            if a is prev or not a:
                continue  # the tuples of an expanded run share one entry: its edge counts once
            prev = a
            if len(a) == 2:
                r = a[0]
                acks[r] = acks.get(r, 0) ^ a[1]
            else:
                for q in range(0, len(a), 2):
                    r = a[q]
                    acks[r] = acks.get(r, 0) ^ a[q + 1]
        for tup in batch._made:  # noqa: SLF001
            x = tup._ackval
            a = tup.anchors
            if x and a:
                for q in range(0, len(a), 2):
                    r = a[q]
                    acks[r] = acks.get(r, 0) ^ x
        x = batch._ackval  # noqa: SLF001
        if x:
            roots = batch.anchors or ()
            for q in range(0, len(roots), 2):
                r = roots[q]
                acks[r] = acks.get(r, 0) ^ x

    def counters(self) -> dict[str, Any]:
        data = super().counters()
        arrival = getattr(self, "arrival", None)
        if arrival is not None and arrival.hist:
            data["arrival_hist"] = dict(arrival.hist)
            data["arrival_ms"] = arrival.summary()
        return data

    def _tick(self) -> None:
        bolt: Bolt = self.instance
        tup = Tuple((), "__system", -1, TICK_STREAM, None, {})
        tup._ackval = 0
        try:
            bolt.process_tick(tup)
        except Exception as exc:
            self.record_error("process_tick", exc)

    def loop(self) -> None:
        outbox = self.outbox
        deadline, ctl_deadline = outbox.deadline, outbox.ctl_deadline
        empty = self.data_q.empty
        get = self.data_q.get
        get_nowait = self.data_q.get_nowait
        clock = time.monotonic
        tick = self.tick_secs
        self.announce_ready()
        while self._running:
            self.refresh_routing()
            if self.awaiting_until is not None:
                self._wait_for_state()
                continue
            if not self.ctl_q.empty():
                self._handle_control()
            if self.draining and self._drain_done():
                self.hand_over()
                break
            if outbox.backlog and not outbox.drain_backlog():
                # A peer takes nothing now (dead, restarting, cut off): new input would only pile
                # up behind it, so take none until it does (or its messages are dropped).
                time.sleep(0.005)
                if deadline.due(clock()):
                    outbox.flush()
                continue
            now = clock()
            wait = 0.01 if self.draining else 0.1
            if tick:
                wait = min(wait, max(0.0, self.next_tick - now))
            wait = ctl_deadline.wait(now, deadline.wait(now, wait))
            try:
                src, batch = get(timeout=wait) if wait > 0 else get_nowait()
            except queue.Empty:
                pass
            else:
                began = clock()
                armed = deadline.at is not None
                deadline.worked(began)
                ctl_deadline.worked(began)  # acks
                process = self._process_batch
                try:
                    process(src, batch)
                    # Keep taking input while more waits, up to the deadline.
                    at = deadline.at
                    while clock() < at:  # type: ignore[operator]
                        try:
                            src, batch = get_nowait()
                        except queue.Empty:
                            break
                        process(src, batch)
                except Exception as exc:  # a batch that decoded but is not what it claims: drop it
                    outbox.current = None
                    self.record_error("batch", exc)
                if not armed and not outbox.holding():
                    deadline.flushed()  # everything left at once (low rates): no wake-up to send nothing
                if self.batch_avg < 2.0 and empty():
                    # Tuples come one at a time, further apart than acks would wait: holding the
                    # acks back would cost a wake-up and save no message.
                    outbox.flush_control()
            now = clock()
            if tick and now >= self.next_tick:
                self.next_tick = now + tick
                deadline.worked(now)
                ctl_deadline.worked(now)
                self._tick()
            # A batch leaves when it reaches its limit (in the emit) or at the deadline; running
            # out of input is no reason to send a small one (Nephele's output buffers, not Nagle).
            # Acks leave sooner, but only while input is not waiting: a busy executor sends them
            # with its data (a few messages per deadline), an idle one within a quarter of it.
            if deadline.due(now):
                outbox.flush()
            elif ctl_deadline.due(now) and empty():
                outbox.flush_control()
        outbox.flush()

    def _handle_control(self) -> None:
        while True:
            try:
                kind, _src, entries = self.ctl_q.get_nowait()
            except queue.Empty:
                return
            if kind == wire.READY:
                self.note_ready(entries)
            elif kind == wire.GONE:
                pass  # an answer to a READY resent after the state had come: nothing to do
            elif kind == wire.STATE:
                log.warning("executor %s: a state hand-over came after this copy had started; ignored",
                            self.executor_id)
            else:
                log.warning("executor %s: unexpected control message %d ignored", self.executor_id, kind)

    def _drain_done(self) -> bool:
        """Every upstream executor has switched (markers seen), the queue is empty and the new
        copy is set up; or DK passed."""
        if self.markers_needed <= self.markers_seen and self.data_q.empty() and self.ready_seen:
            return True
        if time.monotonic() > self.drain_deadline:
            dropped = 0
            while True:  # DK passed: what is still queued is dropped; the acker replays it
                try:
                    _src, batch = self.data_q.get_nowait()
                except queue.Empty:
                    break
                decoded = self.decode(batch) if batch is not None else None
                if decoded is not None:
                    dropped += len(decoded[0])
            if dropped or not self.markers_needed <= self.markers_seen:
                log.warning("executor %s: lazy kill after DK; %d queued tuples dropped, markers missing from %s",
                            self.executor_id, dropped, sorted(self.markers_needed - self.markers_seen))
            return True
        return False

    def teardown(self) -> None:
        try:
            self.instance.cleanup()
        except Exception as exc:
            self.record_error("cleanup", exc)
        self.outbox.close()


class AckerExecutor(Executor):
    """Storm's acker: XOR of 64-bit edge ids per spout tuple; zero means fully processed.

    A root's entry starts at zero without an init from the spout (the copies of a spout tuple
    carry edges that XOR to zero, :mod:`worker.wire`), so an entry is made by the first ack
    that reaches it and the tree is complete when its XOR returns to zero; the spout to tell
    is in the root's low bits. Entries older than ``topology.message.timeout.secs`` are dropped
    (their spout has failed them by then).

    The acker has no queue to wait on: a message put on its ``ctl_q`` is handled at once, in
    the thread that puts it (a local executor flushing its acks, or the receiver of control
    messages from other workers), under the acker's lock, and the answers leave at once.
    An ack message then costs no thread wake-up; the acker's own thread only expires entries.
    """

    kind = "acker"

    def __init__(self, worker: Worker, executor_id: str, task: int) -> None:
        super().__init__(worker, executor_id, task)
        self.lock = threading.Lock()
        self.ctl_q = _InlineInbox(self)  # type: ignore[assignment]
        self.outbox = Outbox(worker, task, "__acker", {"components": {"__acker": {"outputs": {}, "inputs": []}}})
        self.entries: dict[int, int] = {}  # root -> XOR of the acks so far (never 0)
        self.failed_roots: dict[int, None] = {}  # failed trees: their late acks are ignored
        self.timeout = float(worker.conf["topology.message.timeout.secs"])
        self.timeouts = Timeouts(self.timeout, granularity=1.0)

    def _complete(self, root: int, kind: int) -> None:
        task = wire.root_task(root)
        routing = self.outbox.routing
        if routing is None or task >= len(routing.location):
            return  # not a root any spout of this topology made
        if kind == wire.ACKED:
            self.acked += 1
        else:
            self.failed += 1
        self.outbox.control(kind, task, root)

    def _handle(self, kind: int, entries: Any) -> None:
        table = self.entries
        self.executed += len(entries)
        if kind == wire.ACK:
            failed = self.failed_roots
            for root, x in entries:
                v = table.get(root)
                if v is None:
                    if failed and root in failed:
                        continue
                    if x:
                        table[root] = x
                        self.timeouts.add(root, time.monotonic())
                    else:
                        self._complete(root, wire.ACKED)
                    continue
                v ^= x
                if v:
                    table[root] = v
                else:
                    del table[root]
                    self._complete(root, wire.ACKED)
        elif kind == wire.FAIL:
            for root in entries:
                if root in self.failed_roots:
                    continue
                table.pop(root, None)
                self.failed_roots[root] = None
                self.timeouts.add(root, time.monotonic())
                self._complete(root, wire.FAILED)

    def _expire(self, now: float) -> None:
        table, failed = self.entries, self.failed_roots
        for root in self.timeouts.expire(now):
            table.pop(root, None)
            failed.pop(root, None)

    def handle_now(self, kind: int, entries: Any) -> None:
        """One control message, in the caller's thread: update the entries, send the answers."""
        with self.lock:
            if not self._running:
                return  # stopping with its worker: the spouts time these trees out
            routing = self.worker.routing
            if routing is not self.outbox.routing and routing is not None:
                self.outbox.rebuild(routing)
            try:
                self._handle(kind, entries)
            except Exception as exc:  # entries that are not [root, xor] pairs: dropped
                self.record_error("acker entries", exc)
            self.outbox.flush()

    def loop(self) -> None:
        while self._running:
            time.sleep(_ACKER_EXPIRY_SECS)
            with self.lock:
                self._expire(time.monotonic())

    def teardown(self) -> None:
        with self.lock:
            self._running = False
            self.outbox.flush()
            self.outbox.close()

    def counters(self) -> dict[str, Any]:
        data = super().counters()
        data["queue"] = 0
        data["pending"] = len(self.entries)
        return data


class _InlineInbox:
    """An acker's ``ctl_q``: what is put on it is handled at once (see :class:`AckerExecutor`)."""

    __slots__ = ("acker",)

    def __init__(self, acker: AckerExecutor) -> None:
        self.acker = acker

    def put(self, item: tuple[int, int, Any]) -> None:
        kind, _src, entries = item
        self.acker.handle_now(kind, entries)

    def qsize(self) -> int:
        return 0

    def empty(self) -> bool:
        return True
