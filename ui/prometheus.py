"""``GET /metrics``: the cluster in Prometheus' text format (``prometheus_client``).

Built at each scrape from what the UI reads anyway (:class:`~ui.documents.TopologyView`), so the
UI keeps no state of its own. Labels: ``topology``, ``component``, ``executor``, ``worker``,
``node``. Families:

- per executor and per component: emitted, executed, acked, failed (counters), capacity and
  execute latency over the workers' stats window (gauges), queue depth;
- per component: the latency histogram (``kind``: ``complete`` for spouts, ``emit_to_process`` for
  bolts), from the workers' cumulative log buckets folded into fixed bounds (an observation is
  counted under the first bound at or above its bucket's upper edge, so within a bucket, 4.7%; ``_sum`` is
  estimated the same way);
- per worker: CPU (share of a core), queued tuples, dropped frames, forwarded frames, heartbeat age;
- per topology: migrations by mode and by whom, OTD rounds by case, checkpoint restores, pending
  spout tuples, chained executors;
- per latency constraint (label ``path``: ``a>b>c``): its bound and its last window's measured
  p99 (seconds; none once the path has had no sample for two windows and 3 s), whether that
  window met the bound (1/0, none then), and the windows judged and met (counters of the leading
  Nimbus's controller, which a Nimbus that takes over goes on from);
- user metrics (``context.register_counter`` / ``register_gauge``): ``nstorm_user_<name>_total``
  and ``nstorm_user_<name>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from nstorm import latency
from nstorm.plan import Plan
from nstorm.topology import component_of
from ui.documents import TopologyView

__all__ = ["CONTENT_TYPE_LATEST", "LATENCY_BOUNDS", "cluster_families", "render", "topology_families"]

LATENCY_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_EXECUTOR = ["topology", "component", "executor", "worker", "node"]
_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_]")


def _name(user: str) -> str:
    return _BAD_CHARS.sub("_", user)


def histogram_buckets(hist: Mapping[int | str, int]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative ``(le, count)`` buckets over :data:`LATENCY_BOUNDS` and the estimated sum (seconds)
    of a :mod:`nstorm.latency` histogram."""
    counts = [0] * (len(LATENCY_BOUNDS) + 1)
    total_sum = 0.0
    for key, n in hist.items():
        upper = latency.upper_bound(int(key))
        total_sum += upper * int(n)
        slot = next((i for i, b in enumerate(LATENCY_BOUNDS) if upper <= b * 1.000001), len(LATENCY_BOUNDS))
        counts[slot] += int(n)
    buckets, running = [], 0
    for bound, n in zip([*map(repr, LATENCY_BOUNDS), "+Inf"], counts, strict=True):
        running += n
        buckets.append((bound, float(running)))
    return buckets, total_sum


class _Families:
    """The families of one scrape, created on first use so that unused ones are not exported."""

    def __init__(self) -> None:
        self.made: dict[str, Metric] = {}
        self.user_owner: dict[str, tuple[str, str]] = {}  # exposed name -> (user metric name, kind)

    def user_family(self, mname: str, kind: str) -> str | None:
        """The family of user metric ``mname`` (``kind``: counter or gauge) for the whole scrape,
        every topology's: None when a name it would expose is another's (``a.b`` and ``a-b`` both
        make ``nstorm_user_a_b``; a counter and a gauge of one name): the first one seen keeps it,
        so no sample is a duplicate and none changes its type."""
        family = f"nstorm_user_{_name(mname)}"
        names = (family, f"{family}_total") if kind == "counter" else (family,)
        if any(self.user_owner.get(n, (mname, kind)) != (mname, kind) for n in names):
            return None
        for n in names:
            self.user_owner[n] = (mname, kind)
        return family

    def counter(self, name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        if name not in self.made:
            self.made[name] = CounterMetricFamily(name, doc, labels=labels)
        return self.made[name]  # type: ignore[return-value]

    def gauge(self, name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        if name not in self.made:
            self.made[name] = GaugeMetricFamily(name, doc, labels=labels)
        return self.made[name]  # type: ignore[return-value]

    def histogram(self, name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
        if name not in self.made:
            self.made[name] = HistogramMetricFamily(name, doc, labels=labels)
        return self.made[name]  # type: ignore[return-value]


def cluster_families(supervisors: Mapping[str, Mapping[str, Any]], plans: Mapping[str, Plan | None],
                     leader: bool) -> list[Metric]:
    """The cluster's own gauges."""
    used = {w for p in plans.values() if p for w in p.workers}
    total = sum(len(s.get("slots") or []) for s in supervisors.values())
    live = {f"{node}:{slot[0]}" for node, s in supervisors.items() for slot in s.get("slots") or []}
    up = GaugeMetricFamily("nstorm_up", "1: this scrape read the cluster's ZooKeeper (while it cannot, /metrics answers 503)")
    up.add_metric([], 1)
    sup = GaugeMetricFamily("nstorm_cluster_supervisors", "Registered supervisors")
    sup.add_metric([], len(supervisors))
    slots = GaugeMetricFamily("nstorm_cluster_slots", "Worker slots of the live supervisors", labels=["state"])
    slots.add_metric(["used"], len(live & used))
    slots.add_metric(["free"], total - len(live & used))
    topo = GaugeMetricFamily("nstorm_cluster_topologies", "Submitted topologies")
    topo.add_metric([], len(plans))
    nimbus = GaugeMetricFamily("nstorm_cluster_nimbus_leader", "1 while a Nimbus leads")
    nimbus.add_metric([], 1 if leader else 0)
    return [up, sup, slots, topo, nimbus]


def topology_families(views: Iterable[TopologyView], now: float) -> list[Metric]:
    """Every family of the topologies in ``views``."""
    f = _Families()
    for view in views:
        _topology(f, view, now)
    return list(f.made.values())


def _topology(f: _Families, view: TopologyView, now: float) -> None:
    name = view.name
    status = view.status
    plan = view.plan
    f.gauge("nstorm_topology_info", "1 per topology, with its status and scheduler",
            ["topology", "status", "scheduler"]).add_metric(
        [name, str(status["status"]), str(view.conf.get("topology.scheduler", "static"))], 1)
    f.gauge("nstorm_topology_workers", "Workers in the plan", ["topology"]).add_metric(
        [name], len(plan.workers) if plan else 0)
    f.gauge("nstorm_topology_executors", "Executors in the plan (ackers included)", ["topology"]).add_metric(
        [name], len(plan.executors) if plan else 0)
    f.gauge("nstorm_topology_spout_pending", "Tracked spout tuples not fully acked", ["topology"]).add_metric(
        [name], status["spouts"]["pending"])
    moves: dict[tuple[str, str], int] = {}
    for m in view.migrations:
        key = (m.mode.value, m.by)
        moves[key] = moves.get(key, 0) + 1
    family = f.counter("nstorm_topology_migrations", "Executor moves asked for, by mode and by whom",
                       ["topology", "mode", "by"])
    for (mode, by), n in sorted(moves.items()):
        family.add_metric([name, mode, by], n)
    cases = (view.otd_history or {}).get("cases") or {}
    rounds = f.counter("nstorm_topology_otd_rounds", "OTD rounds by case", ["topology", "case"])
    for case, n in sorted(cases.items()):
        rounds.add_metric([name, str(case)], int(n))
    checkpoints = status.get("checkpoints") or {}
    if checkpoints.get("provider", "memory") != "memory":
        f.counter("nstorm_topology_checkpoint_restores", "Rollbacks to a committed checkpoint",
                  ["topology"]).add_metric([name], int(checkpoints.get("restores") or 0))
        last = checkpoints.get("last_committed") or {}
        f.gauge("nstorm_topology_checkpoint_last_committed", "Id of the last committed checkpoint",
                ["topology"]).add_metric([name], int(last.get("id") or 0))
    f.gauge("nstorm_topology_chained_executors", "Executors running in their upstream executor's thread",
            ["topology"]).add_metric([name], len(status.get("chains") or {}))
    _constraints(f, view)
    _components(f, view)
    _executors(f, view)
    _workers(f, view, now)


def _constraints(f: _Families, view: TopologyView) -> None:
    """The latency constraints' families, from status's ``constraints`` (what ``status --json``
    and the API show, so that an alert and the page agree)."""
    labels = ["topology", "path"]
    for c in view.status.get("constraints") or ():
        key = [view.name, ">".join(c["path"])]
        f.gauge("nstorm_latency_constraint_bound_seconds", "The latency constraint's bound on the path's p99",
                labels).add_metric(key, float(c["p99_ms"]) / 1000.0)
        if c.get("measured_p99_ms") is not None:
            f.gauge("nstorm_latency_constraint_p99_seconds", "The path's p99 over the last judged window",
                    labels).add_metric(key, float(c["measured_p99_ms"]) / 1000.0)
        if c.get("met") is not None:
            f.gauge("nstorm_latency_constraint_met", "1 if the last judged window met the bound, else 0",
                    labels).add_metric(key, 1 if c["met"] else 0)
        f.counter("nstorm_latency_constraint_windows", "Windows judged (counted on across Nimbus fail-overs)",
                  labels).add_metric(key, int(c.get("windows") or 0))
        f.counter("nstorm_latency_constraint_windows_met", "Judged windows that met the bound (counted on across Nimbus fail-overs)",
                  labels).add_metric(key, int(c.get("windows_met") or 0))


def _components(f: _Families, view: TopologyView) -> None:
    labels = ["topology", "component"]
    hists: dict[tuple[str, str], list[Mapping[Any, int]]] = {}
    counters = view.executor_counters()
    for eid, (c, _wid) in counters.items():
        comp = component_of(eid)
        if c.get("latency_hist"):
            hists.setdefault((comp, "complete"), []).append(c["latency_hist"])
        if c.get("arrival_hist"):
            hists.setdefault((comp, "emit_to_process"), []).append(c["arrival_hist"])
    for comp, data in view.status["components"].items():
        key = [view.name, comp]
        for field in ("emitted", "executed", "acked", "failed"):
            f.counter(f"nstorm_component_{field}", f"Tuples {field} by the component's executors", labels).add_metric(
                key, int(data.get(field) or 0))
        f.counter("nstorm_component_errors", "Errors raised by the component's code", labels).add_metric(
            key, int(data.get("errors") or 0))
        if data.get("capacity") is not None:
            f.gauge("nstorm_component_capacity", "Storm's capacity of the busiest executor over the stats window",
                    labels).add_metric(key, float(data["capacity"]))
    family = f.histogram("nstorm_component_latency_seconds",
                         "complete: spout emit to fully acked; emit_to_process: spout emit to processed here",
                         ["topology", "component", "kind"])
    for (comp, kind), parts in sorted(hists.items()):
        buckets, total = histogram_buckets(latency.merge(*parts))
        family.add_metric([view.name, comp, kind], buckets, total)


def _executors(f: _Families, view: TopologyView) -> None:
    plan = view.plan
    for eid, (c, wid) in sorted(view.executor_counters().items()):
        placed = plan.executors.get(eid, wid) if plan else wid
        slot = plan.workers.get(placed) if plan else None
        key = [view.name, component_of(eid), eid, placed, slot.node if slot else placed.rpartition(":")[0]]
        for field in ("emitted", "executed", "acked", "failed", "errors"):
            f.counter(f"nstorm_executor_{field}", f"Tuples {field} by the executor" if field != "errors"
                      else "Errors raised by the executor's code", _EXECUTOR).add_metric(key, int(c.get(field) or 0))
        f.gauge("nstorm_executor_queue", "Batches waiting in the executor's input queue", _EXECUTOR).add_metric(
            key, int(c.get("queue") or 0))
        if c.get("capacity") is not None:
            f.gauge("nstorm_executor_capacity", "Share of the stats window the executor was busy (Storm's capacity)",
                    _EXECUTOR).add_metric(key, float(c["capacity"]))
        if c.get("execute_ms") is not None:
            f.gauge("nstorm_executor_execute_latency_seconds", "Busy time per executed tuple over the stats window",
                    _EXECUTOR).add_metric(key, float(c["execute_ms"]) / 1000.0)
        metrics = c.get("metrics") or {}
        # A name is one family in the whole scrape: the first seen keeps it (f.user_family).
        for mname, value in (metrics.get("counters") or {}).items():
            family = f.user_family(mname, "counter")
            if family is not None:
                f.counter(family, "User counter (context.register_counter)", _EXECUTOR).add_metric(key, float(value))
        for mname, value in (metrics.get("gauges") or {}).items():
            family = f.user_family(mname, "gauge")
            if family is not None:
                f.gauge(family, "User gauge (context.register_gauge)", _EXECUTOR).add_metric(key, float(value))


def _workers(f: _Families, view: TopologyView, now: float) -> None:
    labels = ["topology", "worker", "node"]
    plan = view.plan
    for wid, beat in sorted(view.beats.items()):
        slot = plan.workers.get(wid) if plan else None
        key = [view.name, wid, slot.node if slot else wid.rpartition(":")[0]]
        f.gauge("nstorm_worker_cpu", "Worker CPU, as a share of one core", labels).add_metric(key, beat.cpu)
        f.gauge("nstorm_worker_queue", "Tuples queued in the worker's executors", labels).add_metric(key, beat.queue)
        f.counter("nstorm_worker_dropped_frames", "Frames dropped (garbage, truncated, oversized, unknown task)",
                  labels).add_metric(key, beat.dropped_frames)
        f.counter("nstorm_worker_forwarded_frames", "Frames forwarded to a moved executor's new place",
                  labels).add_metric(key, beat.forwarded)
        f.gauge("nstorm_worker_heartbeat_age_seconds", "Seconds since the worker's last heartbeat",
                labels).add_metric(key, max(0.0, now - beat.time))


def render(families: Iterable[Metric]) -> bytes:
    """The text exposition of ``families``."""
    made = list(families)

    class _Once:
        def collect(self) -> Iterable[Metric]:
            return made

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Once())  # type: ignore[arg-type]
    return generate_latest(registry)
