"""The outbox's compiled emits: an emit per routing table, for the common case of each kind.

The common case is one subscriber on the default stream with a fields (one field), shuffle or
global grouping: there an emit picks a buffer with one hash or one ``next`` of a cycle,
appends, and compares the buffer's length with its limit (with acking, an identity check
keeps the current run open); everything else goes the general way
(:meth:`~worker.outbox.Outbox.emit_plain` and its siblings). Built again by
:meth:`Outbox.rebuild <worker.outbox.Outbox.rebuild>` whenever the routing table changes.
This is the per-tuple hot path: every line counts.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from worker.runs import K_FIELD1, K_GLOBAL, K_SHUFFLE, Buffer, SpoutGroup, Target

__all__ = ["Emitting", "compile_anchored_emit", "compile_many_emit", "compile_plain_emit", "compile_tracked_emit",
           "cycle", "fast_target", "single"]


class Emitting(Protocol):
    """What the compiled emits use of their outbox (:class:`worker.outbox.Outbox`)."""

    targets: Mapping[str, list[Target]]
    acking: bool
    auto_anchor: bool
    current: Any
    emit_plain: Callable[..., None]
    emit_anchored_general: Callable[..., None]
    emit_many_general: Callable[..., None]
    emit_tracked_general: Callable[..., int]

    def flush_buffer(self, buf: Buffer) -> None: ...

    def open_run(self, buf: Buffer, cur: Any) -> None: ...

    def open_group_run(self, buf: Buffer, group: SpoutGroup) -> None: ...


def fast_target(outbox: Emitting) -> Target | None:
    """The one default-stream subscriber if it is a fields (one field), shuffle or global one."""
    targets = outbox.targets.get("default") or []
    if len(targets) != 1 or targets[0].kind not in (K_FIELD1, K_SHUFFLE, K_GLOBAL) or not targets[0].n:
        return None
    return targets[0]


def single(target: Target) -> Buffer | None:
    """The target's buffer if it has only one: an emit then appends to it without a ``next`` of a
    cycle (a buffer object lives as long as its routing table: flushing empties it in place)."""
    return target.bufs[0] if len(target.bufs) == 1 else None


def cycle(target: Target) -> Any:
    """The target's buffers in turn, from a random one (shuffle and global groupings)."""
    bufs = target.bufs
    start = random.randrange(len(bufs))
    return itertools.cycle(bufs[start:] + bufs[:start]).__next__


def compile_plain_emit(outbox: Emitting) -> Any:
    """An unanchored emit compiled for the current routing table (without acking)."""
    general = outbox.emit_plain
    target = fast_target(outbox)
    if target is None or outbox.acking:
        return general
    bufs, n, flush = target.bufs, target.n, outbox.flush_buffer
    if target.kind == K_FIELD1 and n > 1:
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
    only = single(target)
    if only is not None:
        append = only.append

        def emit_single(values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
            if stream != "default":
                return general(values, stream)
            append(values)
            if len(only) >= only.limit:
                flush(only)
            return None

        return emit_single
    nxt = cycle(target)

    def emit_cycle(values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
        if stream != "default":
            return general(values, stream)
        buf = nxt()
        buf.append(values)
        if len(buf) >= buf.limit:
            flush(buf)
        return None

    return emit_cycle


def compile_anchored_emit(outbox: Emitting) -> Any:
    """A bolt's anchored emit compiled for the current routing table.

    The common case (default stream, one fields/shuffle/global subscriber, anchored to
    the current tuple) costs an append, an identity check and an increment while the
    current tuple's run in that buffer is open; the rest goes through
    :meth:`emit_anchored_general`.
    """
    general = outbox.emit_anchored_general
    target = fast_target(outbox)
    if target is None or not outbox.auto_anchor or not outbox.acking:
        return general
    bufs, n, flush = target.bufs, target.n, outbox.flush_buffer
    open_run = outbox.open_run
    if target.kind == K_FIELD1 and n > 1:
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
    only = single(target)
    if only is not None:
        append = only.append

        def emit_single(values: Sequence[Any], stream: str = "default", anchors: Any = None) -> None:
            cur = outbox.current
            if stream != "default" or anchors is not None or cur is None:
                return general(values, stream, anchors)
            append(values)
            if only.owner is not cur:
                open_run(only, cur)
            if len(only) >= only.limit:
                flush(only)
            return None

        return emit_single
    nxt = cycle(target)

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


def compile_many_emit(outbox: Emitting) -> Any:
    """A bolt's ``emit_many`` compiled for the current routing table: the compiled emit's
    work per tuple in one loop, without a call per tuple."""
    general = outbox.emit_many_general
    target = fast_target(outbox)
    if target is None or (outbox.acking and not outbox.auto_anchor):
        return general
    bufs, n, flush = target.bufs, target.n, outbox.flush_buffer
    idx = target.idx
    fields = target.kind == K_FIELD1 and n > 1
    only = None if fields else single(target)
    nxt = None if fields or only is not None else cycle(target)
    # One loop per grouping kind, so that a tuple's buffer costs no test of which kind it is.
    if not outbox.acking:
        def emit_many_fields(values_list: Iterable[Sequence[Any]], stream: str = "default",
                             anchors: Any = None) -> None:
            if stream != "default":
                return general(values_list, stream, anchors)
            for values in values_list:
                buf = bufs[hash(values[idx]) % n]
                buf.append(values)
                if len(buf) >= buf.limit:
                    flush(buf)
            return None

        def emit_many_cycle(values_list: Iterable[Sequence[Any]], stream: str = "default",
                            anchors: Any = None) -> None:
            if stream != "default":
                return general(values_list, stream, anchors)
            for values in values_list:
                buf = nxt()
                buf.append(values)
                if len(buf) >= buf.limit:
                    flush(buf)
            return None

        def emit_many_single(values_list: Iterable[Sequence[Any]], stream: str = "default",
                             anchors: Any = None) -> None:
            if stream != "default":
                return general(values_list, stream, anchors)
            append = only.append  # type: ignore[union-attr]
            for values in values_list:
                append(values)
                if len(only) >= only.limit:  # type: ignore[union-attr,arg-type]
                    flush(only)  # type: ignore[arg-type]
            return None

        return emit_many_fields if fields else emit_many_cycle if only is None else emit_many_single
    open_run = outbox.open_run

    def emit_many_anchored_fields(values_list: Iterable[Sequence[Any]], stream: str = "default",
                                  anchors: Any = None) -> None:
        cur = outbox.current
        if stream != "default" or anchors is not None or cur is None:
            return general(values_list, stream, anchors)
        for values in values_list:
            buf = bufs[hash(values[idx]) % n]
            buf.append(values)
            if buf.owner is not cur:
                open_run(buf, cur)
            if len(buf) >= buf.limit:
                flush(buf)
        return None

    def emit_many_anchored_cycle(values_list: Iterable[Sequence[Any]], stream: str = "default",
                                 anchors: Any = None) -> None:
        cur = outbox.current
        if stream != "default" or anchors is not None or cur is None:
            return general(values_list, stream, anchors)
        for values in values_list:
            buf = nxt()
            buf.append(values)
            if buf.owner is not cur:
                open_run(buf, cur)
            if len(buf) >= buf.limit:
                flush(buf)
        return None

    def emit_many_anchored_single(values_list: Iterable[Sequence[Any]], stream: str = "default",
                                  anchors: Any = None) -> None:
        cur = outbox.current
        if stream != "default" or anchors is not None or cur is None:
            return general(values_list, stream, anchors)
        buf: Buffer = only  # type: ignore[assignment]
        append = buf.append
        for values in values_list:
            append(values)
            if buf.owner is not cur:
                open_run(buf, cur)
            if len(buf) >= buf.limit:
                flush(buf)
        return None

    if fields:
        return emit_many_anchored_fields
    return emit_many_anchored_cycle if only is None else emit_many_anchored_single


def compile_tracked_emit(outbox: Emitting) -> Any:
    """A spout's tracked emit compiled for the current routing table: while the group's
    run in the chosen buffer is open, an append, an identity check and an increment."""
    general = outbox.emit_tracked_general
    target = fast_target(outbox)
    if target is None or not outbox.acking:
        return general
    bufs, n = target.bufs, target.n
    fields = target.kind == K_FIELD1 and n > 1
    idx = target.idx
    open_group_run = outbox.open_group_run
    only = None if fields else single(target)
    nxt = None if fields or only is not None else cycle(target)
    if only is not None:
        append = only.append

        def emit_tracked_single(values: Sequence[Any], stream: str, group: SpoutGroup) -> int:
            if stream != "default":
                return general(values, stream, group)
            append(values)
            if only.owner is not group:
                open_group_run(only, group)
            return 1

        return emit_tracked_single

    def emit_tracked(values: Sequence[Any], stream: str, group: SpoutGroup) -> int:
        if stream != "default":
            return general(values, stream, group)
        buf = bufs[hash(values[idx]) % n] if fields else nxt()  # type: ignore[misc]
        buf.append(values)
        if buf.owner is not group:
            open_group_run(buf, group)
        return 1

    return emit_tracked
