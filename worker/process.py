"""The worker process: runs a topology's executors on one slot of a node.

It reads its node's plan from the LMDB store every ``worker.sync.interval.ms``
(TW): on a new version it starts executor threads it gained, swaps its routing
table in one assignment, and stops executors it lost after
``worker.lazy.kill.ms`` (DK) so their queues drain. It reports a heartbeat
with per-executor counters to ZooKeeper, and never needs ZooKeeper to keep
processing tuples.

States: ``STARTING -> RUNNING`` once the first plan is applied;
``RUNNING -> STOPPING`` on SIGTERM/SIGINT or when the plan no longer has this
worker; ``STOPPING -> STOPPED`` before the process exits.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvstore import KVStoreError, LMDBPlanStore, StoreMissingError
from nstorm.config import ENV_CPU_LIMIT
from nstorm.errors import AuthError, NStormError, TopologyLoadError, UsageError
from nstorm.home import logs_dir
from nstorm.loader import is_member_name, load_topology
from nstorm.logtail import events_file
from nstorm.plan import LocalPlan, PlanError
from nstorm.records import Heartbeat, MoveMode, TopologyStatus
from nstorm.signals import relay_signals
from nstorm.state.config import state_config
from nstorm.state.record import CheckpointRecord
from nstorm.ticker import passes
from nstorm.topology import ACKER, component_of, is_acker
from nstorm.zkschema import ZkPaths, connect, encode
from worker import wire
from worker.acker import AckerExecutor
from worker.backpressure import BackpressureMonitor
from worker.bolt import BoltExecutor
from worker.cpupin import CorePin, pin_worker
from worker.delivery import CONTROL, DATA, Courier, Inbox, Sockets
from worker.eventlog import EventFile, EventSampling
from worker.executor import Executor, UserExecutor
from worker.fencing import Fence
from worker.host import ExecutorStats
from worker.loglevels import LogLevels
from worker.metrics import MetricsCollector
from worker.migration import MigrationDesk
from worker.recovery import WorkerCheckpoints
from worker.routing import RoutingTable
from worker.sched import batch_in_effect, batch_threads
from worker.spout import SpoutExecutor
from worker.stats import StatsWindow
from worker.threaddump import ThreadDumps
from worker.transport import WORKER_TASK, Transport
from worker.windowed import WindowedBoltExecutor

__all__ = ["Worker"]

log = logging.getLogger(__name__)
# Whether this interpreter runs one thread's Python at a time: with the GIL, a chain's threads
# share one core's Python whether chained or not (nimbus.latency unchains only without it).
_GIL = bool(getattr(sys, "_is_gil_enabled", lambda: True)())

_STATE_KINDS = (wire.STATE, wire.STATE_PART, wire.ACKER_TABLE)  # a moved executor's state, kept for its new copy
_UNKNOWN_TASK_PATIENCE_SECS = 30.0  # frames for a task id no plan here has named yet wait this long


def write_local_beat(beat_file: Path, beat: dict[str, Any]) -> OSError | None:
    """Write the local heartbeat its supervisor watches (worker hung if it goes stale); when the
    file cannot be written (a full disk), touch the old one's time instead, so that a live
    worker is not killed as hung every timeout. Returns the write's error, if any."""
    try:
        tmp = beat_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(beat))
        tmp.replace(beat_file)
    except OSError as exc:
        try:
            os.utime(beat_file)
        except OSError:
            pass  # no file yet either: the supervisor's start timeout decides
        return exc
    return None


def _carries_tuples(item: Any) -> bool:
    """A stashed data item with tuples in it (not a marker, a barrier or a rescale's marker)."""
    payload = item[1]
    return payload is not None and type(payload) not in (int, wire.ShiftMark, wire.Seal)


class Worker:
    """One worker process, and the :class:`~worker.host.Host` of its parts. See the module docstring."""

    def __init__(
        self, node: str, port: int, topology: str, store_path: Path, zk_address: str | None, zk_root: str,
        curve_keys: Path | None = None,
    ) -> None:
        """``curve_keys``: the keys directory when CurveZMQ is on (the supervisor decides), else None."""
        self.node = node
        self.curve_keys = curve_keys
        self.port = port
        self.topology = topology
        self.worker_id = f"{node}:{port}"
        # Cores this process may use when its supervisor caps it (supervisor/cpulimit.py); None: one
        # core, the GIL's bound. OTD measures load against it.
        self.cpu_limit = float(os.environ[ENV_CPU_LIMIT]) if os.environ.get(ENV_CPU_LIMIT) else None
        self.store_path = store_path
        self.zk_address = zk_address
        self.paths = ZkPaths(zk_root)
        self.state = "STARTING"
        self.executors: dict[int, Executor] = {}
        self.draining: dict[int, Executor] = {}  # moved-away copies still finishing their input
        self.stashed: dict[int, list[tuple[float, Any]]] = {}  # frames for tasks not (yet) here
        # Executors/draining/stash changes vs the receivers' slow path; re-entrant: a rollback
        # replays held frames through the receiver's path while it holds it.
        self.lock = threading.RLock()
        self.restart_pending = False
        self.log_levels: LogLevels | None = None  # the topology's dynamic log levels (set_log_level)
        self.event_file = EventFile(events_file(logs_dir(), self.worker_id))  # opened at the first event
        self.events: EventSampling | None = None  # the topology's event sampling (worker.eventlog)
        self.dumps = ThreadDumps(logs_dir(), self.worker_id,
                                 lambda: f"topology {self.topology}, plan v{self.version}")  # on request
        self.routing: RoutingTable | None = None
        self.version = 0
        self.first_version = 0  # the plan this process started with: a restart asked later is not done yet
        self.active = False
        self.conf: dict[str, Any] = {}
        self.core_pin: CorePin | None = None  # the core this worker holds (worker.cpu.pin), if any
        self.acking = False
        self.sockets: Sockets | None = None  # type: ignore[assignment]
        self.courier = Courier(self, WORKER_TASK)  # the main loop's: forwarded frames, GONE answers
        self.migrations = MigrationDesk(self.worker_id, self._send_gone)
        self.forwarded = 0  # frames sent on to an executor's new place
        self.forward_dropped = 0  # ... that its new place did not take (a full pipe)
        self.transport: Transport | None = None
        self.backpressure: BackpressureMonitor | None = None
        self.metrics: MetricsCollector | None = None
        self.classes: Mapping[str, type] = {}
        self.definition: Mapping[str, Any] = {}
        self.submission: str | None = None  # of the topology's code and conf this worker runs
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._zk = None
        self.fence: Fence | None = None
        self.fenced = False  # cut off from ZooKeeper long enough to have been replaced: spouts pause
        self.epoch = 0  # rollbacks taken (worker.recovery): data frames of an older epoch are dropped
        self.checkpoints: WorkerCheckpoints | None = None  # None: topology.state.provider=memory
        self.local: LocalPlan | None = None  # the plan applied last
        self.newer: list[list[bytes]] = []  # data frames of a newer epoch, until this worker rolls back
        self.newer_bytes = 0  # their size: at most wire.MAX_FRAME_BYTES are kept
        self.ordered = 0  # the last checkpoint passed on to the spouts
        self.committed = 0  # the last commit passed on to the executors
        self.applied_once = False
        self.stats: StatsWindow | None = None  # rates, capacity, execute latency in heartbeats
        self._store_trouble = False  # the plan store failed the last read (logged once)
        self.exit_code = 0  # 1 once an executor's loop failed (executor_failed)
        self.sched_batch = False  # its threads run under SCHED_BATCH (worker.sched.batch, if the kernel let it)

    @property
    def throttled(self) -> bool:
        """True while some worker of the topology is congested: spouts pause."""
        bp = self.backpressure
        return self.fenced or (bp is not None and bp.throttled)

    # -- the host of executors, receivers, backpressure and metrics (worker.host.Host) --------
    def inbox(self, task: int, wid: str | None = None) -> Inbox | None:
        """The inbox of ``task`` if it runs (or still drains) here; with ``wid``, only if that is here."""
        if wid is not None and wid != self.worker_id:
            return None
        ex = self.executors.get(task)
        if ex is None:
            ex = self.draining.get(task)
            if ex is not None and ex.handed_over:
                return None  # its loop has ended: what comes now is stashed and forwarded, not left unread
        return ex.inbox if ex is not None else None

    def inboxes(self) -> list[Inbox]:
        return [ex.inbox for ex in list(self.executors.values())]

    def executor_stats(self) -> list[ExecutorStats]:
        everyone = list(self.executors.values()) + list(self.draining.values())
        return [ExecutorStats(ex.executor_id, ex.task, ex.traffic, ex.data_q.qsize(), ex.thread.native_id)
                for ex in everyone]

    def stash(self, dst: int, channel: str, item: Any, extra: Any, epoch: int | None = None) -> bool:
        """Keep a frame for a task this worker does not host, until the next plan says where it is.

        Called by a receiver: the task may be about to arrive here (the plan that moves it
        is on its way) or may have left (the frame is forwarded). The main loop settles it.
        A data frame's ``epoch`` is compared under the lock a rollback takes: one of an epoch
        rolled back meanwhile is dropped, not given to the executors the rollback makes (False).
        """
        with self.lock:
            if epoch is not None and epoch != self.epoch:
                return False
            inbox = self.inbox(dst)
            if inbox is not None and inbox.put(channel, item):  # arrived while we looked
                return True
            self.stashed.setdefault(dst, []).append((time.monotonic(), (channel, item, extra)))
        self._wake.set()
        return True

    def hold_newer(self, frames: list[bytes], epoch: int) -> bool:
        """Keep a data message of a newer ``epoch`` until this worker rolls back; False (not kept)
        if it has rolled back meanwhile: a message kept after the rollback took the list would
        wait for the next one, and be dropped then."""
        if self.checkpoints is None:  # no checkpoints, no rollbacks: no newer epoch exists (garbage)
            self._drop_newer()
            return True
        size = sum(map(len, frames))
        with self.lock:
            if epoch <= self.epoch:
                return False
            if self.newer_bytes + size > wire.MAX_FRAME_BYTES:  # bounded: the acker replays what is dropped
                self._drop_newer()
                return True
            self.newer.append(frames)
            self.newer_bytes += size
        self._wake.set()
        return True

    def _drop_newer(self) -> None:
        if self.transport is not None:
            self.transport.dropped += 1

    def _send_gone(self, wid: str, task: int, entries: Any) -> None:
        self.courier.routing = self.routing
        self.courier.control_frame(wid, wire.control_message(wire.GONE, task, WORKER_TASK, entries))

    def _load_code(self, local: LocalPlan) -> None:
        self.submission = local.plan.submission
        self.definition = local.definition
        self.conf = dict(local.conf)
        self.acking = any(is_acker(t) for t in local.plan.tasks)
        config = state_config(self.conf)
        if config.durable and self.checkpoints is None:
            self.checkpoints = WorkerCheckpoints(config, self.topology, self.submission, self.worker_id, self._wake.set)
        if not is_member_name(local.main):  # a path would run a file the archive's checksum does not cover
            msg = f"topology {self.topology}: main {local.main!r} is not a file of its code archive"
            raise TopologyLoadError(msg)
        main = Path(local.code_dir) / local.main
        topology = load_topology(main, local.user_conf, module_name=f"nstorm_topology_{self.topology}")
        self.classes = topology.classes

    def _make_executor(self, eid: str, task: int) -> Executor:
        comp = component_of(eid)
        if comp == ACKER:
            return AckerExecutor(self, eid, task)
        spec = self.definition["components"][comp]
        cls = self.classes[comp]
        if spec["kind"] == "spout":
            return SpoutExecutor(self, eid, task, cls, self.definition)
        if spec.get("window"):
            return WindowedBoltExecutor(self, eid, task, cls, self.definition)
        return BoltExecutor(self, eid, task, cls, self.definition)

    def _upstream_tasks(self, routing: RoutingTable, component: str) -> set[int]:
        """Every executor that may send data to ``component`` (it waits for their markers)."""
        sources = {i["component"] for i in self.definition["components"][component]["inputs"]}
        return {t for c in sources for t in routing.component_tasks.get(c, ())}

    def apply_plan(self, local: LocalPlan) -> bool:
        """Move to ``plan``; False if this worker is no longer part of it."""
        if not self.classes:
            self._load_code(local)
        plan = local.plan
        if plan.submission != self.submission:
            log.info("plan v%d belongs to another submission of %s: this worker's is over", plan.version,
                     self.topology)
            return False
        routing = RoutingTable.from_plan(plan)
        if self.worker_id not in routing.endpoints:
            return False
        self.local = local
        self.first_version = self.first_version or routing.version
        asked = routing.restart_asked(self.worker_id, self.first_version)
        if asked is not None:
            # process mode: the supervisor restarts this worker (for the plan ``asked``, which a
            # later plan carries on until it is done); move nothing as threads, apply no later plan.
            if not self.restart_pending:
                log.info("plan v%d restarts this worker (process mode): waiting to be restarted", asked)
            self.restart_pending = True
            return True
        state_wait = float(self.conf["worker.state.wait.ms"]) / 1000.0
        drain = float(self.conf["worker.lazy.kill.ms"]) / 1000.0
        mine = {routing.tasks.index(e): e for e in plan.executors_of(self.worker_id)}
        # Executors a rescale adds take their key groups from the old owners (worker.rescale).
        rescaled = {e for step in plan.rescales.values() for e in step.new if e not in step.old}
        created: list[Executor] = []
        started: list[str] = []
        with self.lock:
            for task, eid in mine.items():
                if task in self.executors:
                    continue
                ex = self._make_executor(eid, task)
                move = plan.moved.get(eid)
                awaiting = eid in rescaled
                if move and move.target == self.worker_id and isinstance(ex, UserExecutor):
                    if move.mode is MoveMode.THREAD and move.source != self.worker_id:
                        ex.handover.await_state(state_wait, move)
                        awaiting = True
                    elif move.mode is not MoveMode.THREAD and move.record:
                        started.append(move.record)  # process/stop mode: started is done
                if self.checkpoints is not None and isinstance(ex, UserExecutor) and not awaiting:
                    self._start_from_checkpoint(ex)
                for _, (channel, item, _extra) in self.stashed.pop(task, []):
                    ex.inbox.put(channel, item)
                self.executors[task] = ex
                created.append(ex)
            lost = [t for t in self.executors if t not in mine]
            ackers: list[AckerExecutor] = []
            for task in lost:
                ex = self.executors.pop(task)
                if isinstance(ex, AckerExecutor):
                    ackers.append(ex)  # its open trees go to its new place once the routing says where
                    continue
                if not isinstance(ex, UserExecutor):
                    ex.stop()
                    continue
                if plan.retiring.get(ex.executor_id) == self.worker_id:
                    self.draining[task] = ex  # removed by a rescale: it gives its key groups away, then ends
                    continue
                ex.handover.begin_drain(self._upstream_tasks(routing, ex.component), drain, routing.version)
                self.draining[task] = ex
            self.active = plan.status is TopologyStatus.ACTIVE
            self.routing = routing  # the atomic swap: every executor sees it on its next loop
            self.version = routing.version
            for acker in ackers:
                sent = acker.hand_over()  # (and stops it)
                log.info("plan v%d: acker %s moved to %s with %d open trees", self.version, acker.executor_id,
                         routing.location[acker.task], sent)
        self.applied_once = True
        for ex in created:
            ex.start()
            if self.checkpoints is not None and self.ordered and isinstance(ex, SpoutExecutor):
                ex.inbox.put_control(wire.CHECKPOINT, WORKER_TASK, self.ordered)  # taken unless done before
        for record in started:
            self.migrations.restarted(record, lost=self.checkpoints is None)
        if created or lost:
            log.info("plan v%d: started %s; %s moved away (draining)", self.version,
                     [e.executor_id for e in created], [routing.tasks[t] for t in lost])
        return True

    # -- checkpoints and rollbacks (worker.recovery) ------------------------------------------
    def _start_from_checkpoint(self, ex: UserExecutor) -> None:
        """A user executor that comes without a hand-over: at this process's first plan it starts
        from the current epoch's checkpoint (0: the empty start); on a later plan it has lost
        its state (a process-mode move, or a worker lost with its node), so the topology rolls back."""
        assert self.checkpoints is not None
        if not self.applied_once:
            orders = self.checkpoints.orders
            ex.restore_from = orders.restore if orders is not None and orders.restore else None
        else:
            self.checkpoints.request_rollback(f"{ex.executor_id} started here without its state")

    def _follow_orders(self) -> None:
        """Carry out the coordinator's newest orders (main loop)."""
        cp = self.checkpoints
        orders = cp.orders if cp is not None else None
        if orders is None:
            return
        if orders.epoch > self.epoch:
            self._roll_back(orders)
            return
        users = [ex for ex in [*self.executors.values(), *self.draining.values()] if isinstance(ex, UserExecutor)]
        if orders.pending > self.ordered:
            self.ordered = orders.pending
            for ex in users:
                if isinstance(ex, SpoutExecutor):
                    ex.inbox.put_control(wire.CHECKPOINT, WORKER_TASK, orders.pending)
        if orders.committed > self.committed:
            self.committed = orders.committed
            for ex in users:
                ex.inbox.put_control(wire.COMMITTED, WORKER_TASK, orders.committed)

    def _roll_back(self, orders: CheckpointRecord) -> None:
        """Undo everything since checkpoint ``orders.restore``: stop every executor, drop what is
        queued and stashed, and start them again from that checkpoint in the new epoch."""
        assert self.checkpoints is not None
        began = time.monotonic()
        log.warning("rolling back to checkpoint %d (epoch %d -> %d)", orders.restore, self.epoch, orders.epoch)
        routing, local = self.routing, self.local
        with self.lock:
            old = [*self.executors.values(), *self.draining.values()]
            self.executors, self.draining = {}, {}
            self.stashed.clear()
            self.epoch = orders.epoch  # from here on, older frames are dropped as they come
            newer, self.newer = self.newer, []
            self.newer_bytes = 0
            # Frames of this epoch that came before the rollback go to the stash first, ahead of
            # any a receiver stashes from now on (it waits for the lock): each channel's order,
            # barriers included, is kept into the new executors.
            for frames in newer:
                self.transport.replay(frames)  # type: ignore[union-attr]
        for ex in old:
            outbox = getattr(ex, "outbox", None)
            if outbox is not None:
                outbox.courier.retire()  # a thread slow to stop cannot reach the new executors
            ex.stop()
        for ex in old:
            ex.join(timeout=2.0)
            if not ex.stopped:
                log.warning("executor %s did not stop within 2s of the rollback; its output is dropped",
                            ex.executor_id)
        self.checkpoints.rolled_back(orders.epoch)
        self.ordered = orders.pending
        self.committed = orders.committed
        created: list[Executor] = []
        if routing is not None and local is not None:
            mine = {routing.tasks.index(e): e for e in local.plan.executors_of(self.worker_id)}
            with self.lock:
                fresh: dict[int, Executor] = {}
                for task, eid in mine.items():
                    ex = self._make_executor(eid, task)
                    if isinstance(ex, UserExecutor):
                        ex.restore_from = orders.restore  # 0: the empty start
                    # What was stashed since the rollback began (frames of the new epoch) goes in
                    # before the executor is seen by a receiver, which puts the later frames in.
                    for _, (channel, item, _extra) in self.stashed.pop(task, []):
                        ex.inbox.put(channel, item)
                    fresh[task] = ex
                    created.append(ex)
                self.executors = fresh
            for ex in created:
                ex.start()
                if orders.pending and isinstance(ex, SpoutExecutor):
                    # A worker that rolls back late (a restart, a loaded machine) finds the next
                    # checkpoint ordered already: its spouts take it, or none commits until it is
                    # abandoned, and every failure meanwhile rolls back to the same old checkpoint.
                    ex.inbox.put_control(wire.CHECKPOINT, WORKER_TASK, orders.pending)
            for eid, move in local.plan.moved.items():
                if move.target == self.worker_id and move.record and eid in mine.values():
                    self.migrations.completed(move.record, 0.0, lost=False)  # restored, not handed over
        log.warning("rolled back to checkpoint %d in %.3fs (epoch %d, %d executors restored)", orders.restore,
                    time.monotonic() - began, orders.epoch, len(created))

    def _settle(self) -> None:
        """Reap finished draining copies; deliver, forward or answer stashed frames."""
        for task, ex in list(self.draining.items()):
            if ex.stopped:
                with self.lock:
                    if self.draining.get(task) is ex:
                        del self.draining[task]
        self.migrations.prune()
        if not self.stashed:
            return
        now = time.monotonic()
        patience = 2 * float(self.conf["worker.sync.interval.ms"]) / 1000.0 + 0.05
        state_wait = float(self.conf["worker.state.wait.ms"]) / 1000.0
        known = len(self.routing.location) if self.routing is not None else 0
        with self.lock:
            for dst in list(self.stashed):
                inbox = self.inbox(dst)
                items = self.stashed[dst]
                if inbox is not None:
                    # (An executor that hands over meanwhile refuses the rest: it stays stashed.)
                    taken = 0
                    for _, (channel, item, _extra) in items:
                        if not inbox.put(channel, item):
                            break
                        taken += 1
                    if taken == len(items):
                        del self.stashed[dst]
                    else:
                        del items[:taken]
                elif dst >= known and items and now - items[0][0] <= _UNKNOWN_TASK_PATIENCE_SECS:
                    continue  # a task a rescale adds: the plan that makes it is on its way here
                elif dst >= known:
                    del self.stashed[dst]
                    log.warning("%d frames for task %d dropped: no plan made it", len(items), dst)
                elif items and now - items[0][0] > patience:
                    if any(channel == CONTROL and item[0] in _STATE_KINDS and now - at <= state_wait
                           for at, (channel, item, _extra) in items):
                        # A state (or its parts) goes to where the new copy is to be: keep it, and
                        # what came with it, for the plan that makes the copy here, up to the state
                        # wait, rather than send it back (parts split between here and there would
                        # not fit together).
                        continue
                    del self.stashed[dst]
                    for _, (channel, item, extra) in items:
                        if channel == CONTROL and item[0] == wire.READY:
                            self.migrations.answer_ready(dst, item[2])  # never forwarded: it asks this place
                        else:
                            self._forward(dst, channel, item, extra)

    def _forward(self, dst: int, channel: str, item: Any, extra: Any) -> None:
        """Send a stashed frame on to where the routing table now puts ``dst`` (main loop only)."""
        routing = self.routing
        wid = routing.location[dst] if routing is not None else ""
        if not wid or wid == self.worker_id:
            log.warning("a frame for task %d dropped: it has no place", dst)
            if self.checkpoints is not None and channel == DATA and _carries_tuples(item):
                self.checkpoints.request_rollback(f"a frame for task {dst} had no place")
            return
        self.courier.routing = routing
        if channel == DATA:
            src, payload = item
            hops, count = extra
            if payload is None:
                header = wire.marker_header(dst, src, self.epoch)
            elif type(payload) is int:
                header = wire.barrier_header(dst, src, payload, self.epoch, hops + 1)
                payload = None
            elif type(payload) is wire.ShiftMark:
                header = wire.shift_mark_header(dst, src, payload.version, self.epoch, hops + 1)
                payload = None
            elif type(payload) is wire.Seal:
                header = wire.seal_header(dst, src, self.epoch, hops + 1)
                payload = payload.worker.encode()
            else:
                header = wire.data_header(dst, src, hops + 1, count, self.epoch)
            sent = self.courier.frame(wid, header, payload or b"")
        else:
            sent = self.courier.control_frame(wid, extra)
        if sent:
            self.forwarded += 1
            return
        self.forward_dropped += 1  # its new place takes nothing now (dead?): the acker replays it
        if self.checkpoints is not None and channel == DATA and _carries_tuples(item):
            self.checkpoints.request_rollback(f"a frame for task {dst} could not be forwarded")
        if self.forward_dropped <= 10 or self.forward_dropped % 1000 == 0:
            log.warning("a frame for task %d not forwarded: %s takes nothing now; %d so far", dst, wid,
                        self.forward_dropped)

    def _read_plan(self, store: LMDBPlanStore) -> LocalPlan | None:
        """The latest local plan of this worker's topology; None if there is none (or it is damaged,
        or the store is: its supervisor rebuilds it, and the next poll reads it again)."""
        try:
            latest = store.latest(self.topology)
        except KVStoreError as exc:
            self._store_unreadable(exc)
            return None
        self._store_trouble = False
        if latest is None:
            return None
        try:
            return LocalPlan.from_json(self.topology, latest[1])
        except PlanError as exc:
            log.error("%s (v%d in the store): ignored", exc, latest[0])
            return None

    def _store_unreadable(self, exc: Exception) -> None:
        """Log a failed plan-store read once until a read succeeds (polls come every TW); the
        running plan stays meanwhile (its supervisor rebuilds the store)."""
        if not self._store_trouble:
            log.warning("plan store unreadable (%s): the running plan stays, polling on", exc)
        self._store_trouble = True

    @staticmethod
    def _store_synced(store: LMDBPlanStore) -> bool:
        try:
            return store.get_meta("synced") is not None
        except Exception:  # noqa: BLE001 - unreadable while being rebuilt: not synced
            return False

    def _plan_is_current(self) -> bool:
        """True when the plan in ZooKeeper is the version this worker runs (after a cut: nothing moved)."""
        assert self._zk is not None
        raw, _ = self._zk.get(self.paths.assignment(self.topology))
        return int(json.loads(raw.decode()).get("version", -1)) == self.version

    # -- heartbeat ---------------------------------------------------------------------------
    def heartbeat(self) -> dict[str, Any]:
        """This worker's :class:`~nstorm.records.Heartbeat`, as JSON."""
        executors = {ex.executor_id: ex.counters() for ex in list(self.executors.values())}
        for ex in list(self.draining.values()):
            executors.setdefault(ex.executor_id, ex.counters())
        if self.metrics is not None:
            for eid, cpu in self.metrics.executor_cpu.items():
                if eid in executors:
                    executors[eid]["cpu"] = round(cpu, 4)  # cores, over the last metrics interval
        if self.stats is None:
            self.stats = StatsWindow(float(self.conf.get("worker.stats.window.secs") or 10.0))
        self.stats.apply(time.monotonic(), executors)
        load = self.metrics.last_load if self.metrics else {"cpu": 0.0, "queue": 0}
        return Heartbeat(
            worker_id=self.worker_id, submission=self.submission, pid=os.getpid(), time=time.time(),
            version=self.version, cpu=float(load["cpu"]), queue=int(load["queue"]), cpu_limit=self.cpu_limit,
            core=self.core_pin.core if self.core_pin else None, sched_batch=self.sched_batch,
            gil=_GIL, curve=self.curve_keys is not None, executors=executors, dropped_frames=self.transport.dropped if self.transport else 0,
            forwarded=self.forwarded, curve_refused=self.sockets.security.refused if self.sockets else 0,
            backpressure_events=self.backpressure.events if self.backpressure else 0,  # on/off switches
        ).to_json()

    def _heartbeat_loop(self) -> None:
        interval = float(self.conf.get("worker.heartbeat.interval.secs", 1.0))
        path = self.paths.workerbeat(self.topology, self.worker_id)
        beat_file = self.store_path.parent / f"heartbeat-{self.port}.json"
        failing = beat_unwritable = False
        while not self._stop.wait(interval):
            if self.core_pin is None:  # every core was held (a stopping topology's workers): try again
                self.core_pin = pin_worker(self.conf, again=True)
            beat: dict[str, Any] | None
            try:
                beat = self.heartbeat()
            except Exception:  # noqa: BLE001 - an executor's counters mid-change (a user gauge...): next beat
                log.exception("cannot build a heartbeat; the next one is in %.1fs", interval)
                beat = None
            # the supervisor kills a worker whose local beat goes stale: this thread is alive
            error = write_local_beat(beat_file, beat if beat is not None else {"worker_id": self.worker_id,
                                                                                "time": time.time()})
            if error is not None and not beat_unwritable:
                log.warning("cannot write the local heartbeat (%s): touching the last one instead", error)
            beat_unwritable = error is not None
            if self._zk is None or beat is None:
                continue
            if not self._zk.connected:
                # kazoo queues a call made while disconnected until the reconnect: this thread
                # would stop beating locally, and the supervisor kill the worker as hung.
                if not failing:
                    log.warning("ZooKeeper away: heartbeats to it wait; processing goes on")
                failing = True
                continue
            try:
                data = encode(beat)
                if self._zk.exists(path):
                    self._zk.set(path, data)
                else:
                    self._zk.create(path, data, ephemeral=True, makepath=True)
                if failing:
                    log.info("heartbeats to ZooKeeper resumed")
                failing = False
            except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble must not stop processing
                if not failing:  # once per outage: tuples keep flowing without ZooKeeper
                    log.warning("heartbeat to ZooKeeper failed (%s); processing goes on", type(exc).__name__)
                failing = True

    # -- main loop --------------------------------------------------------------------------
    def _open_store(self, timeout: float = 60.0) -> LMDBPlanStore:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return LMDBPlanStore(self.store_path, readonly=True)
            except StoreMissingError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def run(self) -> int:
        store = self._open_store()
        local = self._read_plan(store)
        if local is None:
            log.error("no plan for topology %s in %s", self.topology, self.store_path)
            return 1
        self._load_code(local)
        levels = self.log_levels = LogLevels(self.topology, self.submission, self._sample_events)
        # A thread woken by a socket or queue waits for the GIL until the running thread
        # is forced to drop it; a short interval keeps hand-offs between executors quick.
        sys.setswitchinterval(float(self.conf["worker.gil.switch.interval.ms"]) / 1000.0)
        # Before the sockets and the executors start their threads: they inherit the core and the policy.
        self.core_pin = pin_worker(self.conf)
        batch_threads(self.conf)
        self.sched_batch = batch_in_effect()
        slot = local.plan.workers.get(self.worker_id)
        if slot is None:
            log.error("worker %s is not in plan v%d", self.worker_id, local.plan.version)
            return 1
        self.sockets = Sockets(self.curve_keys)
        self.backpressure = BackpressureMonitor(self)
        self.transport = Transport(self, self.sockets, slot.host, slot.port, slot.ctl_port,
                                   self.backpressure.on_announcement)
        if self.zk_address:
            self._connect_zookeeper()  # AuthError (one line, exit 1) for credentials it refuses
        if self.checkpoints is not None:
            self._join_checkpoints()
        self.apply_plan(local)
        self.transport.start()
        self.backpressure.start()
        self.metrics = MetricsCollector(self)
        self.metrics.start()  # after the first plan: every frame then finds its executor or a route
        self._tune_gc()
        self.state = "RUNNING"
        log.info("worker %s running topology %s (plan v%d, pid %d)", self.worker_id, self.topology, self.version, os.getpid())
        threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()
        interval = float(self.conf["worker.sync.interval.ms"]) / 1000.0
        left = False  # this worker left the plan (not stopped by a signal)
        for _ in passes(self._stop, self._wake, interval):
            try:
                version = store.latest_version(self.topology)
            except Exception as exc:  # noqa: BLE001 - a store being rebuilt: try again next cycle
                self._store_unreadable(exc)
                continue
            if version is None:
                if not self._store_synced(store):
                    continue  # rebuilt empty just now: the supervisor is mirroring the plans back
                log.info("topology %s removed from the plan store: stopping", self.topology)
                break
            if version != self.version:
                got = self._read_plan(store)
                if got is not None and not self.apply_plan(got):
                    log.info("worker %s is not in plan v%d: stopping", self.worker_id, got.plan.version)
                    left = True
                    break
            levels.poll(store.get_meta, time.time(), time.monotonic())  # set_log_level's settings
            if self.fence is not None:
                self.fenced = self.fence.check(self._plan_is_current)
            # A ZooKeeper call made while disconnected waits for the reconnect (kazoo queues it):
            # it would hold this loop, and with it the fence's check, through the outage.
            zk = self._zk if self._zk is not None and self._zk.connected else None
            if self.checkpoints is not None:
                self._follow_orders()
                self.checkpoints.send_requests(zk, self.paths)
            self._settle()
            self.migrations.report(zk, self.paths.migrations(self.topology))
        self.shutdown(left_plan=left)
        store.close()  # its reader slot: the process ends with os._exit, which would leave it taken
        return self.exit_code

    def _join_checkpoints(self) -> None:
        """Before the first plan: the current epoch and its checkpoint, and whether this worker id
        ran before (a restart has lost its executors' state: the topology rolls back)."""
        cp = self.checkpoints
        assert cp is not None
        zk = self._zk
        if zk is None:
            cp.request_rollback("worker started without ZooKeeper")
            return
        try:
            raw, _ = zk.get(self.paths.checkpoints(self.topology))
        except Exception:  # noqa: BLE001 - no record yet (the coordinator makes it): the first start
            raw = None
        orders = CheckpointRecord.from_json(raw)
        if orders is not None and orders.submission == self.submission:
            cp.orders = orders
            self.epoch = orders.epoch
            cp.epoch = orders.epoch
            self.ordered = orders.pending
            self.committed = orders.committed
        if cp.register_life(zk, self.paths):
            cp.request_rollback(f"worker {self.worker_id} restarted")
        cp.watch(zk, self.paths)

    def _connect_zookeeper(self) -> None:
        """Connect for heartbeats and completions; a worker also runs without ZooKeeper (it needs
        none to process tuples), but not with credentials ZooKeeper refuses: that is a
        configuration error, raised as :class:`~nstorm.errors.AuthError`."""
        session = float(self.conf["nstorm.zookeeper.session.timeout.secs"])
        try:
            zk = connect(self.zk_address, session_timeout=session)  # type: ignore[arg-type]
        except NStormError as exc:
            if isinstance(exc, UsageError):
                raise  # malformed credentials
            log.warning("cannot reach ZooKeeper at %s; running without heartbeats", self.zk_address)
            return
        try:
            self.paths.check_access(zk)
        except AuthError:
            zk.stop()
            zk.close()
            raise
        except Exception:  # noqa: BLE001 - ZooKeeper went away meanwhile: heartbeats retry later
            log.warning("ZooKeeper at %s did not answer; heartbeats retry", self.zk_address)
        self._zk = zk
        # kazoo reports SUSPENDED about 2/3 of a session after the last contact, so a third
        # more is when the server expires the session and Nimbus may reassign.
        self.fence = Fence(self.worker_id, session / 3.0)
        zk.add_listener(self.fence.on_state)

    def _tune_gc(self) -> None:
        """Fewer cyclic-GC passes over the tuples in flight (``worker.gc.threshold``).

        Tuples die by reference counting; the cyclic collector still runs every
        ``threshold`` allocations of containers and walks every live one of the young
        generation, which on the tuple path are the tuples waiting in buffers and queues.
        Objects that exist at start-up (modules, the topology's code) are frozen out of
        collections altogether. Python's default threshold is 700.
        """
        threshold = int(self.conf.get("worker.gc.threshold") or 0)
        if threshold <= 0:
            return
        gc.collect()
        gc.freeze()
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(threshold, gen1, gen2)

    def request_stop(self, *_: Any) -> None:
        self._stop.set()
        self._wake.set()

    def executor_failed(self, executor_id: str) -> None:
        """An executor's loop raised (not its user code, which is caught per call): its thread is
        gone, its queue would fill and backpressure pause every spout. As in Storm, the worker
        exits (code 1) and its supervisor starts it again; what was in flight is replayed."""
        if self.state != "RUNNING":
            return  # stopping anyway
        log.error("executor %s stopped on an error: worker %s exits to be restarted", executor_id, self.worker_id)
        self.exit_code = 1
        self.request_stop()

    def shutdown(self, left_plan: bool = False) -> None:
        """Stop everything; ``left_plan``: the plan no longer has this worker (a later worker of
        this id is a new one, not a restart)."""
        self.state = "STOPPING"
        log.info("worker %s stopping", self.worker_id)
        everyone = list(self.executors.values()) + list(self.draining.values())
        for ex in everyone:
            ex.stop()
        for ex in everyone:
            ex.join(timeout=2.0)
        if self.metrics:
            self.metrics.stop()
        if self.backpressure:
            self.backpressure.stop()
        if self.transport:
            self.transport.stop()
        self.courier.close()
        if self.sockets:
            self.sockets.stop()
        if self.checkpoints is not None:
            if left_plan and self._zk is not None:
                self.checkpoints.forget_life(self._zk, self.paths)
            self.checkpoints.close()
        self.event_file.close()
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:  # noqa: BLE001
                pass
        self.state = "STOPPED"

    def _sample_events(self, events: Mapping[str, float]) -> None:
        """The topology's event sampling changed: every executor wraps its emits (or unwraps
        them) at its next loop pass."""
        self.events = EventSampling(dict(events), self.event_file) if events else None
        log.info("event sampling %s", ", ".join(f"{c} {p:g}%" for c, p in sorted(events.items())) or "off")

    def install_signal_handlers(self) -> None:
        relay_signals({signal.SIGTERM: self.request_stop, signal.SIGINT: self.request_stop,
                       signal.SIGUSR1: self.nudge})

    def nudge(self, *_: Any) -> None:
        """A new plan (or log levels) is in the store, or a thread dump is asked for (the supervisor
        says so): read it now, not at the next TW; the dump at once, in this (the signal) thread."""
        if self.log_levels is not None:
            self.log_levels.stale = True
        self._wake.set()
        try:
            self.dumps.answer()
        except Exception as exc:  # noqa: BLE001 - a dump not written must not end the signal thread's work
            log.warning("thread dump not written: %s", exc)
