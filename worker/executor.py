"""Executors: one thread per spout, bolt or acker instance, run inside a worker process.

Storm splits its executor the same way: this module has what every executor has
(:class:`Executor`: a thread, an :class:`~worker.delivery.Inbox`, counters) and what the two
kinds that run user code share (:class:`UserExecutor`: the component instance, its
:class:`~worker.outbox.Outbox`, its :class:`~worker.migration.Handover`); the loops are in
:mod:`worker.spout`, :mod:`worker.bolt` and :mod:`worker.acker`. The thread is named after
the executor id, so every log line it writes names it. The input queues are unbounded:
flow control is topology-wide backpressure at the spouts (:mod:`worker.backpressure`).

States (:class:`ExecutorState`): ``NEW -> RUNNING`` when the thread starts;
``RUNNING -> STOPPING`` when :meth:`Executor.stop` is called (lazy kill or shutdown);
``STOPPING -> STOPPED`` when the loop has returned and the component's ``close``/``cleanup``
has run (a copy that handed its state over goes from ``RUNNING`` to ``STOPPED`` directly).
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from nstorm.component import Context
from nstorm.constraints import constraints_of
from nstorm.state.keyed import KeyedState, as_key, key_group
from worker import wire
from worker.chaining import SIGNALS
from worker.checkpoint import Snapshotter
from worker.delivery import Courier, Inbox
from worker.eventlog import EventSampling
from worker.host import Host
from worker.migration import READY_RESEND_SECS, Handover, HandoverState
from worker.outbox import Outbox
from worker.qos import QosTracer, Traced
from worker.rescale import KeyGroupShift

__all__ = ["Executor", "ExecutorState", "UserExecutor"]

log = logging.getLogger(__name__)
_TRACE_CHARS = 4000  # of a stack trace in a heartbeat: its end, where the error is


class ExecutorState(enum.Enum):
    """The life of an executor's thread (see the module docstring)."""

    NEW = "NEW"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"


class Executor:
    """What every executor has: a thread, an inbox, counters."""

    kind = "executor"

    def __init__(self, host: Host, executor_id: str, task: int, inbox: Inbox | None = None) -> None:
        self.host = host
        self.executor_id = executor_id
        self.events: EventSampling | None = None  # the event sampling the outbox's emits follow
        self.task = task
        self.component, _, index = executor_id.rpartition(":")
        self.index = int(index)
        self.inbox = inbox or Inbox(int(host.conf["topology.batch.size"]))
        self.data_q = self.inbox.data  # this executor's own queues, read in its loop
        self.ctl_q = self.inbox.control
        self.executed = 0
        self.acked = 0
        self.failed = 0
        self.errors = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None  # wall clock of the last error
        self.last_trace: str | None = None  # its stack trace (the UI shows it), cut to _TRACE_CHARS
        self.bad_batches = 0  # data batches from the network that did not decode
        self.state = ExecutorState.NEW
        self.started_at = time.time()  # wall clock (stall detection: no ack since at most this)
        self._running = True
        self.thread = threading.Thread(target=self._run, name=executor_id, daemon=True)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.state = ExecutorState.RUNNING
        self.started_at = time.time()
        self.thread.start()

    def stop(self) -> None:
        """Ask the loop to end; the thread finishes its current batch first."""
        if self.state is ExecutorState.RUNNING:
            self.state = ExecutorState.STOPPING
        self._running = False

    @property
    def stopped(self) -> bool:
        return self.state is ExecutorState.STOPPED

    @property
    def handed_over(self) -> bool:
        """A moved-away copy that has sent its state: its loop takes nothing more."""
        return False

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _run(self) -> None:
        try:
            self.setup()
        except Exception as exc:  # open/prepare raised: report it, keep the worker
            self.record_error("open/prepare", exc)
            self.broken()
            self.state = ExecutorState.STOPPED
            return
        self.after_setup()
        try:
            self.loop()
        except Exception as exc:
            self.record_error("executor loop", exc)
            failed = getattr(self.host, "executor_failed", None)
            if failed is not None:  # Storm's answer: the worker ends and its supervisor restarts it
                failed(self.executor_id)
        finally:
            try:
                self.teardown()
            except Exception:
                log.exception("executor %s failed to stop cleanly", self.executor_id)
            self.state = ExecutorState.STOPPED

    def setup(self) -> None:
        pass

    def after_setup(self) -> None:
        """After ``open``/``prepare``, before the loop (a rollback's restore)."""

    def broken(self) -> None:
        """After a failed ``open``/``prepare``: keep draining input until stopped."""
        while self._running:
            try:
                self.data_q.get(timeout=0.1)
            except queue.Empty:
                continue

    def loop(self) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        pass

    def decode(self, batch: Any) -> tuple[Any, Any, Any] | None:
        """``(values, runs, streams)`` of a queued batch; None (counted, logged) for garbage."""
        if type(batch) is not bytes:
            if type(batch) is Traced:  # a sampled batch taken apart from its trace (worker.qos)
                return self.decode(batch.batch)
            return batch  # type: ignore[no-any-return]  # from this worker: built by an outbox
        try:
            return wire.decode_batch(batch)
        except Exception as exc:  # noqa: BLE001 - garbage from the network is dropped, never raised
            self.bad_batches += 1
            if self.bad_batches <= 10 or self.bad_batches % 1000 == 0:
                log.warning("executor %s dropped a batch that does not decode (%s); %d so far",
                            self.executor_id, exc, self.bad_batches)
            return None

    def record_error(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = f"{where}: {type(exc).__name__}: {exc}"
        self.last_error_at = time.time()
        self.last_trace = "".join(traceback.format_exception(exc))[-_TRACE_CHARS:]
        log.exception("executor %s: error in %s", self.executor_id, where)

    @property
    def tainted(self) -> bool:
        """This worker lost data in this epoch (:meth:`taint`): it writes no checkpoint and passes
        no barrier on until the rollback."""
        checkpoints = self.host.checkpoints
        return checkpoints is not None and checkpoints.tainted

    @property
    def traffic(self) -> Mapping[int, list[int]]:
        """Cumulative ``[tuples, bytes]`` sent per destination task (load collection)."""
        return {}

    def counters(self) -> dict[str, Any]:
        """This executor's line in the worker's heartbeat."""
        return {
            "kind": self.kind,
            "emitted": 0,
            "batches": 0,
            "control_messages": 0,
            "executed": self.executed,
            "acked": self.acked,
            "failed": self.failed,
            "queue": self.data_q.qsize(),
            "errors": self.errors,
            "last_error": self.last_error,
            **({"last_error_at": self.last_error_at, "last_error_trace": self.last_trace} if self.last_trace else {}),
        }


class UserExecutor(Executor):
    """An executor running user code: a spout or a bolt."""

    def __init__(self, host: Host, executor_id: str, task: int, cls: type, definition: Mapping[str, Any]) -> None:
        super().__init__(host, executor_id, task)
        self.definition = definition
        self.spec = definition["components"][self.component]
        self.instance = cls()
        self.outbox = Outbox(host, task, self.component, definition)
        self.outbox.courier.on_error = self.record_error  # a value with no wire form: lastError, not a dead loop
        self.outbox.on_error = self.record_error  # a tuple whose values do not match its stream's fields
        self.routing = None
        comps = definition["components"]
        self.context = Context(
            component=self.component,
            task_index=self.index,
            executor_id=executor_id,
            topology=definition["name"],
            worker_id=host.worker_id,
            parallelism={n: int(c["parallelism"]) for n, c in comps.items()},
        )
        self.conf = {**host.conf, **(self.spec.get("conf") or {})}
        tick = self.spec.get("tick_secs")
        self.tick_secs = float(tick) if tick else None
        self.next_tick = time.monotonic() + (self.tick_secs or 0)
        self.handover = Handover(self, host, self.outbox.courier)
        self.checkpoint = Snapshotter(self)
        self.restore_from: int | None = None  # a copy made by a rollback: the checkpoint to install
        self.restored: Mapping[str, Any] | None = None  # ... installed before open, its extras after
        self.key_groups = int(host.conf.get("topology.max.parallelism") or 128)
        self.shift: KeyGroupShift | None = None  # the rescale step this executor is in (worker.rescale)
        self.shift_version = 0  # the newest step seen (or settled by a restore)
        self.early_marks: dict[int, set[int]] = {}  # version -> upstream tasks whose SHIFT_MARK came first
        self.early_groups: list[tuple[int, Any]] = []  # GROUPS that came before this copy saw their step
        self.shift_held: list[tuple[int, Any]] = []  # (src, batch) of key groups on their way here
        self.retired = False  # a retiring executor gave everything away: its loop ends
        self.settled = False  # the open steps were settled by a restore (settle_shifts)
        self.ready_sent_at = float("-inf")  # when this executor last said READY (rescale_tick)
        self.context = replace(self.context, owner=self.owns)
        # This executor's part in the topology's latency constraints (worker.qos); None if it has none.
        self.qos = QosTracer.for_executor(self.component, constraints_of(definition, self.conf), self.outbox,
                                          self.conf)

    @property
    def courier(self) -> Courier:
        return self.outbox.courier

    def init_state(self) -> None:
        """``self.state`` and ``self.keyed_state`` before ``open``/``prepare``: a copy made by a
        rollback (or a restarted worker) installs its checkpoint here, so that ``open`` sees the
        restored state (as Flink's ``initializeState`` comes before ``open``)."""
        instance = self.instance
        instance.context = self.context  # also given to open/prepare; a rescale changes what it says
        if not isinstance(getattr(instance, "state", None), dict):
            instance.state = {}
        if not isinstance(getattr(instance, "keyed_state", None), KeyedState):
            instance.keyed_state = self.new_keyed()
        cid = self.restore_from
        checkpoints = self.host.checkpoints
        if cid is None or checkpoints is None:
            return
        self.settle_shifts()  # restored in the plan's layout: no open rescale step is this copy's to run
        try:
            self.restored = self.checkpoint.restore(cid, checkpoints.read, checkpoints.chain)
        except Exception as exc:  # noqa: BLE001 - unreadable or damaged: the coordinator picks an older one
            self.record_error("restore", exc)
            self.taint(f"cannot restore checkpoint {cid}: {exc}")

    def new_keyed(self) -> KeyedState:
        """An empty ``keyed_state``: a dict (its own C methods) with ``touch``, which only notes
        keys where checkpoints are written."""
        keyed = KeyedState()
        if self.host.checkpoints is None:
            keyed.touched = None
        return keyed

    # -- checkpoints (worker.checkpoint) ------------------------------------------------------
    def checkpoint_extra(self) -> dict[str, Any]:
        """What else this kind's snapshot holds (a spout's tracked tuples)."""
        return {}

    def after_setup(self) -> None:
        """After ``open``/``prepare``: what a restore does with user code (a spout acks the trees
        its checkpoint had open)."""
        if self.restored is not None:
            data, self.restored = self.restored, None
            self.restore_checkpoint_extra(data)

    def restore_checkpoint_extra(self, data: Mapping[str, Any]) -> None:
        pass

    def committed(self, cid: int) -> None:
        """Checkpoint ``cid`` is committed: the component's ``on_commit`` (executor thread)."""
        if cid > self.checkpoint.last or self.checkpoint.written == 0:
            return  # not one this copy took part in (it started after, or restored from a later one)
        try:
            self.instance.on_commit(cid)
        except Exception as exc:
            self.record_error("on_commit", exc)

    def answer_seal(self, src: int, seal: wire.Seal) -> None:
        """Everything the old copy of moved ``src`` sent here is taken: tell it (worker.migration)."""
        self.outbox.courier.control(src, seal.worker, wire.SEALED, self.task)

    def taint(self, reason: str) -> None:
        """Data was lost here (durable state only): no checkpoint may commit without it, the
        topology rolls back."""
        checkpoints = self.host.checkpoints
        if checkpoints is not None:
            checkpoints.request_rollback(f"{self.executor_id}: {reason}")

    @property
    def traffic(self) -> Mapping[int, list[int]]:
        return self.outbox.traffic

    def refresh_routing(self) -> None:
        """Pick up a swapped routing table (checked once per loop, never per tuple)."""
        routing = self.host.routing
        if routing is not self.routing:
            self.routing = routing
            self.outbox.rebuild(routing)
            self.bind_emit()
            if routing is not None:
                self.context.parallelism.update({c: len(t) for c, t in routing.component_tasks.items()})
                self.check_shift()
        events = self.host.events
        if events is not self.events:  # the topology's event sampling changed (worker.eventlog)
            self.events = events
            percent = events.percent(self.component) if events is not None else 0.0
            file = events.file if events is not None else None
            self.outbox.sample((percent, file, self.executor_id) if percent > 0 and file is not None else None)
            self.bind_emit()

    # -- live rescaling (worker.rescale) --------------------------------------------------------
    def upstream_tasks(self) -> set[int]:
        """Every task that sends this executor data (a spout has none)."""
        return set()

    def owns(self, key: Any) -> bool:
        """``context.owns``: this executor holds ``key``'s key group now (not while it is on its way)."""
        routing = self.routing
        if routing is None:
            return False
        tasks = routing.component_tasks.get(self.component, ())
        if self.task not in tasks:
            return False
        g = key_group(key, self.key_groups)
        if g % len(tasks) != tasks.index(self.task):
            return False
        shift = self.shift
        return shift is None or g not in shift.awaiting

    def settle_shifts(self) -> None:
        """This copy starts from a checkpoint in the plan's layout: the open steps are not its to
        run; a copy that was to take key groups counts as having them (once)."""
        if self.settled:
            return
        self.settled = True
        routing = self.host.routing
        for step in (routing.rescales.values() if routing is not None else ()):
            self.shift_version = max(self.shift_version, step.version)
            if step.component == self.component and step.record and self.task in step.new \
                    and self.task not in step.old:
                self.host.migrations.shift_done(step.record, self.executor_id, 0.0, lost=False)
            elif step.component == self.component and step.record:
                shift = KeyGroupShift(step, self.task, self.key_groups, (), time.monotonic(), 0.0, 0.0)
                if shift.gained:
                    self.host.migrations.shift_done(step.record, self.executor_id, 0.0, lost=False)

    def check_shift(self) -> None:
        """A new rescale step of this component in the routing table: start this executor's part."""
        routing = self.routing
        if self.restore_from is not None:
            self.settle_shifts()  # a copy made to restore a checkpoint: its layout is the plan's already
        step = routing.rescales.get(self.component) if routing is not None else None
        if step is None or step.version <= self.shift_version:
            return
        self.shift_version = step.version
        conf = self.host.conf
        state_wait = float(conf["worker.state.wait.ms"]) / 1000.0
        # The upstream executors switch (and mark) once every new owner is READY, within
        # state_wait (a new owner's worker may still be starting): an old owner drains for that
        # and its own drain time; a new owner waits for the state it sends after that.
        drain = state_wait + float(conf["worker.lazy.kill.ms"]) / 1000.0
        wait = drain + state_wait
        if self.kind == "spout":  # an old owner waits for its open trees first, a message timeout at most
            wait += float(self.conf["topology.message.timeout.secs"])
        shift = KeyGroupShift(step, self.task, self.key_groups, self.upstream_tasks(), time.monotonic(), drain, wait)
        shift.marks |= self.early_marks.pop(step.version, set())
        self.early_marks = {v: m for v, m in self.early_marks.items() if v > step.version}
        self.shift = shift
        self.checkpoint.need_full = True  # the next checkpoint, in the new layout, writes whole groups
        log.info("executor %s: rescale v%d of %s: gives %d key groups, takes %d%s", self.executor_id, step.version,
                 self.component, len(shift.lost), len(shift.gained), " (retiring)" if shift.retiring else "")
        self.shift_started()
        self.rescale_tick()  # READY at once: the upstream executors switch when all have said it
        early, self.early_groups = self.early_groups, []
        for src, entries in early:
            self.on_groups(src, entries)
        self.shift_step()

    def rescale_tick(self) -> None:
        """Once per loop while the routing table has a rescale step: tell the upstream executors,
        every half second, that this executor of the new layout holds what it takes (READY: they
        switch once all have said it; new incarnations of them hear it too); switch this
        executor's own held outputs that ran out of patience."""
        now = time.monotonic()
        outbox = self.outbox
        if outbox.shifts.held and outbox.switch_due():
            self.bind_emit()  # the component's emit is the newly compiled one
        routing = self.routing
        step = routing.rescales.get(self.component) if routing is not None else None
        if step is None or step.version > self.shift_version or self.task not in step.new:
            return
        if now - self.ready_sent_at < READY_RESEND_SECS:
            return
        self.ready_sent_at = now
        for up in sorted(self.upstream_tasks()):
            self.courier.control(up, routing.location[up], wire.SHIFT_READY, step.version)  # type: ignore[union-attr]

    def on_shift_ready(self, src: int, version: int) -> None:
        """A downstream executor of a rescaled component holds its key groups (SHIFT_READY)."""
        if self.outbox.shift_ready(src, version):
            self.bind_emit()

    def shift_started(self) -> None:
        """What this kind does when a step starts (a bolt stops aligning and starts holding)."""

    def on_shift_mark(self, src: int, version: int) -> None:
        shift = self.shift
        if shift is not None and shift.version == version:
            shift.on_mark(src)
            self.shift_finished_check()  # the last marker may end a step that gave groups away early
        elif version > self.shift_version:
            self.early_marks.setdefault(version, set()).add(src)

    def give_groups(self) -> None:
        """Send each new owner its key groups' state (one GROUPS message each) and forget them."""
        shift = self.shift
        assert shift is not None
        keyed = self.instance.keyed_state
        routing = self.routing
        for to, (groups, pairs) in shift.outgoing(keyed).items():
            for part_groups, payload, more in self._groups_messages(groups, pairs):
                self.courier.control(to, routing.location[to], wire.GROUPS,  # type: ignore[union-attr]
                                     {"version": shift.version, "groups": part_groups, "entries": payload,
                                      "sent_at": time.time(), **({"more": True} if more else {})})
            for key, _value in pairs:
                dict.pop(keyed, key, None)
        shift.released_now()
        self.call_hook("on_key_groups", [], sorted(shift.lost))
        log.info("executor %s: rescale v%d: gave %d key groups", self.executor_id, shift.version, len(shift.lost))
        self.shift_finished_check()

    def _groups_messages(self, groups: list[int], pairs: list[list[Any]]) -> list[tuple[list[int], bytes, bool]]:
        """``(groups, msgpack pairs, more)`` for GROUPS messages: one, or one per group when they
        would not fit a frame comfortably (a receiver refuses frames over ``wire.MAX_FRAME_BYTES``),
        and a group larger than that in several, each but its last with ``more`` (the new owner
        takes the group with its last part; they follow each other on one pipe, in order)."""
        limit = wire.STATE_PART_BYTES
        try:
            payload = wire.pack(pairs)
            if len(payload) <= limit:
                parts = [(groups, payload, False)]
            else:
                by_group: dict[int, list[list[Any]]] = {g: [] for g in groups}
                for pair in pairs:
                    by_group[key_group(pair[0], self.key_groups)].append(pair)
                parts = []
                for g, group_pairs in by_group.items():
                    packed = wire.pack(group_pairs)
                    if len(packed) <= limit:
                        parts.append(([g], packed, False))
                        continue
                    pieces: list[list[list[Any]]] = [[]]  # keys in order, a piece up to ``limit`` bytes
                    size = 0
                    for pair in group_pairs:
                        n = len(wire.pack(pair))
                        if pieces[-1] and size + n > limit:
                            pieces.append([])
                            size = 0
                        pieces[-1].append(pair)
                        size += n
                    parts.extend(([g], wire.pack(p), i < len(pieces) - 1) for i, p in enumerate(pieces))
        except (TypeError, ValueError, OverflowError) as exc:
            self.record_error("rescale", exc)
            self.taint(f"key groups {groups[:5]} are not msgpack data")
            return [(groups, wire.pack([]), False)]
        for part, payload, _more in parts:
            if len(payload) > wire.MAX_FRAME_BYTES:
                log.error("executor %s: keys of key group %s hold %d bytes, more than a frame may: "
                          "the group starts empty there", self.executor_id, part, len(payload))
                self.taint(f"key group {part} is too large to hand over")
        return [(g, p, more) if len(p) <= wire.MAX_FRAME_BYTES else (g, wire.pack([]), more) for g, p, more in parts]

    def on_groups(self, src: int, entries: Any) -> None:
        """Key groups handed over by their old owner (GROUPS)."""
        if not isinstance(entries, Mapping):
            return
        version = int(entries.get("version") or 0)
        shift = self.shift
        if shift is None or shift.version < version:
            if version > self.shift_version:
                self.early_groups.append((src, entries))
            return
        if shift.version > version:
            log.warning("executor %s: key groups of rescale v%d came during v%d: ignored", self.executor_id, version,
                        shift.version)
            return
        groups = [g for g in entries.get("groups") or () if g in shift.awaiting]
        wanted = set(groups)
        more = bool(entries.get("more"))  # a part of a large group: the group is in with its last part
        try:
            pairs = wire.unpack_state(entries.get("entries") or wire.pack([]))
            keyed = self.instance.keyed_state
            for k, v in pairs:
                key = as_key(k)
                if key_group(key, self.key_groups) in wanted:  # not a change: the next checkpoint writes whole groups
                    dict.__setitem__(keyed, key, v)
        except Exception as exc:  # noqa: BLE001 - damaged: those groups start empty, loudly
            self.record_error("rescale", exc)
            self.taint(f"the key groups from task {src} did not decode")
        if more:
            return
        shift.took(groups, time.monotonic(), entries.get("sent_at"))
        self.groups_arrived(groups)
        self.shift_finished_check()

    def groups_arrived(self, groups: list[int]) -> None:
        """What this kind does with tuples it held for ``groups`` (a bolt takes them now)."""

    def shift_step(self) -> None:
        """Once per loop while a step runs: deadlines, and what may be given now."""
        shift = self.shift
        if shift is None:
            return
        if shift.done:
            self.shift_finished_check()
            return
        now = time.monotonic()
        missing = shift.give_up_waiting(now)
        if missing:
            self.taint(f"the state of key groups {missing[:5]} did not come")
            self.groups_arrived(missing)
        self.try_release(now)
        self.shift_finished_check()

    def try_release(self, now: float) -> None:
        """Give the groups away once this kind may (a bolt: every marker is in)."""

    def shift_finished_check(self) -> None:
        shift = self.shift
        if shift is None or not shift.done:
            return
        self.shift = None
        if shift.gained:
            self.call_hook("on_key_groups", sorted(shift.gained), [])
            if shift.step.record:
                self.host.migrations.shift_done(shift.step.record, self.executor_id, shift.stall, shift.lost_state)
        if shift.retiring:
            self.retired = True
            log.info("executor %s: retired by rescale v%d", self.executor_id, shift.version)

    def call_hook(self, name: str, *args: Any) -> None:
        try:
            getattr(self.instance, name)(*args)
        except Exception as exc:
            self.record_error(name, exc)

    def bind_emit(self) -> None:
        """Point the component's ``emit`` at the outbox's compiled emit (rebuilt per routing)."""

    def broken(self) -> None:
        """After a failed ``open``/``prepare``: keep draining input, failing its tracked tuples,
        so that nothing piles up or pauses the topology, until the executor is stopped."""
        outbox = self.outbox
        while self._running:
            try:
                _src, batch = self.data_q.get(timeout=0.1)
            except queue.Empty:
                continue
            if type(batch) is wire.Seal:
                self.answer_seal(_src, batch)
                continue
            if batch is None or type(batch) in SIGNALS or outbox.routing is None:
                continue  # a marker, a barrier, a rescale's marker or a chain's
            decoded = self.decode(batch)
            runs = decoded[1] if decoded else None
            for anchor in runs[1::2] if runs else ():
                outbox.fail_anchors(anchor)
            outbox.flush()

    # -- what a hand-over needs (worker.migration.Migrating) ----------------------------------
    def flush(self) -> None:
        self.refresh_routing()
        self.outbox.flush()

    def downstream_tasks(self) -> list[int]:
        return self.outbox.downstream

    def snapshot(self) -> dict[str, Any]:
        """``self.state`` as msgpack (an empty one, and an error, if it is not msgpack data),
        the counters the new copy carries on, and what else moves with this kind."""
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
                    "failed": self.failed, "errors": self.errors,
                    "user": self.context.metrics.counter_values()}
        keyed = getattr(self.instance, "keyed_state", None) or {}
        try:
            keyed_payload = wire.pack([[k, v] for k, v in keyed.items()])
        except (TypeError, ValueError, OverflowError) as exc:
            keyed_payload, error = wire.pack([]), f"keyed state of {self.executor_id} is not msgpack data: {exc}"
            self.record_error("hand_over", exc)
        moved = {"last": self.checkpoint.last, "aligning": self.checkpoint_alignment()}
        return {"state": payload, "keyed": keyed_payload, "checkpoint": moved, "error": error, "counters": counters,
                **self.snapshot_extra()}

    def checkpoint_alignment(self) -> Any:
        """A bolt's alignment in progress (it moves with the state)."""
        return None

    def snapshot_extra(self) -> dict[str, Any]:
        return {}

    @property
    def handed_over(self) -> bool:
        return self.handover.state is HandoverState.HANDED_OVER

    def close_if_leaving(self) -> None:
        """At the loop's end of a copy that leaves its task without handing over (a rescale retired
        it, or its draining loop raised): its inbox refuses what comes from now on, so senders
        stash it for the task's current place (forwarded, or dropped with a log line), and what it
        left unread is counted in the log rather than dropped in silence."""
        if not self.retired and self.handover.state is not HandoverState.DRAINING:
            return
        left = self.inbox.close()
        if left:
            log.warning("executor %s: %d control messages left unread at its end (%s)", self.executor_id,
                        len(left), "kinds " + ", ".join(str(k) for k in sorted({kind for kind, _src, _e in left})))

    def restore(self, entry: Mapping[str, Any]) -> None:
        """Take a handed-over snapshot: the state first, then what else moved (a spout's held
        acks call ``ack``/``fail``, which update that state), then the counters."""
        try:
            self.instance.state = wire.unpack_state(entry["state"])
        except Exception as exc:  # noqa: BLE001 - a broken hand-over starts empty, loudly
            self.record_error("state", exc)
            self.instance.state = {}
        keyed = self.new_keyed()
        try:
            for k, v in wire.unpack_state(entry.get("keyed") or wire.pack([])):
                dict.__setitem__(keyed, as_key(k), v)
        except Exception as exc:  # noqa: BLE001
            self.record_error("keyed state", exc)
        self.instance.keyed_state = keyed
        moved = entry.get("checkpoint") or {}
        self.checkpoint.last = max(self.checkpoint.last, int(moved.get("last") or 0))
        self.checkpoint.need_full = True  # this copy's first entries for its key groups are full
        self.adopt_alignment(moved.get("aligning"))
        self.restore_extra(entry)
        carried = entry.get("counters") or {}
        self.executed += int(carried.get("executed", 0))
        self.outbox.emitted += int(carried.get("emitted", 0))
        self.acked += int(carried.get("acked", 0))
        self.failed += int(carried.get("failed", 0))
        self.errors += int(carried.get("errors", 0))
        if isinstance(carried.get("user"), Mapping):
            self.context.metrics.carry(carried["user"])

    def restore_extra(self, entry: Mapping[str, Any]) -> None:
        pass

    def adopt_alignment(self, data: Any) -> None:
        pass

    def drop_input(self) -> int:
        return 0

    def counters(self) -> dict[str, Any]:
        data = super().counters()
        outbox = self.outbox
        data["emitted"] = outbox.emitted
        data["batches"] = outbox.batches
        data["control_messages"] = outbox.courier.messages
        if outbox.courier.undelivered:
            data["undelivered"] = outbox.courier.undelivered
        if outbox.courier.unencodable:
            data["unencodable"] = outbox.courier.unencodable
        if outbox.garbage_acks:
            data["garbage_acks"] = outbox.garbage_acks  # a peer's anchors that were no integer pairs
        if outbox.wrong_arity:
            data["wrong_arity"] = outbox.wrong_arity  # batches whose values did not match the declared fields
        if self.handover.awaiting:
            data["awaiting_state"] = True
        if self.context.metrics:
            data["metrics"] = self.context.metrics.snapshot()
        cp = self.checkpoint
        if cp.written or cp.last_error:
            data["checkpoint"] = {"last": cp.last, "written": cp.written, "bytes": cp.last_bytes,
                                  "error": cp.last_error}
        qos = self.qos
        if qos is not None and qos.hists:
            data["qos"] = {key: dict(hist) for key, hist in dict(qos.hists).items()}  # copies: another thread counts
        return data
