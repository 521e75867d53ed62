"""The wire format between workers: msgpack only, never pickle.

Data messages are two zmq frames, ``[header, payload]``: the header
``[DATA, dst_task, src_task, hops, count]`` is tiny so that a receiver can route (or
forward) a batch, and know how many tuples it holds, without decoding it. The payload is one batch in columns (one msgpack
array per batch, not one map or array per tuple, which is three times cheaper to
pack and unpack):

    [values, anchors, streams]

- ``values``: the tuples' values, one array per tuple, in emit order;
- ``anchors``: nil (no tuple of the batch is anchored) or one entry per tuple: nil
  or a flat ``[root, edge, root, edge, ...]`` array for the acker;
- ``streams``: nil (every tuple is on the ``default`` stream) or a map
  ``{index: stream}`` naming the stream of each tuple that is not.

Batches between executors of one worker are the same three columns as Python
objects on the destination's queue (no serialisation).

Control messages (acker traffic, and later migration hand-over) are one frame
``[kind, dst_task, src_task, entries]`` on the worker's separate control port,
whose receiver never blocks, so acks cannot deadlock behind backpressured data.
"""

from __future__ import annotations

from typing import Any

import msgpack

__all__ = [
    "ACKED",
    "BACKPRESSURE",
    "MARKER",
    "READY",
    "MAX_HOPS",
    "STATE",
    "ACK",
    "ACK_INIT",
    "DATA",
    "FAIL",
    "FAILED",
    "control_message",
    "data_header",
    "decode_batch",
    "pack",
    "unpack",
]

DATA = 0
ACK_INIT = 1  # entries: [[root, xor, spout_task], ...]   spout -> acker
ACK = 2  # entries: [[root, xor], ...]                     bolt -> acker
FAIL = 3  # entries: [root, ...]                           bolt -> acker
ACKED = 4  # entries: [root, ...]                          acker -> spout
FAILED = 5  # entries: [root, ...]                         acker -> spout
BACKPRESSURE = 6  # entries: [worker_id, congested]        worker -> worker (dst -1)
STATE = 7  # entries: {"state": msgpack bytes, "sent_at", "from"}   old copy -> new copy
MARKER = 8  # data-channel header kind: "src sends no more to this location of dst"
READY = 9  # entries: {}                                  new copy -> old copy: "set up, send the state"
MAX_HOPS = 16  # a data frame forwarded more often than this is dropped (the acker replays it)

MAX_FRAME_BYTES = 64 * 2**20  # larger frames are refused by the receiving socket


def pack(obj: Any) -> bytes:
    """msgpack-encode (bin type on) with a shared packer."""
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes) -> Any:
    """msgpack-decode into tuples (faster than lists); raises on garbage."""
    return msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)


def decode_batch(batch: Any) -> tuple[Any, Any, Any]:
    """``(values, anchors, streams)`` of a batch: decoded if it came as bytes, shape checked.

    :raises ValueError: for anything that is not a batch (garbage from the network).
    """
    if type(batch) is bytes:
        batch = unpack(batch)
    try:
        values, anchors, streams = batch
    except (TypeError, ValueError):
        msg = "a data batch must be [values, anchors, streams]"
        raise ValueError(msg) from None
    if not isinstance(values, (list, tuple)):
        msg = "batch values must be an array"
        raise ValueError(msg)
    if anchors is not None and (not isinstance(anchors, (list, tuple)) or len(anchors) != len(values)):
        msg = "batch anchors must be nil or one entry per tuple"
        raise ValueError(msg)
    if streams is not None and not isinstance(streams, dict):
        msg = "batch streams must be nil or a map"
        raise ValueError(msg)
    return values, anchors, streams


def data_header(dst: int, src: int, hops: int = 0, count: int = 0) -> bytes:
    """``[DATA, dst, src, hops, count]``: ``count`` tuples in the payload (for backpressure)."""
    return pack((DATA, dst, src, hops, count))


def marker_header(dst: int, src: int) -> bytes:
    return pack((MARKER, dst, src))


def unpack_state(data: bytes) -> Any:
    """Decode a handed-over state: lists stay lists, so user code can keep mutating them."""
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)


def control_message(kind: int, dst: int, src: int, entries: list[Any]) -> bytes:
    return pack((kind, dst, src, entries))
