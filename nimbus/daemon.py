"""The Nimbus daemon: turns submitted topologies into versioned allocation plans.

Clients (``nstorm submit``, ``kill``, ``activate``...) write the topology and its
desired status into ZooKeeper; Nimbus is the only writer of
``assignments/<name>``. Every ``nimbus.monitor.interval.secs`` and on every
watch event it reconciles: a first plan for a new topology (round robin over
free slots), the plan's status following the desired status, executors of
workers whose supervisor disappeared reassigned to live slots, and a killed
topology removed after its ``kill_at`` time.

States: ``STARTING -> RUNNING`` once connected; ``RUNNING -> STOPPING`` on
SIGTERM/SIGINT; ``STOPPING -> STOPPED``.
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

from nimbus.scheduler import EvenScheduler, Scheduler, Slot, interleave_slots
from nstorm.config import merge_conf
from nstorm.zkschema import ACTIVE, INACTIVE, KILLED, ZkPaths, connect, decode, encode

__all__ = ["Nimbus"]

log = logging.getLogger(__name__)


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
        for name in self.zk.get_children(self.paths.assignments):
            plans[name] = self._read(self.paths.assignment(name))
        used = {w for plan, _ in plans.values() if plan for w in plan.get("workers", {})}
        for name in sorted(names):
            try:
                self._reconcile_one(name, plans.get(name, (None, None)), slots, live, used)
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
            new.update({"status": desired, "code_sha256": topo["code_sha256"], "updated_at": time.time()})
            try:
                self.zk.create(self.paths.assignment(name), encode(new), makepath=True)  # type: ignore[union-attr]
            except NodeExistsError:
                return
            used.update(new["workers"])
            log.info("topology %s: plan v1 over workers %s", name, sorted(new["workers"]))
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
        if changed:
            self.write_plan(name, plan, stat.version)

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
                     self.paths.workerbeats(name), self.paths.topology(name), self.paths.status(name)):
            self._delete(path)
        log.info("topology %s killed and removed", name)

    # -- main loop ----------------------------------------------------------------------------
    def run(self) -> int:
        self.zk = connect(self.zk_address, session_timeout=float(self.conf["nstorm.zookeeper.session.timeout.secs"]))
        self.paths.ensure(self.zk)
        self.zk.add_listener(lambda state: self._wake.set())
        self.state = "RUNNING"
        log.info("nimbus running against %s%s", self.zk_address, self.paths.root)
        interval = float(self.conf["nimbus.monitor.interval.secs"])
        self._wake.set()
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.reconcile()
            except Exception:
                log.exception("reconcile failed")
        self.state = "STOPPING"
        self.zk.stop()
        self.zk.close()
        self.state = "STOPPED"
        log.info("nimbus stopped")
        return 0

    def request_stop(self, *_: Any) -> None:
        self._stop.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
