"""The one fake of a worker that unit tests share: a :class:`worker.host.Host` without a process.

Executors, outboxes, backpressure and metrics take a host (:mod:`worker.host`); here every task
the routing table places in this worker gets a plain :class:`~worker.delivery.Inbox` (with
``wire=True`` the batches put on it go through msgpack, as a remote one would), and sockets to
other workers are :class:`FakeSockets` that record what is sent, unless a test passes real
:class:`~worker.delivery.Sockets`.
"""

from __future__ import annotations

import queue
from collections.abc import Iterable, Mapping
from typing import Any

from nstorm.config import merge_conf
from nstorm.plan import Plan, Slot
from worker import wire
from worker.delivery import Inbox, Sockets
from worker.host import ExecutorStats
from worker.migration import MigrationDesk
from worker.routing import RoutingTable

__all__ = ["FakeHost", "FakeSocket", "FakeSockets", "plan_of"]


def plan_of(places: Mapping[str, str], ports: Mapping[str, int] | None = None, version: int = 1) -> Plan:
    """A plan: ``places`` maps executor ids to worker ids, the task ids in this order; ``ports``
    gives a worker's data port (its control port is the next one)."""
    slots = []
    for i, w in enumerate(sorted(set(places.values()))):
        port = (ports or {}).get(w, 1 + 2 * i)
        slots.append(Slot(w.split(":")[0], "127.0.0.1", port, port + 1))
    plan = Plan.first("t", places, places, slots).replace(version=version)
    # A worker id need not look like node:port in a unit test: keep the ids as given.
    return plan.replace(workers=dict(zip(sorted(set(places.values())), slots, strict=True)))


class FakeSocket:
    """A socket that records every message (a list of frames); ``full`` makes data sends refuse."""

    def __init__(self, endpoint: Any, log: list[tuple[str, list[bytes]]]) -> None:
        self.endpoint = endpoint
        self.log = log
        self.full = False
        self._parts: list[bytes] = []

    def send(self, frame: bytes, flags: int = 0) -> None:
        import zmq

        if self.full and not self._parts:
            raise zmq.Again()
        self._parts.append(frame)
        if not flags & zmq.SNDMORE:
            self.log.append((self.endpoint.worker_id, self._parts))
            self._parts = []

    def close(self, linger: int | None = None) -> None:
        pass


class FakeSockets:
    """Makes :class:`FakeSocket` s; ``sent`` has ``(worker id, frames)`` of every message, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[bytes]]] = []
        self.made: list[FakeSocket] = []

    def data(self, endpoint: Any) -> FakeSocket:
        sock = FakeSocket(endpoint, self.sent)
        self.made.append(sock)
        return sock

    control = data

    def control_messages(self) -> list[tuple[str, Any]]:
        """``(worker id, [kind, dst, src, entries])`` of every one-frame (control) message sent."""
        return [(wid, wire.unpack(frames[0])) for wid, frames in self.sent if len(frames) == 1]

    def stop(self) -> None:
        pass


_encode = wire.batch_encoder()  # the tests drive executors from one thread: one encoder, as a Courier's


class _WireInbox(Inbox):
    """An inbox whose batches arrive as msgpack bytes, as from another worker."""

    __slots__ = ()

    def put_data(self, src: int, batch: Any, n: int) -> None:
        super().put_data(src, _encode(batch) if batch is not None and type(batch) is not bytes else batch, n)


class FakeHost:
    """One worker hosting the tasks its routing table places at ``worker_id`` (see the module docstring)."""

    def __init__(self, plan: Plan | None = None, *, worker_id: str = "n1:1", acking: bool = True,
                 wire_format: bool = False, sockets: Sockets | FakeSockets | None = None,
                 local_tasks: Iterable[int] | None = None, **conf: Any) -> None:
        self.worker_id = worker_id
        self.node, _, port = worker_id.partition(":")
        self.port = int(port or 0)
        self.topology = "t"
        self.conf = merge_conf(conf)
        self.acking = acking
        self.routing = RoutingTable.from_plan(plan) if plan is not None else None
        self.active = True
        self.throttled = False
        self.sockets: Any = sockets if sockets is not None else FakeSockets()
        self.gone: list[tuple[str, int, Any]] = []  # GONE answers the migration desk sent
        self.migrations = MigrationDesk(worker_id, lambda wid, task, entries: self.gone.append((wid, task, entries)))
        self.stashed: list[tuple[int, str, Any, Any]] = []
        self.epoch = 0
        self.newer: list[list[bytes]] = []
        self.checkpoints: Any = None
        self.events: Any = None  # worker.eventlog.EventSampling
        self.local_tasks = set(local_tasks) if local_tasks is not None else None
        self._inbox_class = _WireInbox if wire_format else Inbox
        self._inboxes: dict[int, Inbox] = {}

    def _here(self, task: int) -> bool:
        if self.local_tasks is not None:
            return task in self.local_tasks
        routing = self.routing
        return routing is None or (task < len(routing.location) and routing.location[task] == self.worker_id)

    def hold_newer(self, frames: list[bytes], epoch: int) -> bool:
        if epoch <= self.epoch:
            return False
        self.newer.append(frames)
        return True

    def inbox(self, task: int, wid: str | None = None) -> Inbox | None:
        if (wid is not None and wid != self.worker_id) or not self._here(task):
            return None
        found = self._inboxes.get(task)
        if found is None:
            found = self._inboxes[task] = self._inbox_class(int(self.conf["topology.batch.size"]))
        return found

    def adopt(self, task: int, inbox: Inbox) -> None:
        """Deliver to an executor's own inbox (a test that runs that executor)."""
        self._inboxes[task] = inbox

    def inboxes(self) -> list[Inbox]:
        return list(self._inboxes.values())

    def executor_stats(self) -> list[ExecutorStats]:
        return []

    def stash(self, dst: int, channel: str, item: Any, extra: Any, epoch: int | None = None) -> bool:
        if epoch is not None and epoch != self.epoch:
            return False
        self.stashed.append((dst, channel, item, extra))
        return True

    # -- for the tests ----------------------------------------------------------------------
    def data(self, task: int) -> queue.SimpleQueue[Any]:
        """The data queue of a task here."""
        found = self.inbox(task)
        assert found is not None, f"task {task} is not in {self.worker_id}"
        return found.data

    def control(self, task: int) -> Any:
        found = self.inbox(task)
        assert found is not None, f"task {task} is not in {self.worker_id}"
        return found.control

    def take(self, task: int, control: bool = False) -> list[Any]:
        """Everything queued for a task here (its data, or its control messages), in order."""
        q = self.control(task) if control else self.data(task)
        out = []
        while not q.empty():
            out.append(q.get())
        return out

    def completions(self) -> list[tuple[str, dict[str, Any]]]:
        """Migrations reported completed so far."""
        out = []
        while not self.migrations.completions.empty():
            out.append(self.migrations.completions.get())
        return out

    def close(self) -> None:
        if isinstance(self.sockets, Sockets):
            self.sockets.context.destroy(linger=0)
