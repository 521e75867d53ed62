"""The records an outbox builds tuples into: buffers, their anchor runs, and what owns a run.

A :class:`Buffer` is what waits for one destination task: a list of values in emit order,
with (when acking) its anchors as *runs* (see :mod:`worker.wire`). A run is owned by what its
tuples were emitted under: an :class:`InputRun` (the tuples of a bolt's input batch that share
one anchor entry), a tuple, a :class:`BatchLedger` (a batch given to ``process_batch``), a
:class:`SpoutGroup` (tracked tuples of a spout sharing one tree), or :data:`UNANCHORED`. :class:`Target` is one subscribing component of a stream,
compiled for the current routing table. All of it lives in the owning executor's thread.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from worker import wire

__all__ = ["K_ALL", "K_DIRECT", "K_FIELD1", "K_FIELDS", "K_GLOBAL", "K_SHUFFLE", "UNANCHORED", "BatchLedger", "Buffer",
           "InputRun", "SpoutGroup", "Target", "anchor_entry"]

_getrandbits = random.Random().getrandbits  # edge ids: fast, not for secrets

# grouping kinds, compiled
K_SHUFFLE, K_FIELD1, K_FIELDS, K_ALL, K_GLOBAL, K_DIRECT = range(6)


class Unanchored:
    """The owner of an open run of unanchored tuples (acking on, nothing to anchor to)."""


UNANCHORED = Unanchored()


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
        self.bufs: list[Buffer] = []  # where runs were opened (full ones are flushed on close)
        self.last: list[int] | None = None  # the last run's anchor [root, edge]
        self.last_buf: Buffer | None = None
        self.last_sent = 0  # last_buf.sent when that run opened


class Buffer(list):
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
                 "sent", "trace")

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
        self.trace: Any = None  # a latency constraint's trace that leaves with this batch (worker.qos)

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


def anchor_entry(anchor_tups: Sequence[Any]) -> list[int]:
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


class Target:
    """One subscribing component of a stream, compiled for the current routing table."""

    __slots__ = ("kind", "bufs", "n", "idx", "rr", "tasks")

    def __init__(self, kind: int, bufs: list[Buffer], idx: Any = None) -> None:
        self.kind = kind
        self.bufs = bufs
        self.n = len(bufs)
        self.idx = idx
        self.rr = random.randrange(max(1, self.n))


class BatchLedger:
    """The acker's bookkeeping of one input batch given to ``process_batch`` (acking on).

    It owns the anchors as they came (``runs``) or one entry per tuple (``per``, a batch cut
    out of a larger one); the tuples iteration handed out (``made``: their children's XOR is
    acked with them); and, as the owner of what emits outside the batch's loop are anchored
    to, ``anchors`` (every root of the batch) and ``_ackval`` (the XOR of those children's edges).
    """

    __slots__ = ("outbox", "runs", "per", "made", "_ackval", "_anchors")

    def __init__(self, outbox: Any, runs: Any = None, per: Any = None) -> None:
        self.outbox = outbox
        self.runs = runs
        self.per = per
        self.made: list[Any] = []  # the Tuples iteration handed out
        self._ackval = 0
        self._anchors: Any = False  # not computed yet

    def per_tuple(self, n: int) -> Any:
        """One anchor entry per tuple (computed once), or None if nothing is anchored."""
        if self.per is None and self.runs is not None:
            self.per = wire.expand_runs(self.runs, n)
        return self.per

    @property
    def anchors(self) -> list[Any] | None:
        """Every distinct root as ``[root, 0, root, 0, ...]`` (None if nothing is anchored)."""
        if self._anchors is False:
            seen: dict[Any, None] = {}
            for a in (self.runs[1::2] if self.runs is not None else self.per) or ():
                if a:
                    for i in range(0, len(a), 2):
                        seen[a[i]] = None
            out: list[Any] = []
            for r in seen:
                out.append(r)
                out.append(0)
            self._anchors = out or None
        return self._anchors  # type: ignore[no-any-return]
