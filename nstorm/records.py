"""Records that cross packages, as types: statuses, a migration record, a worker heartbeat.

Each record is a frozen dataclass with one :meth:`from_json` (the only place its shape is
checked: what comes from ZooKeeper may be damaged, and is never trusted) and one
:meth:`to_json`. Statuses and modes are string enums, so their values are the JSON ones and
compare equal to them. The plan, the largest record, is in :mod:`nstorm.plan`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["Heartbeat", "MigrationRecord", "MigrationState", "MoveMode", "RecordError", "TopologyStatus"]


class RecordError(ValueError):
    """A record read from the cluster that does not have its documented shape."""


class TopologyStatus(enum.StrEnum):
    """What a topology is asked to do (``status/<name>``) and does (its plan's ``status``).

    ``ACTIVE``: spouts call ``next_tuple``. ``INACTIVE``: spouts pause, bolts drain.
    ``KILLED``: inactive until ``kill_at``, then Nimbus removes the topology (never in a plan).
    """

    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    KILLED = "KILLED"


class MoveMode(enum.StrEnum):
    """How an executor moves (ARCHITECTURE.md section 8)."""

    THREAD = "thread"  # N-Storm: only the moved executor stops, as a thread
    PROCESS = "process"  # Storm*: the workers whose executors changed restart
    STOP = "stop"  # Storm's rebalance: deactivate, wait, stop everything, restart
    RESCALE = "rescale"  # a live parallelism change: key groups handed over, nothing stops (a record's mode)


class MigrationState(enum.StrEnum):
    """Where one executor move is: requested (the plan has it) until its new copy runs."""

    REQUESTED = "REQUESTED"
    COMPLETED = "COMPLETED"


def _number(data: Mapping[str, Any], key: str, default: float | None = None) -> float | None:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        msg = f"{key} must be a number, got {value!r}"
        raise RecordError(msg)
    return float(value)


def _whole(value: Any) -> int | None:
    """A whole number, or None for anything else (an optional field of an older writer)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class MigrationRecord:
    """One executor move, ``migrations/<name>/m-N``: created by Nimbus, completed by the new copy.

    :ivar id: the record's node name (not stored in it).
    :ivar by: who asked: ``user``, ``otd``, ``random``, ``nimbus``, ``ui`` or ``latency``.
    :ivar waiting: a rescale (``mode: rescale``, ``executor`` the component, ``from``/``to`` its
        parallelism before and after): the executors that take key groups over; ``arrived``
        those whose groups came, with each one's stall. The record is completed by the worker
        that reports the last of them.
    """

    executor: str
    source: str
    target: str
    mode: MoveMode
    by: str = "user"
    requested_at: float = 0.0
    version: int = 0
    completed_at: float | None = None
    stall_secs: float | None = None
    state_lost: bool | None = None
    id: str = ""
    waiting: tuple[str, ...] = ()
    arrived: Mapping[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> MigrationState:
        return MigrationState.COMPLETED if self.completed_at else MigrationState.REQUESTED

    def completed(self, at: float, stall_secs: float, state_lost: bool) -> MigrationRecord:
        return replace(self, completed_at=at, stall_secs=stall_secs, state_lost=state_lost)

    @classmethod
    def from_json(cls, data: Any, record_id: str = "") -> MigrationRecord:
        if not isinstance(data, Mapping):
            msg = f"migration record {record_id!r}: expected an object"
            raise RecordError(msg)
        try:
            mode = MoveMode(data.get("mode", "thread"))
        except ValueError:
            msg = f"migration record {record_id!r}: unknown mode {data.get('mode')!r}"
            raise RecordError(msg) from None
        for key in ("executor", "from", "to"):
            if not isinstance(data.get(key), str):
                msg = f"migration record {record_id!r}: {key} must be a string"
                raise RecordError(msg)
        lost = data.get("state_lost")
        waiting = data.get("waiting") or ()
        arrived = data.get("arrived") or {}
        if not isinstance(waiting, (list, tuple)) or not all(isinstance(e, str) for e in waiting) \
                or not isinstance(arrived, Mapping):
            msg = f"migration record {record_id!r}: waiting must list executors, arrived map them"
            raise RecordError(msg)
        return cls(executor=data["executor"], source=data["from"], target=data["to"], mode=mode,
                   waiting=tuple(waiting), arrived=dict(arrived),
                   by=str(data.get("by", "user")), requested_at=_number(data, "requested_at", 0.0) or 0.0,
                   version=int(_number(data, "version", 0) or 0), completed_at=_number(data, "completed_at"),
                   stall_secs=_number(data, "stall_secs"), state_lost=bool(lost) if lost is not None else None,
                   id=record_id)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"executor": self.executor, "from": self.source, "to": self.target,
                                "mode": self.mode.value, "by": self.by, "requested_at": self.requested_at,
                                "version": self.version, "completed_at": self.completed_at}
        if self.completed_at:
            data.update(stall_secs=self.stall_secs, state_lost=self.state_lost)
        if self.waiting:
            data.update(waiting=list(self.waiting), arrived=dict(self.arrived))
        return data


@dataclass(frozen=True)
class Heartbeat:
    """A worker's heartbeat, ``workerbeats/<name>/<worker id>`` (and a local file beside its store).

    :ivar executors: executor id -> its counters (``kind``, ``emitted``, ``executed``, ``acked``,
        ``failed``, ``queue``, ``errors``, ``last_error``; spouts also ``pending``, ``replayed``,
        ``started_at``, ``last_acked_at``, ``acked_per_sec`` and latency histograms).
    """

    worker_id: str
    pid: int
    time: float
    version: int
    submission: str | None = None
    cpu: float = 0.0
    queue: int = 0
    cpu_limit: float | None = None
    core: int | None = None  # the core the worker is pinned to (worker.cpu.pin); None: unpinned
    sched_batch: bool | None = None  # its threads run under SCHED_BATCH (worker.sched.batch); None: not said
    gil: bool | None = None  # its interpreter runs one thread's Python at a time (the GIL); None: not said
    curve: bool | None = None  # its sockets use CurveZMQ (nstorm.transport.curve); None: not said
    executors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    dropped_frames: int = 0
    forwarded: int = 0
    curve_refused: int = 0
    backpressure_events: int = 0

    @classmethod
    def from_json(cls, data: Any) -> Heartbeat:
        if not isinstance(data, Mapping) or not isinstance(data.get("worker_id"), str):
            msg = "a heartbeat must be an object with a worker_id"
            raise RecordError(msg)
        executors = data.get("executors") or {}
        if not isinstance(executors, Mapping) or not all(isinstance(c, Mapping) for c in executors.values()):
            msg = f"heartbeat of {data['worker_id']}: executors must map executor ids to counters"
            raise RecordError(msg)
        submission = data.get("submission")
        return cls(worker_id=data["worker_id"], pid=int(_number(data, "pid", 0) or 0),
                   time=_number(data, "time", 0.0) or 0.0, version=int(_number(data, "version", 0) or 0),
                   submission=submission if isinstance(submission, str) else None,
                   cpu=_number(data, "cpu", 0.0) or 0.0, queue=int(_number(data, "queue", 0) or 0),
                   cpu_limit=_number(data, "cpu_limit"), executors=dict(executors),
                   core=_whole(data.get("core")),
                   sched_batch=data["sched_batch"] if isinstance(data.get("sched_batch"), bool) else None,
                   gil=data["gil"] if isinstance(data.get("gil"), bool) else None,
                   curve=data["curve"] if isinstance(data.get("curve"), bool) else None,
                   dropped_frames=int(_number(data, "dropped_frames", 0) or 0),
                   forwarded=int(_number(data, "forwarded", 0) or 0),
                   curve_refused=int(_number(data, "curve_refused", 0) or 0),
                   backpressure_events=int(_number(data, "backpressure_events", 0) or 0))

    def to_json(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "submission": self.submission, "pid": self.pid, "time": self.time,
                "version": self.version, "cpu": self.cpu, "queue": self.queue, "cpu_limit": self.cpu_limit,
                "core": self.core, "sched_batch": self.sched_batch, "gil": self.gil, "curve": self.curve, "executors": {k: dict(v) for k, v in self.executors.items()}, "dropped_frames": self.dropped_frames,
                "forwarded": self.forwarded, "curve_refused": self.curve_refused,
                "backpressure_events": self.backpressure_events}
