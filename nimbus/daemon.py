"""The Nimbus daemon: turns submitted topologies into versioned allocation plans.

Clients (``nstorm submit``, ``kill``, ``activate``...) write the topology and its
desired status into ZooKeeper; Nimbus is the only writer of
``assignments/<name>``. Every ``nimbus.monitor.interval.secs`` and on every
watch event it reconciles: a first plan for a new topology (round robin over
free slots), the plan's status following the desired status, executors of
workers whose supervisor disappeared reassigned to live slots, and a killed
topology removed after its ``kill_at`` time.

Several Nimbus processes may run (HA); one leads (``nimbus/leader.py``).
States: ``STARTING -> STANDBY`` once connected; ``STANDBY -> LEADING`` when it
holds the leader lock, and back when the ZooKeeper session is lost;
``STOPPING -> STOPPED`` on SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from nimbus.rebalance import (
    MODES,
    RebalanceError,
    apply_moves,
    random_moves,
    spread_moves,
    validate_moves,
)
from nimbus.scheduler import EvenScheduler, Scheduler, Slot, interleave_slots
from nimbus.watchdog import StallWatchdog
from nstorm.config import merge_conf
from nstorm.plans import PlanError, check_plan
from nstorm.zkschema import ACTIVE, INACTIVE, KILLED, ZkPaths, connect, decode, encode

__all__ = ["Nimbus"]

log = logging.getLogger(__name__)


def _plan_workers(plan: Mapping[str, Any]) -> set[str]:
    """Slots a plan holds, including those a stop-mode rebalance has emptied for now."""
    held = set(plan.get("workers", {}))
    rebalance = plan.get("rebalance") or {}
    held.update(rebalance.get("workers", {}))
    held.update(target for _, target in rebalance.get("moves", []))
    return held


class Nimbus:
    """The coordinator. See the module docstring."""

    def __init__(self, zk_address: str, zk_root: str = "/nstorm", conf: Mapping[str, Any] | None = None,
                 scheduler: Scheduler | None = None) -> None:
        self.zk_address = zk_address
        self.paths = ZkPaths(zk_root)
        self.conf = merge_conf(conf)
        self.scheduler = scheduler or EvenScheduler()
        self.state = "STARTING"
        self.zk: KazooClient | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._registered_since: dict[str, float] = {}  # node -> when this Nimbus first saw it registered
        self._bad_plans: dict[str, int] = {}  # topology or path -> zxid of the malformed data already logged
        self.watchdog = StallWatchdog()

    def _watch(self, *_: Any) -> None:
        self._wake.set()

    # -- reading the cluster ------------------------------------------------------------
    def live_supervisors(self) -> dict[str, dict[str, Any]]:
        assert self.zk is not None
        result = {}
        for node in self.zk.get_children(self.paths.supervisors, watch=self._watch):
            try:
                info = decode(self.zk.get(self.paths.supervisor(node))[0])
            except (NoNodeError, ValueError):
                continue
            if info and info.get("slots"):
                result[node] = info
        for node in set(self._registered_since) - set(result):
            del self._registered_since[node]
        for node in result:
            self._registered_since.setdefault(node, time.monotonic())
        return result

    def _beating_workers(self, name: str, plan: Mapping[str, Any], live: Mapping[str, Slot]) -> dict[str, Slot]:
        """Workers of ``plan`` whose supervisor is gone but whose own heartbeat node still exists.

        A supervisor killed (or restarting) leaves its workers running; they keep
        their executors for as long as their ZooKeeper sessions live, as in Storm,
        where Nimbus judges executors by their heartbeats.
        """
        assert self.zk is not None
        missing = [w for w in plan.get("workers", {}) if w not in live]
        if not missing:
            return {}
        try:
            beating = set(self.zk.get_children(self.paths.workerbeats(name), watch=self._watch))
        except NoNodeError:
            return {}
        result = {}
        for wid in missing:
            if wid in beating:
                w = plan["workers"][wid]
                result[wid] = Slot(str(w["node"]), str(w["host"]), int(w["port"]), int(w["ctl_port"]))
        return result

    def _read(self, path: str, watch: bool = False) -> tuple[Any, Any]:
        assert self.zk is not None
        try:
            raw, stat = self.zk.get(path, watch=self._watch if watch else None)
        except NoNodeError:
            return None, None
        try:
            return decode(raw), stat
        except ValueError:
            if self._bad_plans.get(path) != stat.mzxid:  # one line per bad write, not per pass
                self._bad_plans[path] = stat.mzxid
                log.error("malformed JSON in %s: ignored", path)
            return None, stat

    # -- reconcile ---------------------------------------------------------------------------
    def reconcile(self) -> None:
        """One pass over every topology (see the module docstring)."""
        assert self.zk is not None
        supervisors = self.live_supervisors()
        slots = interleave_slots(supervisors)
        live = {s.worker_id: s for s in slots}
        names = self.zk.get_children(self.paths.topologies, watch=self._watch)
        plans: dict[str, tuple[dict[str, Any] | None, Any]] = {}
        names_bad: set[str] = set()
        for name in self.zk.get_children(self.paths.assignments):
            plan, stat = self._read(self.paths.assignment(name))
            if plan is not None or stat is not None:
                try:
                    plan = check_plan(name, plan)
                except PlanError as exc:
                    if self._bad_plans.get(name) != stat.mzxid:  # one line per bad write
                        self._bad_plans[name] = stat.mzxid
                        log.error("%s: topology left alone until a good plan is written", exc)
                    names_bad.add(name)
            plans[name] = (plan, stat)
        for name, (plan, _) in plans.items():
            if plan:
                live.update(self._beating_workers(name, plan, live))
        for name in names_bad:
            plans.pop(name)
        used = {w for plan, _ in plans.values() if plan for w in _plan_workers(plan)}
        self._owners = {w: n for n, (plan, _) in plans.items() if plan for w in _plan_workers(plan)}
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

    def _reconcile_one(self, name: str, current: tuple[Any, Any], slots: list[Slot],
                       live: dict[str, Slot], used: set[str]) -> None:
        topo, _ = self._read(self.paths.topology(name))
        status, _ = self._read(self.paths.status(name), watch=True)
        if topo is None or status is None:
            return
        desired = status.get("status", ACTIVE)
        plan, stat = current
        if desired == KILLED:
            if time.time() >= float(status.get("kill_at") or 0):
                self._remove_topology(name)
                return
            desired = INACTIVE
        free = [s for s in slots if s.worker_id not in used]
        if plan is None:
            conf = merge_conf(topo["definition"].get("conf"), topo.get("conf"))
            new = self.scheduler.initial_plan(name, topo["definition"], conf, free)
            if new is None:
                log.warning("topology %s waits for a free slot (%d supervisors live)", name, len({s.node for s in slots}))
                return
            new.update({"status": desired, "code_sha256": topo["code_sha256"], "updated_at": time.time(),
                        "submission": topo.get("submission")})
            try:
                self.zk.create(self.paths.assignment(name), encode(new), makepath=True)  # type: ignore[union-attr]
            except NodeExistsError:
                return
            used.update(new["workers"])
            log.info("topology %s: plan v1 over workers %s", name, sorted(new["workers"]))
            return
        if plan.get("rebalance"):
            self._advance_stop_rebalance(name, plan, stat, desired)
            return
        changed = False
        repaired = self.scheduler.repair_plan(plan, live, free)
        if repaired is not None:
            lost = sorted(set(plan["workers"]) - set(repaired["workers"]))
            log.warning("topology %s: workers %s lost; executors reassigned (v%d)", name, lost, repaired["version"])
            plan = repaired
            used.update(plan["workers"])
            changed = True
        if plan.get("status") != desired:
            plan = {**plan, "status": desired}
            if repaired is None:
                plan["version"] = int(plan["version"]) + 1
            log.info("topology %s: status %s (v%d)", name, desired, plan["version"])
            changed = True
        done = self._finished_moves(name, plan)
        if done:
            moved = {e: m for e, m in plan["moved"].items() if e not in done}
            plan = {**plan, "moved": moved}
            if not changed:
                plan["version"] = int(plan["version"]) + 1
            log.info("topology %s: moves of %s completed, dropped from the plan (v%d)", name, sorted(done),
                     plan["version"])
            changed = True
        if changed:
            self.write_plan(name, plan, stat.version)
        elif desired == ACTIVE:
            self._spread_back(name, topo, plan, stat, free, live)

    def _stall_inputs(self, name: str) -> tuple[float, dict[str, Any]]:
        """The message timeout of ``name`` and its workers' heartbeats (for the stall watchdog)."""
        assert self.zk is not None
        topo, _ = self._read(self.paths.topology(name))
        conf = merge_conf((topo or {}).get("definition", {}).get("conf"), (topo or {}).get("conf"))
        beats = {}
        try:
            children = self.zk.get_children(self.paths.workerbeats(name))
        except NoNodeError:
            children = []
        submission = (topo or {}).get("submission")
        for wid in children:
            beat, _ = self._read(self.paths.workerbeat(name, wid))
            if isinstance(beat, Mapping) and beat.get("submission") in (None, submission):
                beats[wid] = beat
        return float(conf["topology.message.timeout.secs"]), beats

    def _spread_back(self, name: str, topo: Mapping[str, Any], plan: dict[str, Any], stat: Any,
                     free: list[Slot], live: dict[str, Slot]) -> None:
        """Give a topology that runs on too few workers the slots that came back, by live moves.

        Only slots of supervisors registered for ``nimbus.spread.grace.secs`` are used:
        a node that returns from a cut first stops the workers it ran before.
        """
        wanted = int(topo["definition"].get("workers", len(plan["workers"])))
        if len(plan["workers"]) >= wanted or not free or self._busy_executors(name):
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
    def _busy_executors(self, name: str) -> set[str]:
        """Executors with a migration record not yet completed."""
        assert self.zk is not None
        busy = set()
        try:
            children = self.zk.get_children(self.paths.migrations(name))
        except NoNodeError:
            return busy
        for child in children:
            record, _ = self._read(f"{self.paths.migrations(name)}/{child}")
            if record and not record.get("completed_at"):
                busy.add(record["executor"])
        return busy

    def _finished_moves(self, name: str, plan: Mapping[str, Any]) -> set[str]:
        """Executors whose move in ``plan["moved"]`` has completed (or whose record is gone).

        A worker that starts an executor the plan says was moved to it waits for the old copy's
        state; once the move is complete no state will come, so a worker that restarts later must
        not find the move in the plan. Watches each open record, so its completion wakes Nimbus.
        """
        done = set()
        for executor, move in (plan.get("moved") or {}).items():
            record = move.get("record") if isinstance(move, Mapping) else None
            if not record:
                done.add(executor)
                continue
            info, stat = self._read(f"{self.paths.migrations(name)}/{record}", watch=True)
            if stat is None or not info or info.get("completed_at"):
                done.add(executor)
        return done

    def _create_records(self, name: str, plan: dict[str, Any], moves: list[tuple[str, str]], mode: str,
                        by: str, requested_at: float, version: int) -> dict[str, str]:
        assert self.zk is not None
        records = {}
        for executor, target in moves:
            data = {"executor": executor, "from": plan["executors"][executor], "to": target, "mode": mode,
                    "by": by, "requested_at": requested_at, "version": version, "completed_at": None}
            path = self.zk.create(f"{self.paths.migrations(name)}/m-", encode(data), sequence=True, makepath=True)
            records[executor] = path.rsplit("/", 1)[1]
        return records

    def _handle_requests(self, name: str, live: dict[str, Slot]) -> None:
        """Apply pending rebalance requests of ``name`` in order; write each result back."""
        assert self.zk is not None
        try:
            children = sorted(self.zk.get_children(self.paths.requests(name), watch=self._watch))
        except NoNodeError:
            return
        for child in children:
            path = f"{self.paths.requests(name)}/{child}"
            request, stat = self._read(path)
            if request is None or request.get("result"):
                if request and time.time() - float(request["result"].get("at", 0)) > 300:
                    self._delete(path)  # nobody collected it
                continue
            plan, plan_stat = self._read(self.paths.assignment(name))
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

    def rebalance(self, name: str, plan: dict[str, Any], zk_version: int, request: dict[str, Any],
                  live: dict[str, Slot]) -> dict[str, Any]:
        """Validate and apply one request; returns ``{"ok", "version", "records"}``."""
        mode = request.get("mode", "thread")
        if mode not in MODES:
            msg = f"unknown mode {mode!r}: use one of {', '.join(MODES)}"
            raise RebalanceError(msg)
        busy = self._busy_executors(name)
        by = request.get("by", "user")
        if request.get("random"):
            moves = random_moves(plan, int(request["random"]), exclude=busy)
            by = "random"
        else:
            moves = [(str(e), str(w)) for e, w in request.get("moves", [])]
        others = {w: t for w, t in getattr(self, "_owners", {}).items() if t != name}
        validate_moves(plan, moves, live, busy, others)
        requested_at = float(request.get("requested_at") or time.time())
        if mode == "stop":
            wait = float(request.get("wait_secs", 0))
            records = self._create_records(name, plan, moves, mode, by, requested_at, int(plan["version"]) + 1)
            new = {**plan, "version": int(plan["version"]) + 1, "status": INACTIVE,
                   "rebalance": {"phase": "draining", "until": time.time() + wait, "moves": moves,
                                 "records": records, "since": time.time()}}
        else:
            records = self._create_records(name, plan, moves, mode, by, requested_at, int(plan["version"]) + 1)
            new = apply_moves(plan, moves, mode, live, records)
        if not self.write_plan(name, new, zk_version):
            msg = "the plan changed while the request was applied; try again"
            raise RebalanceError(msg)
        log.info("topology %s: %s-mode move of %s (v%d, by %s)", name, mode,
                 ", ".join(f"{e}->{w}" for e, w in moves), new["version"], by)
        return {"ok": True, "version": new["version"], "records": records, "moves": moves, "mode": mode}

    def _advance_stop_rebalance(self, name: str, plan: dict[str, Any], stat: Any, desired: str) -> None:
        """Storm's rebalance, one phase per call: draining -> stopped -> restarted."""
        assert self.zk is not None
        rb = dict(plan["rebalance"])
        now = time.time()
        if rb["phase"] == "draining" and now >= float(rb["until"]):
            rb.update(phase="stopped", since=now, workers=plan["workers"])
            new = {**plan, "version": int(plan["version"]) + 1, "workers": {}, "rebalance": rb}
            if self.write_plan(name, new, stat.version):
                log.info("topology %s: stop-mode rebalance stopped every worker (v%d)", name, new["version"])
        elif rb["phase"] == "stopped":
            try:
                beats = self.zk.get_children(self.paths.workerbeats(name))
            except NoNodeError:
                beats = []
            if beats and now - float(rb["since"]) < 30:
                self._wake.set()
                return
            executors = dict(plan["executors"])
            workers = dict(rb["workers"])
            moved = dict(plan.get("moved") or {})
            version = int(plan["version"]) + 1
            for executor, target in rb["moves"]:
                moved[executor] = {"from": executors[executor], "to": target, "mode": "stop", "version": version,
                                   "record": rb["records"].get(executor)}
                executors[executor] = target
                if target not in workers:
                    node, _, port = target.partition(":")
                    sup, _ = self._read(self.paths.supervisor(node))
                    slot = next((s for s in (sup or {}).get("slots", []) if int(s[0]) == int(port)), None)
                    if sup and slot:
                        workers[target] = {"node": node, "host": sup["host"], "port": int(port),
                                           "ctl_port": int(slot[1])}
            new = {k: v for k, v in plan.items() if k != "rebalance"}
            new.update(version=version, executors=executors, workers=workers, moved=moved, status=desired,
                       restart={})
            if self.write_plan(name, new, stat.version):
                log.info("topology %s: stop-mode rebalance restarted (v%d)", name, version)

    def write_plan(self, name: str, plan: dict[str, Any], expected_zk_version: int) -> bool:
        """Write ``plan`` if nobody wrote the assignment since we read it."""
        plan["updated_at"] = time.time()
        try:
            self.zk.set(self.paths.assignment(name), encode(plan), version=expected_zk_version)  # type: ignore[union-attr]
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
        for path in (self.paths.assignment(name), self.paths.code(name), self.paths.requests(name),
                     self.paths.migrations(name), self.paths.otd(name),
                     self.paths.workerbeats(name), self.paths.topology(name), self.paths.status(name)):
            self._delete(path)
        self.watchdog.forget(name)
        log.info("topology %s killed and removed", name)

    # -- main loop ----------------------------------------------------------------------------
    def run(self) -> int:
        from nimbus.leader import Leadership

        self.zk = connect(self.zk_address, session_timeout=float(self.conf["nstorm.zookeeper.session.timeout.secs"]),
                          auth=self.conf["nstorm.zookeeper.auth"])
        self.paths.ensure(self.zk)
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
        interval = float(self.conf["nimbus.monitor.interval.secs"])
        self._wake.set()
        try:
            while not self._stop.is_set() and not self.leadership.lost.is_set():
                self._wake.wait(interval)
                self._wake.clear()
                if self._stop.is_set() or not self.leadership.leading:
                    continue  # suspended: another Nimbus may lead by now, so write nothing
                try:
                    self.reconcile()
                except Exception:
                    log.exception("reconcile failed")
        finally:
            otd.stop()
            self.state = "STANDBY"

    def request_stop(self, *_: Any) -> None:
        self._stop.set()
        self._wake.set()
        leadership = getattr(self, "leadership", None)
        if leadership is not None:
            leadership.cancel()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
