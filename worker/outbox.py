"""An executor's outgoing side: grouping, per-destination batching, acker bookkeeping.

This is the per-tuple hot path, so it is written for speed: ``emit`` resolves the
grouping to a destination executor and appends the tuple's values (and, with
acking, its anchors) to that destination's buffer; a buffer leaves as one batch
when it reaches its limit (sized from the destination's rate by
:class:`~worker.batching.BatchPolicy`) or at the executor's flush deadline
(``topology.batch.max.latency.ms``; acker entries have a shorter one). Local
destinations get the batch put on their input queue as Python objects (no
serialisation); remote ones get one msgpack message on a zmq PUSH socket that
this executor thread owns. A batch is three columns, ``(values, anchors,
streams)`` (see :mod:`worker.wire`): no per-tuple record is built on either side.

A buffer is a list of values (one append per emit, no record built). With acking,
each buffer also keeps its anchors as *runs* (see :mod:`worker.wire`): the tuples
one input tuple emits in a row to one destination share one edge id, drawn when
the run opens, so an anchored emit usually costs an identity check and an
increment, not a random number, an XOR and an anchor record per tuple. A run is
one node of the tuple tree: the receiver acks it once all its tuples are acked.
Tuples on other streams than ``default`` are noted in a per-buffer map
``{index: stream}``, so one destination keeps one FIFO buffer and the order of
tuples between two executors is the order of the emits.

Everything here runs in the owning executor's thread only.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nstorm.component import Batch
from nstorm.state.keyed import owner_of
from nstorm.topology import ALL, DIRECT, FIELDS, GLOBAL, LOCAL_OR_SHUFFLE
from worker import wire
from worker.batching import BatchPolicy, FlushDeadline
from worker.delivery import Courier
from worker.emitters import (
    compile_anchored_emit,
    compile_many_emit,
    compile_plain_emit,
    compile_tracked_emit,
)
from worker.eventlog import DIRECT_EMITS, EventFile, sample_emits
from worker.host import Host
from worker.migration import mark_moves
from worker.rescale import UpstreamShifts
from worker.routing import RoutingTable
from worker.runs import (
    K_ALL,
    K_FIELD1,
    K_FIELDS,
    K_GLOBAL,
    K_SHUFFLE,
    UNANCHORED,
    Buffer,
    InputRun,
    SpoutGroup,
    Target,
    anchor_entry,
)
from worker.wire import acker_index

__all__ = ["Outbox"]

log = logging.getLogger(__name__)

_getrandbits = random.Random().getrandbits  # edge ids: fast, not for secrets


class Outbox:
    """Emitting for one executor. See the module docstring.

    :ivar emitted: tuples sent (counted per batch).
    :ivar batches: batches (messages or local queue puts) sent.
    :ivar clock: the monotonic clock of the batching policy (a test may replace it).
    """

    def __init__(self, host: Host, task: int, component: str, definition: Mapping[str, Any]) -> None:
        self.host = host
        self.task = task
        self.component = component
        self.definition = definition
        self.acking = host.acking
        self.policy = BatchPolicy.from_conf(host.conf)
        self.deadline = FlushDeadline(self.policy.max_latency)  # for everything buffered
        self.ctl_deadline = FlushDeadline(self.policy.control_latency)  # for acker entries
        self.clock = time.monotonic
        self.emitted = 0
        self.batches = 0
        self.courier = Courier(host, task)  # how batches and control messages reach their executors
        self.emit = self.emit_plain
        self.emit_anchored = self.emit_anchored_general
        self.emit_tracked = self.emit_tracked_general
        self.emit_many = self.emit_many_general
        # emit_many_general's emit of one tuple: the compiled one, never a sampling wrapper (a
        # sampled emit_many logs its tuples itself)
        self.emit_one: Callable[..., Any] = self.emit_anchored_general if self.acking else self.emit_plain
        self.routing: RoutingTable | None = None
        self.sampling: tuple[float, EventFile, str] | None = None  # event sampling (worker.eventlog)
        self.guests: set[int] = set()  # tasks chained to this executor (asked or running in its thread)
        self.guest_inboxes: list[Any] = []  # their inboxes: the host's loop keeps their deadlines (tend_guests)
        self.targets: dict[str, list[Target]] = {}
        self.direct_targets: dict[str, list[tuple[str, list[Buffer]]]] = {}
        self.buffers: dict[int, Buffer] = {}
        self.ctl_buffers: dict[tuple[int, int], list[Any]] = {}  # (kind, dst) -> entries
        self.acks: dict[int, int] = {}  # root -> xor, flushed per batch
        self.garbage_acks = 0  # ack and fail entries dropped: a peer's anchors were not integer pairs
        # Load collection (paper Fig. 5): cumulative [tuples, wire bytes] per destination task,
        # counted per batch; the metrics thread turns them into per-interval deltas.
        self.traffic: dict[int, list[int]] = {}
        self.current: Any = None  # the tuple (or batch) being processed: what emits anchor to
        self.last_run: Buffer | None = None  # the buffer whose run was opened last (see BoltExecutor)
        self.auto_anchor = True
        outputs = definition["components"][component]["outputs"]
        self.streams = set(outputs)
        self.arities = {stream: len(fields) for stream, fields in outputs.items()}  # declared fields a stream
        self.arity = self.arities.get("default", -1)
        self.wrong_arity = 0  # batches whose first tuple's values were not its stream's declared fields
        self.arity_reported_at = -1e9
        self.on_error: Callable[[str, BaseException], None] | None = None  # its executor's record_error
        self.key_groups = int(host.conf.get("topology.max.parallelism") or 128)
        self.downstream: list[int] = []  # every task of every subscribing component (barriers go to all)
        self.subscribers = sorted(name for name, comp in definition["components"].items()
                                  if any(i["component"] == component for i in comp["inputs"]))
        self.shifts = UpstreamShifts(self.subscribers, float(host.conf.get("worker.state.wait.ms") or 10000) / 1000.0)

    # -- routing ------------------------------------------------------------------------
    def rebuild(self, routing: RoutingTable) -> None:
        """Compile the groupings against a new routing table.

        For every destination that changed place, what is buffered still goes to the
        old place, followed by a marker: the old copy of a moved executor knows it has
        everything from this executor once the marker arrives (per-pipe FIFO), and only
        then hands its state over. Tuples emitted from now on go to the new place.
        """
        mark_moves(self.routing, routing, self.buffers, self.flush_buffer, self.courier)
        ended = self.shifts.ended(routing) if self.shifts.held else []
        if routing.rescales:
            self.shifts.note(routing, self.clock())
        self.routing = routing
        self.downstream = sorted({t for name in self.subscribers for t in routing.component_tasks.get(name, ())})
        self.courier.routing = routing
        for component in ended:
            log.warning("rescale of %s ended before this executor switched to its new layout: switching now",
                        component)
            self.shifts.switch(component, routing, self.buffers, self.flush_buffer, self.courier)
        self.tune(routing.tuning)  # every plan carries its buffer sizes (none: the configured ones)
        self._compile(routing)
        if routing.chains or self.guests:
            self._rechain(routing)

    # -- chaining (worker.chaining) -------------------------------------------------------
    def _rechain(self, routing: RoutingTable) -> None:
        """Ask the executors the plan chains to this one to run in its thread, release the others."""
        me = self.host.worker_id
        want = {d for d, u in routing.chains.items() if u == self.task and routing.location[d] == me}
        for d in list(self.guests):
            inbox = self.host.inbox(d)
            if inbox is not None and inbox.offer != self.task and inbox.host != self.task:
                self.guests.discard(d)  # it let go itself (it moved, or saw a plan without the chain)
        for d in self.guests - want:
            self.courier.release(d)
            self.guests.discard(d)
        for d in want - self.guests:
            if self.courier.chain_mark(d, me):
                self.guests.add(d)
        self.guest_inboxes = [i for d in sorted(self.guests) if (i := self.host.inbox(d)) is not None]

    def release_guests(self) -> None:
        """End every chain to this executor (it stops)."""
        for d in self.guests:
            self.courier.release(d)
        self.guests = set()
        self.guest_inboxes = []

    def tune(self, tuning: Mapping[str, Mapping[str, float]]) -> None:
        """Size the output buffers as a latency constraint's controller asked for the channels
        that leave this component (the tightest of them, for all of its buffers: they share one
        deadline); the configured sizes where it asks nothing."""
        prefix = self.component + ">"
        mine = [v for k, v in tuning.items() if k.startswith(prefix)]
        latencies = [float(v["latency_ms"]) / 1000.0 for v in mine if "latency_ms" in v]
        caps = [int(v["cap"]) for v in mine if "cap" in v]
        policy = self.policy
        policy.tune(min(latencies) if latencies else None, min(caps) if caps else None)
        self.deadline.max_latency = policy.max_latency
        self.ctl_deadline.max_latency = policy.control_latency
        top = policy.cap * policy.unit
        for buf in self.buffers.values():
            if buf.limit > top:
                buf.limit = top

    def shift_ready(self, src: int, version: int) -> bool:
        """An executor of a rescaled component holds its key groups (SHIFT_READY); True if the
        emits were compiled anew (the executor binds them again)."""
        self.shifts.ready(src, version)
        return self.switch_due()

    def switch_due(self) -> bool:
        """Route the held components that may switch by their new layout (worker.rescale); True if
        the emits were compiled anew (the executor binds them again)."""
        due = self.shifts.due(self.clock())
        if not due or self.routing is None:
            return False
        for component in due:
            self.shifts.switch(component, self.routing, self.buffers, self.flush_buffer, self.courier)
        self._compile(self.routing)
        return True

    def _compile(self, routing: RoutingTable) -> None:
        """The groupings and compiled emits for ``routing`` (a held rescale keeps its old layout)."""
        targets: dict[str, list[Target]] = {s: [] for s in self.streams}
        direct: dict[str, list[tuple[str, list[Buffer]]]] = {s: [] for s in self.streams}
        me = self.host.worker_id
        for name, comp in self.definition["components"].items():
            for inp in comp["inputs"]:
                if inp["component"] != self.component:
                    continue
                tasks = list(self.shifts.layout(name) or routing.component_tasks.get(name, ()))
                grouping = inp["grouping"]
                stream = inp["stream"]
                if grouping == LOCAL_OR_SHUFFLE:
                    local = [t for t in tasks if routing.location[t] == me]
                    tasks = local or tasks
                bufs = [self._buffer(t) for t in tasks]
                if grouping == FIELDS:
                    out_fields = self.definition["components"][self.component]["outputs"][stream]
                    idx = [out_fields.index(f) for f in inp["fields"]]
                    if 1 < len(bufs) <= self.key_groups:
                        # One entry per key group, pointing at its owner (nstorm.state.keyed): a key
                        # is routed as ``bufs[hash(key) % groups]``, no dearer than ``% n``.
                        n = len(bufs)
                        bufs = [bufs[owner_of(g, n, self.key_groups)] for g in range(self.key_groups)]
                    target = Target(K_FIELD1, bufs, idx[0]) if len(idx) == 1 else Target(K_FIELDS, bufs, idx)
                elif grouping == ALL:
                    target = Target(K_ALL, bufs)
                elif grouping == GLOBAL:
                    target = Target(K_GLOBAL, bufs[:1])
                elif grouping == DIRECT:
                    direct[stream].append((name, bufs))
                    continue
                else:  # shuffle, none, local_or_shuffle
                    target = Target(K_SHUFFLE, bufs)
                targets[stream].append(target)
        self.targets = targets
        self.direct_targets = direct
        self._compile_emits()

    def _compile_emits(self) -> None:
        """The emits compiled for the targets (the general ones before a routing table), wrapped
        in sampling ones while the component's tuples are sampled (worker.eventlog)."""
        if self.routing is None:
            self.emit, self.emit_anchored = self.emit_plain, self.emit_anchored_general
            self.emit_tracked, self.emit_many = self.emit_tracked_general, self.emit_many_general
        else:
            self.emit = compile_plain_emit(self)
            self.emit_anchored = compile_anchored_emit(self)
            self.emit_tracked = compile_tracked_emit(self)
            self.emit_many = compile_many_emit(self)
        self.emit_one = self.emit_anchored if self.acking else self.emit
        for name in DIRECT_EMITS:
            self.__dict__.pop(name, None)  # a sampling wrapper's shadow: the method again
        if self.sampling is not None:
            sample_emits(self, *self.sampling)

    def sample(self, sampling: tuple[float, EventFile, str] | None) -> None:
        """Write ``(percent, file, executor id)``'s sample of the emitted tuples to the worker's
        events file from now on, or none (None); the executor binds the emits again."""
        if sampling != self.sampling:
            self.sampling = sampling
            self._compile_emits()

    def _buffer(self, dst: int) -> Buffer:
        buf = self.buffers.get(dst)
        if buf is None:
            traffic = self.traffic.get(dst)
            if traffic is None:
                traffic = self.traffic[dst] = [0, 0]
            limit = self.policy.initial_limit()
            buf = self.buffers[dst] = Buffer(dst, self.task, limit, self.clock(), traffic)
        return buf

    def _copies(self, values: Sequence[Any], stream: str) -> list[Buffer]:
        """The destination buffers of one emit (one per receiving executor copy)."""
        try:
            targets = self.targets[stream]
        except KeyError:
            msg = f"{self.component} emits on undeclared stream {stream!r}"
            raise ValueError(msg) from None
        if not targets and self.direct_targets.get(stream):
            self._not_direct(stream)
        out = []
        for t in targets:
            k = t.kind
            if k == K_FIELD1:
                out.append(t.bufs[hash(values[t.idx]) % t.n])
            elif k == K_SHUFFLE:
                t.rr += 1
                out.append(t.bufs[t.rr % t.n])
            elif k == K_FIELDS:
                out.append(t.bufs[hash(tuple([values[i] for i in t.idx])) % t.n])
            elif k == K_ALL:
                out.extend(t.bufs)
            else:
                out.append(t.bufs[0])
        return out

    def anchor_owner(self, anchor: Any) -> Any:
        """What an emit anchored by hand to ``anchor`` (a tuple or a batch) XORs its edge into.

        A batch: its ledger. A tuple of a run a bolt acks itself (``auto_ack``) has no
        ``_ackval`` of its own (:meth:`worker.bolt.BoltExecutor._process_batch` leaves it
        unset): while its run is the current one, the run's :class:`InputRun`, acked with the
        run; after that, a throwaway one (its run was acked: the edge is lost, as it was when it
        went into a tuple whose ack had been sent)."""
        if type(anchor) is Batch:
            return anchor.acking
        try:
            anchor._ackval  # noqa: B018 - set: a tuple acked on its own
        except AttributeError:
            cur = self.current
            if type(cur) is InputRun and cur.anchors is anchor.anchors:
                return cur
            return InputRun(anchor.anchors)
        return anchor

    def open_run(self, buf: Buffer, cur: Any) -> None:
        """Start a run in ``buf`` for tuples emitted under ``cur`` (its first tuple is appended
        already): one new edge per root of ``cur``, XORed into ``cur``'s children.

        If the run open in ``buf`` belongs to a tuple with the very same anchor entry (an
        earlier tuple of the same input run), ``cur`` joins it instead: the edge is already
        in that tuple's children, and the run is acked once, after all its tuples.
        """
        a = cur.anchors
        o = buf.owner
        if o is not None and o is not UNANCHORED and a and o.anchors is a:
            buf.owner = cur
            self.last_run = buf
            return
        if a:
            edge = _getrandbits(64)
            cur._ackval ^= edge
            if len(a) == 2:
                anc: Any = (a[0], edge)
            else:
                anc = []
                for i in range(0, len(a), 2):
                    anc.append(a[i])
                    anc.append(edge)
            buf.open(cur, anc)
        else:
            buf.open(cur, None)
        self.last_run = buf

    def _put(self, buf: Buffer, values: Sequence[Any], stream: str, anchor: Any) -> None:
        """Append one tuple to ``buf`` (any stream) with its own anchor entry (None: unanchored,
        which joins an open unanchored run); send the buffer if it is full."""
        if stream != "default":
            buf.note_stream(stream)
        buf.append(values)
        if self.acking:
            if anchor is None:
                if buf.owner is not UNANCHORED:
                    buf.open(UNANCHORED, None)
            else:
                buf.close_run(len(buf) - 1)
                runs = buf.runs
                runs.append(1)
                runs.append(anchor)
        if len(buf) >= buf.limit:
            self.flush_buffer(buf)

    # -- emitting -------------------------------------------------------------------------
    # The compiled emits below pick a buffer with one hash (fields grouping on one field)
    # or one ``next`` of a cycle (shuffle, global, a single subscriber), append, and
    # compare the buffer's length with its limit; everything else goes the general way.
    def emit_plain(self, values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
        """Unanchored emit, any grouping and stream (see :func:`worker.emitters.compile_plain_emit` for the fast path)."""
        for buf in self._copies(values, stream):
            self._put(buf, values, stream, None)

    def emit_many_general(self, values_list: Iterable[Sequence[Any]], stream: str = "default",
                          anchors: Any = None) -> None:
        """A bolt's ``emit_many``: each tuple as its ``emit`` would (anchored with acking on)."""
        emit = self.emit_one
        for values in values_list:
            emit(values, stream, anchors)

    def emit_anchored_general(self, values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
        """A bolt's emit, anchored to the current tuple (or batch), or to ``anchors``."""
        if anchors is None:
            cur = self.current if self.auto_anchor else None
            anchor_tups: Sequence[Any] = (cur,) if cur is not None and cur.anchors else ()
        else:
            anchor_tups = [self.anchor_owner(a) for a in anchors if a.anchors]
        if not anchor_tups:
            self.emit_plain(values, stream)
            return
        for buf in self._copies(values, stream):
            self._put(buf, values, stream, anchor_entry(anchor_tups))

    def emit_tracked_general(self, values: Sequence[Any], stream: str, group: SpoutGroup) -> int:
        """A spout's tracked emit, any grouping and stream: returns how many copies were
        buffered (0: nobody subscribes). Each copy joins ``group``'s run in its buffer."""
        bufs = self._copies(values, stream)
        for buf in bufs:
            self._put_grouped(buf, values, stream, group)
        return len(bufs)

    def _put_grouped(self, buf: Buffer, values: Sequence[Any], stream: str, group: SpoutGroup) -> None:
        if stream != "default":
            # A run never spans streams (a process_batch bolt gets each stream's tuples
            # apart and would ack the run once per part): a run of its own.
            buf.note_stream(stream)
            buf.append(values)
            self.open_group_run(buf, group)
            buf.close_run(len(buf))
            return
        buf.append(values)
        if buf.owner is not group:
            self.open_group_run(buf, group)

    def open_group_run(self, buf: Buffer, group: SpoutGroup) -> None:
        """Start ``group``'s run in ``buf`` (its first tuple is appended already)."""
        edge = _getrandbits(64)
        group._ackval ^= edge
        anc = [group.root, edge]
        buf.open(group, anc)
        group.bufs.append(buf)
        group.last = anc
        group.last_buf = buf
        group.last_sent = buf.sent

    def close_group(self, group: SpoutGroup) -> bool:
        """Seal ``group``'s tree: False if none of its tuples went anywhere (complete at once).

        The last run's edge becomes the XOR of the others, so all the group's edges XOR to
        zero and the first ack the acker sees for the root creates it; if that run has left
        already, the XOR goes to the acker as an ack entry instead. Buffers the group filled
        are sent now (tracked emits do not send, so that the last run usually is still here).
        """
        last = group.last
        if last is None:
            return False
        x = group._ackval
        if group.last_buf.sent == group.last_sent:  # type: ignore[union-attr]
            last[1] ^= x
        else:
            root = group.root
            acks = self.acks
            acks[root] = acks.get(root, 0) ^ x
        for buf in group.bufs:
            if len(buf) >= buf.limit:
                self.flush_buffer(buf)
        return True

    def _not_direct(self, stream: str) -> None:
        """Storm refuses a regular emit on a stream only direct groupings take, and the other way
        round: the tuple would go nowhere, and a tracked one be acked as if delivered."""
        if self.targets.get(stream):
            msg = f"{self.component} emit_direct on stream {stream!r}, which no component takes with direct_grouping"
        else:
            msg = f"{self.component} emits on stream {stream!r}, which only direct_grouping takes: use emit_direct"
        raise ValueError(msg)

    def _direct(self, task: int, stream: str) -> list[tuple[str, list[Buffer]]]:
        """The direct subscribers of ``stream``, ``task`` checked against each before any gets a copy."""
        direct = self.direct_targets.get(stream)
        if direct is None:
            msg = f"{self.component} emits on undeclared stream {stream!r}"
            raise ValueError(msg)
        if not direct and self.targets.get(stream):
            self._not_direct(stream)
        for name, bufs in direct:
            if not 0 <= task < len(bufs):
                msg = f"emit_direct to task {task} of {name!r}, which has {len(bufs)} executors"
                raise ValueError(msg)
        return direct

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default", anchors: Any = None,
                    **_: Any) -> None:
        """Send to executor ``task`` (index within each direct-subscribing component); anchored
        like :meth:`emit_anchored_general` (to the current tuple, or to ``anchors``)."""
        direct = self._direct(task, stream)
        anchor_tups: Sequence[Any] = ()
        if self.acking:
            if anchors is not None:
                anchor_tups = [self.anchor_owner(a) for a in anchors if a.anchors]
            elif self.auto_anchor:
                cur = self.current
                anchor_tups = (cur,) if cur is not None and cur.anchors else ()
        for _name, bufs in direct:
            self._put(bufs[task], values, stream, anchor_entry(anchor_tups) if anchor_tups else None)

    def emit_direct_tracked(self, task: int, values: Sequence[Any], stream: str, group: SpoutGroup) -> int:
        """A spout's tracked direct emit: returns how many copies were buffered."""
        direct = self._direct(task, stream)
        for _name, bufs in direct:
            self._put_grouped(bufs[task], values, stream, group)
        return len(direct)

    # -- acker bookkeeping ---------------------------------------------------------------
    def ack_tuple(self, tup: Any) -> None:
        """Record the ack of ``tup``: XOR of its edge and its children's, per root.

        A tuple of a run (:class:`~worker.wire.AckRun`) adds its children's XOR to the run's;
        the run's last tuple to be acked sends it all with the run's edge.
        """
        anchors = tup.anchors
        if not anchors:
            return
        x = getattr(tup, "_ackval", 0)  # unset: a tuple of an auto-acked run (anchor_owner)
        acks = self.acks
        if type(anchors) is wire.AckRun:
            anchors.left -= 1
            if anchors.left > 0:
                anchors.x ^= x
                return
            x ^= anchors.x
        for i in range(0, len(anchors), 2):
            r = anchors[i]
            acks[r] = acks.get(r, 0) ^ anchors[i + 1] ^ x

    def fail_tuple(self, tup: Any) -> None:
        self.fail_anchors(tup.anchors)

    def fail_anchors(self, anchors: Any) -> None:
        """Fail every root of a flat ``[root, edge, ...]`` anchor entry (None: nothing to fail)."""
        if not anchors:
            return
        for i in range(0, len(anchors), 2):
            r = anchors[i]
            try:
                acker = self.acker_for(r)
            except TypeError:  # not a root (a peer's garbage): no acker keeps its tree
                self._garbage("a fail of a root that is not one")
                continue
            self.control(wire.FAIL, acker, r)

    def acker_for(self, root: int) -> int:
        ackers = self.routing.ackers  # type: ignore[union-attr]
        return ackers[acker_index(root, len(ackers))]

    def control(self, kind: int, dst: int, entry: Any) -> None:
        """Queue one control entry for ``dst``; sent with the next flush."""
        key = (kind, dst)
        buf = self.ctl_buffers.get(key)
        if buf is None:
            buf = self.ctl_buffers[key] = []
        buf.append(entry)

    # -- flushing ------------------------------------------------------------------------
    def worked(self, now: float) -> None:
        """Arm both deadlines from ``now`` (off the per-batch loop, which arms them inline): what
        a pass outside it emitted leaves by them, input or none."""
        self.deadline.worked(now)
        self.ctl_deadline.worked(now)

    def holding(self) -> bool:
        """True if some data buffer holds tuples (the executor's deadline must then be armed)."""
        return any(self.buffers.values())

    def flush(self) -> None:
        """Send every non-empty buffer, then the acks and other control entries."""
        self.flush_data()
        self.flush_control()

    def flush_data(self) -> None:
        """Send every non-empty data buffer (the acks keep their own deadline)."""
        self.deadline.flushed()
        for buf in self.buffers.values():
            if buf:
                self.flush_buffer(buf)

    def flush_control(self) -> None:
        """Send the acks and other control entries (not the data buffers)."""
        self.ctl_deadline.flushed()
        if self.acks:
            acks = self.acks
            self.acks = {}
            ackers = self.routing.ackers  # type: ignore[union-attr]
            n = len(ackers)
            pending = iter(acks.items())
            while True:
                try:
                    for r, x in pending:
                        self.control(wire.ACK, ackers[acker_index(r, n)], (r, x))
                    break
                except TypeError:  # a root that is no int (a peer's garbage): its ack is dropped, the rest go on
                    self._garbage("an ack of a root that is not one")
        if self.ctl_buffers:
            ctl = self.ctl_buffers
            self.ctl_buffers = {}
            for (kind, dst), entries in ctl.items():
                try:
                    self._send_control(kind, dst, entries)
                except (OverflowError, TypeError, ValueError):  # no msgpack form: from a peer's garbage anchors
                    self._send_packable(kind, dst, entries)

    def flush_buffer(self, buf: Buffer) -> None:
        """Send what ``buf`` holds as one batch ``(values, runs, streams)``."""
        runs = None
        if self.acking:
            if buf.owner is not None:
                buf.close_run(len(buf))
            runs = buf.runs
            buf.runs = []
            if len(runs) == 2 and runs[1] is None:
                runs = None  # all unanchored
        values = buf[:]
        buf.clear()
        buf.sent += 1
        streams = buf.streams
        if streams is not None:
            buf.streams = None
        try:  # a batch's first tuple against its stream's fields: a len a batch, no check a tuple
            odd = len(values[0]) != self.arity or streams is not None
        except IndexError:  # nothing buffered
            odd = False
        except TypeError:  # values with no length at all
            odd = True
        if odd:
            self._check_arity(values[0], streams)
        n = len(values)
        self.emitted += n
        self.batches += 1
        policy = self.policy
        if policy.adaptive:
            policy.observe(buf, n, self.clock())
        traffic = buf.traffic
        traffic[0] += n
        dst = buf.dst
        trace = buf.trace
        if trace is None:
            traffic[1] += self.courier.batch(dst, self.routing.location[dst], (values, runs, streams), n)  # type: ignore[union-attr]
        else:
            buf.trace = None
            traffic[1] += self.courier.traced_batch(dst, self.routing.location[dst], (values, runs, streams), n,  # type: ignore[union-attr]
                                                    trace)

    def send_barrier(self, cid: int) -> None:
        """Checkpoint ``cid``'s barrier to every downstream task, each behind what its buffer held."""
        self.deadline.flushed()
        buffers = self.buffers
        location = self.routing.location  # type: ignore[union-attr]
        for dst in self.downstream:
            buf = buffers.get(dst)
            if buf:
                self.flush_buffer(buf)
            self.courier.barrier(dst, location[dst], cid)
        self.flush_control()

    def _check_arity(self, values: Any, streams: Mapping[int, str] | None) -> None:
        """Report (as this executor's error, at most once a second) a batch whose first tuple's
        values do not match its stream's declared fields, as Storm's emit does ("Tuple created
        with wrong number of fields"): the batch still goes (nothing is lost), and the receivers'
        ``tup["field"]`` says what is missing. Checked a batch, not a tuple: a component that
        emits the wrong number every time is reported at its first batch."""
        stream = streams.get(0, "default") if streams else "default"
        expected = self.arities.get(stream, -1)
        try:
            got = len(values)
        except TypeError:
            got = -1
        if got == expected:
            return
        self.wrong_arity += 1
        now = self.clock()
        if self.on_error is None or now - self.arity_reported_at < 1.0:
            return
        self.arity_reported_at = now
        fields = self.definition["components"][self.component]["outputs"].get(stream, [])
        what = f"{got} values" if got >= 0 else "no sequence of values"
        self.on_error("emit", ValueError(
            f"{self.component} emitted {values!r:.80} ({what}) on stream {stream!r}, which declares "
            f"{len(fields)} fields {list(fields)}: emit a sequence of one value a declared field"))

    def _garbage(self, what: str) -> None:
        """Count (and log once) a control entry dropped because a peer sent anchors that are not
        ``[root, edge, ...]`` integer pairs: checking every anchor of every batch would cost 2-3% of
        the words a second, so the garbage is caught where it breaks (its trees time out)."""
        if not self.garbage_acks:
            log.warning("%s: dropped %s (anchors from another worker that are not integer pairs)",
                        self.component, what)
        self.garbage_acks += 1

    def _send_packable(self, kind: int, dst: int, entries: list[Any]) -> None:
        """Send the entries that have a wire form, drop the others (see :meth:`_garbage`)."""
        good = []
        for entry in entries:
            try:
                wire.pack(entry)
            except (OverflowError, TypeError, ValueError):
                self._garbage("a control entry with no wire form")
                continue
            good.append(entry)
        if good:
            self._send_control(kind, dst, good)

    def _send_control(self, kind: int, dst: int, entries: Any) -> None:
        self.courier.control(dst, self.routing.location[dst], kind, entries)  # type: ignore[union-attr]

    def close(self) -> None:
        """Close the sockets (after a last try at what a peer's full pipe did not take)."""
        self.release_guests()
        self.courier.close()
