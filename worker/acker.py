"""Storm's acker as an executor: the XOR of a tuple tree's edges, per root, until it is zero.

See :class:`AckerExecutor`. Ackers are system executors (``__acker:<i>``), one per worker by
default; a spout's roots pick the acker in its own worker, so its answers never cross processes.

An acker moves (Nimbus moves the ackers off a worker it is about to release) by handing its open
entries over: XOR commutes, so the new copy starts at once with an empty table, and the old
copy's table, sent as one ``ACKER_TABLE`` message, merges into it like acks (a tree completes
where its XOR reaches zero). What reaches the old copy afterwards is sent on to the new one.
No tree is lost, so none is replayed.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from nstorm.topology import ACKER
from worker import wire
from worker.executor import Executor
from worker.host import Host
from worker.outbox import Outbox
from worker.timeouts import Timeouts

__all__ = ["AckerExecutor"]

log = logging.getLogger(__name__)
_ACKER_EXPIRY_SECS = 0.25  # how often an acker's thread drops entries past the message timeout


class AckerExecutor(Executor):
    """Storm's acker: XOR of 64-bit edge ids per spout tuple; zero means fully processed.

    A root's entry starts at zero without an init from the spout (the copies of a spout tuple
    carry edges that XOR to zero, :mod:`worker.wire`), so an entry is made by the first ack
    that reaches it and the tree is complete when its XOR returns to zero; the spout to tell
    is in the root's low bits. Entries older than ``topology.message.timeout.secs`` are dropped
    (their spout has failed them by then).

    The acker has no queue to wait on: a message put on its ``ctl_q`` is handled at once, in
    the thread that puts it (a local executor flushing its acks, or the receiver of control
    messages from other workers), under the acker's lock, and the answers leave at once.
    An ack message then costs no thread wake-up; the acker's own thread only expires entries.
    """

    kind = "acker"

    def __init__(self, host: Host, executor_id: str, task: int) -> None:
        super().__init__(host, executor_id, task)
        self.lock = threading.Lock()
        self.inbox.control = self.ctl_q = _InlineControl(self)
        self.outbox = Outbox(host, task, ACKER, {"components": {ACKER: {"outputs": {}, "inputs": []}}})
        self.entries: dict[int, int] = {}  # root -> XOR of the acks so far (never 0)
        self.failed_roots: dict[int, None] = {}  # failed trees: their late acks are ignored
        self.timeout = float(host.conf["topology.message.timeout.secs"])
        self.timeouts = Timeouts(self.timeout, granularity=1.0)
        self.moved_away = False  # handed its table over: what comes now is sent on to the new copy

    def _complete(self, root: int, kind: int) -> None:
        task = wire.root_task(root)
        routing = self.outbox.routing
        if routing is None or task >= len(routing.location):
            return  # not a root any spout of this topology made
        if kind == wire.ACKED:
            self.acked += 1
        else:
            self.failed += 1
        self.outbox.control(kind, task, root)

    def _handle(self, kind: int, entries: Any) -> None:
        table = self.entries
        self.executed += len(entries)
        if kind == wire.ACK or kind == wire.ACKER_TABLE:  # (a table merges like acks: XOR commutes)
            failed = self.failed_roots
            for root, x in entries:
                v = table.get(root)
                if v is None:
                    if failed and root in failed:
                        continue
                    if x:
                        table[root] = x
                        self.timeouts.add(root, time.monotonic())
                    else:
                        self._complete(root, wire.ACKED)
                    continue
                v ^= x
                if v:
                    table[root] = v
                else:
                    del table[root]
                    self._complete(root, wire.ACKED)
        elif kind == wire.FAIL:
            for root in entries:
                if root in self.failed_roots:
                    continue
                table.pop(root, None)
                self.failed_roots[root] = None
                self.timeouts.add(root, time.monotonic())
                self._complete(root, wire.FAILED)

    def _expire(self, now: float) -> None:
        table, failed = self.entries, self.failed_roots
        for root in self.timeouts.expire(now):
            table.pop(root, None)
            failed.pop(root, None)

    def handle_now(self, kind: int, entries: Any) -> None:
        """One control message, in the caller's thread: update the entries, send the answers."""
        with self.lock:
            if self.moved_away:
                self._send_on(kind, entries)
                return
            if not self._running:
                return  # stopping with its worker: the spouts time these trees out
            routing = self.host.routing
            if routing is not self.outbox.routing and routing is not None:
                self.outbox.rebuild(routing)
            try:
                self._handle(kind, entries)
            except Exception as exc:  # entries that are not [root, xor] pairs: dropped
                self.record_error("acker entries", exc)
            self.outbox.flush()

    def hand_over(self) -> int:
        """Stop, and send the open entries to this acker's new place (the host's routing, swapped
        already, says where); returns how many went. What reaches this copy later follows them."""
        with self.lock:
            self.stop()
            self.moved_away = True
            table, self.entries = self.entries, {}
            self._send_on(wire.ACKER_TABLE, list(table.items()))
            return len(table)

    def _send_on(self, kind: int, entries: Any) -> None:
        """Send entries meant for this acker to its new place (under the lock)."""
        routing = self.host.routing
        if routing is None or not entries:
            return
        if routing is not self.outbox.routing:
            self.outbox.rebuild(routing)
        try:
            for entry in entries:
                self.outbox.control(kind, self.task, entry)
            self.outbox.flush_control()
        except Exception as exc:  # noqa: BLE001 - entries that are no list (a peer's garbage), a socket
            # error: dropped, their trees time out and are replayed; the caller (a receiver) goes on
            self.outbox.ctl_buffers.clear()
            self.record_error("acker entries sent on", exc)

    def loop(self) -> None:
        while self._running:
            time.sleep(_ACKER_EXPIRY_SECS)
            with self.lock:
                self._expire(time.monotonic())

    def teardown(self) -> None:
        with self.lock:
            self._running = False
            self.outbox.flush()
            self.outbox.close()

    def counters(self) -> dict[str, Any]:
        data = super().counters()
        data["emitted"] = self.outbox.emitted
        data["batches"] = self.outbox.batches
        data["control_messages"] = self.outbox.courier.messages
        data["queue"] = 0
        data["pending"] = len(self.entries)
        return data


class _InlineControl:
    """An acker's control queue: what is put on it is handled at once (see :class:`AckerExecutor`)."""

    __slots__ = ("acker",)

    def __init__(self, acker: AckerExecutor) -> None:
        self.acker = acker

    def put(self, item: tuple[int, int, Any]) -> None:
        kind, _src, entries = item
        self.acker.handle_now(kind, entries)

    def qsize(self) -> int:
        return 0

    def empty(self) -> bool:
        return True
