"""What the parts of a worker process need of it: a narrow :class:`Host`, not the whole worker.

Executors, their outboxes, the receivers, backpressure and metrics each take a host and use
only what is listed here; the worker process (:class:`worker.process.Worker`) is the real
one, ``tests/fakes.py`` the one unit tests share. So none of these modules imports the
worker, and each can be run and tested on its own (pystorm keeps one loop iteration in
``_run`` "so it can be properly unit tested"; Storm hands ``WorkerState`` to everything and
pays for it in tests).
"""

from __future__ import annotations

import queue
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from worker.routing import Endpoint, RoutingTable

__all__ = ["Checkpoints", "ExecutorStats", "Host", "Mailbox", "MigrationReports", "SocketFactory"]


class Mailbox(Protocol):
    """An executor's receiving side, as its senders see it (:class:`worker.delivery.Inbox`)."""

    data: queue.SimpleQueue[Any]
    control: Any

    def put_data(self, src: int, batch: Any, n: int) -> None: ...

    def put_control(self, kind: int, src: int, entries: Any) -> bool: ...

    def put(self, channel: str, item: Any) -> bool: ...

    def close(self) -> list[Any]: ...

    def depth(self, cap: float) -> float: ...


class SocketFactory(Protocol):
    """Makes a thread's sockets to another worker (:class:`worker.delivery.Sockets`)."""

    def data(self, endpoint: Endpoint) -> Any: ...

    def control(self, endpoint: Endpoint) -> Any: ...


class MigrationReports(Protocol):
    """Where executor copies report their side of a hand-over (:class:`worker.migration.MigrationDesk`)."""

    def completed(self, record: str, stall: float, lost: bool) -> None: ...

    def handed_over(self, task: int, to: str, copy: Any) -> None: ...

    def shift_done(self, record: str, executor: str, stall: float, lost: bool) -> None: ...


class Checkpoints(Protocol):
    """Where executors write their part of a checkpoint (:class:`worker.checkpoint.WorkerCheckpoints`)."""

    groups: int  # topology.max.parallelism: key groups
    tainted: bool  # this worker lost data in the current epoch: its executors write no checkpoint

    def write(self, cid: int, executor: str, blob: bytes, groups: Mapping[tuple[str, int], tuple[bool, bytes]]) -> int:
        """Write one executor's part of ``cid``; the bytes written (StateError if it cannot)."""
        ...

    def read(self, cid: int, executor: str) -> bytes | None:
        """An executor's snapshot in ``cid`` (StateError if the store cannot be read)."""
        ...

    def chain(self, component: str, group: int, upto: int) -> list[tuple[int, bool, bytes]]:
        """A key group's entries a restore of ``upto`` applies."""
        ...

    def request_rollback(self, reason: str) -> None:
        """State was lost here: ask the coordinator to roll the topology back (any thread)."""
        ...


@dataclass(frozen=True)
class ExecutorStats:
    """One executor as metrics see it: cumulative ``[tuples, bytes]`` sent per destination task
    (its outbox's, read without a lock: a dict copy is atomic under the GIL) and its queue."""

    executor_id: str
    task: int
    traffic: Mapping[int, list[int]]
    queue: int
    thread_id: int | None = None  # the executor thread's native id (its CPU time, from /proc)


class Host(Protocol):
    """A worker process, as its parts see it.

    :ivar worker_id: ``node:port``.
    :ivar conf: the topology's configuration (defaults included).
    :ivar acking: the topology has ackers.
    :ivar routing: the current routing table, swapped whole when a plan arrives (None before).
    :ivar active: the topology is ACTIVE (spouts call ``next_tuple``).
    :ivar sockets: the worker's zmq socket factory.
    :ivar migrations: the worker's side of live migration (hand-overs done, completions).
    :ivar epoch: rollbacks taken (data frames of an older epoch are dropped).
    :ivar checkpoints: where executors write checkpoints; None with ``topology.state.provider=memory``.
    :ivar events: the topology's event sampling (``worker.eventlog``), swapped whole when it changes.
    """

    worker_id: str
    node: str
    port: int
    topology: str
    conf: Mapping[str, Any]
    acking: bool
    routing: RoutingTable | None
    active: bool
    sockets: SocketFactory
    migrations: MigrationReports
    epoch: int
    checkpoints: Checkpoints | None
    events: Any

    @property
    def throttled(self) -> bool:
        """Spouts must not emit (backpressure somewhere in the topology, or a fence)."""
        ...

    def inbox(self, task: int, wid: str | None = None) -> Mailbox | None:
        """The inbox of ``task`` if it runs (or still drains) in this worker, else None; with
        ``wid``, only if ``wid`` is this worker (the caller's routing says it is here)."""
        ...

    def inboxes(self) -> list[Mailbox]:
        """The inboxes of the executors that run here (not the draining ones)."""
        ...

    def executor_stats(self) -> list[ExecutorStats]:
        """Every executor here, draining ones included, for load collection."""
        ...

    def stash(self, dst: int, channel: str, item: Any, extra: Any, epoch: int | None = None) -> bool:
        """Keep a frame for a task that is not here (yet), until the next plan says where it is;
        a data frame of an ``epoch`` this worker has rolled back from meanwhile is dropped (False)."""
        ...

    def hold_newer(self, frames: list[bytes], epoch: int) -> bool:
        """Keep a data message of a newer ``epoch`` (its sender rolled back before this worker did);
        False if this worker has reached that epoch meanwhile (the caller delivers it)."""
        ...
