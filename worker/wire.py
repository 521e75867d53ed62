"""The wire format between workers: msgpack only, never pickle.

Data messages are two zmq frames, ``[header, payload]``: the header
``[DATA, dst_task, src_task, hops, count]`` is tiny so that a receiver can route (or
forward) a batch, and know how many tuples it holds, without decoding it. The payload is one batch in columns (one msgpack
array per batch, not one map or array per tuple, which is three times cheaper to
pack and unpack):

    [values, runs, streams]

- ``values``: the tuples' values, one array per tuple, in emit order;
- ``runs``: nil (no tuple of the batch is anchored) or the anchors as runs, a flat
  array ``[n, anchor, n, anchor, ...]``: the next ``n`` tuples share ``anchor``, nil
  (unanchored) or a flat ``[root, edge, root, edge, ...]`` array for the acker; the
  ``n`` add up to the number of values. A run is one node of its tuple trees: the
  sender XORed its edge into the parent once, the receiver acks the run once all of
  its tuples are acked (:class:`AckRun`) and fails it if any fails. A bolt's run is
  what one input tuple emitted in a row to one destination, so the ten words of a
  sentence that go to one counter cost one edge id, not ten;
- ``streams``: nil (every tuple is on the ``default`` stream) or a map
  ``{index: stream}`` naming the stream of each tuple that is not.

Batches between executors of one worker are the same three columns as Python
objects on the destination's queue (no serialisation).

Control messages (acker traffic, backpressure, and the hand-over of a moved executor) are one frame
``[kind, dst_task, src_task, entries]`` on the worker's separate control port,
whose receiver never blocks, so acks cannot deadlock behind backpressured data.

Root ids (the acker's key for one spout tuple's tree) carry the emitting spout's task
in their low :data:`ROOT_TASK_BITS` bits and pick their acker with the bits above
(:func:`acker_index`). Knowing the spout from the root is what lets a spout skip
Storm's "ack init" message: it gives the copies of a spout tuple edge ids whose XOR is
zero (a single copy gets edge 0), so the acker's value for a root starts at zero
without being told, and an acker entry that returns to zero is a complete tree.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from itertools import chain
from typing import Any

import msgpack
import msgspec

from nstorm.state import keyed

__all__ = [
    "ACKED",
    "BACKPRESSURE",
    "MARKER",
    "READY",
    "MAX_HOPS",
    "STATE",
    "ACK",
    "AckRun",
    "ROOT_TASK_BITS",
    "acker_index",
    "control_entries_ok",
    "control_entries_plausible",
    "root_task",
    "DATA",
    "FAIL",
    "FAILED",
    "GONE",
    "BARRIER",
    "CHECKPOINT",
    "COMMITTED",
    "GROUPS",
    "SHIFT_MARK",
    "SHIFT_READY",
    "SEAL",
    "SEALED",
    "Seal",
    "ShiftMark",
    "barrier_header",
    "control_message",
    "data_header",
    "decode_batch",
    "expand_runs",
    "pack",
    "batch_encoder",
    "pack_batch",
    "seal_header",
    "shift_mark_header",
    "unpack",
]

DATA = 0
# 1 was ACK_INIT (spout -> acker): not needed, see the module docstring
ACK = 2  # entries: [[root, xor], ...]                     bolt -> acker
FAIL = 3  # entries: [root, ...]                           bolt -> acker
ACKED = 4  # entries: [root, ...]                          acker -> spout
FAILED = 5  # entries: [root, ...]                         acker -> spout
BACKPRESSURE = 6  # entries: [worker_id, congested]        worker -> worker (dst -1)
STATE = 7  # entries: {"state": msgpack bytes, "sent_at", "from"}   old copy -> new copy
MARKER = 8  # data-channel header kind: "src sends no more to this location of dst"
READY = 9  # entries: {"worker": id}                      new copy -> old copy: "set up, send the state"
GONE = 10  # entries: {"worker": id}                      old place -> new copy: "no copy here: nothing comes"
BARRIER = 11  # data-channel header kind: checkpoint ``cid``'s barrier (worker.checkpoint)
CHECKPOINT = 12  # entries: cid                           worker -> its spout executors: "take checkpoint cid"
COMMITTED = 13  # entries: cid                            worker -> its user executors: "cid is committed"
SHIFT_MARK = 14  # data-channel header kind: src routes a rescaled component by its new layout (worker.rescale)
GROUPS = 15  # entries: {"version", "groups", "entries", "more"?}  old owner -> new owner: key groups handed over
SHIFT_READY = 16  # entries: version                     new layout's executor -> upstream: "I hold; switch"
# 17 (WAKE, a chained guest's host armed its deadline) is no longer sent: the host keeps it (tend_guests)
STATE_PART = 18  # entries: {"id", "seq", "parts", "data": bytes}  old copy -> new copy: a part of a STATE too large for one
SEAL = 19  # data-channel header kind, payload the old copy's worker id: "that copy of src sends you nothing more"
SEALED = 20  # entries: the answering task                 downstream -> a moved executor's old copy: "SEAL taken"
ACKER_TABLE = 21  # entries: [[root, xor], ...]             a moved acker's old copy -> its new one: the open trees
MAX_HOPS = 16  # a data frame forwarded more often than this is dropped (the acker replays it)
MAX_TASKS = 1 << 16  # task ids fit the low 16 bits of a root (nstorm.topology.MAX_TASKS)

MAX_FRAME_BYTES = 64 * 2**20  # larger frames are refused by the receiving socket
STATE_PART_BYTES = 16 * 2**20  # a handed-over state (STATE_PART) or key group (GROUPS "more") goes in parts of this size

ROOT_TASK_BITS = 16  # a root's low bits: the task of the spout that emitted it
_ROOT_TASK_MASK = (1 << ROOT_TASK_BITS) - 1


def root_task(root: int) -> int:
    """The task of the spout executor that emitted the tree of ``root``."""
    return root & _ROOT_TASK_MASK


def acker_index(root: int, ackers: int) -> int:
    """Which of ``ackers`` acker executors keeps the tree of ``root`` (random bits, so even)."""
    return (root >> ROOT_TASK_BITS) % ackers


def pack(obj: Any) -> bytes:
    """msgpack-encode (bin type on) with a shared packer."""
    return msgpack.packb(obj, use_bin_type=True)


def batch_encoder() -> Callable[[Any], bytes]:
    """A data batch ``(values, runs, streams)`` encoder for one thread: msgspec's msgpack encoder,
    which writes the same bytes as :func:`pack` for everything msgpack encodes, four times as
    fast (1.6 against 7.2 µs a batch of 100 words). An encoder reuses one output buffer between
    calls, so each :class:`~worker.delivery.Courier` (one thread's sends) has its own.

    It also encodes what msgpack refuses (sets as arrays, datetimes as msgpack timestamps,
    dataclasses as maps): values cross a process as msgpack, so arrays of any kind arrive as
    tuples. State and control messages keep :func:`pack`, which refuses those."""
    return msgspec.msgpack.Encoder().encode


def pack_batch(batch: Any) -> bytes:
    """:func:`batch_encoder`'s bytes from any thread (a new encoder state each call: for tests and
    one-off sends, not the tuple path)."""
    return msgspec.msgpack.encode(batch)


def unpack(data: bytes) -> Any:
    """msgpack-decode into tuples (faster than lists); raises on garbage."""
    return msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)


class AckRun(list):
    """The anchor entry ``[root, edge, ...]`` shared by the tuples of one run, with how many
    of them are still to be acked and the XOR of the children of those acked so far: all of
    it goes to the acker with the last one. (Sent earlier, the children of the first tuples
    could cancel with their own acks while the run's edge is still unseen: a spout group's
    single run has edge 0, so the tree would look complete.)"""

    __slots__ = ("left", "x")

    def __init__(self, anchor: Any, n: int) -> None:
        super().__init__(anchor)
        self.left = n
        self.x = 0


def expand_runs(runs: Any, n: int) -> list[Any]:
    """One anchor entry per tuple for a batch of ``n`` tuples (runs of several tuples share an
    :class:`AckRun`); ``[None] * n`` for nil runs."""
    if runs is None:
        return [None] * n
    out: list[Any] = []
    for k in range(0, len(runs), 2):
        count, anchor = runs[k], runs[k + 1]
        if count > 1 and anchor:
            anchor = AckRun(anchor, count)
        out.extend([anchor] * count)
    return out


def _u64_arrays(arrays: Any) -> bool:
    """Whether every element of every array is an int of 64 bits (roots, edges, XORs): checked in
    ``array``'s C loop, a few ns an element, as they come off the network on the tuple path."""
    try:
        array("Q", chain.from_iterable(arrays))
    except (TypeError, OverflowError):
        return False
    return True


def decode_batch(batch: Any) -> tuple[Any, Any, Any]:
    """``(values, runs, streams)`` of a batch: decoded if it came as bytes, shape checked.

    :raises ValueError: for anything that is not a batch (garbage from the network).
    """
    if type(batch) is bytes:
        batch = unpack(batch)
    try:
        values, runs, streams = batch
    except (TypeError, ValueError):
        msg = "a data batch must be [values, runs, streams]"
        raise ValueError(msg) from None
    if not isinstance(values, (list, tuple)):
        msg = "batch values must be an array"
        raise ValueError(msg)
    if runs is not None:
        if not isinstance(runs, (list, tuple)) or len(runs) % 2:
            msg = "batch runs must be nil or [n, anchor, ...]"
            raise ValueError(msg)
        counts = runs[0::2]
        if set(map(type, counts)) - {int} or (counts and min(counts) < 1) or sum(counts) != len(values):
            msg = "batch runs must count every tuple once"
            raise ValueError(msg)
        anchors = runs[1::2]
        if set(map(type, anchors)) - {tuple, list, type(None)}:
            msg = "a run's anchor must be nil or [root, edge, ...]"
            raise ValueError(msg)
        # An anchor's contents are not checked here (two passes over every root and edge cost 3% of
        # word count's words/s): what is not integer pairs raises where the batch is taken (the rest
        # of it is dropped) or is dropped where its ack leaves (Outbox.flush_control, garbage_acks).
        # Workers only send integer pairs; CurveZMQ keeps others out.
    if streams is not None and not isinstance(streams, dict):
        msg = "batch streams must be nil or a map"
        raise ValueError(msg)
    return values, runs, streams


_ROOT_LISTS = frozenset((FAIL, ACKED, FAILED))
_ACK_KINDS = frozenset((ACK, FAIL, ACKED, FAILED, ACKER_TABLE))
_INT_ENTRIES = frozenset((CHECKPOINT, COMMITTED, SHIFT_READY, SEALED))
_MAP_ENTRIES = frozenset((STATE, READY, GONE, GROUPS, STATE_PART))


def control_entries_ok(kind: int, entries: Any) -> bool:
    """Whether a control message has the shape its handler takes (decoded with arrays as
    tuples): ACK and ACKER_TABLE ``[[root, xor], ...]``; FAIL, ACKED, FAILED ``[root, ...]``; ids as ints; the
    hand-over messages as maps. The transport checks the rare kinds with it; the acker and the
    spouts, which take the frequent ones, catch what raises and ask it then (no cost per ack)."""
    if kind == ACK or kind == ACKER_TABLE:
        return (type(entries) is tuple and not set(map(type, entries)) - {tuple}
                and not set(map(len, entries)) - {2} and _u64_arrays(entries))
    if kind in _ROOT_LISTS:
        return type(entries) is tuple and _u64_arrays((entries,))
    if kind in _INT_ENTRIES:
        return type(entries) is int
    return kind in _MAP_ENTRIES and type(entries) is dict


def control_entries_plausible(kind: int, entries: Any) -> bool:
    """The transport's check of a control message from the network: the whole shape for the rare
    kinds, only an array for the acks (see :func:`control_entries_ok`)."""
    if kind in _ACK_KINDS:
        return type(entries) is tuple
    return control_entries_ok(kind, entries)


def run_around(runs: Any, index: int, n: int) -> tuple[int, int]:
    """The bounds ``(lo, hi)`` of the run that holds tuple ``index`` of a batch of ``n`` (with no
    runs, that tuple alone): a batch is cut only between runs, whose tuples share one anchor
    entry and are acked together."""
    index = min(max(0, index), max(0, n - 1))
    if runs is None:
        return index, min(n, index + 1)
    lo = 0
    for k in range(0, len(runs), 2):
        hi = lo + runs[k]
        if index < hi:
            return lo, hi
        lo = hi
    return lo, n


def slice_batch(values: Any, runs: Any, streams: Any, lo: int, hi: int) -> tuple[Any, Any, Any]:
    """Tuples ``lo:hi`` of a batch as a batch of their own; ``lo`` and ``hi`` are run bounds."""
    if runs is not None:
        part = []
        at = 0
        for k in range(0, len(runs), 2):
            if lo <= at < hi:
                part += (runs[k], runs[k + 1])
            at += runs[k]
        runs = part
    if streams:
        streams = {i - lo: s for i, s in streams.items() if lo <= i < hi} or None
    return values[lo:hi], runs, streams


def data_header(dst: int, src: int, hops: int = 0, count: int = 0, epoch: int = 0, trace: Any = None) -> bytes:
    """``[DATA, dst, src, hops, count, epoch]``: ``count`` tuples in the payload (for
    backpressure); ``epoch``: the rollbacks the sender had taken (older frames are dropped);
    ``trace``: a latency constraint's ``[buffered_us, sent_us, [[constraint, origin_us], ...], ahead, n]``
    as a seventh element (worker.qos), on a sampled batch only."""
    if trace is None:
        return pack((DATA, dst, src, hops, count, epoch))
    return pack((DATA, dst, src, hops, count, epoch, trace))


def marker_header(dst: int, src: int, epoch: int = 0) -> bytes:
    return pack((MARKER, dst, src, 0, 0, epoch))


def barrier_header(dst: int, src: int, cid: int, epoch: int = 0, hops: int = 0) -> bytes:
    """``[BARRIER, dst, src, hops, cid, epoch]``: checkpoint ``cid``'s barrier, behind what ``src`` sent."""
    return pack((BARRIER, dst, src, hops, cid, epoch))


class ShiftMark:
    """A rescale's marker on an executor's data queue: the sender now routes the component by
    the layout of rescale ``version`` (worker.rescale). Its own type, so the bolt loop tells it
    from a batch, a move's marker (None) and a checkpoint's barrier (an int) by one ``type``."""

    __slots__ = ("version",)

    def __init__(self, version: int) -> None:
        self.version = version

    def __repr__(self) -> str:
        return f"ShiftMark({self.version})"


def shift_mark_header(dst: int, src: int, version: int, epoch: int = 0, hops: int = 0) -> bytes:
    """``[SHIFT_MARK, dst, src, hops, version, epoch]``: behind what ``src`` sent ``dst`` before."""
    return pack((SHIFT_MARK, dst, src, hops, version, epoch))


class Seal:
    """A moved executor's old copy's last item to a downstream task of another worker, behind
    everything it sent there (worker.migration: with checkpoints on, its new copy may send
    nothing, not even a barrier, until every such task has taken its seal). ``worker``: where
    the old copy waits for the answer (SEALED)."""

    __slots__ = ("worker",)

    def __init__(self, worker: str) -> None:
        self.worker = worker

    def __repr__(self) -> str:
        return f"Seal({self.worker!r})"


def seal_header(dst: int, src: int, epoch: int = 0, hops: int = 0) -> bytes:
    """``[SEAL, dst, src, hops, 0, epoch]``; the payload is the old copy's worker id (UTF-8)."""
    return pack((SEAL, dst, src, hops, 0, epoch))


def unpack_state(data: bytes) -> Any:
    """Decode a handed-over state: lists stay lists, so user code can keep mutating them, and
    tuple keys of maps are tuples again (:func:`nstorm.state.keyed.unpack_state`)."""
    return keyed.unpack_state(data)


def control_message(kind: int, dst: int, src: int, entries: list[Any]) -> bytes:
    return pack((kind, dst, src, entries))
