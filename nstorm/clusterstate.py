"""Reading the cluster's tree in ZooKeeper as typed records: one reader for every daemon and client.

Paths and node formats are :mod:`nstorm.zkschema`'s; this module turns what is stored there
into :class:`~nstorm.plan.Plan`, :class:`~nstorm.records.MigrationRecord` and
:class:`~nstorm.records.Heartbeat` objects. ZooKeeper is shared, so what it holds may be
damaged: a node that is not JSON, or not the record it should be, reads as missing, with one
log line per write (not per read).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.lock import Lock

from nstorm.plan import Plan, PlanError
from nstorm.records import Heartbeat, MigrationRecord, RecordError, TopologyStatus
from nstorm.zkschema import ZkPaths, decode

__all__ = ["CURRENT", "ClusterState"]

log = logging.getLogger(__name__)

CURRENT = object()  # heartbeats(): only those of the topology's current submission


class ClusterState:
    """Typed reads of one cluster's tree (see the module docstring).

    :arg watch: called by ZooKeeper when a node read with ``watch=True`` changes.
    """

    def __init__(self, zk: KazooClient, paths: ZkPaths, watch: Callable[..., Any] | None = None) -> None:
        self.zk = zk
        self.paths = paths
        self.watch = watch
        self._bad: dict[str, int] = {}  # path -> zxid of the damaged data already logged

    def _once(self, path: str, zxid: int, message: str) -> None:
        if self._bad.get(path) != zxid:  # one line per bad write, not per read
            self._bad[path] = zxid
            log.error("%s", message)

    def read(self, path: str, watch: bool = False) -> tuple[Any, Any]:
        """``(data, stat)`` of a JSON node: ``(None, None)`` if it does not exist, ``(None, stat)``
        if it is not JSON."""
        try:
            raw, stat = self.zk.get(path, watch=self.watch if watch else None)
        except NoNodeError:
            return None, None
        try:
            return decode(raw), stat
        except ValueError:
            self._once(path, stat.mzxid, f"malformed JSON in {path}: ignored")
            return None, stat

    def children(self, path: str, watch: bool = False) -> list[str]:
        try:
            return list(self.zk.get_children(path, watch=self.watch if watch else None))
        except NoNodeError:
            return []

    # -- topologies -------------------------------------------------------------------------
    def names(self, watch: bool = False) -> list[str]:
        """The submitted topologies."""
        return self.children(self.paths.topologies, watch)

    def topology(self, name: str) -> dict[str, Any] | None:
        """The submission record of ``name``: definition, conf, code hash, main file, submission id."""
        data, _ = self.read(self.paths.topology(name))
        return data if isinstance(data, dict) else None

    def status(self, name: str, watch: bool = False) -> tuple[TopologyStatus | None, float]:
        """The status asked for ``name`` (None if none) and, once killed, when to remove it."""
        data, _ = self.read(self.paths.status(name), watch)
        if not isinstance(data, dict):
            return None, 0.0
        try:
            status = TopologyStatus(data.get("status", TopologyStatus.ACTIVE))
        except ValueError:
            return None, 0.0
        kill_at = data.get("kill_at")
        return status, float(kill_at) if isinstance(kill_at, (int, float)) else 0.0

    def kill_wait(self, name: str) -> float:
        """How long a kill of ``name`` asked to wait (its ``kill_at`` less its ``updated_at``: both the
        killer's clock, so another machine's clock does not shift it); 0 if not said."""
        data, _ = self.read(self.paths.status(name))
        if not isinstance(data, dict):
            return 0.0
        kill_at, at = data.get("kill_at"), data.get("updated_at")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (kill_at, at)):
            return 0.0
        wait = float(kill_at) - float(at)  # type: ignore[arg-type]
        return wait if 0.0 <= wait < float("inf") else 0.0

    def plan(self, name: str, watch: bool = False) -> tuple[Plan | None, Any]:
        """``(plan, stat)``: ``(None, None)`` if there is none yet, ``(None, stat)`` if it is damaged
        (logged once: "malformed plan for NAME: why")."""
        path = self.paths.assignment(name)
        try:
            raw, stat = self.zk.get(path, watch=self.watch if watch else None)
        except NoNodeError:
            return None, None
        try:
            try:
                data = decode(raw)
            except ValueError as exc:
                msg = f"malformed plan for {name}: not JSON ({exc})"
                raise PlanError(msg) from None
            return Plan.from_json(name, data), stat
        except PlanError as exc:
            self._once(path, stat.mzxid, f"{str(exc).splitlines()[0]}: rejected; the last good plan stays in force")
            return None, stat

    def planned(self) -> list[str]:
        """The topologies that have a plan node."""
        return self.children(self.paths.assignments)

    # -- supervisors, workers, migrations ---------------------------------------------------------
    def supervisors(self, watch: bool = False) -> dict[str, dict[str, Any]]:
        """Registered supervisors with slots: node -> ``{"node", "host", "slots", ...}``."""
        result = {}
        for node in self.children(self.paths.supervisors, watch):
            info, _ = self.read(self.paths.supervisor(node))
            if isinstance(info, dict) and info.get("slots"):
                result[node] = info
        return result

    def heartbeats(self, name: str, submission: Any = CURRENT) -> dict[str, Heartbeat]:
        """Worker id -> heartbeat of the workers of ``name`` (by default of its current submission
        only: a worker of a killed one that still runs may write there too)."""
        if submission is CURRENT:
            submission = (self.topology(name) or {}).get("submission")
        beats = {}
        for wid in self.children(self.paths.workerbeats(name)):
            beat = self.heartbeat(name, wid)
            if beat is not None and (submission is None or beat.submission in (None, submission)):
                beats[wid] = beat
        return beats

    def heartbeat(self, name: str, worker_id: str) -> Heartbeat | None:
        """One worker's heartbeat (None if it has none, or a damaged one: logged once)."""
        path = self.paths.workerbeat(name, worker_id)
        data, stat = self.read(path)
        if data is None:
            return None
        try:
            return Heartbeat.from_json(data)
        except RecordError as exc:
            self._once(path, stat.mzxid, f"heartbeat of {name}/{worker_id}: {exc}")
            return None

    def migrations(self, name: str) -> list[MigrationRecord]:
        """Every migration record of ``name``, oldest first."""
        records = []
        for child in sorted(self.children(self.paths.migrations(name))):
            record = self.migration(name, child)
            if record is not None:
                records.append(record)
        return records

    def migration(self, name: str, record_id: str, watch: bool = False) -> MigrationRecord | None:
        path = f"{self.paths.migrations(name)}/{record_id}"
        data, stat = self.read(path, watch)
        if data is None:
            return None
        try:
            return MigrationRecord.from_json(data, record_id)
        except RecordError as exc:
            self._once(path, stat.mzxid, str(exc))
            return None

    def nimbuses(self) -> list[str]:
        """Identities of the running Nimbus processes, the leader first ([] if none runs): the
        contenders for the election lock, in its order."""
        try:  # (kazoo's contenders() creates the lock's node: a read must not)
            if self.zk.exists(self.paths.nimbus_election) is None:
                return []
            return [c for c in Lock(self.zk, self.paths.nimbus_election).contenders() if c]
        except NoNodeError:
            return []

    def busy_executors(self, name: str) -> set[str]:
        """Executors with a migration record not completed yet (they may not move again)."""
        return {r.executor for r in self.migrations(name) if not r.completed_at}
