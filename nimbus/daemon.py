"""The Nimbus daemon: turns submitted topologies into versioned allocation plans.

Clients (``nstorm submit``, ``kill``, ``activate``...) write the topology and its
desired status into ZooKeeper; Nimbus is the only writer of
``assignments/<name>``. Every ``nimbus.monitor.interval.secs`` and on every
watch event it reconciles: a first plan for a new topology (round robin over
free slots), the plan's status following the desired status, executors of
workers whose supervisor disappeared reassigned to live slots, completed moves
dropped from the plan, rebalance requests applied, and a killed topology
removed once it has waited what its kill asked for (timed on this Nimbus's clock).

Several Nimbus processes may run (HA); one leads (``nimbus/leader.py``).
States: ``STARTING -> STANDBY`` once connected; ``STANDBY -> LEADING`` when it
holds the leader lock, and back when the ZooKeeper session is lost;
``STOPPING -> STOPPED`` on SIGTERM/SIGINT.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from nimbus.checkpoints import CheckpointCoordinator, drop_checkpoints
from nimbus.latency import LatencyController
from nimbus.rebalance import (
    apply_moves,
    drained_workers,
    hollow,
    random_moves,
    release_workers,
    shed_ackers,
    spread_moves,
    stop_mode_restart,
)
from nimbus.scheduler import EvenScheduler, Scheduler
from nimbus.watchdog import StallWatchdog
from nstorm.chaining import every_pointwise_pair, kept_chains
from nstorm.clusterstate import ClusterState
from nstorm.config import check_directory, daemon_flag, flag, merge_conf, positive_number
from nstorm.constraints import input_components
from nstorm.errors import ConfigError
from nstorm.moves import MODES, RebalanceError, validate_moves
from nstorm.plan import Plan, PlanError, Slot, interleave_slots
from nstorm.records import MigrationRecord, MoveMode, TopologyStatus
from nstorm.rescale import gaining_executors, new_worker_slots, rescale_plan, validate_rescale
from nstorm.signals import relay_signals
from nstorm.spread import even_moves, idle_dropped_workers
from nstorm.state.config import state_config
from nstorm.ticker import passes
from nstorm.topology import component_of
from nstorm.zkschema import ZkPaths, connect, encode

__all__ = ["Nimbus"]

log = logging.getLogger(__name__)

DROP_AGAIN_SECS = 30.0  # a killed topology's checkpoints are deleted again this long after the kill
RELEASE_GRACE_SECS = 1.0  # a released worker's last second: what still reached it is sent on
ORPHAN_GRACE_SECS = 60.0  # an open migration record no plan names is completed this long after its request
ORPHAN_CHECK_SECS = 30.0  # ... looked for at most this often per topology


def _plan_workers(plan: Plan) -> set[str]:
    """Slots a plan holds, including those a stop-mode rebalance has emptied for now."""
    held = set(plan.workers)
    rebalance = plan.rebalance or {}
    held.update(rebalance.get("workers", {}))
    held.update(target for _, target in rebalance.get("moves", []))
    held.update(rebalance.get("new_workers", {}))
    return held


def check_nimbus_conf(conf: Mapping[str, Any]) -> None:
    """Nimbus's own settings, checked as it is built: it reads them in ``float()`` (or ``bool()``)
    only after it has connected and leads, where a bad one was a traceback.

    :raises ConfigError: one line naming the setting.
    """
    for key in ("nstorm.zookeeper.session.timeout.secs", "nimbus.monitor.interval.secs"):
        positive_number(conf, key)
    positive_number(conf, "nimbus.spread.grace.secs", zero_ok=True)
    daemon_flag(conf, "otd.spark.eager", False)
    check_directory(conf, "nstorm.metrics.dir")  # the OTD runner's (scheduler_otd/runner.py)
    if not isinstance(conf.get("otd.spark.master"), str):
        msg = f"-c otd.spark.master={conf.get('otd.spark.master')!r}: expected a Spark master URL such as local[2]"
        raise ConfigError(msg)


class Nimbus:
    """The coordinator. See the module docstring."""

    def __init__(self, zk_address: str, zk_root: str = "/nstorm", conf: Mapping[str, Any] | None = None,
                 scheduler: Scheduler | None = None) -> None:
        self.zk_address = zk_address
        self.paths = ZkPaths(zk_root)
        self.conf = merge_conf(conf)
        check_nimbus_conf(self.conf)
        self.scheduler = scheduler or EvenScheduler()
        self.state = "STARTING"
        self.zk: KazooClient | None = None
        self.cluster: ClusterState | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._registered_since: dict[str, float] = {}  # node -> when this Nimbus first saw it registered
        self._owners: dict[str, str] = {}  # worker id -> the topology whose plan holds it
        self._unwatched: set[str] = set()  # workers that run on while their supervisor is down (no move)
        self._kills: dict[str, tuple[float, float]] = {}  # topology -> (its kill_at, when to remove it: monotonic)
        # (topology, worker) -> (when seen releasing, when every worker was first seen on its version): monotonic
        self._releases: dict[tuple[str, str], tuple[float, float | None]] = {}
        self._orphans_checked: dict[str, float] = {}  # topology -> when to look for orphan records next
        self.watchdog = StallWatchdog()
        self.checkpoints: CheckpointCoordinator | None = None  # the leader's (nimbus/checkpoints.py)
        self._drop_again: list[tuple[float, str, dict[str, Any]]] = []  # (when, name, topo) of killed topologies

    def _watch(self, *_: Any) -> None:
        self._wake.set()

    def _kill_due(self, name: str, kill_at: float) -> bool:
        """Whether the kill of ``name`` has waited what it asked for, on this Nimbus's own clock from
        when it first saw the kill (a ``kill_at`` it has not seen): the killer's clock may be another
        machine's. A Nimbus that takes the lead meanwhile waits the whole time again."""
        assert self.cluster is not None
        seen = self._kills.get(name)
        if seen is None or seen[0] != kill_at:  # a new kill (a second one starts its own wait)
            seen = self._kills[name] = (kill_at, time.monotonic() + self.cluster.kill_wait(name))
        return time.monotonic() >= seen[1]

    # -- reading the cluster ------------------------------------------------------------
    def live_supervisors(self) -> dict[str, dict[str, Any]]:
        assert self.cluster is not None
        result = self.cluster.supervisors(watch=True)
        for node in set(self._registered_since) - set(result):
            del self._registered_since[node]
        for node in result:
            self._registered_since.setdefault(node, time.monotonic())
        return result

    def _beating_workers(self, name: str, plan: Plan, live: Mapping[str, Slot]) -> dict[str, Slot]:
        """Workers of ``plan`` whose supervisor is gone but whose own heartbeat node still exists.

        A supervisor killed (or restarting) leaves its workers running; they keep
        their executors for as long as their ZooKeeper sessions live, as in Storm,
        where Nimbus judges executors by their heartbeats.
        """
        assert self.cluster is not None
        missing = [w for w in plan.workers if w not in live]
        if not missing:
            return {}
        beating = set(self.cluster.children(self.paths.workerbeats(name), watch=True))
        return {wid: plan.workers[wid] for wid in missing if wid in beating}

    # -- reconcile ---------------------------------------------------------------------------
    def reconcile(self) -> None:
        """One pass over every topology (see the module docstring)."""
        assert self.cluster is not None
        supervisors = self.live_supervisors()
        slots = interleave_slots(supervisors)
        live = {s.worker_id: s for s in slots}
        names = self.cluster.names(watch=True)
        plans: dict[str, tuple[Plan | None, Any]] = {}
        names_bad: set[str] = set()
        for name in self.cluster.planned():
            plan, stat = self.cluster.plan(name)
            if plan is None and stat is not None:
                names_bad.add(name)  # damaged: left alone (logged once) until a good plan is written
                continue
            plans[name] = (plan, stat)
        for plan, _ in plans.values():
            if plan is not None:
                live.update(self._beating_workers(plan.topology, plan, live))
        used = {w for plan, _ in plans.values() if plan for w in _plan_workers(plan)}
        self._owners = {w: n for n, (plan, _) in plans.items() if plan for w in _plan_workers(plan)}
        self._unwatched = set(live) - {s.worker_id for s in slots}  # beating, their supervisor gone
        for name in sorted(set(names) - names_bad):
            try:
                self._reconcile_one(name, plans.get(name, (None, None)), slots, live, used)
                self._handle_requests(name, live)
                self.watchdog.check(name, lambda name=name: self._stall_inputs(name))
            except Exception:
                log.exception("cannot reconcile topology %s", name)
        for name in plans:
            if name not in names:
                self._delete(self.paths.assignment(name))
        self._drop_checkpoints_again()

    def _reconcile_one(self, name: str, current: tuple[Plan | None, Any], slots: list[Slot],
                       live: dict[str, Slot], used: set[str]) -> None:
        assert self.cluster is not None and self.zk is not None
        topo = self.cluster.topology(name)
        desired, kill_at = self.cluster.status(name, watch=True)
        if topo is None or desired is None:
            return
        plan, stat = current
        if desired is TopologyStatus.KILLED:
            if self._kill_due(name, kill_at):
                self._kills.pop(name, None)
                self._remove_topology(name)
                return
            desired = TopologyStatus.INACTIVE
        free = [s for s in slots if s.worker_id not in used]
        if plan is None:
            conf = merge_conf(topo["definition"].get("conf"), topo.get("conf"))
            first = self.scheduler.initial_plan(name, topo["definition"], conf, free)
            if first is None:
                log.warning("topology %s waits for a free slot (%d supervisors live)", name, len({s.node for s in slots}))
                return
            first = first.replace(status=desired, code_sha256=topo["code_sha256"], updated_at=time.time(),
                                  submission=topo.get("submission"))
            if flag(conf, "topology.chaining"):
                first = first.replace(chains=every_pointwise_pair(topo["definition"], first))
            try:
                self.zk.create(self.paths.assignment(name), encode(first.to_json()), makepath=True)
            except NodeExistsError:
                return
            used.update(first.workers)
            log.info("topology %s: plan v1 over workers %s", name, sorted(first.workers))
            return
        if plan.rebalance:
            self._advance_stop_rebalance(name, plan, stat, desired)
            return
        current = plan  # every change below goes into one next version
        repaired = self.scheduler.repair_plan(plan, live, free)
        if repaired is not None:
            lost = sorted(set(plan.workers) - set(repaired.workers) - set(plan.releasing))  # (those held nothing)
            if lost:
                log.warning("topology %s: workers %s lost; executors reassigned (v%d)", name, lost,
                            current.version + 1)
                if self.checkpoints is not None:
                    self.checkpoints.roll_back(name, f"workers {lost} lost with their executors")
            stranded = {e: m for e, m in repaired.moved.items() if m.target in lost}
            if stranded:
                # Their new copies were on a lost worker: the executors start afresh where the
                # repair put them (as every executor of a lost worker does), the moves are over.
                repaired = repaired.replace(moved={e: m for e, m in repaired.moved.items() if e not in stranded})
                self._settle_records(name, [m.record for m in stranded.values() if m.record],
                                     f"its target worker was lost ({', '.join(sorted(stranded))})")
            plan = repaired
            used.update(plan.workers)
        if plan.status is not desired:
            plan = plan.replace(status=desired)
            log.info("topology %s: status %s (v%d)", name, desired.value, current.version + 1)
        finished = self._finished_rescales(name, plan)
        if finished:
            plan = plan.replace(rescales={c: r for c, r in plan.rescales.items() if c not in finished},
                                retiring={e: w for e, w in plan.retiring.items() if component_of(e) not in finished})
            log.info("topology %s: rescale of %s completed, dropped from the plan (v%d)", name, sorted(finished),
                     current.version + 1)
        done = self._finished_moves(name, plan)
        empty = drained_workers(plan, sorted(done))
        if done:
            plan = plan.replace(moved={e: m for e, m in plan.moved.items() if e not in done})
            log.info("topology %s: moves of %s completed, dropped from the plan (v%d)", name, sorted(done),
                     current.version + 1)
        if empty:
            plan = shed_ackers(plan, empty, current.version + 1)
            log.info("topology %s: workers %s left without executors by moves: their ackers moved off, released "
                     "once every worker has v%d", name, empty, current.version + 1)
        elif plan.releasing:
            plan = self._release(name, plan)
        if plan != current:
            self.write_plan(name, plan.replace(version=current.version + 1), stat.version)
        else:
            self._settle_orphans(name, plan)
            if desired is TopologyStatus.ACTIVE:
                self._spread_back(name, topo, plan, stat, free, live)

    def _release(self, name: str, plan: Plan) -> Plan:
        """Release the workers of ``plan.releasing`` once every worker of the topology runs the
        version that moved their ackers off (heartbeats; then a second more, for the frames they
        send on), or the message timeout after Nimbus first saw them releasing (a worker that
        does not beat). One that holds something again (a rescale placed an executor there) stays."""
        now = time.monotonic()
        keep = [w for w in plan.releasing if w in plan.workers and not hollow(plan, w)]
        timeout, beats = self._stall_inputs(name)
        ready = []
        for worker, version in plan.releasing.items():
            if worker in keep or worker not in plan.workers:
                continue
            seen, caught = self._releases.get((name, worker), (now, None))
            if caught is None and all(w in beats and beats[w].version >= version for w in plan.workers):
                caught = now
            self._releases[(name, worker)] = (seen, caught)
            if (caught is not None and now - caught >= RELEASE_GRACE_SECS) or now - seen >= timeout:
                ready.append(worker)
        gone = [w for w in plan.releasing if w not in plan.workers]
        for worker in [*ready, *keep, *gone]:
            self._releases.pop((name, worker), None)
        if keep:
            log.info("topology %s: workers %s hold executors again: not released", name, keep)
        if ready:
            log.info("topology %s: workers %s released", name, ready)
        if not (ready or keep or gone):
            return plan
        plan = release_workers(plan, ready)
        return plan.replace(releasing={w: v for w, v in plan.releasing.items() if w not in keep and w not in gone})

    def _stall_inputs(self, name: str) -> tuple[float, dict[str, Any]]:
        """The message timeout of ``name`` and its workers' heartbeats (for the stall watchdog)."""
        assert self.cluster is not None
        topo = self.cluster.topology(name) or {}
        conf = merge_conf(topo.get("definition", {}).get("conf"), topo.get("conf"))
        return float(conf["topology.message.timeout.secs"]), self.cluster.heartbeats(name)

    def _spread_back(self, name: str, topo: Mapping[str, Any], plan: Plan, stat: Any,
                     free: list[Slot], live: dict[str, Slot]) -> None:
        """Give a topology that runs on too few workers the slots that came back, by live moves.

        Only slots of supervisors registered for ``nimbus.spread.grace.secs`` are used:
        a node that returns from a cut first stops the workers it ran before.
        """
        assert self.cluster is not None
        wanted = len(plan.workers) + plan.missing_workers  # workers lost with a node, not ones moves emptied
        if not plan.missing_workers or not free or self.cluster.busy_executors(name):
            return
        grace = float(self.conf.get("nimbus.spread.grace.secs", 10))
        settled = [s for s in free if time.monotonic() - self._registered_since.get(s.node, time.monotonic()) >= grace]
        moves = spread_moves(plan, wanted, settled)
        if not moves:
            return
        request = {"mode": "thread", "moves": moves, "by": "nimbus", "requested_at": time.time()}
        try:
            result = self.rebalance(name, plan, stat.version, request, live)
        except RebalanceError as exc:
            log.warning("topology %s: cannot spread back over returned slots: %s", name, exc)
            return
        log.info("topology %s: spread back over %s (%d moves, v%d)", name,
                 sorted({t for _, t in moves}), len(moves), result["version"])

    # -- rebalance ---------------------------------------------------------------------------
    def _finished_moves(self, name: str, plan: Plan) -> set[str]:
        """Executors whose move in ``plan.moved`` has completed (or whose record is gone).

        A worker that starts an executor the plan says was moved to it waits for the old copy's
        state; once the move is complete no state will come, so a worker that restarts later must
        not find the move in the plan. Watches each open record, so its completion wakes Nimbus.
        """
        assert self.cluster is not None
        done = set()
        for executor, move in plan.moved.items():
            if not move.record:
                done.add(executor)
                continue
            record = self.cluster.migration(name, move.record, watch=True)
            if record is None or record.completed_at:
                done.add(executor)
        return done

    def _finished_rescales(self, name: str, plan: Plan) -> set[str]:
        """Components whose rescale in ``plan.rescales`` has completed (or whose record is gone);
        watches each open record, so its completion wakes Nimbus."""
        assert self.cluster is not None
        done = set()
        for component, step in plan.rescales.items():
            record = self.cluster.migration(name, step.record, watch=True) if step.record else None
            if record is None or record.completed_at:
                done.add(component)
        return done

    def _create_records(self, name: str, plan: Plan, moves: list[tuple[str, str]], mode: MoveMode,
                        by: str, requested_at: float, version: int) -> dict[str, str]:
        assert self.zk is not None
        records = {}
        for executor, target in moves:
            record = MigrationRecord(executor, plan.executors[executor], target, mode, by, requested_at, version)
            path = self.zk.create(f"{self.paths.migrations(name)}/m-", encode(record.to_json()), sequence=True,
                                  makepath=True)
            records[executor] = path.rsplit("/", 1)[1]
        return records

    def _handle_requests(self, name: str, live: dict[str, Slot]) -> None:
        """Apply pending rebalance requests of ``name`` in order; write each result back."""
        assert self.zk is not None and self.cluster is not None
        for child in sorted(self.cluster.children(self.paths.requests(name), watch=True)):
            path = f"{self.paths.requests(name)}/{child}"
            request, stat = self.cluster.read(path)
            if not isinstance(request, dict) or request.get("result"):
                if isinstance(request, dict) and time.time() - float(request["result"].get("at", 0)) > 300:
                    self._delete(path)  # nobody collected it
                continue
            plan, plan_stat = self.cluster.plan(name)
            try:
                if plan is None:
                    msg = f"topology {name!r} has no plan yet"
                    raise RebalanceError(msg)
                result = self.rebalance(name, plan, plan_stat.version, request, live)
            except RebalanceError as exc:
                result = {"ok": False, "error": str(exc)}
                log.warning("rebalance of %s rejected: %s", name, exc)
            result["at"] = time.time()
            try:
                if request.get("by") == "otd":
                    self.zk.delete(path, version=stat.version)  # nobody waits for the scheduler's own requests
                else:
                    self.zk.set(path, encode({**request, "result": result}), version=stat.version)
            except (NoNodeError, BadVersionError):
                pass

    def rebalance(self, name: str, plan: Plan, zk_version: int, request: Mapping[str, Any],
                  live: dict[str, Slot]) -> dict[str, Any]:
        """Validate and apply one request; returns ``{"ok", "version", "records", "moves", "mode"}``."""
        assert self.cluster is not None
        mode = request.get("mode", "thread")
        if mode not in MODES:
            msg = f"unknown mode {mode!r}: use one of {', '.join(MODES)}"
            raise RebalanceError(msg)
        mode = MoveMode(mode)
        if request.get("tuning") is not None:
            return self._tune(name, plan, zk_version, request)
        if request.get("chains") is not None:
            return self._chain(name, plan, zk_version, request)
        if request.get("parallelism"):
            return self._rescale(name, plan, zk_version, request, live, mode)
        busy = self.cluster.busy_executors(name)
        by = request.get("by", "user")
        idle: list[str] = []
        if request.get("spread"):  # Storm's rebalance [-n N]: even over N workers (default: as many as now)
            count = request.get("workers")
            count = len(plan.workers) if count is None else count
            moves = even_moves(plan, count, self._free(live), self._unwatched)
            idle = idle_dropped_workers(plan, count, moves, self._unwatched)
            if not moves:
                return self._release_idle(name, plan, zk_version, idle, mode)
        elif request.get("random"):
            moves = random_moves(plan, int(request["random"]), exclude=busy, unwatched=self._unwatched)
            by = "random"
        else:
            moves = [(str(e), str(w)) for e, w in request.get("moves", [])]
        others = {w: t for w, t in self._owners.items() if t != name}
        validate_moves(plan, moves, live, busy, others, self._unwatched)
        requested_at = float(request.get("requested_at") or time.time())
        records = self._create_records(name, plan, moves, mode, by, requested_at, plan.version + 1)
        if mode is MoveMode.STOP:
            wait = float(request.get("wait_secs", 0))
            new = plan.next(status=TopologyStatus.INACTIVE,
                            rebalance={"phase": "draining", "until": time.time() + wait, "moves": moves,
                                       "records": records, "since": time.time()})
        else:
            new = apply_moves(plan, moves, mode, live, records)
        if request.get("spread"):  # the user chose the count: no spreading back to workers lost before
            new = shed_ackers(new, idle, new.version).replace(missing_workers=0)
        self._write_plan_with_records(name, new, zk_version, records)
        log.info("topology %s: %s-mode move of %s (v%d, by %s)", name, mode.value,
                 ", ".join(f"{e}->{w}" for e, w in moves), new.version, by)
        return {"ok": True, "version": new.version, "records": records, "moves": moves, "mode": mode.value}

    def _free(self, live: Mapping[str, Slot]) -> list[Slot]:
        """The live slots no topology's plan holds, in Nimbus's order (for new workers)."""
        return [s for w, s in live.items() if w not in self._owners]

    def _release_idle(self, name: str, plan: Plan, zk_version: int, idle: list[str], mode: MoveMode) -> dict[str, Any]:
        """An even placement that needs no move: the workers it drops that hold only ackers are
        released now (no move will empty them); else nothing changes."""
        if not idle:
            log.info("topology %s: already even over its %d workers, nothing moved", name, len(plan.workers))
            return {"ok": True, "version": plan.version, "records": {}, "moves": [], "mode": mode.value}
        new = shed_ackers(plan, idle, plan.version + 1).replace(version=plan.version + 1, missing_workers=0)
        self._write_plan_with_records(name, new, zk_version, {})
        log.info("topology %s: workers %s hold only ackers: moved off, the workers released next (v%d)", name, idle,
                 new.version)
        return {"ok": True, "version": new.version, "records": {}, "moves": [], "mode": mode.value, "released": idle}

    def _rescale(self, name: str, plan: Plan, zk_version: int, request: Mapping[str, Any], live: dict[str, Slot],
                 mode: MoveMode) -> dict[str, Any]:
        """A parallelism change (``request["parallelism"]``): live (thread mode, key groups handed
        over, nothing stops) or Storm's way (stop mode); ``process`` mode is refused."""
        assert self.cluster is not None and self.zk is not None
        if mode is MoveMode.PROCESS:
            msg = "a parallelism change is live (thread mode) or Storm's (stop mode), not process mode"
            raise RebalanceError(msg)
        topo = self.cluster.topology(name) or {}
        definition = topo.get("definition") or {}
        conf = merge_conf(definition.get("conf"), topo.get("conf"))
        groups = int(conf["topology.max.parallelism"])
        raw = request.get("parallelism")
        changes = {str(k): v for k, v in raw.items()} if isinstance(raw, Mapping) else {}
        workers = request.get("workers")
        free = self._free(live)
        validate_rescale(plan, definition, changes, groups, len(free), workers)
        hosts = request.get("hosts") or []
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            msg = "hosts must be a list of host names (the machines new workers should go to first)"
            raise RebalanceError(msg)
        new_slots = new_worker_slots(free, workers - len(plan.workers), hosts) if workers else []
        by = str(request.get("by", "user"))
        requested_at = float(request.get("requested_at") or time.time())
        live_mode = mode is MoveMode.THREAD
        draft = rescale_plan(plan, changes, new_slots, live_mode, {})
        records: dict[str, str] = {}
        for component, n in changes.items():
            before = sum(1 for e in plan.executors if component_of(e) == component)
            waiting = tuple(gaining_executors(draft.rescales[component], groups)) if live_mode else ()
            record = MigrationRecord(component, str(before), str(n), MoveMode.RESCALE if live_mode else MoveMode.STOP,
                                     by, requested_at, plan.version + 1, waiting=waiting)
            path = self.zk.create(f"{self.paths.migrations(name)}/m-", encode(record.to_json()), sequence=True,
                                  makepath=True)
            records[component] = path.rsplit("/", 1)[1]
        if live_mode:
            new = rescale_plan(plan, changes, new_slots, True, records)
        else:
            wait = float(request.get("wait_secs", 0))
            new = plan.next(status=TopologyStatus.INACTIVE, rebalance={
                "phase": "draining", "until": time.time() + wait, "moves": [], "records": records,
                "parallelism": changes, "new_workers": {s.worker_id: s.to_json() for s in new_slots},
                "since": time.time()})
        self._write_plan_with_records(name, new, zk_version, records)
        log.info("topology %s: %s parallelism change %s (v%d, by %s)", name, "live" if live_mode else "stop-mode",
                 ", ".join(f"{c}={n}" for c, n in changes.items()), new.version, by)
        return {"ok": True, "version": new.version, "records": records, "moves": [], "mode": mode.value,
                "parallelism": changes}

    def _advance_stop_rebalance(self, name: str, plan: Plan, stat: Any, desired: TopologyStatus) -> None:
        """Storm's rebalance, one phase per call: draining -> stopped -> restarted."""
        assert self.cluster is not None
        rb = dict(plan.rebalance or {})
        now = time.time()
        if rb["phase"] == "draining" and now >= float(rb["until"]):
            rb.update(phase="stopped", since=now, workers={w: s.to_json() for w, s in plan.workers.items()})
            new = plan.next(workers={}, rebalance=rb)
            if self.write_plan(name, new, stat.version):
                log.info("topology %s: stop-mode rebalance stopped every worker (v%d)", name, new.version)
        elif rb["phase"] == "stopped":
            beats = self.cluster.children(self.paths.workerbeats(name))
            if beats and now - float(rb["since"]) < 30:
                self._wake.set()
                return
            new = stop_mode_restart(plan, desired, self.cluster.supervisors())
            if rb.get("parallelism"):  # Storm's rebalance -e: the new executors start with the restart
                slots = [Slot.from_json(name, w, s) for w, s in (rb.get("new_workers") or {}).items()]
                new = rescale_plan(new, rb["parallelism"], slots, False, {}).replace(version=new.version)
            if self.write_plan(name, new, stat.version):
                log.info("topology %s: stop-mode rebalance restarted (v%d)", name, new.version)
                if rb.get("parallelism"):
                    for record in (rb.get("records") or {}).values():
                        self._complete_record(name, record)

    def _tune(self, name: str, plan: Plan, zk_version: int, request: Mapping[str, Any]) -> dict[str, Any]:
        """Output-buffer sizes (``tuning``: a latency constraint's, nimbus/latency.py, or a user's,
        ``ClusterClient.tune``) into the next plan; a channel that is not one of the topology's
        is refused (its prefix alone would size the buffers of a real component)."""
        tuning = request["tuning"]
        if not isinstance(tuning, Mapping) or not all(isinstance(k, str) and isinstance(v, Mapping)
                                                      for k, v in tuning.items()):
            msg = "tuning must map channels (upstream>downstream) to sizes"
            raise RebalanceError(msg)
        topo = self.cluster.topology(name) if self.cluster is not None else None
        if topo:
            inputs = input_components(topo["definition"])
            unknown = sorted(k for k in tuning if k.partition(">")[0] not in inputs.get(k.partition(">")[2], ()))
            if unknown:
                msg = f"no such channel: {', '.join(unknown)} (upstream>downstream, where downstream has an input from upstream)"
                raise RebalanceError(msg)
        new = plan.next(tuning=dict(tuning))
        try:
            Plan.from_json(name, new.to_json())
        except PlanError as exc:
            raise RebalanceError(str(exc)) from None
        if not self.write_plan(name, new, zk_version):
            msg = "the plan changed while the request was applied; try again"
            raise RebalanceError(msg)
        log.info("topology %s: output buffers sized (v%d, by %s): %s", name, new.version,
                 request.get("by", "user"), tuning)
        return {"ok": True, "version": new.version, "tuning": tuning}

    def _chain(self, name: str, plan: Plan, zk_version: int, request: Mapping[str, Any]) -> dict[str, Any]:
        """Chains (downstream executor -> upstream executor, nstorm.chaining) into the next plan:
        ``chains`` is the whole new set; a pair that may not be chained is refused."""
        chains = request["chains"]
        if not isinstance(chains, Mapping) or not all(isinstance(d, str) and isinstance(u, str) for d, u in chains.items()):
            msg = "chains must map executors to executors"
            raise RebalanceError(msg)
        topo = self.cluster.topology(name) if self.cluster is not None else None
        new = plan.next(chains=dict(chains))
        kept = kept_chains(topo["definition"], new) if topo else {}
        refused = sorted(set(chains) - set(kept))
        if refused:
            msg = (f"cannot chain {', '.join(f'{d} to {chains[d]}' for d in refused)}: a chained executor's only input "
                   "must be that executor, in its worker (local_or_shuffle, or one executor at each end)")
            raise RebalanceError(msg)
        if not self.write_plan(name, new, zk_version):
            msg = "the plan changed while the request was applied; try again"
            raise RebalanceError(msg)
        log.info("topology %s: chains (v%d, by %s): %s", name, new.version, request.get("by", "user"), kept)
        return {"ok": True, "version": new.version, "chains": kept}

    def _complete_record(self, name: str, record: str) -> None:
        """Mark a migration record completed (a stop-mode parallelism change has restarted): the
        stall is the whole stop, from the request; the state is lost unless checkpoints keep it."""
        assert self.zk is not None and self.cluster is not None
        path = f"{self.paths.migrations(name)}/{record}"
        topo = self.cluster.topology(name) or {}
        try:
            durable = state_config(merge_conf(topo.get("definition", {}).get("conf"), topo.get("conf"))).durable
        except Exception:  # noqa: BLE001 - checked at submit; a damaged record is not ours to fix
            durable = False
        try:
            raw, stat = self.zk.get(path)
            moved = MigrationRecord.from_json(json.loads(raw.decode()), record)
            now = time.time()
            done = moved.completed(now, round(max(0.0, now - moved.requested_at), 4), not durable)
            self.zk.set(path, encode(done.to_json()), version=stat.version)
        except (NoNodeError, BadVersionError, ValueError):
            pass

    def _write_plan_with_records(self, name: str, plan: Plan, expected_zk_version: int,
                                 records: Mapping[str, str]) -> None:
        """Write the plan a request made; if it was refused (another write came first), delete
        the migration records made for it (an open record no plan names would hold OTD and
        every later request off the topology for good).

        :raises RebalanceError: the plan changed meanwhile (the requester may try again).
        """
        # An exception (a lost connection) does not say whether the write took: the records stay,
        # and if no plan names them a minute later, _settle_orphans completes them.
        written = self.write_plan(name, plan, expected_zk_version)
        if not written:
            self._forget_records(name, records)
            msg = "the plan changed while the request was applied; try again"
            raise RebalanceError(msg)

    def _settle_orphans(self, name: str, plan: Plan) -> None:
        """Complete the open migration records no plan names, a minute after their request (a
        Nimbus that stopped between creating them and writing its plan, or whose write was
        lost with its connection): an open record holds OTD, spreading back and every later
        move of its executor off for good. Looked at every ``ORPHAN_CHECK_SECS`` at most."""
        assert self.cluster is not None
        now = time.monotonic()
        if now < self._orphans_checked.get(name, 0.0):
            return
        self._orphans_checked[name] = now + ORPHAN_CHECK_SECS
        named = {m.record for m in plan.moved.values()} | {r.record for r in plan.rescales.values()}
        named |= set(((plan.rebalance or {}).get("records") or {}).values())
        orphans = [r.id for r in self.cluster.migrations(name)
                   if not r.completed_at and r.id not in named and time.time() - r.requested_at > ORPHAN_GRACE_SECS]
        if orphans:
            self._settle_records(name, orphans, "no plan names it")

    def _settle_records(self, name: str, records: list[str], why: str) -> None:
        """Complete migration records that no worker will complete (``state_lost``: true)."""
        assert self.cluster is not None and self.zk is not None
        for record_id in records:
            record = self.cluster.migration(name, record_id)
            if record is None or record.completed_at:
                continue
            done = record.completed(time.time(), 0.0, True).to_json()
            try:
                self.zk.set(f"{self.paths.migrations(name)}/{record_id}", encode(done))
            except Exception:  # noqa: BLE001 - ZooKeeper trouble: the next look settles it
                log.warning("topology %s: cannot complete migration record %s", name, record_id)
                continue
            log.warning("topology %s: migration record %s (%s of %s) completed by Nimbus: %s", name, record_id,
                        record.mode.value, record.executor, why)

    def _forget_records(self, name: str, records: Mapping[str, str]) -> None:
        for record in records.values():
            try:
                self._delete(f"{self.paths.migrations(name)}/{record}")
            except Exception:  # noqa: BLE001 - ZooKeeper trouble: the record stays (logged)
                log.warning("topology %s: migration record %s of a plan never written stays", name, record)

    def write_plan(self, name: str, plan: Plan, expected_zk_version: int) -> bool:
        """Write ``plan`` if nobody wrote the assignment since we read it (with the chains that
        still hold in it: a moved executor leaves its chain in the plan that moves it)."""
        assert self.zk is not None
        if plan.chains:
            topo = self.cluster.topology(name) if self.cluster is not None else None
            plan = plan.replace(chains=kept_chains(topo["definition"], plan) if topo else {})
        data = plan.replace(updated_at=time.time()).to_json()
        try:
            self.zk.set(self.paths.assignment(name), encode(data), version=expected_zk_version)
        except BadVersionError:
            log.info("assignment of %s changed under us; retrying next round", name)
            self._wake.set()
            return False
        return True

    def _delete(self, path: str) -> None:
        try:
            self.zk.delete(path, recursive=True)  # type: ignore[union-attr]
        except NoNodeError:
            pass

    def _remove_topology(self, name: str) -> None:
        topo = self.cluster.topology(name) if self.cluster else None
        if self.checkpoints is not None:
            self.checkpoints.drop(name, topo)  # its store, closed in the coordinator first
        else:
            drop_checkpoints(topo, name)
        for path in (self.paths.checkpoints(name), self.paths.assignment(name), self.paths.code(name), self.paths.requests(name),
                     self.paths.migrations(name), self.paths.otd(name), self.paths.latency(name), self.paths.logconfig(name),
                     self.paths.workerbeats(name), self.paths.topology(name), self.paths.status(name)):
            self._delete(path)
        self.watchdog.forget(name)
        if topo:  # once its workers have surely stopped, for what they wrote after the drop above
            self._drop_again.append((time.monotonic() + DROP_AGAIN_SECS, name, topo))
        log.info("topology %s killed and removed", name)

    def _drop_checkpoints_again(self) -> None:
        """Delete a killed topology's checkpoints a second time, :data:`DROP_AGAIN_SECS` after the
        kill: its workers stop only once their supervisors see the assignment gone, and one may
        finish a checkpoint write meanwhile (the keys are under the killed submission's id, which
        no later submission reads, so they would only take room)."""
        now = time.monotonic()
        due = [d for d in self._drop_again if d[0] <= now]
        if not due:
            return
        self._drop_again = [d for d in self._drop_again if d[0] > now]
        for _at, name, topo in due:
            drop_checkpoints(topo, name)

    # -- main loop ----------------------------------------------------------------------------
    def run(self) -> int:
        from nimbus.leader import Leadership

        self.zk = connect(self.zk_address, session_timeout=float(self.conf["nstorm.zookeeper.session.timeout.secs"]),
                          auth=self.conf["nstorm.zookeeper.auth"])
        self.paths.ensure(self.zk)
        self.cluster = ClusterState(self.zk, self.paths, watch=self._watch)
        self.zk.add_listener(lambda state: self._wake.set())
        self.leadership = Leadership(self.zk, self.paths)
        self.state = "STANDBY"
        log.info("nimbus %s running against %s%s", self.leadership.identity, self.zk_address, self.paths.root)
        self.leadership.run(self._lead, self._stop)
        self.state = "STOPPING"
        self.zk.stop()
        self.zk.close()
        self.state = "STOPPED"
        log.info("nimbus stopped")
        return 0

    def _lead(self) -> None:
        """The leader's loop: reconcile on every watch event and every monitor interval."""
        from scheduler_otd.runner import OtdRunner

        assert self.zk is not None
        self.state = "LEADING"
        otd = OtdRunner(self.zk, self.paths, self.conf)
        otd.start()
        qos = LatencyController(self.zk, self.paths, self.conf)
        qos.start()
        self.checkpoints = CheckpointCoordinator(self.zk, self.paths, self.conf)
        self.checkpoints.start()
        interval = float(self.conf["nimbus.monitor.interval.secs"])
        self._wake.set()
        try:
            for _ in passes(self._stop, self._wake, interval, also_until=self.leadership.lost.is_set):
                if not self.leadership.leading:
                    continue  # suspended: another Nimbus may lead by now, so write nothing
                try:
                    self.reconcile()
                except Exception:
                    log.exception("reconcile failed")
        finally:
            otd.stop()
            qos.stop()
            self.checkpoints.stop()
            self.checkpoints = None
            self.state = "STANDBY"

    def request_stop(self, *_: Any) -> None:
        self._stop.set()
        self._wake.set()
        leadership = getattr(self, "leadership", None)
        if leadership is not None:
            leadership.cancel()

    def install_signal_handlers(self) -> None:
        relay_signals({signal.SIGTERM: self.request_stop, signal.SIGINT: self.request_stop})
