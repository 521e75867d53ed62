"""The OTD loop Nimbus runs: every ``otd.period.secs``, one round per OTD topology.

A round reads the topology's plan, runs the PySpark traffic job over ``otd.window.secs``
(the communication matrix, and each worker's mean CPU, backlog and backlog trend; a worker
without records falls back to its last heartbeat), and hands the
decision of :func:`~scheduler_otd.otd.otd_round` to Nimbus as an ordinary thread-mode
rebalance request with ``by: otd``, so Nimbus stays the only writer of plans. The last
decision (and the Case 2 warning) is kept in ``otd/<topology>`` for ``nstorm status``,
with the engine that aggregated the window and how long the round took.

One SparkSession serves every round. It starts in a thread of its own, with a warm-up
job, as soon as the runner starts when ``otd.spark.eager`` is set (Nimbus's configuration),
else as soon as the first OTD topology shows up, so that no Nimbus that runs no OTD holds a
JVM. Starting it takes seconds on an idle machine and a minute or more on a loaded one;
until it is ready, rounds aggregate the same records with plain Python
(:func:`~scheduler_otd.traffic.aggregate_records`, a few milliseconds for a window of
seconds) instead of waiting, and say so (``engine: python``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from kazoo.client import KazooClient

from nstorm.clusterstate import ClusterState
from nstorm.config import flag, merge_conf
from nstorm.home import metrics_dir
from nstorm.moves import recently_moved, unwatched_workers
from nstorm.plan import Slot, interleave_slots
from nstorm.records import Heartbeat, TopologyStatus
from nstorm.topology import component_of, is_acker
from nstorm.zkschema import ZkPaths, encode
from scheduler_otd.history import record_round
from scheduler_otd.otd import (
    HIGH,
    ScaleStep,
    WorkerLoad,
    autoscale,
    behind,
    hosts_with_cpu,
    no_cpu_for_more,
    otd_round,
)
from scheduler_otd.traffic import aggregate_records, read_window, window_files

__all__ = ["OtdRunner"]

log = logging.getLogger(__name__)


class OtdRunner:
    """A thread beside Nimbus's loop. See the module docstring."""

    def __init__(self, zk: KazooClient, paths: ZkPaths, conf: dict[str, Any]) -> None:
        self.zk = zk
        self.paths = paths
        self.cluster = ClusterState(zk, paths)
        self.conf = conf
        self.metrics_dir = metrics_dir(conf)
        self._job: Any = None
        self._next: dict[str, float] = {}
        self._low_since: dict[str, dict[str, float]] = {}  # topology -> component -> idle since (autoscale)
        self._scaled_at: dict[str, float] = {}  # topology -> its last autoscaling step
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otd", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._job is not None:
            self._job.stop()

    def _start_spark(self) -> None:
        """Create the traffic job and warm its SparkSession up in a thread of its own."""
        from scheduler_otd.traffic import TrafficJob

        self._job = job = TrafficJob(master=str(self.conf.get("otd.spark.master", "local[2]")),
                                     metrics_dir=self.metrics_dir)

        def warm() -> None:
            try:
                job.warm_up()
            except Exception:  # noqa: BLE001 - rounds go on with the Python aggregation
                if not self._stop.is_set():
                    log.exception("cannot start the Spark traffic job; rounds aggregate in Python")

        threading.Thread(target=warm, name="otd-spark", daemon=True).start()

    def _otd_topologies(self) -> dict[str, dict[str, Any]]:
        result = {}
        for name in self.cluster.names():
            topo = self.cluster.topology(name)
            if not topo:
                continue
            conf = merge_conf(topo["definition"].get("conf"), topo.get("conf"))
            if conf.get("topology.scheduler") == "otd":
                result[name] = conf
        return result

    def _run(self) -> None:
        if flag(self.conf, "otd.spark.eager"):  # "false" is off (Nimbus checks it is a flag)
            self._start_spark()
        while not self._stop.wait(0.5):
            try:
                topologies = self._otd_topologies()
            except Exception:  # noqa: BLE001 - ZooKeeper trouble: try again
                log.warning("OTD: cannot list topologies", exc_info=True)
                continue
            if topologies and self._job is None:
                self._start_spark()
            now = time.monotonic()
            for name, conf in topologies.items():
                if now < self._next.get(name, 0):
                    continue
                self._next[name] = now + float(conf.get("otd.period.secs", 5))
                try:
                    self.round(name, conf)
                except Exception:  # noqa: BLE001 - one bad round must not stop the loop
                    if self._stop.is_set():  # the traffic job was stopped under the round
                        log.info("OTD round for %s cut short: stopping", name)
                        return
                    log.exception("OTD round for %s failed", name)

    def _busy(self, name: str) -> bool:
        """A move of ``name`` is under way or asked for: no round now."""
        return bool(self.cluster.busy_executors(name)) or bool(self.cluster.children(self.paths.requests(name)))

    def loads(self, name: str) -> dict[str, WorkerLoad]:
        """Each worker's load from its last heartbeat (CPU and queue now; no trend)."""
        loads = {}
        for wid, beat in self.cluster.heartbeats(name).items():
            capacity = _capacity(beat)
            loads[wid] = WorkerLoad(beat.cpu / capacity, float(beat.queue), capacity=capacity,
                                    capped=bool(beat.cpu_limit and beat.cpu_limit > 0))
        return loads

    def traffic(self, name: str, window: float, load_secs: float) -> tuple[dict[str, Any], str]:
        """The window's traffic and load, from Spark once it is warm, else from plain Python."""
        if self._job is not None and self._job.ready.is_set():
            try:
                return self._job.run(name, window_secs=window, load_secs=load_secs), "spark"
            except Exception:  # noqa: BLE001 - Spark went away (its JVM died): the round goes on in Python
                if self._stop.is_set():
                    raise
                log.warning("OTD %s: the Spark traffic job failed; this round aggregates in Python", name,
                            exc_info=True)
        now = time.time()
        files = window_files(self.metrics_dir / name, window, now)
        return aggregate_records(read_window(files, window, now), window, now, load_secs), "python"

    def round(self, name: str, conf: dict[str, Any]) -> dict[str, Any] | None:
        """One OTD round for ``name``; returns the recorded decision."""
        plan, _ = self.cluster.plan(name)
        if plan is None or plan.rebalance or plan.status is not TopologyStatus.ACTIVE or self._busy(name):
            return None
        started = time.monotonic()
        window = float(conf.get("otd.window.secs", 10))
        traffic, engine = self.traffic(name, window, window)
        worker_node = {w: slot.node for w, slot in plan.workers.items()}
        loads = {w: load for w, load in self.loads(name).items() if w in worker_node}
        for w in traffic["workers"]:  # the window's load over the last heartbeat's; its cap stays
            if w["id"] in worker_node:
                beat = loads.get(w["id"]) or WorkerLoad(0.0, 0.0)
                loads[w["id"]] = replace(beat, cpu=w["cpu"] / beat.capacity, queue=w["backlog"], trend=w["trend"],
                                         wait=w.get("wait", 0.0))
        executors = sorted(plan.executors)
        edges = [(e["src"], e["dst"], float(e["tuples"])) for e in traffic["edges"]]
        # A latency constraint wins: OTD moves no executor its controller moved within the cool-down,
        # and breaks no chain (nimbus/latency.py). Nor one OTD itself moved within
        # otd.move.cooldown.secs: a window that still shows the old load (it spans the move) would
        # send it back, and then again (N-Storm's stability).
        migrations = self.cluster.migrations(name)
        now = time.time()
        held = recently_moved(migrations, "latency", now) | set(plan.chains) | set(plan.chains.values()) \
            | recently_moved(migrations, "otd", now, float(conf.get("otd.move.cooldown.secs", 60)))
        # The executors a latency move joined are the point of it: they stay as well.
        joined = {r.target for r in migrations if r.by == "latency" and r.executor in held}
        held |= {e for e, w in plan.executors.items() if w in joined}
        last_move = max((float(r.completed_at or r.requested_at or 0.0) for r in migrations if r.by == "otd"),
                        default=0.0)
        # A worker whose supervisor is down reads no new plan: Nimbus refuses a move from or to it,
        # so it is neither a source nor a target (a worker without a load is in no class); nor is
        # one being released (moves emptied it: its idle load would draw them back).
        supervisors = self.cluster.supervisors()
        unwatched = unwatched_workers(plan.workers, supervisors)
        loads = {w: load for w, load in loads.items() if w not in unwatched and w not in plan.releasing}
        movable = [e for e in executors if not is_acker(e) and e not in held and plan.executors[e] not in unwatched]
        decision = otd_round(executors, plan.executors, worker_node, loads, edges, conf, movable)
        elapsed = time.monotonic() - started
        record = {**decision.as_json(), "at": time.time(), "inter_node_ratio": traffic["inter_node_ratio"],
                  "window_tuples": traffic["total_tuples"], "engine": engine, "round_secs": round(elapsed, 3),
                  "loads": {w: [round(x.cpu, 3), round(x.queue, 1), round(x.trend, 2), round(x.wait, 3)]
                            for w, x in sorted(loads.items())}}
        log.info("OTD %s: round in %.2fs (%s), case %d, inter-node ratio %.1f%% over %d tuples, %d low, "
                 "high/normal (cpu, backlog, trend, wait): %s", name, elapsed, engine, decision.case,
                 100 * traffic["inter_node_ratio"], traffic["total_tuples"],
                 sum(1 for c in decision.classes.values() if c == "low"),
                 {w: (c, *record["loads"].get(w, ())) for w, c in sorted(decision.classes.items()) if c != "low"})
        if flag(conf, "otd.autoscale"):
            step = self._autoscale(name, plan, decision, conf, loads, behind(loads, conf), supervisors)
            if step is not None:
                record["autoscale"] = step.as_json()
                decision.warning = None  # acted on
            record["warning"] = decision.warning  # or why it could not act (no CPU for more)
        if decision.warning:
            log.warning("OTD %s: %s", name, decision.warning)
        if decision.executor and decision.target and "autoscale" not in record and now - last_move < window:
            # The window still holds traffic and load from before OTD's last move: judge the
            # next one on a window that shows the new placement only.
            record["held"] = f"OTD's last move was {now - last_move:.1f}s ago, within otd.window.secs"
            log.info("OTD %s: case %d would move %s -> %s: held (%s)", name, decision.case, decision.executor,
                     decision.target, record["held"])
        elif decision.executor and decision.target and "autoscale" not in record:
            log.info("OTD %s: case %d moves %s -> %s (ASC %.0f)", name, decision.case, decision.executor,
                     decision.target, decision.asc)
            request = {"mode": "thread", "moves": [[decision.executor, decision.target]], "random": 0,
                       "by": "otd", "requested_at": time.time()}
            self.zk.create(f"{self.paths.requests(name)}/req-", encode(request), sequence=True, makepath=True)
        path = self.paths.otd(name)
        data = json.dumps(record, default=str).encode()
        if self.zk.exists(path):
            self.zk.set(path, data)
        else:
            self.zk.create(path, data, makepath=True)
        record_round(self.zk, self.paths, name, record, int(conf.get("otd.history.size") or 200))
        return record


    def _autoscale(self, name: str, plan: Any, decision: Any, conf: dict[str, Any],
                   loads: dict[str, WorkerLoad], lagging: set[str],
                   supervisors: dict[str, dict[str, Any]]) -> ScaleStep | None:
        """Case 2 scales the overloaded component out; an idle one is scaled in (scheduler_otd.otd)."""
        now = time.monotonic()
        since = now - self._scaled_at.get(name, -1e9)
        if since < float(conf.get("otd.window.secs", 10)):
            return None  # the window still shows the layout before the last step
        topo = self.cluster.topology(name) or {}
        bolts = {c for c, spec in (topo.get("definition") or {}).get("components", {}).items() if spec["kind"] == "bolt"}
        executor_cpu: dict[str, float] = {}
        for beat in self.cluster.heartbeats(name).values():
            for eid, counters in beat.executors.items():
                if isinstance(counters.get("cpu"), (int, float)):
                    executor_cpu[eid] = float(counters["cpu"])
        others: list[Slot] = []  # other topologies' workers
        for other in self.cluster.names():
            other_plan = self.cluster.plan(other)[0] if other != name else None
            if other_plan is not None:
                others.extend(other_plan.workers.values())
        used = set(plan.workers) | {s.worker_id for s in others}
        free = [s for s in interleave_slots(supervisors) if s.worker_id not in used]  # Nimbus's order
        placement = {e: w for e, w in plan.executors.items() if not is_acker(e)}
        high = {w for w, c in decision.classes.items() if c == HIGH}
        worker_host = {w: s.host for w, s in plan.workers.items()}
        wait_high = float(conf.get("otd.cpu.wait.high", 0.25))
        free_hosts = [s.host for s in free]
        machines, hosts = _machines(supervisors, others), machine_of(supervisors)
        no_cpu = no_cpu_for_more(high & lagging, loads, worker_host, free_hosts, wait_high, machines, hosts)
        capacity = {w: load.capacity for w, load in loads.items()}
        step = autoscale(decision, placement, bolts, executor_cpu, capacity, conf, len(free),
                         self._low_since.setdefault(name, {}), now, lagging, no_cpu)
        if step is None:
            return None
        scaling_in = step.parallelism < sum(1 for e in placement if component_of(e) == step.component)
        if scaling_in and since < float(conf.get("otd.autoscale.cooldown.secs", 30)):
            return None  # out as soon as the load asks for it, in only after the cool-down
        self._scaled_at[name] = now
        log.info("OTD %s: autoscale %s to %d executors%s: %s", name, step.component, step.parallelism,
                 f" on {step.workers} workers" if step.workers else "", step.why)
        request = {"mode": "thread", "moves": [], "random": 0, "by": "otd", "requested_at": time.time(),
                   "parallelism": {step.component: step.parallelism}, "workers": step.workers,
                   "hosts": hosts_with_cpu(free_hosts, loads, worker_host, wait_high, machines, hosts)}  # a new worker goes there first
        self.zk.create(f"{self.paths.requests(name)}/req-", encode(request), sequence=True, makepath=True)
        return step


def machine_of(supervisors: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Host -> the machine the supervisors there registered (``machine``: the kernel's boot id and
    the CPUs they may use, which network namespaces and containers of one machine share); a host
    whose supervisors registered none (older supervisors) is a machine of its own."""
    where: dict[str, str] = {}
    for info in supervisors.values():
        host = str(info.get("host"))
        if info.get("machine") or host not in where:  # one that registered its machine decides
            where[host] = str(info.get("machine") or host)
    return where


def _machines(supervisors: Mapping[str, Mapping[str, Any]], others: Sequence[Slot] = ()) -> dict[str, tuple[float, float]]:
    """Host -> (the CPU cap its supervisors give a new worker, the largest where they differ, 0 for
    none; the cores a topology may use on its machine, :func:`machine_of`), from the supervisors'
    registrations (one that registered neither is left out): the machine's cores less the caps
    of ``others`` (other topologies' workers) on any of its hosts, each its own host's cap."""
    where = machine_of(supervisors)
    caps: dict[str, float] = {}
    cores: dict[str, float] = {}
    for info in supervisors.values():
        cap, count = info.get("worker_cpu_limit"), info.get("cores")
        if isinstance(cap, (int, float)) and isinstance(count, (int, float)) and count > 0:
            host = str(info.get("host"))
            caps[host] = max(caps.get(host, 0.0), float(cap))
            cores[where[host]] = max(cores.get(where[host], 0.0), float(count))
    for slot in others:
        if caps.get(slot.host, 0.0) > 0:
            machine = where[slot.host]
            cores[machine] -= min(caps[slot.host], 1.0)
    return {host: (cap, cores[where[host]]) for host, cap in caps.items()}


def _capacity(beat: Heartbeat) -> float:
    """Cores a worker can use: its cgroup cap if its supervisor set one, else one (the GIL)."""
    limit = beat.cpu_limit or 0.0
    return min(limit, 1.0) if limit > 0 else 1.0
