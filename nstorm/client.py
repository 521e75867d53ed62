"""The client side of a cluster: what ``nstorm submit/list/status/kill/...`` do.

Everything goes through ZooKeeper: a client writes a topology and its desired
status; Nimbus turns them into plans. :meth:`ClusterClient.status` joins the
plan with the workers' heartbeats into the schema of ``nstorm status --json``.
"""

from __future__ import annotations

import json
import math
import statistics
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from nstorm import latency
from nstorm.clusterstate import ClusterState
from nstorm.config import check_topology_conf, check_workers, merge_conf
from nstorm.constraints import check_submit as check_constraints
from nstorm.constraints import constraints_of
from nstorm.errors import ClusterError, ConfigError, NotFoundError, UsageError
from nstorm.loader import load_topology, make_archive
from nstorm.loglevels import LogConfig
from nstorm.moves import MODES, RebalanceError, unwatched_workers, validate_moves
from nstorm.plan import Plan, Slot, interleave_slots
from nstorm.qospolicy import ConstraintState, status_entry
from nstorm.records import Heartbeat, MigrationRecord, TopologyStatus
from nstorm.rescale import validate_rescale
from nstorm.spread import even_moves
from nstorm.stall import find_stall
from nstorm.state.config import state_config
from nstorm.state.record import CheckpointRecord
from nstorm.topology import check_topology_name, component_of
from nstorm.window.checks import check_submit as check_windows
from nstorm.window.status import merge_window_status
from nstorm.zkauth import without_secrets
from nstorm.zkschema import (
    ACTIVE,
    INACTIVE,
    KILLED,
    ZkPaths,
    connect,
    encode,
    resolve_zk_address,
)

__all__ = ["ClusterClient", "check_rebalance_options"]




def check_rebalance_options(moves: Sequence[Any], random_count: int, parallelism: Mapping[str, int] | None,
                            workers: int | None) -> None:
    """The options of a rebalance that do not go together (the CLI checks them before it
    connects, the client before it asks Nimbus).

    :raises UsageError: one line naming them.
    """
    if moves and random_count:
        msg = "give either --move or --random, not both"
        raise UsageError(msg)
    if parallelism and (moves or random_count):
        msg = "give either moves or a parallelism change (--parallelism), not both"
        raise UsageError(msg)
    if workers is not None and (moves or random_count):
        msg = "--workers goes alone (spread evenly over that many workers) or with --parallelism, not with moves"
        raise UsageError(msg)
    if random_count < 0:
        msg = f"--random must be >= 1, got {random_count}"
        raise UsageError(msg)


class ClusterClient:
    """A connection to a cluster's ZooKeeper, with the user-facing operations.

    Example::

        with ClusterClient("127.0.0.1:2181") as client:
            client.submit("topologies/wordcount.py")
            print(client.status("wordcount"))
    """

    def __init__(
        self, zk_address: str | None = None, root: str = "/nstorm", timeout: float = 10.0, auth: str | None = None,
        read_only: bool = False,
    ) -> None:
        """Connect; ``auth`` is ``user:password`` of a cluster with ACLs (None: ``$NSTORM_ZK_AUTH``).
        ``read_only``: write nothing (a health check): the tree is neither created nor locked down."""
        self.address = resolve_zk_address(zk_address)
        self.paths = ZkPaths(root)
        self.zk = connect(self.address, timeout=timeout, auth=auth)
        self.cluster = ClusterState(self.zk, self.paths)
        if read_only:
            return
        try:
            self.paths.ensure(self.zk)
        except BaseException:
            self.close()
            raise

    @classmethod
    def over(cls, zk: Any, root: str = "/nstorm") -> ClusterClient:
        """A client over a connection the caller owns (the UI's, which reconnects by itself and
        may be down for a while): it neither connects nor checks the tree; don't :meth:`close` it."""
        client = cls.__new__(cls)
        client.address = ""
        client.paths = ZkPaths(root)
        client.zk = zk
        client.cluster = ClusterState(zk, client.paths)
        return client

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _require(self, name: str) -> dict[str, Any]:
        """The submission record of ``name``: a name that is not one is bad input (exit 2), not
        a ZooKeeper path (``..``) nor kazoo's traceback; a valid unknown one is NotFoundError."""
        topo = self.cluster.topology(check_topology_name(name))
        if topo is None:
            msg = f"no topology named {name!r} (see 'nstorm list')"
            raise NotFoundError(msg)
        return topo

    # -- submit -------------------------------------------------------------------------------
    def submit(self, path: str | Path, name: str | None = None, conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Validate and store a topology file; Nimbus schedules it. Returns a summary."""
        conf = without_secrets(conf or {})  # ZooKeeper credentials are never stored with a topology
        topology = load_topology(path, conf)
        definition = dict(topology.definition)
        if name is not None:
            definition["name"] = check_topology_name(name)
        if "topology.workers" in conf:
            definition["workers"] = check_workers(conf["topology.workers"])
        check_topology_conf(merge_conf(definition.get("conf"), conf))  # the known settings' kinds, as local does
        state = state_config(merge_conf(definition.get("conf"), conf))  # ConfigError: exit 2, one line
        check_windows(definition, merge_conf(definition.get("conf"), conf))
        check_constraints(definition, merge_conf(definition.get("conf"), conf))  # TopologyError: exit 2
        if state.durable:
            for cname, comp in definition["components"].items():
                if comp["kind"] != "spout" and int(comp["parallelism"]) > state.max_parallelism:
                    msg = (f"component {cname!r} has parallelism {comp['parallelism']}, more than "
                           f"topology.max.parallelism={state.max_parallelism} (its key groups)")
                    raise ConfigError(msg)
        acker = conf.get("topology.acker.executors")
        if acker is not None and (isinstance(acker, bool) or not isinstance(acker, int) or acker < 0):
            msg = f"-c topology.acker.executors={acker!r}: expected an integer >= 0"
            raise ConfigError(msg)
        name = definition["name"]
        archive, sha = make_archive(path)
        record = {
            "definition": definition,
            "conf": conf,
            "user_conf": conf,
            "code_sha256": sha,
            "main": Path(path).name,
            "submitted_at": time.time(),
            # One submission of a name: submitted again after a kill, the same name and code with
            # other options is another one (supervisors and status tell them apart by this).
            "submission": uuid.uuid4().hex,
        }
        tx = self.zk.transaction()
        tx.create(self.paths.topology(name), encode(record))
        tx.create(self.paths.code(name), archive)
        tx.create(self.paths.status(name), encode({"status": ACTIVE, "updated_at": time.time()}))
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if any(isinstance(r, NodeExistsError) for r in failures):
            msg = f"a topology named {name!r} is already running (kill it first, or use --name)"
            raise UsageError(msg)
        if failures:
            msg = f"cannot store topology {name!r}: {failures[0]!r}"
            raise ClusterError(msg)
        executors = sum(c["parallelism"] for c in definition["components"].values())
        return {"name": name, "executors": executors, "workers": definition["workers"], "code_sha256": sha}

    # -- lifecycle ---------------------------------------------------------------------------
    def set_status(self, name: str, status: str) -> None:
        """Ask Nimbus to activate or deactivate ``name``."""
        self._require(name)
        current, _ = self.cluster.status(name)
        if current is TopologyStatus.KILLED:
            msg = f"topology {name!r} is being killed"
            raise UsageError(msg)
        self.zk.set(self.paths.status(name), encode({"status": status, "updated_at": time.time()}))

    def activate(self, name: str) -> None:
        self.set_status(name, ACTIVE)

    def deactivate(self, name: str) -> None:
        self.set_status(name, INACTIVE)

    def kill(self, name: str, wait_secs: float = 0.0) -> None:
        """Deactivate ``name`` now and have Nimbus remove it after ``wait_secs``."""
        self._require(name)
        if not math.isfinite(wait_secs) or wait_secs < 0:  # NaN: a kill_at never reached, the topology never removed
            msg = f"--wait must be a finite number of seconds >= 0, got {wait_secs}"
            raise UsageError(msg)
        now = time.time()  # Nimbus times the wait itself: kill_at - updated_at (clocks differ between machines)
        self.zk.set(self.paths.status(name), encode({"status": KILLED, "kill_at": now + wait_secs, "updated_at": now}))

    # -- dynamic log levels (nstorm.loglevels) ------------------------------------------------
    def log_levels(self, name: str) -> dict[str, dict[str, Any]]:
        """The log levels set on ``name``'s workers and in force now: ``{logger: {"level", "until"}}``
        (``until``: wall-clock seconds, None until reset)."""
        topo = self._require(name)
        raw, _ = self.cluster.read(self.paths.logconfig(name))
        config = LogConfig.from_json(raw)
        if config.submission != topo.get("submission"):
            return {}
        now = time.time()
        return {n: s.to_json() for n, s in sorted(config.settings.items()) if s.until is None or s.until > now}

    def set_log_levels(self, name: str, levels: Mapping[str, tuple[str, float]],
                       reset: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
        """Set loggers of ``name``'s workers to levels (``{logger: (level, timeout secs)}``, 0 for
        none; ``ROOT`` is the root logger) and give ``reset`` ones their own level back, live
        (Storm's ``set_log_level``); returns the levels in force. Timeouts run on the workers'
        clocks, as in Storm (the cluster's clocks are taken to agree).

        :raises UsageError: an unknown level, a bad logger name or timeout.
        """
        reset = list(reset)
        now = time.time()
        self._change_logconfig(name, lambda config: config.changed(levels, reset, now))
        return self.log_levels(name)

    def event_sampling(self, name: str) -> dict[str, float]:
        """``name``'s event sampling (Storm's topology event inspector): ``{component or "*":
        percent}``, a component's own entry (0: off) winning over ``*``; {} when off."""
        topo = self._require(name)
        raw, _ = self.cluster.read(self.paths.logconfig(name))
        config = LogConfig.from_json(raw)
        return dict(config.events) if config.submission == topo.get("submission") else {}

    def set_event_sampling(self, name: str, percent: float | None, component: str | None = None) -> dict[str, float]:
        """Have ``name``'s executors of ``component`` (None: of every component) write ``percent``
        % of the tuples they emit to their worker's events file (``nstorm events``), or stop
        (None; off for the topology ends every component's), live (Storm's "Debug"); returns the
        sampling in force.

        :raises NotFoundError: no such component.
        :raises UsageError: a percentage not in (0, 100].
        """
        topo = self._require(name)
        if component is not None and component not in topo["definition"]["components"]:
            msg = f"topology {name!r} has no component {component!r}"
            raise NotFoundError(msg)
        self._change_logconfig(name, lambda config: config.sampled(component, percent))
        return self.event_sampling(name)

    def _change_logconfig(self, name: str, change: Callable[[LogConfig], LogConfig]) -> None:
        """Write ``change`` of ``name``'s log configuration (levels and event sampling; one of an
        earlier submission counts as none), compare and set: two clients' changes both land.

        :raises UsageError: ``change`` refused (its ValueError).
        """
        topo = self._require(name)
        path = self.paths.logconfig(name)
        while True:
            raw, stat = self.cluster.read(path)
            config = LogConfig.from_json(raw)
            if config.submission != topo.get("submission"):
                config = LogConfig(topo.get("submission"))
            try:
                data = encode(change(config).to_json())
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            try:
                if stat is None:
                    self.zk.create(path, data, makepath=True)
                else:
                    self.zk.set(path, data, version=stat.version)
            except (NodeExistsError, BadVersionError):
                continue
            return

    def wait_removed(self, name: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.zk.exists(self.paths.topology(name)) and not self.heartbeats(name):
                return True
            time.sleep(0.2)
        return False

    # -- rebalance ---------------------------------------------------------------------------
    def migrations(self, name: str) -> list[MigrationRecord]:
        """Every migration record of ``name``, oldest first."""
        return self.cluster.migrations(name)

    def _require_plan(self, name: str) -> Plan:
        plan = self.plan(name)
        if plan is None:
            msg = f"topology {name!r} has no plan yet (is nimbus running?)"
            raise ClusterError(msg)
        return plan

    def _check_moves(self, name: str, moves: list[tuple[str, str]]) -> None:
        """The checks Nimbus makes, done here first so bad input fails fast with exit 2."""
        plan = self._require_plan(name)
        live = {s.worker_id: s for s in interleave_slots(self.cluster.supervisors())}
        others = {}
        for other in self.names():
            if other != name:
                for wid in (self.plan(other) or plan.replace(workers={})).workers:
                    others[wid] = other
        validate_moves(plan, moves, live, self.cluster.busy_executors(name), others,
                       unwatched_workers(plan.workers, {s.node for s in live.values()}))

    def _slots(self, plan: Plan) -> tuple[list[Slot], list[Slot]]:
        """Every live slot in Nimbus's order, and those no topology's plan holds (``plan``'s included)."""
        used = {w for other in self.names() for w in (self.plan(other) or plan.replace(workers={})).workers}
        slots = interleave_slots(self.cluster.supervisors())
        return slots, [s for s in slots if s.worker_id not in used]

    def _check_spread(self, name: str, workers: int | None) -> None:
        """The checks Nimbus makes of an even spread over ``workers`` (None: as many as now)."""
        plan = self._require_plan(name)
        slots, free = self._slots(plan)
        fixed = unwatched_workers(plan.workers, {s.node for s in slots})
        even_moves(plan, len(plan.workers) if workers is None else workers, free, fixed)

    def _check_rescale(self, name: str, topo: Mapping[str, Any], changes: Mapping[str, int], workers: int | None) -> None:
        """The checks Nimbus makes of a parallelism change, done here first (exit 2 on bad input)."""
        plan = self._require_plan(name)
        _slots, free = self._slots(plan)
        conf = merge_conf(topo["definition"].get("conf"), topo.get("conf"))
        validate_rescale(plan, topo["definition"], changes, int(conf["topology.max.parallelism"]), len(free), workers)

    def rebalance(
        self,
        name: str,
        mode: str = "thread",
        moves: list[tuple[str, str]] | None = None,
        random_count: int = 0,
        wait_secs: float | None = None,
        by: str = "user",
        timeout: float = 60.0,
        parallelism: Mapping[str, int] | None = None,
        workers: int | None = None,
    ) -> dict[str, Any]:
        """Ask Nimbus to move executors, or to change components' parallelism (``parallelism``,
        with ``workers`` for more worker processes), or, with neither, to spread the executors
        evenly over the workers (over ``workers`` of them: Storm's rebalance [-n N]); returns its
        result (``version``, ``records``, ``moves``).

        :raises UsageError: bad input (unknown executor, component or worker, an acker, a busy
            executor, a parallelism out of range, a rescale in progress).
        """
        topo = self._require(name)
        if mode not in MODES:
            msg = f"unknown mode {mode!r}: use one of {', '.join(MODES)}"
            raise UsageError(msg)
        moves = list(moves or [])
        check_rebalance_options(moves, random_count, parallelism, workers)
        spread = not (parallelism or moves or random_count)  # Storm's rebalance [-n N]: spread evenly
        if parallelism:
            if mode == "process":
                msg = "a parallelism change is live (--mode thread) or Storm's (--mode stop), not process mode"
                raise UsageError(msg)
            self._check_rescale(name, topo, parallelism, workers)
        elif spread:
            self._check_spread(name, workers)
        elif not random_count:
            self._check_moves(name, moves)
        if wait_secs is not None and (not math.isfinite(wait_secs) or wait_secs < 0):
            msg = f"--wait must be a finite number of seconds >= 0, got {wait_secs}"  # NaN: deactivated for good
            raise UsageError(msg)
        if wait_secs is None:
            conf = {**topo["definition"].get("conf", {}), **topo.get("conf", {})}
            wait_secs = float(conf.get("topology.message.timeout.secs", 30)) if mode == "stop" else 0.0
        request = {"mode": mode, "moves": moves, "random": random_count, "wait_secs": wait_secs, "by": by,
                   "requested_at": time.time()}
        if parallelism:
            request.update(parallelism=dict(parallelism), workers=workers)
        elif spread:
            request.update(spread=True, workers=workers)
        return self._request(name, request, timeout)

    def chain(self, name: str, chains: Mapping[str, str], by: str = "user", timeout: float = 30.0) -> dict[str, Any]:
        """Run each downstream executor of ``chains`` in its upstream executor's thread, live
        (nstorm.chaining): ``chains`` is the whole new set, ``{}`` ends every chain. Nimbus refuses
        a pair whose downstream executor has other inputs than that one executor."""
        self._require(name)
        request = {"mode": "thread", "moves": [], "random": 0, "chains": dict(chains), "by": by,
                   "requested_at": time.time()}
        return self._request(name, request, timeout)

    def tune(self, name: str, tuning: Mapping[str, Mapping[str, float]], by: str = "user",
             timeout: float = 30.0) -> dict[str, Any]:
        """Size the output buffers of channels live, as a latency constraint's controller does
        (the plan's ``tuning``): ``{"split>count": {"latency_ms": 2.5}}`` bounds the buffers of
        ``split``'s executors (all of a component's buffers share the tightest bound of its
        channels; ``cap`` bounds a batch's length too); ``{}`` goes back to the configured sizes.
        A constraint's controller, if the topology has one, goes on sizing them too."""
        self._require(name)
        if not isinstance(tuning, Mapping) or not all(isinstance(v, Mapping) for v in tuning.values()):
            msg = 'tuning maps channels to sizes: {"split>count": {"latency_ms": 2.5}}'
            raise RebalanceError(msg)
        request = {"mode": "thread", "moves": [], "random": 0, "tuning": {k: dict(v) for k, v in tuning.items()},
                   "by": by, "requested_at": time.time()}
        return self._request(name, request, timeout)

    def _request(self, name: str, request: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """Put a request for Nimbus and wait for its result (RebalanceError if refused)."""
        path = self.zk.create(f"{self.paths.requests(name)}/req-", encode(request), sequence=True, makepath=True)
        deadline = time.monotonic() + timeout
        try:
            while True:
                data, _ = self.cluster.read(path)
                if isinstance(data, dict) and data.get("result"):
                    result = data["result"]
                    break
                if time.monotonic() > deadline:
                    msg = f"nimbus did not take the rebalance request within {timeout:.0f}s (is it running?)"
                    raise ClusterError(msg)
                time.sleep(0.05)
        finally:
            try:
                self.zk.delete(path)
            except NoNodeError:
                pass
        if not result.get("ok"):
            raise RebalanceError(result.get("error", "rejected"))
        return result

    def wait_migrations(self, name: str, records: Mapping[str, str], timeout: float = 60.0) -> list[MigrationRecord]:
        """Wait until every record (executor -> record id) is completed; returns them."""
        deadline = time.monotonic() + timeout
        wanted = set(records.values())
        while True:
            done = [r for r in self.migrations(name) if r.id in wanted and r.completed_at]
            if len(done) == len(wanted):
                return done
            if time.monotonic() > deadline:
                missing = sorted(wanted - {r.id for r in done})
                msg = f"migrations {missing} of {name!r} did not complete within {timeout:.0f}s"
                raise ClusterError(msg)
            time.sleep(0.05)

    # -- inspection --------------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self.cluster.names())

    def heartbeats(self, name: str) -> dict[str, Heartbeat]:
        """The heartbeats of the workers of ``name``'s current submission (a worker of a killed
        one that still runs may write there too: it is left out)."""
        return self.cluster.heartbeats(name)

    def plan(self, name: str) -> Plan | None:
        """The current plan of ``name`` (None if it has none, or a damaged one)."""
        return self.cluster.plan(name)[0]

    def nimbuses(self) -> dict[str, Any]:
        """The running Nimbus processes: ``{"leader": "host:pid" | None, "standby": [...]}``."""

        contenders = self.cluster.nimbuses()
        return {"leader": contenders[0] if contenders else None, "standby": contenders[1:]}

    def list(self) -> list[dict[str, Any]]:
        rows = []
        for name in self.names():
            status, _ = self.cluster.status(name)
            plan = self.plan(name)
            rows.append({
                "name": name,
                "status": status.value if status else "?",
                "plan_version": plan.version if plan else None,
                "workers": len(plan.workers) if plan else 0,
                "executors": len(plan.executors) if plan else 0,
            })
        return rows

    def status(self, name: str) -> dict[str, Any]:
        """The ``nstorm status --json`` document of ``name``."""
        topo = self._require(name)
        status, _ = self.cluster.status(name)
        plan = self.plan(name)
        beats = self.heartbeats(name)
        definition = topo["definition"]
        conf = merge_conf(definition.get("conf"), topo.get("conf"))
        by_worker: dict[str, list[str]] = {}
        for eid, wid in sorted((plan.executors if plan else {}).items()):
            by_worker.setdefault(wid, []).append(eid)
        workers = []
        for wid, slot in sorted((plan.workers if plan else {}).items()):
            beat = beats.get(wid)
            workers.append({
                "id": wid, "node": slot.node, "host": slot.host, "port": slot.port,
                "pid": beat.pid if beat else None, "executors": by_worker.get(wid, []),
                "alive": beat is not None and time.time() - beat.time < 10,
                "plan_version": beat.version if beat else None, "cpu": beat.cpu if beat else None,
                "cpu_limit": beat.cpu_limit if beat else None, "core": beat.core if beat else None,
                "sched_batch": beat.sched_batch if beat else None, "gil": beat.gil if beat else None,
                "curve": beat.curve if beat else None,
                "releasing": bool(plan and wid in plan.releasing),  # emptied by moves: released next
            })
        counters: dict[str, dict[str, Any]] = {}
        for beat in beats.values():
            for eid, c in beat.executors.items():
                if eid in counters:  # a moved executor reported by its old and new worker
                    merged = dict(counters[eid])
                    # The new copy carries the old one's totals on from the hand-over, when the old
                    # copy stops counting: the larger is the executor's; queued and pending add up.
                    for key in ("emitted", "batches", "executed", "acked", "failed", "errors"):
                        merged[key] = max(int(merged.get(key) or 0), int(c.get(key) or 0))
                    for key in ("queue", "pending", "replayed"):
                        merged[key] = int(merged.get(key) or 0) + int(c.get(key) or 0)
                    if c.get("window") and (c["window"].get("fired") or 0) >= ((merged.get("window") or {}).get("fired") or 0):
                        merged["window"] = c["window"]  # the copy that carries the windows on
                    counters[eid] = merged
                else:
                    counters[eid] = c
        components: dict[str, Any] = {}
        spouts = {"pending": 0, "acked": 0, "failed": 0, "replayed": 0}
        for cname, comp in definition["components"].items():
            # The component's executors now (a live rescale changes them; their ids keep growing).
            eids = ([e for e in plan.tasks if e in plan.executors and component_of(e) == cname] if plan
                    else [f"{cname}:{i}" for i in range(comp["parallelism"])])
            agg = {"parallelism": len(eids), "emitted": 0, "batches": 0, "executed": 0, "acked": 0,
                   "failed": 0, "queue": 0, "errors": 0, "last_error": None}
            recent = []  # each executor's latency over its last samples
            windows: list[dict[str, Any]] = []  # a windowed bolt's executors' windows
            capacity: list[float] = []
            user: dict[str, Any] = {"counters": {}, "gauges": {}}
            for eid in eids:
                c = counters.get(eid, {})
                for key in ("emitted", "batches", "executed", "acked", "failed", "queue", "errors"):
                    agg[key] += int(c.get(key) or 0)
                if c.get("capacity") is not None:
                    capacity.append(float(c["capacity"]))
                metrics = c.get("metrics") or {}
                for mname, value in (metrics.get("counters") or {}).items():
                    user["counters"][mname] = user["counters"].get(mname, 0) + value
                for mname, value in (metrics.get("gauges") or {}).items():
                    user["gauges"].setdefault(mname, {})[eid] = value
                lat = c.get("latency_ms" if comp["kind"] == "spout" else "arrival_ms")
                if lat:
                    recent.append(lat)
                if c.get("last_error"):
                    agg["last_error"] = c["last_error"]
                if c.get("window"):
                    windows.append(c["window"])
                if comp["kind"] == "spout":
                    spouts["pending"] += int(c.get("pending") or 0)
                    spouts["acked"] += int(c.get("acked") or 0)
                    spouts["failed"] += int(c.get("failed") or 0)
                    spouts["replayed"] += int(c.get("replayed") or 0)
            if capacity:  # Storm's: the busiest executor's share of the last worker.stats.window.secs
                agg["capacity"] = max(capacity)
            if user["counters"] or user["gauges"]:
                agg["metrics"] = user
            if recent:  # spouts: complete latency; bolts: from the spout's emit to processing here
                agg["latency_ms"] = {"p50": statistics.median(x["p50"] for x in recent),
                                     "p99": max(x["p99"] for x in recent),
                                     "kind": "complete" if comp["kind"] == "spout" else "emit-to-process"}
            if comp.get("window"):
                agg["window"] = merge_window_status(windows)
            components[cname] = agg
        otd, _ = self.cluster.read(self.paths.otd(name))
        return {
            "name": name,
            "status": status.value if status else "?",
            "plan_version": plan.version if plan else None,
            "workers": workers,
            "components": components,
            "spouts": spouts,
            "otd": otd,
            "stalled": find_stall(beats, float(conf["topology.message.timeout.secs"]), time.time()),
            "migrations": [
                {k: r.to_json().get(k) for k in ("executor", "from", "to", "mode", "by", "requested_at",
                                                 "completed_at", "stall_secs", "version")
                 + (("waiting", "arrived") if r.waiting else ())}
                for r in self.migrations(name)
            ],
            "checkpoints": self.checkpoints(name, topo),
            "constraints": self.constraints(name, topo),
            "chains": dict(plan.chains) if plan else {},
        }

    def constraints(self, name: str, topo: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The ``constraints`` field of ``status --json``: every latency constraint of ``name`` with
        what the controller (nimbus/latency.py) has measured and done so far."""
        topo = topo or self._require(name)
        declared = constraints_of(topo["definition"], merge_conf(topo["definition"].get("conf"), topo.get("conf")))
        raw, _ = self.cluster.read(self.paths.latency(name))
        recorded = {}
        if isinstance(raw, dict) and raw.get("submission") == topo.get("submission"):
            recorded = {tuple(c.get("path") or ()): c for c in raw.get("constraints") or () if isinstance(c, dict)}
        return [recorded.get(c.path) or status_entry(c, ConstraintState(), None, []) for c in declared]

    def checkpoints(self, name: str, topo: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The ``checkpoints`` field of ``status --json`` (see :class:`nstorm.state.record.CheckpointRecord`)."""
        topo = topo or self._require(name)
        config = state_config(merge_conf(topo["definition"].get("conf"), topo.get("conf")))
        raw, _ = self.cluster.read(self.paths.checkpoints(name))
        record = CheckpointRecord.from_json(json.dumps(raw).encode()) if isinstance(raw, dict) else None
        if record is None or record.submission != topo.get("submission"):
            record = CheckpointRecord(provider=config.provider, interval_ms=config.interval_ms)
        return record.status()

    def acked_per_second(self, name: str) -> dict[int, dict[str, int]]:
        """Spout acks per wall-clock second and executor, from the last heartbeats (recent seconds only)."""
        result: dict[int, dict[str, int]] = {}
        for beat in self.heartbeats(name).values():
            for eid, counters in beat.executors.items():
                for sec, n in (counters.get("acked_per_sec") or {}).items():
                    slot = result.setdefault(int(sec), {})
                    slot[eid] = max(slot.get(eid, 0), int(n))
        return result

    def latencies(self, name: str) -> dict[str, dict[str, float]]:
        """Complete latency (spout emit -> fully acked) per spout executor: p50, p99 in ms."""
        result = {}
        for beat in self.heartbeats(name).values():
            for eid, counters in beat.executors.items():
                if counters.get("latency_ms"):
                    result[eid] = counters["latency_ms"]
        return result

    def latency_histogram(self, name: str) -> dict[int, int]:
        """Cumulative complete-latency bucket counts of every spout (see :mod:`nstorm.latency`).

        Subtract two readings to get the histogram of the window between them.
        """
        hists = []
        for beat in self.heartbeats(name).values():
            for counters in beat.executors.values():
                if counters.get("latency_hist"):
                    hists.append(counters["latency_hist"])
        return latency.merge(*hists)

    def arrival_latencies(self, name: str, component: str) -> dict[str, dict[str, float]]:
        """Emit-to-process latency (a spout's emit -> this bolt processes a descendant) per executor
        of ``component``, over its last samples: p50, p99 in ms (see :mod:`nstorm.latency`)."""
        result = {}
        for beat in self.heartbeats(name).values():
            for eid, counters in beat.executors.items():
                if component_of(eid) == component and counters.get("arrival_ms"):
                    result[eid] = counters["arrival_ms"]
        return result

    def arrival_histogram(self, name: str, component: str) -> dict[int, int]:
        """Cumulative emit-to-process bucket counts of every executor of ``component`` (a bolt);
        for the last bolt of a topology that is its end-to-end latency. Subtract two readings
        to get the histogram of the window between them."""
        hists = []
        for beat in self.heartbeats(name).values():
            for eid, counters in beat.executors.items():
                if component_of(eid) == component and counters.get("arrival_hist"):
                    hists.append(counters["arrival_hist"])
        return latency.merge(*hists)

    def wait_running(self, name: str, timeout: float = 60.0) -> Plan:
        """Wait until every executor of ``name`` reports from its planned worker; returns the plan."""
        deadline = time.monotonic() + timeout
        while True:
            plan = self.plan(name)
            if plan:
                beats = self.heartbeats(name)
                reported = {e for b in beats.values() if b.version == plan.version for e in b.executors}
                if set(plan.executors) <= reported:
                    return plan
            if time.monotonic() > deadline:
                msg = f"topology {name!r} did not start within {timeout:.0f}s"
                raise ClusterError(msg)
            time.sleep(0.2)
