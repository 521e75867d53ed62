"""Live migration (thread mode): the hand-over protocol of a moved executor, in one place.

A moved executor exists twice for a moment. Its *old copy* keeps processing what its upstream
executors sent it before they switched to the new place; each upstream executor, on its first
loop after the routing swap, sends the old copy a marker behind that data (per-sender FIFO:
:func:`mark_moves`, called by the outbox when its routing table changes).
Once the markers are *aligned* (one from every upstream executor), its input is empty and the
new copy has said it is set up (READY), the old copy *snapshots* its state and sends it
(STATE). The *new copy* holds its input until the state comes, then continues. "Align markers
on every input, then snapshot ``self.state``" is the barrier of a checkpoint as well: the
:class:`Alignment` here is meant to carry those next.

Each executor copy has one :class:`Handover`; its states and transitions::

    RUNNING -> DRAINING          the plan moved the executor away (begin_drain)
    DRAINING -> HANDED_OVER      markers aligned, input empty, new copy ready; or the drain
                                 deadline DK (worker.lazy.kill.ms) passed: the state is sent
                                 (with checkpoints on, only once every downstream task of
                                 another worker answered this copy's SEAL: Handover._seal)
    AWAITING_STATE -> RUNNING    the state came (taken); or GONE came, or the wait's deadline
                                 (worker.state.wait.ms) passed: the copy starts empty

A new copy asks for its state (READY) at once and again every ``READY_RESEND_SECS``. The
old place answers a READY for a task that no longer runs or drains there from its
:class:`MigrationDesk`: silence if it sent the state to that copy (it is on its way), GONE
otherwise (its worker restarted, or the state went to an earlier incarnation of the copy's
worker), so a copy never waits for a state that cannot come. The desk also carries each
completion to the migration record in ZooKeeper.
"""

from __future__ import annotations

import enum
import json
import logging
import queue
import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NoNodeError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError

from nstorm.plan import Move
from nstorm.zkschema import encode
from worker import wire
from worker.delivery import Courier
from worker.host import Host, Mailbox
from worker.routing import RoutingTable

__all__ = ["Alignment", "Handover", "HandoverState", "MigrationDesk", "READY_RESEND_SECS", "StateParts", "mark_moves",
           "state_parts"]

log = logging.getLogger(__name__)

READY_RESEND_SECS = 0.5  # a copy waiting for its state asks the old place again this often
HANDOVER_MEMORY_SECS = 120.0  # how long a worker remembers where it handed a state over
# The hand-over's own messages, which mean nothing to the new copy: not passed on to it.
_NOT_PASSED_ON = frozenset((wire.SEALED, wire.READY, wire.GONE, wire.STATE, wire.STATE_PART))


class HandoverState(enum.Enum):
    """Where one executor copy is in the protocol (see the module docstring)."""

    RUNNING = "RUNNING"  # the executor's copy, processing
    AWAITING_STATE = "AWAITING_STATE"  # a new copy: holds its input until the state comes
    DRAINING = "DRAINING"  # an old copy: finishes what was sent before the markers
    HANDED_OVER = "HANDED_OVER"  # an old copy: its state is sent, its loop ends


class Alignment:
    """A barrier over an executor's inputs: which upstream executors have sent their marker.

    Markers are noted from the start (one may come before this worker learns of the move
    that it announces); :meth:`expect` sets whom to wait for.
    """

    __slots__ = ("expected", "seen")

    def __init__(self) -> None:
        self.expected: set[int] | None = None
        self.seen: set[int] = set()

    def expect(self, upstream: Iterable[int]) -> None:
        self.expected = set(upstream)

    def mark(self, src: int) -> None:
        self.seen.add(src)

    @property
    def complete(self) -> bool:
        return self.expected is not None and self.expected <= self.seen

    @property
    def missing(self) -> list[int]:
        return sorted((self.expected or set()) - self.seen)


def state_parts(entry: Mapping[str, Any], part_bytes: int = wire.STATE_PART_BYTES) -> list[dict[str, Any]] | None:
    """A STATE ``entry`` as STATE_PART entries of at most ``part_bytes`` of it each, or None when
    it fits one message: a receiving socket refuses frames over ``wire.MAX_FRAME_BYTES``, and a
    state (a big dict, a model, a windowed bolt's open windows, a spout's tuples in flight) may
    be larger. The parts follow each other on the old copy's control pipe to the new copy's
    worker (FIFO per sender), as any control message; ``id`` tells one hand-over's from another's."""
    blob = wire.pack(entry)
    if len(blob) <= part_bytes:
        return None
    view, n, handover = memoryview(blob), -(-len(blob) // part_bytes), random.getrandbits(48)
    return [{"id": handover, "seq": i, "parts": n, "data": view[i * part_bytes:(i + 1) * part_bytes]}
            for i in range(n)]


class StateParts:
    """The new copy's side of :func:`state_parts`: the parts so far; the entry once all are in."""

    __slots__ = ("data", "id", "parts")

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.parts = 0
        self.id: Any = None  # the hand-over whose parts these are

    def clear(self) -> None:
        self.data, self.parts, self.id = [], 0, None

    def add(self, part: Any) -> Mapping[str, Any] | None:
        """Take one part (in order); the whole STATE entry with the last one.

        :raises ValueError: a part that is not one, or out of order (its state cannot be rebuilt).
        """
        if not isinstance(part, Mapping):
            raise ValueError("a state part that is not a map")
        seq, parts, data = part.get("seq"), part.get("parts"), part.get("data")
        if type(seq) is not int or type(parts) is not int or not isinstance(data, bytes | memoryview) or parts < 1:
            self.clear()
            raise ValueError("a state part without seq, parts and data")
        if seq == 0:
            self.data, self.parts, self.id = [], parts, part.get("id")  # the first part (of a later hand-over)
        elif part.get("id") != self.id:
            return None  # a part of another hand-over than the one being joined (its first did not come here)
        if seq != len(self.data) or parts != self.parts:
            have, of = len(self.data), self.parts
            self.clear()
            raise ValueError(f"state part {seq + 1} of {parts} came after {have} of {of}")
        self.data.append(bytes(data))
        if len(self.data) < parts:
            return None
        blob = b"".join(self.data)
        self.clear()
        entry = wire.unpack(blob)
        if not isinstance(entry, Mapping):
            raise ValueError("the parts of a state are not a map")
        return entry


class Migrating(Protocol):
    """What a :class:`Handover` needs of its executor."""

    executor_id: str
    task: int
    inbox: Mailbox
    routing: RoutingTable | None  # the table its loop routes by (picked up once per loop)

    def snapshot(self) -> dict[str, Any]:
        """``state`` (msgpack bytes), ``error``, ``counters`` and what else moves (a spout's tuples)."""
        ...

    def restore(self, entry: Mapping[str, Any]) -> None:
        """Install a handed-over snapshot."""
        ...

    def drop_input(self) -> int:
        """Drop what is queued (the drain deadline passed); the tuples dropped."""
        ...

    def flush(self) -> None:
        """Send everything buffered (before the state leaves)."""
        ...

    def downstream_tasks(self) -> Iterable[int]:
        """Every task this executor sends to (a checkpoint's barrier goes to each)."""
        ...


class Handover:
    """One executor copy's side of live migration. See the module docstring."""

    def __init__(self, executor: Migrating, host: Host, courier: Courier) -> None:
        self.executor = executor
        self.host = host
        self.courier = courier
        self.state = HandoverState.RUNNING
        self.alignment = Alignment()
        self.copy_id = random.getrandbits(48)  # tells this copy from a later one of a restarted worker
        self.move: Move | None = None  # the plan's record of the move that made this copy
        self.wait_until = 0.0
        self.drain_until = 0.0
        self.drain_version = 0  # the plan that moved this copy away: it hands over only once it routes by it
        self.held_since: float | None = None  # the first input held while waiting (the stall's start)
        self.ready_sent_at = float("-inf")
        self.ready_seen = False  # the new copy is set up and waits for the state
        self.ready_copy: int | None = None  # ... and which copy it is
        self.parts = StateParts()  # a new copy's state, when it comes in parts
        self.drain_secs = 0.0
        self.unsealed: set[int] | None = None  # downstream tasks whose SEALED has not come (None: no seal sent)
        self.sealed_at = 0.0
        self.seal_until = 0.0
        self.passed_on: list[tuple[int, int, Any]] = []  # control that came while sealing or was left at the hand-over: to the new copy

    @property
    def awaiting(self) -> bool:
        return self.state is HandoverState.AWAITING_STATE

    @property
    def draining(self) -> bool:
        return self.state is HandoverState.DRAINING

    @property
    def sealing(self) -> bool:
        """An old copy that sent its seals and waits for their answers (:meth:`wait_sealed`)."""
        return self.unsealed is not None and self.state is HandoverState.DRAINING

    def _set_state(self, new: HandoverState, why: str) -> None:
        """The one transition: every change of state goes through here, and is logged."""
        if new is self.state:
            return
        log.info("executor %s: %s -> %s (%s)", self.executor.executor_id, self.state.value, new.value, why)
        self.state = new

    # -- the new copy -------------------------------------------------------------------------
    def await_state(self, timeout: float, move: Move) -> None:
        """This copy replaces one on another worker: hold input until its state comes."""
        self.move = move
        self.wait_until = time.monotonic() + timeout
        self._set_state(HandoverState.AWAITING_STATE, f"moved here from {move.source}")

    def announce(self) -> None:
        """Ask the old copy for the state (READY), once ``open``/``prepare`` is done; again while waiting."""
        if self.awaiting and self.move:
            self.ready_sent_at = time.monotonic()
            self.courier.control(self.executor.task, self.move.source, wire.READY,
                                 {"worker": self.host.worker_id, "copy": self.copy_id})

    def wait(self, on_other: Callable[[int, Any, int], None] | None = None) -> None:
        """One step of the wait (10 ms at most); the deadline holds whatever arrives meanwhile.
        Other control messages go to ``on_other(kind, entries, src)``, which holds what must
        wait for the state."""
        now = time.monotonic()
        if self.held_since is None and not self.executor.inbox.data.empty():
            self.held_since = now
        if now > self.wait_until:
            self._start_empty("no state arrived in time")
            return
        if now - self.ready_sent_at >= READY_RESEND_SECS:
            self.announce()
        try:
            kind, src, entries = self.executor.inbox.control.get(timeout=0.01)
        except queue.Empty:
            return
        if kind == wire.STATE:
            self._take(entries)
        elif kind == wire.STATE_PART:
            try:
                entry = self.parts.add(entries)
            except Exception as exc:  # noqa: BLE001 - garbage or a gap: no state can be made of it
                self._start_empty(f"its state came in parts that do not fit together ({exc})")
                return
            if entry is not None:
                self._take(entry)
        elif kind == wire.GONE:
            self._start_empty(f"its old place {self.move.source if self.move else '?'} has no state for it")
        elif on_other is not None:
            on_other(kind, entries, src)

    def _take(self, entry: Mapping[str, Any]) -> None:
        now = time.monotonic()
        self.executor.restore(entry)
        # The executor stood still from the old copy's last tuple (it sent its state then)
        # or from the first tuple held here, whichever came first, until now.
        stall = max(time.time() - float(entry.get("sent_at") or time.time()),
                    now - self.held_since if self.held_since is not None else 0.0, 0.0)
        self._set_state(HandoverState.RUNNING, f"state taken after {stall:.3f}s")
        self._done(stall, lost=False)

    def _start_empty(self, why: str) -> None:
        log.warning("executor %s: %s; starting empty", self.executor.executor_id, why)
        self.parts.clear()
        checkpoints = getattr(self.host, "checkpoints", None)
        if checkpoints is not None:  # durable state: the topology rolls back to its last checkpoint
            checkpoints.request_rollback(f"{self.executor.executor_id} got no state from its old place")
        self._set_state(HandoverState.RUNNING, "started empty")
        self._done(0.0, lost=True)

    def _done(self, stall: float, lost: bool) -> None:
        if self.move is not None and self.move.record:
            self.host.migrations.completed(self.move.record, stall, lost)

    # -- the old copy -------------------------------------------------------------------------
    def begin_drain(self, upstream: Iterable[int], timeout: float, version: int = 0) -> None:
        """This copy moved away in plan ``version``: finish what ``upstream`` sent here (their
        markers), then hand over.

        The worker calls this before it swaps in that plan's routing table, and the copy's loop
        picks the table up once per pass: until it has, it must not hand over. A copy that did
        would send its state to the place the old table names (its own worker, where nobody
        takes it) and end without the markers it owes the executors moved with it."""
        self.alignment.expect(upstream)
        self.drain_secs = timeout
        self.drain_until = time.monotonic() + timeout
        self.drain_version = version
        self._set_state(HandoverState.DRAINING, "moved away")

    def on_marker(self, src: int) -> None:
        self.alignment.mark(src)

    def on_control(self, kind: int, entries: Any) -> bool:
        """A migration message outside the wait: READY (to the old copy), a late GONE or STATE."""
        if kind == wire.READY:
            self.ready_seen = True
            if isinstance(entries, Mapping):
                self.ready_copy = entries.get("copy")
            return True
        if kind == wire.GONE:
            return True  # an answer to a READY sent again after the state had come
        if kind == wire.SEALED:
            if self.unsealed is not None and type(entries) is int:
                self.unsealed.discard(entries)
            return True  # (one that came after the seals' deadline, passed on: nothing to do)
        if kind == wire.STATE or (kind == wire.STATE_PART and isinstance(entries, Mapping) and entries.get("seq") == 0):
            log.warning("executor %s: a state hand-over came after this copy had started; ignored",
                        self.executor.executor_id)
            return True
        return kind == wire.STATE_PART  # the rest of that late one

    def drained(self, input_empty: bool) -> bool:
        """True when the state may go: markers aligned, input empty and the new copy ready, or the
        drain deadline passed (what is still queued is then dropped: the acker replays it); in
        either case only once the copy routes by the plan that moved it (:meth:`begin_drain`)."""
        routing = self.executor.routing
        if routing is None or routing.version < self.drain_version:
            return False
        if self.alignment.complete and input_empty and self.ready_seen:
            return not self._seal(routing)
        if time.monotonic() > self.drain_until:
            dropped = self.executor.drop_input()
            if dropped or not self.alignment.complete or not self.ready_seen:
                log.warning("executor %s: lazy kill after DK; %d queued tuples dropped, markers missing from %s%s",
                            self.executor.executor_id, dropped, self.alignment.missing,
                            "" if self.ready_seen else ", the new copy never asked")
            return not self._seal(routing)
        return False

    # -- seals: the new copy sends nothing before what this one sent is in (durable state) ----
    def _seal(self, routing: RoutingTable) -> bool:
        """With checkpoints on, send a SEAL behind this copy's data to every downstream task of
        another worker; True if there were any (:meth:`wait_sealed` then waits for their answers).

        The new copy's tuples and barriers take other pipes than this copy's last tuples: a
        downstream task could take the new copy's barrier first, and checkpoint a state without
        tuples that the spout's part of the same checkpoint counts as done (a restore from it
        loses them), or the new copy's tuples before this copy's barrier (a restore counts them
        twice). Tasks in this worker need none: this copy's tuples are on their queues already."""
        if getattr(self.host, "checkpoints", None) is None:
            return False
        here = self.host.worker_id
        targets = {dst: wid for dst in self.executor.downstream_tasks()
                   if (wid := routing.location[dst]) and wid != here}
        if not targets:
            return False
        self.executor.flush()
        for dst, wid in targets.items():
            self.courier.seal(dst, wid, here)
        self.unsealed = set(targets)
        self.sealed_at = time.monotonic()
        self.seal_until = self.sealed_at + max(self.drain_secs, 0.1)
        return True

    def wait_sealed(self) -> bool:
        """One step (10 ms at most) of the wait for SEALED answers; once every one is in, or at
        the deadline (then a checkpoint may miss this copy's last tuples: the topology rolls
        back), it hands over and returns True: the copy's loop ends. Other control messages
        wait, and go to the new copy behind the state."""
        if self._sealed():
            self.hand_over()
            return True
        return False

    def _sealed(self) -> bool:
        courier = self.courier
        if courier.backlog:
            courier.drain()  # the seals wait behind data a full pipe did not take yet
        try:
            kind, src, entries = self.executor.inbox.control.get(timeout=0.01)
        except queue.Empty:
            pass
        else:
            if kind == wire.SEALED or kind == wire.READY:
                self.on_control(kind, entries)
            else:
                self.passed_on.append((kind, src, entries))
        if not self.unsealed:
            return True
        if time.monotonic() <= self.seal_until:
            return False
        log.warning("executor %s: no answer to its seal from tasks %s in %.1fs; handing over all the same",
                    self.executor.executor_id, sorted(self.unsealed), self.seal_until - self.sealed_at)
        checkpoints = getattr(self.host, "checkpoints", None)
        if checkpoints is not None:
            checkpoints.request_rollback(f"{self.executor.executor_id}: seals unanswered at a move")
        return True

    def hand_over(self) -> None:
        """Snapshot the executor and send it to its current place; the copy's loop ends."""
        self.executor.flush()
        entry = self.executor.snapshot()
        routing = self.executor.routing  # the plan that moved it, or a later one (drained)
        to = routing.location[self.executor.task] if routing is not None else ""
        entry.update(sent_at=time.time(), copy=self.ready_copy)
        entry["from"] = self.host.worker_id
        parts = state_parts(entry)
        if parts is None:
            self.courier.control(self.executor.task, to, wire.STATE, entry)
        else:
            for part in parts:
                self.courier.control(self.executor.task, to, wire.STATE_PART, part)
            # The copy's loop ends now and closes its sockets: let them send the parts for as long
            # as the new copy waits for them (worker.state.wait.ms), not the usual second.
            self.courier.linger_ms = max(self.courier.linger_ms, int(float(self.host.conf["worker.state.wait.ms"])))
        self.host.migrations.handed_over(self.executor.task, to, self.ready_copy)
        sealed = (f", after its seals' answers ({(time.monotonic() - self.sealed_at) * 1000:.1f} ms)"
                  if self.unsealed is not None else "")
        self._set_state(HandoverState.HANDED_OVER, f"{len(entry['state'])} bytes of state sent to {to}"
                        + (f" in {len(parts)} parts" if parts else "") + sealed)
        # What came while sealing, or since the loop's last look at its control queue (acks, a
        # spout's completions, orders), goes behind the state: the worker hands this copy no more
        # from now on (it stashes them for the new place), and nobody would read them here.
        self.passed_on.extend(self.executor.inbox.close())
        for kind, src, entries in self.passed_on:
            if kind not in _NOT_PASSED_ON:
                self.courier.control(self.executor.task, to, kind, entries, src)
        self.passed_on = []


def _merge_arrival(info: dict[str, Any], arrived: Mapping[str, Any]) -> None:
    """Add executors that have their key groups to a rescale record; complete it once all are in."""
    merged = dict(info.get("arrived") or {})
    merged.update(arrived)
    info["arrived"] = merged
    if set(info.get("waiting") or ()) <= set(merged):
        info["completed_at"] = time.time()
        info["stall_secs"] = max((float(a.get("stall_secs") or 0.0) for a in merged.values()), default=0.0)
        info["state_lost"] = any(bool(a.get("state_lost")) for a in merged.values())


def mark_moves(old: RoutingTable | None, new: RoutingTable, buffers: Mapping[int, Any],
               flush: Callable[[Any], None], courier: Courier) -> None:
    """An upstream executor's side of a move, when its routing table changes from ``old`` to
    ``new``: for every destination that changed place, what it buffered for the old place
    leaves first, then a marker on the same pipe (FIFO per sender), so that the old copy knows
    it has everything from this executor once the marker is in (its :class:`Alignment`)."""
    if old is None or old is new:
        return
    for dst, buf in buffers.items():
        was = old.location[dst]
        if was and dst < len(new.location) and new.location[dst] != was:
            if buf:
                flush(buf)
            courier.marker(dst, was)  # the courier still has the old table: that worker may have left


class MigrationDesk:
    """A worker's side of migration: where it handed states over, answers to READY for tasks
    that left, and the completions it owes ZooKeeper (written by the main loop)."""

    def __init__(self, worker_id: str, send_gone: Callable[[str, int, Any], None]) -> None:
        """``send_gone(worker, task, entries)`` sends a GONE (from the worker's main thread)."""
        self.worker_id = worker_id
        self.send_gone = send_gone
        self.completions: queue.SimpleQueue[tuple[str, dict[str, Any]]] = queue.SimpleQueue()
        self._handovers: dict[int, tuple[str, Any, float]] = {}  # task -> (to, copy, when)
        self._unreported: list[tuple[str, dict[str, Any]]] = []

    def handed_over(self, task: int, to: str, copy: Any) -> None:
        """An old copy sent its state (to ``copy`` at ``to``; None: to whichever copy runs there,
        the new copy had not asked by the drain deadline)."""
        self._handovers[task] = (to, copy, time.monotonic())

    def answer_ready(self, task: int, entries: Any) -> None:
        """A READY for a task that neither runs nor drains here (main loop only): see the module docstring."""
        if not isinstance(entries, Mapping) or not isinstance(entries.get("worker"), str):
            return
        sender, copy = entries["worker"], entries.get("copy")
        sent = self._handovers.get(task)
        if sent is not None and sent[0] == sender and sent[1] in (None, copy):
            return
        log.info("task %d: READY from %s, but no copy here holds its state: answered GONE", task, sender)
        self.send_gone(sender, task, {"worker": self.worker_id})

    def completed(self, record: str, stall: float, lost: bool) -> None:
        """A moved-in copy resumed (any thread): its record is completed by :meth:`report`."""
        self.completions.put((record, {"completed_at": time.time(), "stall_secs": round(stall, 4), "state_lost": lost}))

    def restarted(self, record: str, lost: bool) -> None:
        """A process- or stop-mode move's executor started at its new place (any thread): its
        stall is from the request to now (the old copy stopped for it), and its state is lost
        unless a checkpoint restores it."""
        self.completions.put((record, {"completed_at": time.time(), "state_lost": lost, "stall_from_request": True}))

    def shift_done(self, record: str, executor: str, stall: float, lost: bool) -> None:
        """An executor has the key groups a rescale gave it (any thread): :meth:`report` adds it to
        the record's ``arrived``, and completes the record when every executor it waits for is there."""
        self.completions.put((record, {"arrived": {executor: {"at": time.time(), "stall_secs": round(stall, 4),
                                                              "state_lost": lost}}}))

    def prune(self) -> None:
        now = time.monotonic()
        for task, (_to, _copy, at) in list(self._handovers.items()):
            if now - at > HANDOVER_MEMORY_SECS:
                del self._handovers[task]

    def report(self, zk: Any, records_path: str) -> None:
        """Mark finished migrations completed under ``records_path``; kept for a retry while
        ZooKeeper is unreachable (main loop only)."""
        while True:
            try:
                self._unreported.append(self.completions.get_nowait())
            except queue.Empty:
                break
        if zk is None or not self._unreported:
            return
        pending, self._unreported = self._unreported, []
        for i, (record, update) in enumerate(pending):
            path = f"{records_path}/{record}"
            try:
                data, stat = zk.get(path)
                info = json.loads(data.decode())
                if info.get("completed_at"):
                    continue  # reported before (this worker restarted since)
                if "arrived" in update:
                    _merge_arrival(info, update["arrived"])
                elif update.get("stall_from_request"):
                    done = float(update["completed_at"])
                    info.update(completed_at=done, state_lost=update["state_lost"],
                                stall_secs=round(max(0.0, done - float(info.get("requested_at") or done)), 4))
                else:
                    info.update(update)
                zk.set(path, encode(info), version=stat.version)
                if info.get("completed_at"):
                    log.info("migration %s of %s completed (stall %.3fs)", record, info.get("executor"),
                             info.get("stall_secs") or 0.0)
            except BadVersionError:
                self._unreported.extend(pending[i:])  # another worker wrote it meanwhile: again next cycle
                return
            except NoNodeError:
                continue  # the topology was killed
            except (ConnectionLoss, SessionExpiredError, ZookeeperError, KazooTimeoutError):
                self._unreported.extend(pending[i:])  # ZooKeeper is away: retry next cycle
                return
            except Exception:  # noqa: BLE001 - bookkeeping only
                log.warning("cannot record completion of migration %s", record, exc_info=True)
