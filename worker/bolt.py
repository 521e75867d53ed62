"""The bolt executor: takes batches from its data queue and runs ``process`` (or ``process_batch``).

The per-tuple hot path of the engine lives here (:meth:`BoltExecutor._process_batch`): a
delivered :class:`~nstorm.component.Tuple` costs one slot write (two with acking) and, only if
``process`` kept the previous one, a call of its class (no ``__init__`` runs); a run of tuples that
share an anchor entry is acked once. A moved bolt's old
copy keeps processing until its upstream executors' markers are aligned, then hands its
state over (:mod:`worker.migration`).
"""

from __future__ import annotations

import logging
import queue
import sys
import time
from collections.abc import Mapping
from typing import Any

from nstorm import latency
from nstorm.component import TICK_STREAM, Batch, Bolt, Tuple, TupleMeta, delivered_tuple_class
from nstorm.config import flag
from nstorm.topology import FIELDS
from worker import wire
from worker.batching import ALIGNED_BURST, AlignedFlush
from worker.chaining import SIGNALS, ChainMark, tend_guests
from worker.checkpoint import BarrierAligner
from worker.executor import UserExecutor
from worker.host import Host
from worker.qos import Traced
from worker.rescale import KeyGroupShift, split_batch
from worker.runs import BatchLedger, InputRun

__all__ = ["BoltExecutor"]

log = logging.getLogger(__name__)
STAMPED = latency.STAMPED  # roots at or above carry their spout emit time (nstorm.latency)
_ShiftMark = wire.ShiftMark
_Traced = Traced
_ChainMark = ChainMark
_Seal = wire.Seal
# How often a chained executor's own thread looks at its buffers' deadlines, in case its host's
# loop is held up (the host keeps them: worker.chaining.tend_guests).
GUEST_CHECK_SECS = 0.02
# A delivered Tuple that ``process`` did not keep is filled again for the next tuple (as CPython's
# ``zip`` reuses its result tuple): no reference but the loop's own and ``getrefcount``'s argument.
# Only where those are counted as such (CPython before 3.14, which may borrow a local's reference);
# elsewhere every tuple is a new one (-1: any count is "kept").
_refs = sys.getrefcount
_UNKEPT = 2 if sys.implementation.name == "cpython" and sys.version_info < (3, 14) else -1


class BoltExecutor(UserExecutor):
    """Takes batches from the data queue and calls ``process`` for each tuple."""

    kind = "bolt"

    def __init__(self, host: Host, executor_id: str, task: int, cls: type, definition: Mapping[str, Any]) -> None:
        super().__init__(host, executor_id, task, cls, definition)
        bolt: Bolt = self.instance
        self.outbox.auto_anchor = bool(bolt.auto_anchor)
        self.fields: dict[tuple[str, str], dict[str, int]] = {}
        for name, comp in self.definition["components"].items():
            for stream, fields in comp["outputs"].items():
                self.fields[(name, stream)] = {f: i for i, f in enumerate(fields)}
        self.tuple_classes: dict[int, dict[str, type[Tuple]]] = {}
        # A bolt that defines process_batch gets whole batches.
        self.batched = type(bolt).process_batch is not Bolt.process_batch
        self.arrival = latency.Recorder()  # spout emit -> processed here, of the stamped tuples
        self.aligner = BarrierAligner()
        self.upstream: set[int] = set()  # every task of every input component (barriers come from all)
        self.take = self._process_batch  # what the loop hands a batch to (_take_aligning, _take_shifting)
        self.unplaced: list[tuple[int, Any]] = []  # batches from tasks the routing table does not know yet
        # (source, stream) -> the key's field positions, for inputs grouped by fields: what a
        # rescale's key groups are computed from (the same hash the upstream routes with).
        self.key_of: dict[str, dict[str, list[int]]] = {}
        for inp in self.spec["inputs"]:
            if inp["grouping"] == FIELDS:
                out = self.definition["components"][inp["component"]]["outputs"][inp["stream"]]
                self.key_of.setdefault(inp["component"], {})[inp["stream"]] = [out.index(f) for f in inp["fields"]]
        # Seconds spent taking input (process and its bookkeeping), read off the clock reads the
        # loop makes anyway, never per tuple: with ``executed`` it gives Storm's execute latency
        # and capacity (worker.stats).
        self.busy_secs = 0.0
        self.held_control: list[tuple[int, int, Any]] = []  # control that came before the state (_hold_control)
        self.guest_pending = -1  # the host whose CHAIN_MARK was taken, until the loop accepts it (worker.chaining)
        self.chained_version = 0  # the plan version this executor had when it became a guest
        # Output batches aligned with the input that fills them (worker.batching: a unit of work is
        # the input taken in a row, or a host's hand-over), where one upstream task feeds this
        # bolt (refresh_routing); None otherwise, and with fixed-size batches.
        self.align_enabled = self.outbox.policy.adaptive and flag(host.conf, "topology.batch.align", True)
        self.align: AlignedFlush | None = None

    def setup(self) -> None:
        bolt: Bolt = self.instance
        self.refresh_routing()
        bolt.emit_direct = self.outbox.emit_direct  # type: ignore[method-assign]
        bolt.ack = self._ack  # type: ignore[method-assign]
        bolt.fail = self._fail  # type: ignore[method-assign]
        self.init_state()
        bolt.prepare(self.conf, self.context)

    def refresh_routing(self) -> None:
        routing = self.routing
        super().refresh_routing()
        if self.routing is not routing and self.routing is not None:
            sources = {i["component"] for i in self.spec["inputs"]}
            self.upstream = {t for c in sources for t in self.routing.component_tasks.get(c, ())}
            self._align_batches()
            if self.routing.rescales and self.aligner.aligning and self.shift is None:
                self._abandon_alignment()
            if self.unplaced:
                unplaced, self.unplaced = self.unplaced, []
                began = time.monotonic()
                for src, batch in unplaced:  # in order: the senders they came from are known now, or still not
                    try:
                        self.take(src, batch)
                    except Exception as exc:  # as in the loop
                        self._drop_batch(exc)
                self.outbox.worked(began)  # what they emitted leaves by the deadlines, input or none

    def _drop_batch(self, exc: Exception) -> None:
        """A batch that decoded but is not what it claims: it is dropped and recorded, the
        executor (and its host's thread, chained) goes on."""
        self.outbox.current = None
        self.record_error("batch", exc)

    def _align_batches(self) -> None:
        """Align output batches with the input where one upstream task feeds this bolt: its
        batches come a fill time apart, and a burst a batch each. With several, the bursts are
        smaller and the gaps uneven, and at word count's peak (two spouts a split) aligned batches
        sent 4% fewer words a second (scratch, session 27): their limits stay plain there."""
        one = self.align_enabled and len(self.upstream) == 1
        self.align = (self.align or AlignedFlush()) if one else None
        self.outbox.policy.burst = ALIGNED_BURST if one else 1.0

    def bind_emit(self) -> None:
        outbox = self.outbox
        self.instance.emit = outbox.emit_anchored if outbox.acking else outbox.emit  # type: ignore[method-assign]
        self.instance.emit_many = outbox.emit_many  # type: ignore[method-assign]
        self.instance.emit_direct = outbox.emit_direct  # type: ignore[method-assign]  # (sampled or not)

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
        if self.host.checkpoints is not None:
            self.taint("a tuple failed")  # its tree's other branches took effect: roll back, not replay
        if type(tup) is Batch:
            self.failed += len(tup.values)
            if self.outbox.acking:
                self.outbox.fail_anchors(tup.anchors)
            return
        self.failed += 1
        if self.outbox.acking:
            self.outbox.fail_tuple(tup)

    def _classes(self, src: int) -> dict[str, type[Tuple]] | None:
        """Per-stream tuple classes of one upstream executor (metadata as class attributes), built
        once; None for a task this executor's routing table does not know yet (a rescale added it)."""
        classes = self.tuple_classes.get(src)
        if classes is None:
            routing = self.routing
            if src >= len(routing.task_component):  # type: ignore[union-attr]
                return None
            source, index = routing.task_component[src], routing.task_index[src]  # type: ignore[union-attr]
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
            self.handover.on_marker(src)  # before this worker itself learns of the move)
            return
        if type(batch) is int:  # checkpoint ``batch``'s barrier
            self._on_barrier(src, batch)
            return
        if type(batch) is _ShiftMark:  # ``src`` routes by a rescale's new layout from here on
            self.on_shift_mark(src, batch.version)
            return
        if type(batch) is _Traced:  # a latency constraint's sampled batch (worker.qos)
            self.take_traced(src, batch)
            return
        if type(batch) is _ChainMark:  # ``src`` asks to run this executor in its thread (worker.chaining)
            self.guest_pending = src
            return
        if type(batch) is _Seal:  # the old copy of moved ``src`` sends no more (worker.migration)
            self.answer_seal(src, batch)
            return
        decoded = self.decode(batch) if type(batch) is bytes else batch
        if decoded is None:
            return
        classes = self._classes(src)
        if classes is None:  # from an executor a rescale added, before this one's plan names it
            self.unplaced.append((src, decoded))
            return
        values, runs, streams = decoded
        inbox = self.inbox
        inbox.batch_avg += (len(values) - inbox.batch_avg) * 0.125
        if self.batched:
            self._process_as_batches(classes, values, runs, streams)
            return
        cls = classes.get("default")
        if streams is not None or cls is None:
            self._process_general(classes, values, runs, streams)
            return
        process = self.instance.process
        outbox = self.outbox
        tup = cls()
        refs, unkept = _refs, _UNKEPT
        if not outbox.acking:
            for v in values:
                tup.values = v
                try:
                    process(tup)
                except Exception as exc:
                    self.record_error("process", exc)
                    tup = cls()
                    continue
                if refs(tup) > unkept:  # the bolt kept it: the next tuple is a new one
                    tup = cls()
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
            tup.anchors = a  # (and again on a new tuple: a reused one keeps it for the run)
            if a is None:
                for v in values[i:j]:
                    tup.values = v
                    try:
                        process(tup)
                    except Exception as exc:
                        self.record_error("process", exc)
                        tup = cls()
                        tup.anchors = a
                        continue
                    if refs(tup) > unkept:
                        tup = cls()
                        tup.anchors = a
                i = j
                continue
            if a[0] >= STAMPED:
                stamp(a[0])
            ok = n
            # A tuple's ``_ackval`` slot stays unset here: an emit anchored to it by hand XORs
            # the child's edge into ``own`` instead (Outbox.anchor_owner), which is acked with
            # the run: a store, a load and an XOR a tuple fewer.
            for v in (values[i],) if n == 1 else values[i:j]:
                tup.values = v
                try:
                    process(tup)
                except Exception as exc:
                    self.record_error("process", exc)
                    if auto_fail:
                        self._fail(tup)
                    ok -= 1
                    tup = cls()
                    tup.anchors = a
                    continue
                if refs(tup) > unkept:
                    tup = cls()
                    tup.anchors = a
            i = j
            if ok != n:  # a tuple of the run was not acked: neither is the run
                acked += ok
                continue
            acked += n
            x = own._ackval
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

    # -- chaining (worker.chaining) ----------------------------------------------------------
    def take_chained(self, src: int, item: Any) -> None:
        """What the host ``src`` hands this chained executor, in the host's thread: anything still
        queued first, then ``item``; this executor's buffers leave at their deadline as ever."""
        inbox = self.inbox
        outbox = self.outbox
        with inbox.lock:
            if inbox.host != src or (outbox.courier.backlog and not outbox.courier.drain()):
                # Released meanwhile, or a peer of this executor takes nothing now (it takes no
                # input then, as its own loop would not): the queue, taken in order later.
                inbox.data.put((src, item))
                return
            began = time.monotonic()
            outbox.worked(began)  # (kept by the host's loop: tend_guests)
            align = self.align
            if align is not None:
                align.began(began)
            qos = self.qos
            try:
                self._drain_queued()
                if qos is not None and qos.starts and qos.sample_due(began):
                    qos.start()
                self.take(src, item)
                if qos is not None and qos.pending:
                    qos.resolve()
                now = time.monotonic()
                self.busy_secs += now - began
                if outbox.deadline.due(now):
                    outbox.flush()
                    return
                if align is not None and align.due(outbox.deadline, outbox.policy.fill, now):
                    outbox.flush_data()  # this hand-over's burst leaves with it
                if outbox.ctl_deadline.due(now):
                    outbox.flush_control()
            except Exception as exc:  # this executor's error, never its host's
                self._drop_batch(exc)
                if qos is not None and qos.pending:
                    qos.resolve()

    def _drain_queued(self) -> None:
        """Take what waits on the queue (the caller holds the inbox's lock); a bad batch is dropped
        as in the loop, and the rest (and then the host's item) taken all the same."""
        get = self.data_q.get_nowait
        while True:
            try:
                src, batch = get()
            except queue.Empty:
                return
            try:
                self.take(src, batch)
            except Exception as exc:  # this executor's error, never its host's
                self._drop_batch(exc)

    def _guest_pass(self) -> None:
        """One pass of the loop while chained (or about to be): everything that needs no input,
        under the inbox's lock, then a wait for control messages of at most ``GUEST_CHECK_SECS``
        (the host keeps this executor's deadlines)."""
        inbox = self.inbox
        outbox = self.outbox
        first = None
        with inbox.lock:
            if self.guest_pending >= 0:
                src, self.guest_pending = self.guest_pending, -1
                if inbox.offer == src:  # still offered: from now on the host's thread runs this one
                    inbox.guest = self
                    inbox.host = src
                    self.chained_version = self.routing.version if self.routing is not None else 0
            self.refresh_routing()
            if not self.ctl_q.empty():
                self._handle_control()
            if self.shift is not None:
                self.shift_step()
            if self.routing is not None and self.routing.rescales:
                self.rescale_tick()
            if not self.data_q.empty() and (not outbox.courier.backlog or outbox.courier.drain()):
                # From elsewhere than the host (a plan on its way), or queued behind its chain mark
                # or when it let go: what they emit leaves by the deadlines this arms (the host's
                # loop keeps them, tend_guests), not only once the host hands over something more.
                outbox.worked(time.monotonic())
                self._drain_queued()
            routing = self.routing
            if inbox.host >= 0 and (self.handover.draining or (
                    routing is not None and routing.version > self.chained_version
                    and routing.chains.get(self.task) != inbox.host)):
                if inbox.offer == inbox.host:
                    inbox.offer = -1  # declined: the host's next plan that chains it offers again (Outbox._rechain)
                inbox.host = -1  # moved, or a newer plan has no such chain: it ends here, whatever the host does
                inbox.guest = None
            now = time.monotonic()
            if outbox.deadline.due(now):
                outbox.flush()
            elif outbox.ctl_deadline.due(now):
                outbox.flush_control()
            chained = inbox.host >= 0
        if not chained:
            return
        try:
            # Not until this executor's own deadlines: its host's loop keeps them (tend_guests),
            # and waking here for each would cost a switch and the lock per deadline.
            first = self.ctl_q.get(timeout=GUEST_CHECK_SECS)
        except queue.Empty:
            return
        with inbox.lock:
            self._handle_control(first)

    def take_traced(self, src: int, traced: Traced) -> None:
        """Process a sampled batch: count its channel's parts and this executor's time, pass the
        trace on along its paths (worker.qos), from the traced tuple's run processed on its own."""
        batch = traced.batch
        qos = self.qos
        routing = self.routing
        if qos is None or routing is None or src >= len(routing.task_component):
            self._process_batch(src, batch)
            return
        buffered, sent, origins, ahead, _ = traced.trace
        taken = time.time_ns() // 1000
        qos.record_channel(routing.task_component[src], buffered, sent, taken)
        decoded = self.decode(batch)
        if decoded is None:
            return
        values, runs, streams = decoded
        lo, hi = wire.run_around(runs, ahead, len(values))
        inbox = self.inbox
        avg = inbox.batch_avg  # the batch counts as one batch taken, not three
        if lo:
            self._process_batch(src, wire.slice_batch(values, runs, streams, 0, lo))
        qos.arm(origins)  # around the traced tuple's run alone: its outputs are the unit's first
        try:
            self._process_batch(src, wire.slice_batch(values, runs, streams, lo, hi))
            reached = time.time_ns() // 1000
        finally:
            qos.resolve()  # even if the batch failed: no trace may wait on a buffer past its unit
        if hi < len(values):
            self._process_batch(src, wire.slice_batch(values, runs, streams, hi, len(values)))
        inbox.batch_avg = avg + (len(values) - avg) * 0.125
        qos.record_done(origins, taken, time.time_ns() // 1000, reached)

    # -- checkpoints (worker.checkpoint) ------------------------------------------------------
    def _take_aligning(self, src: int, batch: Any) -> None:
        """While aligning: what comes after a barrier waits; markers and seals never wait."""
        if batch is not None and src in self.aligner.seen and type(batch) is not _Seal:
            self.aligner.held.append((src, batch))
            return
        self._process_batch(src, batch)

    def _on_barrier(self, src: int, cid: int) -> None:
        if self.shift is not None or self.routing.rescales:  # type: ignore[union-attr]
            # No checkpoint is taken while a rescale changes the layout (of any component: a
            # rescaled spout sends no barrier, so the others' would hold this bolt's input
            # until a newer checkpoint, and none is ordered until the rescale is done).
            return
        aligned, released = self.aligner.on_barrier(src, cid, self.upstream)
        self.take = self._take_aligning if self.aligner.aligning else self._process_batch
        for item in released:
            self.take(*item)
        if aligned:
            self._complete_checkpoint()

    def _complete_checkpoint(self) -> None:
        """Every input's barrier is in: snapshot, write, pass the barrier on, take what waited."""
        cid = self.aligner.cid
        self.checkpoint.take(cid)
        if not self.tainted:  # (see SpoutExecutor._take_checkpoint)
            self.outbox.send_barrier(cid)
        held = self.aligner.release()
        self.take = self._process_batch
        if held:
            # The barrier sent every buffer and disarmed the deadlines: what the held batches emit
            # leaves by new ones, not only once more input comes (none may, at a stream's end).
            self.outbox.worked(time.monotonic())
        for item in held:
            self.take(*item)

    def checkpoint_alignment(self) -> Any:
        return self.aligner.export()

    # -- live rescaling (worker.rescale) --------------------------------------------------------
    def upstream_tasks(self) -> set[int]:
        routing = self.routing
        if routing is None:
            return set()
        sources = {i["component"] for i in self.spec["inputs"]}
        return {t for c in sources for t in routing.component_tasks.get(c, ())}

    def shift_started(self) -> None:
        """A rescale step: an alignment in progress ends (its checkpoint is abandoned: none is taken
        while the layout changes), and tuples of key groups on their way here are held."""
        if self.aligner.aligning:
            self._abandon_alignment()
        self.take = self._take_shifting

    def _abandon_alignment(self) -> None:
        """End the alignment in progress (the coordinator abandons its checkpoint during a
        rescale) and take what it held, in order."""
        log.info("executor %s: checkpoint %d abandoned (a rescale)", self.executor_id, self.aligner.cid)
        held = self.aligner.release()
        self.take = self._process_batch
        for item in held:
            self._process_batch(*item)

    def _split_for_shift(self, src: int, values: Any, runs: Any, streams: Any,
                         shift: KeyGroupShift) -> tuple[Any, Any, Any]:
        """``(go, hold, fail)`` batches of one input batch: tuples of groups on their way here are
        held, of groups given away before every marker came failed, the rest go on."""
        routing = self.routing
        keys = self.key_of.get(routing.task_component[src]) if src < len(routing.task_component) else None  # type: ignore[union-attr]
        if keys is None:
            return (values, runs, streams), None, None
        groups = self.key_groups
        awaiting, forced = shift.awaiting, shift.forced if shift.forced_pending else ()
        kind = []
        for i, v in enumerate(values):
            idx = keys.get(streams.get(i, "default") if streams else "default")
            if idx is None:
                kind.append(0)
                continue
            g = hash(v[idx[0]] if len(idx) == 1 else tuple([v[j] for j in idx])) % groups
            kind.append(1 if g in awaiting else 2 if g in forced else 0)
        if not any(kind):
            return (values, runs, streams), None, None
        go, rest = split_batch(values, runs, streams, [k != 0 for k in kind])
        if rest is None:
            return go, None, None
        rest_kind = [k for k in kind if k]
        held, failed = split_batch(*rest, [k == 2 for k in rest_kind])
        return go, held, failed

    def _take_shifting(self, src: int, batch: Any) -> None:
        shift = self.shift
        if type(batch) is _Traced:
            batch = batch.batch  # a key group's tuples may be held: the trace stays behind
        if shift is None or batch is None or type(batch) in SIGNALS:
            self._process_batch(src, batch)
            return
        decoded = self.decode(batch) if type(batch) is bytes else batch
        if decoded is None:
            return
        go, held, failed = self._split_for_shift(src, *decoded, shift)
        if go is not None:
            self._process_batch(src, go)
        if held is not None:
            shift.note_held(time.monotonic())
            self.shift_held.append((src, held))
        if failed is not None:
            self.failed += len(failed[0])
            if self.outbox.acking and failed[1] is not None:
                for a in failed[1][1::2]:
                    self.outbox.fail_anchors(a)
            self.taint("tuples of key groups given away came after the rescale's deadline")

    def groups_arrived(self, groups: list[int]) -> None:
        """Take the held tuples whose groups are here now, in order; keep the others held."""
        held, self.shift_held = self.shift_held, []
        shift = self.shift
        for src, batch in held:
            if shift is not None and shift.awaiting:
                go, again, _ = self._split_for_shift(src, *batch, shift)
                if again is not None:
                    self.shift_held.append((src, again))
                if go is not None:
                    self._process_batch(src, go)
            else:
                self._process_batch(src, batch)
        if held:
            self.outbox.worked(time.monotonic())  # what they emitted leaves by the deadlines

    def try_release(self, now: float) -> None:
        shift = self.shift
        if shift is not None and not shift.released and shift.may_release(now, True):
            self.give_groups()

    def shift_finished_check(self) -> None:
        super().shift_finished_check()
        if self.shift is None and self.take == self._take_shifting:
            self.take = self._process_batch

    def adopt_alignment(self, data: Any) -> None:
        self.aligner.adopt(data)
        if self.aligner.aligning:
            self.take = self._take_aligning
            if self.upstream and self.upstream <= self.aligner.seen:
                self._complete_checkpoint()

    def _process_general(self, classes: Mapping[str, type[Tuple]], values: Any, runs: Any, streams: Any) -> None:
        """Any batch: tuples on named streams, manual acking, unknown streams."""
        bolt: Bolt = self.instance
        outbox = self.outbox
        acking = outbox.acking
        anchors = wire.expand_runs(runs, len(values)) if acking else None
        for i, v in enumerate(values):
            stream = streams.get(i, "default") if streams else "default"
            cls = classes.get(stream)
            if cls is None:
                self.record_error("process", ValueError(f"a tuple on unknown stream {stream!r}"))
                if anchors is not None:
                    outbox.fail_anchors(anchors[i])
                continue
            tup = cls()
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
            if not acking:
                batch = Batch(values if whole else values[i:j], cls.meta, cls)
            elif whole:
                batch = Batch(values, cls.meta, cls, BatchLedger(outbox, runs=runs))
            else:
                batch = Batch(values[i:j], cls.meta, cls, BatchLedger(outbox, per=per[i:j] if per is not None else None))
            self._run_batch(batch)

    def _run_batch(self, batch: Batch) -> None:
        bolt: Bolt = self.instance
        outbox = self.outbox
        acking = outbox.acking
        if acking:
            ledger: BatchLedger = batch.acking
            outbox.current = ledger  # what emits outside the batch's loop anchor to
            runs = ledger.runs
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
        ledger: BatchLedger | None = batch.acking
        if ledger is None:
            return
        runs = ledger.runs
        entries = runs[1::2] if runs is not None else ledger.per
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
        for tup in ledger.made:
            x = tup._ackval
            a = tup.anchors
            if x and a:
                for q in range(0, len(a), 2):
                    r = a[q]
                    acks[r] = acks.get(r, 0) ^ x
        x = ledger._ackval
        if x:
            roots = ledger.anchors or ()
            for q in range(0, len(roots), 2):
                r = roots[q]
                acks[r] = acks.get(r, 0) ^ x

    def counters(self) -> dict[str, Any]:
        data = super().counters()
        data["busy_secs"] = round(self.busy_secs, 6)
        host, routing = self.inbox.host, self.routing
        if host >= 0 and routing is not None and host < len(routing.tasks):
            data["chained_to"] = routing.tasks[host]  # runs in that executor's thread (worker.chaining)
        arrival = self.arrival
        if arrival.hist:
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
        courier = outbox.courier
        handover = self.handover
        handover.announce()
        began = 0.0
        qos = self.qos if self.qos is not None and self.qos.starts else None  # this bolt starts a constrained path
        inbox = self.inbox
        policy = outbox.policy
        while self._running:
            if self.guest_pending >= 0 or inbox.host >= 0:  # chained: the host's thread takes the input
                self._guest_pass()
                continue
            self.refresh_routing()
            if handover.awaiting:
                handover.wait(self._hold_control)
                if not handover.awaiting and self.held_control:
                    self._replay_held_control()
                continue
            if handover.sealing:  # an old copy whose seals are out: nothing runs until they are answered
                if handover.wait_sealed():  # (it handed over)
                    break
                continue
            if not self.ctl_q.empty():
                self._handle_control()
            if handover.draining and handover.drained(input_empty=empty()):
                handover.hand_over()
                break
            if handover.sealing:
                continue
            if self.shift is not None:
                self.shift_step()
            if self.retired:
                break
            if self.routing is not None and self.routing.rescales:
                self.rescale_tick()
            if courier.backlog and not courier.drain():
                # A peer takes nothing now (dead, restarting, cut off): new input would only pile
                # up behind it, so take none until it does (or its messages are dropped).
                time.sleep(0.005)
                if deadline.due(clock()):
                    outbox.flush()
                continue
            now = clock()
            wait = 0.01 if handover.draining or self.shift is not None else 0.1
            if tick:
                wait = min(wait, max(0.0, self.next_tick - now))
            wait = ctl_deadline.wait(now, deadline.wait(now, wait))
            if outbox.guest_inboxes:  # executors chained to this one: their deadlines are kept here
                wait = tend_guests(outbox.guest_inboxes, self.task, now, wait)
            try:
                src, batch = get(timeout=wait) if wait > 0 else get_nowait()
            except queue.Empty:
                pass
            else:
                began = clock()
                armed = deadline.at is not None
                deadline.worked(began)
                ctl_deadline.worked(began)  # acks
                align = self.align  # (a new routing table may change it)
                if align is not None:
                    align.began(began)
                if qos is not None and qos.sample_due(began):
                    qos.start()
                try:
                    self.take(src, batch)  # (a barrier may switch ``take`` for what follows)
                    if qos is not None and qos.pending:
                        qos.resolve()
                    # Keep taking input while more waits, up to the deadline (or a chain's mark);
                    # aligned, up to the fill time, where what is buffered leaves.
                    at = deadline.at  # None if what was taken sent everything (a checkpoint's barrier)
                    if at is not None and align is not None:
                        at -= deadline.max_latency - policy.fill
                    while at is not None and self.guest_pending < 0 and clock() < at:
                        try:
                            src, batch = get_nowait()
                        except queue.Empty:
                            break
                        self.take(src, batch)
                        if qos is not None and qos.pending:
                            qos.resolve()
                except Exception as exc:
                    self._drop_batch(exc)
                if qos is not None and qos.pending:
                    qos.resolve()
                if not armed and not outbox.holding():
                    deadline.flushed()  # everything left at once (low rates): no wake-up to send nothing
                elif align is not None and align.due(deadline, policy.fill, now := clock()):
                    outbox.flush_data()  # the unit's burst leaves with it
                    if ctl_deadline.due(now):
                        # The acks would have left with the data at the deadline, which this flush
                        # disarmed: a busy bolt (input always waiting) would hold them for good.
                        outbox.flush_control()
                if self.inbox.batch_avg < 2.0 and empty():
                    # Tuples come one at a time, further apart than acks would wait: holding the
                    # acks back would cost a wake-up and save no message.
                    outbox.flush_control()
            now = clock()
            if began:
                self.busy_secs += now - began
                began = 0.0
            if tick and now >= self.next_tick:
                self.next_tick = now + tick
                deadline.worked(now)
                ctl_deadline.worked(now)
                self._tick()
            # A batch leaves when it reaches its limit (in the emit) or at the deadline; running
            # out of input is no reason to send a small one (Nephele's output buffers, not Nagle).
            # Acks leave sooner, but only while input is not waiting: a busy executor sends them
            # with its data (a few messages per deadline), an idle one within a quarter of it.
            # With no data deadline armed (a sink, or all its data sent) nothing would carry
            # them: they leave at their own deadline, or a sink that always has input waiting
            # would hold its acks until its spouts stopped at their pending cap.
            if deadline.due(now):
                outbox.flush()
            elif ctl_deadline.due(now) and (deadline.at is None or empty()):
                outbox.flush_control()
        with inbox.lock:  # a host may still hand over what it sends until it sees this one gone
            inbox.offer = inbox.host = -1
            inbox.guest = None
            outbox.flush()

    def _hold_control(self, kind: int, entries: Any, src: int) -> None:
        """A control message that came while this copy awaits its state (a commit, a rescale's
        message): it applies to the state that comes, so it waits for it."""
        self.held_control.append((kind, src, entries))

    def _replay_held_control(self) -> None:
        held, self.held_control = self.held_control, []
        for kind, src, entries in held:
            self._apply_control(kind, src, entries)

    def _handle_control(self, first: Any = None) -> None:
        while True:
            if first is not None:
                kind, src, entries = first
                first = None
            else:
                try:
                    kind, src, entries = self.ctl_q.get_nowait()
                except queue.Empty:
                    return
            self._apply_control(kind, src, entries)

    def _apply_control(self, kind: int, src: int, entries: Any) -> None:
        if kind == wire.COMMITTED:
            self.committed(int(entries))
        elif kind == wire.GROUPS:
            self.on_groups(src, entries)
        elif kind == wire.SHIFT_READY:
            self.on_shift_ready(src, int(entries))
        elif not self.handover.on_control(kind, entries):
            log.warning("executor %s: unexpected control message %d ignored", self.executor_id, kind)

    def drop_input(self) -> int:
        """The drain deadline passed: what is still queued is dropped (the acker replays it)."""
        dropped = 0
        while True:
            try:
                _src, batch = self.data_q.get_nowait()
            except queue.Empty:
                return dropped
            if type(batch) is _Seal:
                self.answer_seal(_src, batch)
                continue
            decoded = self.decode(batch) if batch is not None and type(batch) not in SIGNALS else None
            if decoded is not None:
                dropped += len(decoded[0])
                if self.host.checkpoints is not None:
                    self.taint("queued tuples dropped at the drain deadline")

    def teardown(self) -> None:
        inbox = self.inbox
        with inbox.lock:  # however the loop ended: no host runs this executor any more
            inbox.offer = inbox.host = -1
            inbox.guest = None
        self.close_if_leaving()
        try:
            self.instance.cleanup()
        except Exception as exc:
            self.record_error("cleanup", exc)
        self.outbox.close()
