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
import queue
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError, ZookeeperError
from kazoo.handlers.threading import KazooTimeoutError

from kvstore import LMDBPlanStore, StoreMissingError
from nstorm.loader import load_topology
from nstorm.zkschema import ACTIVE, ZkPaths, connect, encode
from supervisor.cpulimit import ENV_CPU_LIMIT
from worker import wire
from worker.backpressure import BackpressureMonitor
from worker.executor import AckerExecutor, BoltExecutor, Executor, SpoutExecutor
from worker.fencing import Fence
from worker.metrics import MetricsCollector
from worker.routing import RoutingTable
from worker.transport import Transport

__all__ = ["Worker"]

log = logging.getLogger(__name__)

_HANDOVER_MEMORY_SECS = 120.0  # how long a worker remembers where it handed a state over


class Worker:
    """One worker process. See the module docstring."""

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
        self.stash: dict[int, list[tuple[float, Any]]] = {}  # frames for tasks not (yet) here
        self.lock = threading.Lock()  # executors/draining/stash changes vs the receivers' slow path
        self.completions: queue.SimpleQueue[tuple[str, dict[str, Any]]] = queue.SimpleQueue()
        self.restart_pending = False
        self.routing: RoutingTable | None = None
        self.version = 0
        self.active = False
        self.conf: dict[str, Any] = {}
        self.acking = False
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
        self._unreported: list[tuple[str, dict[str, Any]]] = []  # completions ZooKeeper has not taken yet
        # task -> (worker, copy, when) of the states handed over from here lately: a READY that comes
        # after the copy left is answered from it (worker.process.Worker.answer_ready)
        self._handovers: dict[int, tuple[str, Any, float]] = {}

    @property
    def throttled(self) -> bool:
        """True while some worker of the topology is congested: spouts pause."""
        bp = self.backpressure
        return self.fenced or (bp is not None and bp.throttled)

    # -- plan handling ---------------------------------------------------------------------
    def local_queue(self, dst: int, wid: str) -> Any:
        """The data queue of ``dst`` if it runs (or still drains) in this worker, else None."""
        if wid != self.worker_id:
            return None
        ex = self.executors.get(dst) or self.draining.get(dst)
        return ex.data_q if ex is not None else None

    def local_target(self, dst: int, wid: str) -> Executor | None:
        """The executor ``dst`` if it runs (or still drains) in this worker, else None."""
        if wid != self.worker_id:
            return None
        return self.executors.get(dst) or self.draining.get(dst)

    def local_control(self, dst: int, wid: str) -> Any:
        if wid != self.worker_id:
            return None
        ex = self.executors.get(dst) or self.draining.get(dst)
        return ex.ctl_q if ex is not None else None

    def target(self, dst: int) -> Any:
        """The executor a frame for ``dst`` goes to here: the running copy, else a draining one."""
        return self.executors.get(dst) or self.draining.get(dst)

    def stash_frame(self, dst: int, item: Any) -> None:
        """Keep a frame for a task this worker does not host, until the next plan says where it is.

        Called by a receiver: the task may be about to arrive here (the plan that moves it
        is on its way) or may have left (the frame is forwarded). The main loop settles it.
        """
        with self.lock:
            ex = self.target(dst)
            if ex is not None:  # arrived while we looked
                (ex.data_q if item[0] == "data" else ex.ctl_q).put(item[1])
                return
            self.stash.setdefault(dst, []).append((time.monotonic(), item))
        self._wake.set()

    def handed_over(self, task: int, to: str, copy: Any) -> None:
        """Called by an old copy when it has sent its state (to ``copy`` at ``to``; None: to whichever
        copy runs there, the new copy had not announced itself by the drain deadline)."""
        self._handovers[task] = (to, copy, time.monotonic())

    def answer_ready(self, task: int, entries: Any) -> None:
        """A new copy's READY came for a task this worker neither runs nor drains (main loop only).

        If the state went to that very copy (or blindly to its worker), it is on its way and the
        copy keeps waiting; otherwise no state will come from here (this worker restarted since,
        or the state went to an earlier incarnation of the copy's worker): GONE tells it to start
        empty now instead of at its deadline.
        """
        if not isinstance(entries, Mapping) or not isinstance(entries.get("worker"), str):
            return
        sender, copy = entries["worker"], entries.get("copy")
        sent = self._handovers.get(task)
        if sent is not None and sent[0] == sender and sent[1] in (None, copy):
            return
        log.info("task %d: READY from %s, but no copy here holds its state: answered GONE", task, sender)
        self.transport.send_control(sender, wire.GONE, task, {"worker": self.worker_id})  # type: ignore[union-attr]

    def migration_done(self, ex: Executor, stall: float, lost: bool) -> None:
        """Called by a moved-in copy when it resumes; reported to ZooKeeper by the main loop."""
        migration = getattr(ex, "migration", None) or {}
        record = migration.get("record")
        if record:
            self.completions.put((record, {"completed_at": time.time(), "stall_secs": round(stall, 4),
                                           "state_lost": lost}))

    def _load_code(self, plan: Mapping[str, Any]) -> None:
        self.submission = plan.get("submission")
        self.definition = plan["definition"]
        self.conf = dict(plan["conf"])
        self.acking = bool(any(t.startswith("__acker:") for t in plan["tasks"]))
        main = Path(plan["code_dir"]) / plan["main"]
        topology = load_topology(main, plan.get("user_conf") or {}, module_name=f"nstorm_topology_{self.topology}")
        self.classes = topology.classes

    def _make_executor(self, eid: str, task: int) -> Executor:
        comp = eid.rpartition(":")[0]
        if comp == "__acker":
            return AckerExecutor(self, eid, task)
        spec = self.definition["components"][comp]
        cls = self.classes[comp]
        if spec["kind"] == "spout":
            return SpoutExecutor(self, eid, task, cls, self.definition)
        return BoltExecutor(self, eid, task, cls, self.definition)

    def _upstream_tasks(self, routing: RoutingTable, component: str) -> set[int]:
        """Every executor that may send data to ``component`` (it waits for their markers)."""
        sources = {i["component"] for i in self.definition["components"][component]["inputs"]}
        return {t for c in sources for t in routing.component_tasks.get(c, ())}

    def apply_plan(self, plan: Mapping[str, Any]) -> bool:
        """Move to ``plan``; False if this worker is no longer part of it."""
        if not self.classes:
            self._load_code(plan)
        if plan.get("submission") != self.submission:
            log.info("plan v%s belongs to another submission of %s: this worker's is over", plan.get("version"),
                     self.topology)
            return False
        routing = RoutingTable.from_plan(plan)
        if self.worker_id not in routing.endpoints:
            return False
        if self.version and routing.restart.get(self.worker_id) == routing.version:
            # process mode: the supervisor restarts this worker; move nothing as threads.
            if not self.restart_pending:
                log.info("plan v%d restarts this worker (process mode): waiting to be restarted", routing.version)
            self.restart_pending = True
            return True
        state_wait = float(self.conf["worker.state.wait.ms"]) / 1000.0
        drain = float(self.conf["worker.lazy.kill.ms"]) / 1000.0
        mine = {routing.tasks.index(e): e for e in routing.executors_of(self.worker_id)}
        created: list[Executor] = []
        with self.lock:
            for task, eid in mine.items():
                if task in self.executors:
                    continue
                ex = self._make_executor(eid, task)
                moved = routing.moved.get(eid)
                if moved and moved.get("to") == self.worker_id and ex.kind != "acker":
                    if moved.get("mode") == "thread" and moved.get("from") != self.worker_id:
                        ex.await_state(state_wait, moved)  # type: ignore[attr-defined]
                    elif moved.get("mode") != "thread":
                        ex.migration = moved  # type: ignore[attr-defined]  # process/stop: done once started
                for _, item in self.stash.pop(task, []):
                    (ex.data_q if item[0] == "data" else ex.ctl_q).put(item[1])
                self.executors[task] = ex
                created.append(ex)
            lost = [t for t in self.executors if t not in mine]
            for task in lost:
                ex = self.executors.pop(task)
                if ex.kind == "acker":
                    ex.stop()
                    continue
                ex.begin_drain(self._upstream_tasks(routing, ex.component), drain)  # type: ignore[attr-defined]
                self.draining[task] = ex
            self.active = plan.get("status") == ACTIVE
            self.routing = routing  # the atomic swap: every executor sees it on its next loop
            self.version = routing.version
        for ex in created:
            ex.start()
            if getattr(ex, "migration", None) and getattr(ex, "awaiting_until", None) is None:
                self.migration_done(ex, 0.0, lost=False)  # process/stop mode: started is done
        if created or lost:
            log.info("plan v%d: started %s; %s moved away (draining)", self.version,
                     [e.executor_id for e in created], [routing.tasks[t] for t in lost])
        return True

    def _settle(self) -> None:
        """Reap finished draining copies; deliver or forward stashed frames."""
        for task, ex in list(self.draining.items()):
            if ex.state == "STOPPED":
                with self.lock:
                    if self.draining.get(task) is ex:
                        del self.draining[task]
        now = time.monotonic()
        for task, (_to, _copy, at) in list(self._handovers.items()):
            if now - at > _HANDOVER_MEMORY_SECS:
                del self._handovers[task]
        if not self.stash:
            return
        patience = 2 * float(self.conf["worker.sync.interval.ms"]) / 1000.0 + 0.05
        with self.lock:
            for dst in list(self.stash):
                ex = self.target(dst)
                items = self.stash[dst]
                if ex is not None:
                    for _, item in items:
                        (ex.data_q if item[0] == "data" else ex.ctl_q).put(item[1])
                    del self.stash[dst]
                elif items and now - items[0][0] > patience:
                    del self.stash[dst]
                    for _, item in items:
                        if item[0] == "ctl" and item[1][0] == wire.READY:
                            self.answer_ready(dst, item[1][2])  # never forwarded: it asks this place
                        else:
                            self.transport.forward(dst, item)  # type: ignore[union-attr]

    def _report_completions(self) -> None:
        """Mark finished migrations completed in ZooKeeper; kept for a retry while it is unreachable."""
        while True:
            try:
                self._unreported.append(self.completions.get_nowait())
            except queue.Empty:
                break
        if self._zk is None or not self._unreported:
            return
        pending, self._unreported = self._unreported, []
        for i, (record, update) in enumerate(pending):
            path = f"{self.paths.migrations(self.topology)}/{record}"
            try:
                data, stat = self._zk.get(path)
                info = json.loads(data.decode())
                if info.get("completed_at"):
                    continue  # reported before (this worker restarted since)
                info.update(update)
                self._zk.set(path, encode(info), version=stat.version)
                log.info("migration %s of %s completed (stall %.3fs)", record, info.get("executor"), update["stall_secs"])
            except NoNodeError:
                continue  # the topology was killed
            except (ConnectionLoss, SessionExpiredError, ZookeeperError, KazooTimeoutError):
                self._unreported.extend(pending[i:])  # ZooKeeper is away: retry next cycle
                return
            except Exception:  # noqa: BLE001 - bookkeeping only
                log.warning("cannot record completion of migration %s", record, exc_info=True)

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
        executors = {ex.executor_id: ex.counters() for ex in list(self.executors.values())}
        for ex in list(self.draining.values()):
            executors.setdefault(ex.executor_id, ex.counters())
        return {
            "worker_id": self.worker_id,
            "submission": self.submission,
            "pid": os.getpid(),
            "time": time.time(),
            "version": self.version,
            "cpu": self.metrics.last_load["cpu"] if self.metrics else 0.0,
            "queue": self.metrics.last_load["queue"] if self.metrics else 0,
            "cpu_limit": self.cpu_limit,
            "executors": executors,
            "dropped_frames": self.transport.dropped if self.transport else 0,
            "forwarded": self.transport.forwarded if self.transport else 0,
            "curve_refused": self.transport.security.refused if self.transport else 0,
            "backpressure_events": self.backpressure.events if self.backpressure else 0,  # on/off switches
        }

    def _heartbeat_loop(self) -> None:
        interval = float(self.conf.get("worker.heartbeat.interval.secs", 1.0))
        path = self.paths.workerbeat(self.topology, self.worker_id)
        beat_file = self.store_path.parent / f"heartbeat-{self.port}.json"
        failing = False
        while not self._stop.wait(interval):
            beat = self.heartbeat()
            try:
                tmp = beat_file.with_suffix(".tmp")
                tmp.write_text(json.dumps(beat))
                tmp.replace(beat_file)
            except OSError:
                log.exception("cannot write local heartbeat")
            if self._zk is None:
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
        latest = store.latest(self.topology)
        if latest is None:
            log.error("no plan for topology %s in %s", self.topology, self.store_path)
            return 1
        _, plan = latest
        self._load_code(plan)
        # A thread woken by a socket or queue waits for the GIL until the running thread
        # is forced to drop it; a short interval keeps hand-offs between executors quick.
        sys.setswitchinterval(float(self.conf["worker.gil.switch.interval.ms"]) / 1000.0)
        endpoint = plan["workers"].get(self.worker_id)
        if endpoint is None:
            log.error("worker %s is not in plan v%s", self.worker_id, plan["version"])
            return 1
        self.transport = Transport(self, endpoint["host"], int(endpoint["port"]), int(endpoint["ctl_port"]),
                                   self.curve_keys)
        if self.zk_address:
            try:
                session = float(self.conf["nstorm.zookeeper.session.timeout.secs"])
                self._zk = connect(self.zk_address, session_timeout=session)
                # kazoo reports SUSPENDED about 2/3 of a session after the last contact, so a third
                # more is when the server expires the session and Nimbus may reassign.
                self.fence = Fence(self.worker_id, session / 3.0)
                self._zk.add_listener(self.fence.on_state)
            except Exception:  # noqa: BLE001 - run without heartbeats to ZooKeeper
                log.warning("cannot reach ZooKeeper at %s; running without heartbeats", self.zk_address)
        self.backpressure = BackpressureMonitor(self)
        self.apply_plan(plan)
        self.transport.start()
        self.backpressure.start()
        self.metrics = MetricsCollector(self)
        self.metrics.start()  # after the first plan: every frame then finds its executor or a route
        self._tune_gc()
        self.state = "RUNNING"
        log.info("worker %s running topology %s (plan v%d, pid %d)", self.worker_id, self.topology, self.version, os.getpid())
        threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()
        interval = float(self.conf["worker.sync.interval.ms"]) / 1000.0
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                version = store.latest_version(self.topology)
            except Exception:  # noqa: BLE001 - a store being rebuilt: try again next cycle
                log.warning("plan store unreadable", exc_info=True)
                continue
            if version is None:
                if not self._store_synced(store):
                    continue  # rebuilt empty just now: the supervisor is mirroring the plans back
                log.info("topology %s removed from the plan store: stopping", self.topology)
                break
            if version != self.version:
                got = store.latest(self.topology)
                if got is not None and not self.apply_plan(got[1]):
                    log.info("worker %s is not in plan v%d: stopping", self.worker_id, got[0])
                    break
            if self.fence is not None:
                self.fenced = self.fence.check(self._plan_is_current)
            self._settle()
            self._report_completions()
        self.shutdown()
        return 0

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

    def shutdown(self) -> None:
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
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:  # noqa: BLE001
                pass
        self.state = "STOPPED"

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
