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

import collections
import itertools
import logging
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import zmq

from nstorm.topology import ALL, DIRECT, FIELDS, GLOBAL, LOCAL_OR_SHUFFLE
from worker import wire
from worker.batching import BatchPolicy, FlushDeadline
from worker.routing import RoutingTable
from worker.transport import try_send_frames
from worker.wire import acker_index

if TYPE_CHECKING:
    from worker.process import Worker

__all__ = ["InputRun", "Outbox", "SpoutGroup"]

log = logging.getLogger(__name__)
_CLOSE_DRAIN_SECS = 1.0  # a stopping executor tries this long to send what its peers could not take yet

_getrandbits = random.Random().getrandbits  # edge ids: fast, not for secrets

# grouping kinds, compiled
_K_SHUFFLE, _K_FIELD1, _K_FIELDS, _K_ALL, _K_GLOBAL, _K_DIRECT = range(6)

class _Unanchored:
    """The owner of an open run of unanchored tuples (acking on, nothing to anchor to)."""


_UNANCHORED = _Unanchored()


class InputRun:
    """What a bolt's emits anchor to while it processes one input run (the tuples of a batch
    that share one anchor entry): the owner of the runs they open, ``_ackval`` the XOR of
    those runs' edges. One object per run, so that an emit continues its run by identity."""

    __slots__ = ("anchors", "_ackval")

    def __init__(self, anchors: Any) -> None:
        self.anchors = anchors
        self._ackval = 0


class SpoutGroup:
    """Tracked tuples of one spout that share a tuple tree (one root).

    To an outgoing buffer the group is what an input tuple is to a bolt: the owner of a
    run, so the group's tuples to one destination form one run with one edge. The edges
    are XORed into ``_ackval``; when the group closes, the last run's edge is changed so
    that they all XOR to zero (or, if that run already left, the acker gets the XOR as an
    ack entry), so the acker needs no message from the spout.
    """

    __slots__ = ("root", "_ackval", "msg_ids", "bufs", "last", "last_buf", "last_sent")

    def __init__(self, root: int) -> None:
        self.root = root
        self._ackval = 0
        self.msg_ids: list[Any] = []
        self.bufs: list[_Buffer] = []  # where runs were opened (full ones are flushed on close)
        self.last: list[int] | None = None  # the last run's anchor [root, edge]
        self.last_buf: _Buffer | None = None
        self.last_sent = 0  # last_buf.sent when that run opened


class _Buffer(list):
    """What waits for one destination task: the values, in emit order.

    ``limit`` (list length that makes it leave), ``rate`` and ``last`` belong to the
    batching policy; ``traffic`` is the destination's cumulative [tuples, bytes]. With
    acking, ``runs`` holds the closed anchor runs ``[n, anchor, n, anchor, ...]`` and
    ``owner`` / ``run_start`` / ``run_anchor`` the open one: ``owner`` is what its tuples
    were emitted under (an input run, a tuple, a batch or a spout group), None when no run
    is open; the run is the buffer's tuples from index ``run_start`` on, so that an emit
    that continues it writes nothing but the tuple.
    """

    __slots__ = ("dst", "streams", "limit", "rate", "last", "traffic", "runs", "owner", "run_start", "run_anchor",
                 "sent")

    def __init__(self, dst: int, src: int, limit: int, now: float, traffic: list[int]) -> None:
        super().__init__()
        self.dst = dst
        self.streams: dict[int, str] | None = None
        self.limit = limit
        self.rate = 0.0
        self.last = now
        self.traffic = traffic
        self.runs: list[Any] = []
        self.owner: Any = None
        self.run_start = 0
        self.run_anchor: Any = None
        self.sent = 0  # batches sent: a run's anchor may change only while its batch is here

    def note_stream(self, stream: str) -> None:
        """The tuple about to be appended goes on ``stream`` (not ``default``)."""
        streams = self.streams
        if streams is None:
            streams = self.streams = {}
        streams[len(self)] = stream

    def close_run(self, end: int) -> None:
        """Move the open run (if any), which ends before index ``end``, to ``runs``."""
        if self.owner is not None:
            runs = self.runs
            runs.append(end - self.run_start)
            runs.append(self.run_anchor)
            self.owner = None

    def open(self, owner: Any, anchor: Any) -> None:
        """Close the open run before the tuple just appended, and start ``owner``'s with it."""
        end = len(self) - 1
        self.close_run(end)
        self.owner = owner
        self.run_start = end
        self.run_anchor = anchor


def _anchor_entry(anchor_tups: Sequence[Any]) -> list[int]:
    """A new child's anchor entry ``[root, id, ...]``: Storm's scheme, an edge per anchor tuple
    (XORed into it), XORed per root. (One edge for all would cancel out when two anchors share
    a root, as tuples of one spout group do.)"""
    ids: dict[int, int] = {}
    for a in anchor_tups:
        edge = _getrandbits(64)
        a._ackval ^= edge
        roots = a.anchors
        for i in range(0, len(roots), 2):
            r = roots[i]
            ids[r] = ids.get(r, 0) ^ edge
    anc: list[int] = []
    for r, e in ids.items():
        anc.append(r)
        anc.append(e)
    return anc


class _Target:
    """One subscribing component of a stream, compiled for the current routing table."""

    __slots__ = ("kind", "bufs", "n", "idx", "rr", "tasks")

    def __init__(self, kind: int, bufs: list[_Buffer], idx: Any = None) -> None:
        self.kind = kind
        self.bufs = bufs
        self.n = len(bufs)
        self.idx = idx
        self.rr = random.randrange(max(1, self.n))


class Outbox:
    """Emitting for one executor. See the module docstring.

    :ivar emitted: tuples sent (counted per batch).
    :ivar batches: batches (messages or local queue puts) sent.
    :ivar clock: the monotonic clock of the batching policy (a test may replace it).
    """

    def __init__(self, worker: Worker, task: int, component: str, definition: Mapping[str, Any]) -> None:
        self.worker = worker
        self.task = task
        self.component = component
        self.definition = definition
        self.acking = worker.acking
        self.policy = BatchPolicy.from_conf(worker.conf)
        self.deadline = FlushDeadline(self.policy.max_latency)  # for everything buffered
        self.ctl_deadline = FlushDeadline(self.policy.control_latency)  # for acker entries
        self.clock = time.monotonic
        self.emitted = 0
        self.batches = 0
        self.control_messages = 0  # acker and migration messages sent (queue puts or zmq sends)
        self.emit = self.emit_plain
        self.emit_anchored = self.emit_anchored_general
        self.emit_tracked = self.emit_tracked_general
        self.emit_many = self.emit_many_general
        self.routing: RoutingTable | None = None
        self.targets: dict[str, list[_Target]] = {}
        self.direct_targets: dict[str, list[tuple[str, list[_Buffer]]]] = {}
        self.buffers: dict[int, _Buffer] = {}
        self.ctl_buffers: dict[tuple[int, int], list[Any]] = {}  # (kind, dst) -> entries
        self.acks: dict[int, int] = {}  # root -> xor, flushed per batch
        # Load collection (paper Fig. 5): cumulative [tuples, wire bytes] per destination task,
        # counted per batch; the metrics thread turns them into per-interval deltas.
        self.traffic: dict[int, list[int]] = {}
        self._data_socks: dict[str, zmq.Socket] = {}
        self._ctl_socks: dict[str, zmq.Socket] = {}
        # Messages a worker's full pipe did not take (it is dead, restarting or cut off), in order,
        # per worker: later ones wait behind them. The executor retries them (drain_backlog) and
        # takes no new input meanwhile; they are dropped (the acker replays them) once the worker
        # leaves the plan or after topology.message.timeout.secs.
        self.backlog: dict[str, collections.deque[tuple[bytes, bytes, int]]] = {}
        self.backlog_since: dict[str, float] = {}
        self.give_up_secs = float(worker.conf.get("topology.message.timeout.secs") or 30)
        self.undelivered = 0  # tuples dropped from the backlog
        self.current: Any = None  # the tuple (or batch) being processed: what emits anchor to
        self.last_run: _Buffer | None = None  # the buffer whose run was opened last (see BoltExecutor)
        self.auto_anchor = True
        self.streams = set(definition["components"][component]["outputs"])

    # -- routing ------------------------------------------------------------------------
    def rebuild(self, routing: RoutingTable) -> None:
        """Compile the groupings against a new routing table.

        For every destination that changed place, what is buffered still goes to the
        old place, followed by a marker: the old copy of a moved executor knows it has
        everything from this executor once the marker arrives (per-pipe FIFO), and only
        then hands its state over. Tuples emitted from now on go to the new place.
        """
        old = self.routing
        if old is not None and old is not routing:
            for dst, buf in self.buffers.items():
                was = old.location[dst]
                if was and dst < len(routing.location) and routing.location[dst] != was:
                    if buf:
                        self.flush_buffer(buf)
                    self._send_marker(dst, was, old)
        self.routing = routing
        targets: dict[str, list[_Target]] = {s: [] for s in self.streams}
        direct: dict[str, list[tuple[str, list[_Buffer]]]] = {s: [] for s in self.streams}
        me = self.worker.worker_id
        for name, comp in self.definition["components"].items():
            for inp in comp["inputs"]:
                if inp["component"] != self.component:
                    continue
                tasks = list(routing.component_tasks.get(name, ()))
                grouping = inp["grouping"]
                stream = inp["stream"]
                if grouping == LOCAL_OR_SHUFFLE:
                    local = [t for t in tasks if routing.location[t] == me]
                    tasks = local or tasks
                bufs = [self._buffer(t) for t in tasks]
                if grouping == FIELDS:
                    out_fields = self.definition["components"][self.component]["outputs"][stream]
                    idx = [out_fields.index(f) for f in inp["fields"]]
                    target = _Target(_K_FIELD1, bufs, idx[0]) if len(idx) == 1 else _Target(_K_FIELDS, bufs, idx)
                elif grouping == ALL:
                    target = _Target(_K_ALL, bufs)
                elif grouping == GLOBAL:
                    target = _Target(_K_GLOBAL, bufs[:1])
                elif grouping == DIRECT:
                    direct[stream].append((name, bufs))
                    continue
                else:  # shuffle, none, local_or_shuffle
                    target = _Target(_K_SHUFFLE, bufs)
                targets[stream].append(target)
        self.targets = targets
        self.direct_targets = direct
        self.emit = self._make_plain_emit()
        self.emit_anchored = self._make_anchored_emit()
        self.emit_tracked = self._make_tracked_emit()
        self.emit_many = self._make_many_emit()

    def _buffer(self, dst: int) -> _Buffer:
        buf = self.buffers.get(dst)
        if buf is None:
            traffic = self.traffic.get(dst)
            if traffic is None:
                traffic = self.traffic[dst] = [0, 0]
            limit = self.policy.initial_limit()
            buf = self.buffers[dst] = _Buffer(dst, self.task, limit, self.clock(), traffic)
        return buf

    def _copies(self, values: Sequence[Any], stream: str) -> list[_Buffer]:
        """The destination buffers of one emit (one per receiving executor copy)."""
        try:
            targets = self.targets[stream]
        except KeyError:
            msg = f"{self.component} emits on undeclared stream {stream!r}"
            raise ValueError(msg) from None
        out = []
        for t in targets:
            k = t.kind
            if k == _K_FIELD1:
                out.append(t.bufs[hash(values[t.idx]) % t.n])
            elif k == _K_SHUFFLE:
                t.rr += 1
                out.append(t.bufs[t.rr % t.n])
            elif k == _K_FIELDS:
                out.append(t.bufs[hash(tuple([values[i] for i in t.idx])) % t.n])
            elif k == _K_ALL:
                out.extend(t.bufs)
            else:
                out.append(t.bufs[0])
        return out

    def open_run(self, buf: _Buffer, cur: Any) -> None:
        """Start a run in ``buf`` for tuples emitted under ``cur`` (its first tuple is appended
        already): one new edge per root of ``cur``, XORed into ``cur``'s children.

        If the run open in ``buf`` belongs to a tuple with the very same anchor entry (an
        earlier tuple of the same input run), ``cur`` joins it instead: the edge is already
        in that tuple's children, and the run is acked once, after all its tuples.
        """
        a = cur.anchors
        o = buf.owner
        if o is not None and o is not _UNANCHORED and a and o.anchors is a:
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

    def _put(self, buf: _Buffer, values: Sequence[Any], stream: str, anchor: Any) -> None:
        """Append one tuple to ``buf`` (any stream) with its own anchor entry (None: unanchored,
        which joins an open unanchored run); send the buffer if it is full."""
        if stream != "default":
            buf.note_stream(stream)
        buf.append(values)
        if self.acking:
            if anchor is None:
                if buf.owner is not _UNANCHORED:
                    buf.open(_UNANCHORED, None)
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
    def _fast_target(self) -> _Target | None:
        """The one default-stream subscriber if it is a fields (one field), shuffle or global one."""
        targets = self.targets.get("default") or []
        if len(targets) != 1 or targets[0].kind not in (_K_FIELD1, _K_SHUFFLE, _K_GLOBAL) or not targets[0].n:
            return None
        return targets[0]

    @staticmethod
    def _cycle(target: _Target) -> Any:
        bufs = target.bufs
        start = random.randrange(len(bufs))
        return itertools.cycle(bufs[start:] + bufs[:start]).__next__

    def emit_plain(self, values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
        """Unanchored emit, any grouping and stream (see :meth:`_make_plain_emit` for the fast path)."""
        for buf in self._copies(values, stream):
            self._put(buf, values, stream, None)

    def _make_plain_emit(self) -> Any:
        """An unanchored emit compiled for the current routing table (without acking)."""
        general = self.emit_plain
        target = self._fast_target()
        if target is None or self.acking:
            return general
        bufs, n, flush = target.bufs, target.n, self.flush_buffer
        if target.kind == _K_FIELD1 and n > 1:
            idx = target.idx

            def emit_fields(values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
                if stream != "default":
                    return general(values, stream)
                buf = bufs[hash(values[idx]) % n]
                buf.append(values)
                if len(buf) >= buf.limit:
                    flush(buf)
                return None

            return emit_fields
        nxt = self._cycle(target)

        def emit_cycle(values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
            if stream != "default":
                return general(values, stream)
            buf = nxt()
            buf.append(values)
            if len(buf) >= buf.limit:
                flush(buf)
            return None

        return emit_cycle

    def _make_anchored_emit(self) -> Any:
        """A bolt's anchored emit compiled for the current routing table.

        The common case (default stream, one fields/shuffle/global subscriber, anchored to
        the current tuple) costs an append, an identity check and an increment while the
        current tuple's run in that buffer is open; the rest goes through
        :meth:`emit_anchored_general`.
        """
        general = self.emit_anchored_general
        target = self._fast_target()
        if target is None or not self.auto_anchor or not self.acking:
            return general
        bufs, n, flush = target.bufs, target.n, self.flush_buffer
        outbox = self
        open_run = self.open_run
        if target.kind == _K_FIELD1 and n > 1:
            idx = target.idx

            def emit_fields(values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
                cur = outbox.current
                if stream != "default" or anchors is not None or cur is None:
                    return general(values, stream, anchors)
                buf = bufs[hash(values[idx]) % n]
                buf.append(values)
                if buf.owner is not cur:
                    open_run(buf, cur)
                if len(buf) >= buf.limit:
                    flush(buf)
                return None

            return emit_fields
        nxt = self._cycle(target)

        def emit_cycle(values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
            cur = outbox.current
            if stream != "default" or anchors is not None or cur is None:
                return general(values, stream, anchors)
            buf = nxt()
            buf.append(values)
            if buf.owner is not cur:
                open_run(buf, cur)
            if len(buf) >= buf.limit:
                flush(buf)
            return None

        return emit_cycle

    def emit_many_general(self, values_list: Iterable[Sequence[Any]], stream: str = "default",
                          anchors: Any = None) -> None:
        """A bolt's ``emit_many``: each tuple as its ``emit`` would (anchored with acking on)."""
        emit = self.emit_anchored if self.acking else self.emit
        for values in values_list:
            emit(values, stream, anchors)

    def _make_many_emit(self) -> Any:
        """A bolt's ``emit_many`` compiled for the current routing table: the compiled emit's
        work per tuple in one loop, without a call per tuple."""
        general = self.emit_many_general
        target = self._fast_target()
        if target is None or (self.acking and not self.auto_anchor):
            return general
        bufs, n, flush = target.bufs, target.n, self.flush_buffer
        idx = target.idx
        nxt = None if target.kind == _K_FIELD1 and n > 1 else self._cycle(target)
        if not self.acking:
            def emit_many_plain(values_list: Iterable[Sequence[Any]], stream: str = "default",
                                anchors: Any = None) -> None:
                if stream != "default":
                    return general(values_list, stream, anchors)
                for values in values_list:
                    buf = bufs[hash(values[idx]) % n] if nxt is None else nxt()
                    buf.append(values)
                    if len(buf) >= buf.limit:
                        flush(buf)
                return None

            return emit_many_plain
        outbox = self
        open_run = self.open_run

        def emit_many_anchored(values_list: Iterable[Sequence[Any]], stream: str = "default",
                               anchors: Any = None) -> None:
            cur = outbox.current
            if stream != "default" or anchors is not None or cur is None:
                return general(values_list, stream, anchors)
            for values in values_list:
                buf = bufs[hash(values[idx]) % n] if nxt is None else nxt()
                buf.append(values)
                if buf.owner is not cur:
                    open_run(buf, cur)
                if len(buf) >= buf.limit:
                    flush(buf)
            return None

        return emit_many_anchored

    def emit_anchored_general(self, values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
        """A bolt's emit, anchored to the current tuple (or batch), or to ``anchors``."""
        if anchors is None:
            cur = self.current if self.auto_anchor else None
            anchor_tups: Sequence[Any] = (cur,) if cur is not None and cur.anchors else ()
        else:
            anchor_tups = [a for a in anchors if a.anchors]
        if not anchor_tups:
            self.emit_plain(values, stream)
            return
        for buf in self._copies(values, stream):
            self._put(buf, values, stream, _anchor_entry(anchor_tups))

    def emit_tracked_general(self, values: Sequence[Any], stream: str, group: SpoutGroup) -> int:
        """A spout's tracked emit, any grouping and stream: returns how many copies were
        buffered (0: nobody subscribes). Each copy joins ``group``'s run in its buffer."""
        bufs = self._copies(values, stream)
        for buf in bufs:
            self._put_grouped(buf, values, stream, group)
        return len(bufs)

    def _put_grouped(self, buf: _Buffer, values: Sequence[Any], stream: str, group: SpoutGroup) -> None:
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

    def open_group_run(self, buf: _Buffer, group: SpoutGroup) -> None:
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

    def _make_tracked_emit(self) -> Any:
        """A spout's tracked emit compiled for the current routing table: while the group's
        run in the chosen buffer is open, an append, an identity check and an increment."""
        general = self.emit_tracked_general
        target = self._fast_target()
        if target is None or not self.acking:
            return general
        bufs, n = target.bufs, target.n
        fields = target.kind == _K_FIELD1 and n > 1
        idx = target.idx
        nxt = self._cycle(target)
        open_group_run = self.open_group_run

        def emit_tracked(values: Sequence[Any], stream: str, group: SpoutGroup) -> int:
            if stream != "default":
                return general(values, stream, group)
            buf = bufs[hash(values[idx]) % n] if fields else nxt()
            buf.append(values)
            if buf.owner is not group:
                open_group_run(buf, group)
            return 1

        return emit_tracked

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default", anchors: Any = None,
                    **_: Any) -> None:
        """Send to executor ``task`` (index within each direct-subscribing component); anchored
        like :meth:`emit_anchored_general` (to the current tuple, or to ``anchors``)."""
        direct = self.direct_targets.get(stream)
        if direct is None:
            msg = f"{self.component} emits on undeclared stream {stream!r}"
            raise ValueError(msg)
        anchor_tups: Sequence[Any] = ()
        if self.acking:
            if anchors is not None:
                anchor_tups = [a for a in anchors if a.anchors]
            elif self.auto_anchor:
                cur = self.current
                anchor_tups = (cur,) if cur is not None and cur.anchors else ()
        for name, bufs in direct:
            if not 0 <= task < len(bufs):
                msg = f"emit_direct to task {task} of {name!r}, which has {len(bufs)} executors"
                raise ValueError(msg)
            self._put(bufs[task], values, stream, _anchor_entry(anchor_tups) if anchor_tups else None)

    def emit_direct_tracked(self, task: int, values: Sequence[Any], stream: str, group: SpoutGroup) -> int:
        """A spout's tracked direct emit: returns how many copies were buffered."""
        direct = self.direct_targets.get(stream)
        if direct is None:
            msg = f"{self.component} emits on undeclared stream {stream!r}"
            raise ValueError(msg)
        for name, bufs in direct:
            if not 0 <= task < len(bufs):
                msg = f"emit_direct to task {task} of {name!r}, which has {len(bufs)} executors"
                raise ValueError(msg)
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
        x = tup._ackval
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
            self.control(wire.FAIL, self.acker_for(r), r)

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
    def holding(self) -> bool:
        """True if some data buffer holds tuples (the executor's deadline must then be armed)."""
        return any(self.buffers.values())

    def flush(self) -> None:
        """Send every non-empty buffer, then the acks and other control entries."""
        self.deadline.flushed()
        for buf in self.buffers.values():
            if buf:
                self.flush_buffer(buf)
        self.flush_control()

    def flush_control(self) -> None:
        """Send the acks and other control entries (not the data buffers)."""
        self.ctl_deadline.flushed()
        if self.acks:
            acks = self.acks
            self.acks = {}
            ackers = self.routing.ackers  # type: ignore[union-attr]
            n = len(ackers)
            for r, x in acks.items():
                self.control(wire.ACK, ackers[acker_index(r, n)], (r, x))
        if self.ctl_buffers:
            ctl = self.ctl_buffers
            self.ctl_buffers = {}
            for (kind, dst), entries in ctl.items():
                self._send_control(kind, dst, entries)

    def flush_buffer(self, buf: _Buffer) -> None:
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
        n = len(values)
        self.emitted += n
        self.batches += 1
        policy = self.policy
        if policy.adaptive:
            policy.observe(buf, n, self.clock())
        traffic = buf.traffic
        traffic[0] += n
        dst = buf.dst
        routing = self.routing
        wid = routing.location[dst]  # type: ignore[union-attr]
        local = self.worker.local_target(dst, wid)
        if local is not None:
            local.in_size = n
            local.data_q.put((self.task, (values, runs, streams)))
            return
        payload = wire.pack((values, runs, streams))
        traffic[1] += len(payload)
        header = wire.data_header(dst, self.task, 0, n)
        if self.backlog and wid in self.backlog:
            self.backlog[wid].append((header, payload, n))  # behind what waits for that worker
            return
        sock = self._data_socks.get(wid)
        if sock is None:
            sock = self._data_socks[wid] = self.worker.transport.data_socket(routing.endpoints[wid])  # type: ignore[union-attr]
        if not try_send_frames(sock, header, payload):
            self._hold(wid, header, payload, n)

    def _send_marker(self, dst: int, wid: str, routing: RoutingTable) -> None:
        local = self.worker.local_queue(dst, wid)
        if local is not None:
            local.put((self.task, None))
            return
        endpoint = routing.endpoints.get(wid)
        if endpoint is None:
            return
        header = wire.marker_header(dst, self.task)
        if self.backlog and wid in self.backlog:
            self.backlog[wid].append((header, b"", 0))
            return
        sock = self._data_socks.get(wid)
        if sock is None:
            sock = self._data_socks[wid] = self.worker.transport.data_socket(endpoint)  # type: ignore[union-attr]
        if not try_send_frames(sock, header, b""):
            self._hold(wid, header, b"", 0)

    # -- messages a peer did not take ------------------------------------------------------
    def _hold(self, wid: str, header: bytes, payload: bytes, n: int) -> None:
        """Keep a message ``wid``'s full pipe refused; the executor retries it (drain_backlog)."""
        self.backlog[wid] = collections.deque([(header, payload, n)])
        self.backlog_since[wid] = self.clock()
        log.info("task %d: worker %s takes no more data (full pipe): holding its messages", self.task, wid)

    def drain_backlog(self) -> bool:
        """Send what waits in the backlog as far as the peers take it, without blocking;
        True when nothing waits any more. Messages for a worker that left the plan, or that
        has taken nothing for ``topology.message.timeout.secs``, are dropped: their tuples
        time out at their spouts and are replayed."""
        now = self.clock()
        routing = self.routing
        for wid, waiting in list(self.backlog.items()):
            sock = self._data_socks.get(wid)
            gone = sock is None or routing is None or wid not in routing.endpoints
            while waiting and not gone:
                header, payload, _n = waiting[0]
                if not try_send_frames(sock, header, payload):  # type: ignore[arg-type]
                    break
                waiting.popleft()
                self.backlog_since[wid] = now
            if waiting and (gone or now - self.backlog_since[wid] > self.give_up_secs):
                dropped = sum(n for _h, _p, n in waiting)
                self.undelivered += dropped
                log.warning("task %d: %d tuples for worker %s dropped (%s); their spouts replay them", self.task,
                            dropped, wid, "it left the plan" if gone else f"it took nothing for {self.give_up_secs:.0f}s")
                waiting.clear()
            if not waiting:
                del self.backlog[wid]
                self.backlog_since.pop(wid, None)
        return not self.backlog

    def send_control_to(self, wid: str, kind: int, dst: int, entries: Any) -> None:
        """A control message to ``dst`` at worker ``wid``, whatever the routing table says."""
        local = self.worker.local_control(dst, wid)
        if local is not None:
            local.put((kind, self.task, entries))
            return
        endpoint = self.routing.endpoints.get(wid)  # type: ignore[union-attr]
        if endpoint is None:
            return
        sock = self._ctl_socks.get(wid)
        if sock is None:
            sock = self._ctl_socks[wid] = self.worker.transport.control_socket(endpoint)  # type: ignore[union-attr]
        sock.send(wire.control_message(kind, dst, self.task, entries))

    def _send_control(self, kind: int, dst: int, entries: Any) -> None:
        self.control_messages += 1
        routing = self.routing
        wid = routing.location[dst]  # type: ignore[union-attr]
        local = self.worker.local_control(dst, wid)
        if local is not None:
            local.put((kind, self.task, entries))
            return
        sock = self._ctl_socks.get(wid)
        if sock is None:
            sock = self._ctl_socks[wid] = self.worker.transport.control_socket(routing.endpoints[wid])  # type: ignore[union-attr]
        sock.send(wire.control_message(kind, dst, self.task, entries))

    def close(self) -> None:
        """Close the sockets, after trying for a moment to send what waits in the backlog."""
        deadline = self.clock() + _CLOSE_DRAIN_SECS
        while self.backlog and not self.drain_backlog() and self.clock() < deadline:
            time.sleep(0.01)
        if self.backlog:
            self.give_up_secs = 0.0
            self.drain_backlog()
        for sock in [*self._data_socks.values(), *self._ctl_socks.values()]:
            sock.close(linger=1000)
        self._data_socks.clear()
        self._ctl_socks.clear()
