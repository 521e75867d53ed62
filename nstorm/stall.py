"""Stall detection: a topology whose spouts wait on pending tuples and see no ack for long.

A healthy topology acks, or fails and replays, every tracked tuple within
``topology.message.timeout.secs``. When its spouts have pending tuples and no spout has
seen an ack for two message timeouts, something holds the topology: an executor sitting on
its input, a copy waiting for a state, a peer that takes nothing, or windows that hold the
spouts' tuples while the spouts, at ``topology.max.spout.pending``, wait for them (a window
fires only when newer tuples move its watermark on). :func:`find_stall` tells it from the
workers' heartbeats alone (so ``nstorm status`` and Nimbus agree), and names the executors
that hold input, wait for a state, or hold tuples in open windows.

Every executor reports its ``kind`` and ``queue`` and, while a moved-in copy waits for its
state, ``awaiting_state``; spouts also ``pending``, ``last_acked_at`` (wall clock of their
last ack, None before the first) and ``started_at``; windowed bolts ``window.tuples``, the
tuples their open windows keep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nstorm.records import Heartbeat

__all__ = ["STALL_TIMEOUTS", "find_stall"]

STALL_TIMEOUTS = 2.0  # message timeouts without an ack that make a stall


def find_stall(beats: Mapping[str, Heartbeat], timeout_secs: float, now: float) -> dict[str, Any] | None:
    """``{"since", "pending", "holding_input", "waiting_for_state", "holding_windows"}`` if stalled,
    else None.

    :arg beats: worker id -> heartbeat.
    :arg timeout_secs: the topology's ``topology.message.timeout.secs``.
    :arg now: the wall clock (heartbeat times are wall-clock times).
    """
    pending = 0
    progress: float | None = None
    holding: set[str] = set()
    waiting: set[str] = set()
    windows: set[str] = set()
    for beat in beats.values():
        for eid, counters in beat.executors.items():
            if not isinstance(counters, Mapping):
                continue
            if counters.get("awaiting_state"):
                waiting.add(eid)
            if int(counters.get("queue") or 0) > 0:
                holding.add(eid)
            window = counters.get("window")
            if isinstance(window, Mapping) and (int(window.get("tuples") or 0) > 0 or (
                    window.get("holds_acks") and int(window.get("open_windows") or 0) > 0)):
                windows.add(eid)  # (an incremental bolt keeps no tuples, but holds their acks)
            if counters.get("kind") == "spout":
                pending += int(counters.get("pending") or 0)
                seen = max(float(counters.get("last_acked_at") or 0.0), float(counters.get("started_at") or 0.0))
                progress = seen if progress is None else max(progress, seen)
    if not pending or progress is None or now - progress < STALL_TIMEOUTS * timeout_secs:
        return None
    return {"since": progress, "pending": pending, "holding_input": sorted(holding),
            "waiting_for_state": sorted(waiting), "holding_windows": sorted(windows)}
