"""The REST API's documents, in the shape of Storm's UI REST API (``docs/STORM-UI-REST-API.md``).

Same paths and field names where the concept exists (``spoutId``, ``boltId``, ``executors``,
``emitted``, ``transferred``, ``acked``, ``failed``, ``executed``, ``capacity``,
``executeLatency``, ``processLatency``, ``completeLatency``, ``lastError``, ...), latencies and
capacity as strings with three decimals, as Storm sends them; nstorm's own facts (placement,
per-executor load, the DAG, migrations, OTD, checkpoints, latency constraints, chains) in fields
of their own. ``:id`` is the topology's name.

Pure functions of what :mod:`ui.source` read, so that each document is tested without a cluster.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nstorm import __version__
from nstorm.client import ClusterClient
from nstorm.config import flag, merge_conf, without_credentials
from nstorm.loglevels import sampling_of
from nstorm.plan import Plan
from nstorm.records import Heartbeat, MigrationRecord
from nstorm.rescale import executors_of_component
from nstorm.topology import component_of

__all__ = [
    "TopologyView",
    "cluster_summary",
    "component_document",
    "masked",
    "migrations_document",
    "nimbus_summary",
    "latency_document",
    "otd_document",
    "pretty_secs",
    "read_topology",
    "supervisor_summary",
    "topology_document",
    "topology_summary",
]

_SECRET = re.compile(r"password|secret|token|auth", re.IGNORECASE)
MASK = "********"
ALIVE_SECS = 10.0  # a worker whose last heartbeat is older is shown dead
# status --json fields the documents map to Storm's or show in a place of their own (the latency
# constraints and chains: a table and the placement view); every other one (checkpoints, stalled,
# and whatever later features add) is passed on under its own name.
_KNOWN_STATUS = {"name", "status", "plan_version", "workers", "components", "spouts", "otd", "migrations",
                 "constraints", "chains"}
_KNOWN_COMPONENT = {"parallelism", "emitted", "batches", "executed", "acked", "failed", "queue", "errors",
                    "last_error", "latency_ms", "capacity", "metrics"}




def masked(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with the values of secret-looking keys (password, secret, token, auth) hidden, in
    nested settings too (``topology.state.provider.config``), and credentials in URLs."""
    return {k: _masked_value(k, v) for k, v in sorted(conf.items())}


def _masked_value(key: str, value: Any) -> Any:
    if _SECRET.search(str(key)) and value not in (None, "", False):
        return MASK
    if isinstance(value, Mapping):
        return {k: _masked_value(k, v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked_value(key, v) for v in value]
    if isinstance(value, str):
        return without_credentials(value, MASK)  # "redis://:p@ss@host" -> "redis://********@host"
    return value


def pretty_secs(secs: float | None) -> str:
    """Storm's uptime format: ``1d 2h 3m 4s``, ``5m 58s``, ``12s``."""
    if secs is None:
        return ""
    secs = max(0, int(secs))
    days, rest = divmod(secs, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{days}d"] if days else []
    if days or hours:
        parts.append(f"{hours}h")
    if days or hours or minutes:
        parts.append(f"{minutes}m")
    parts.append(f"{seconds}s")
    return " ".join(parts)


def _f3(value: float | None) -> str:
    """Storm's number-as-string with three decimals ("0.000" when unknown, as Storm does)."""
    return f"{float(value):.3f}" if value is not None else "0.000"


def _worker_log_link(name: str, wid: str) -> str:
    return f"/api/v1/topology/{name}/worker/{wid}/log"


# -- reading -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TopologyView:
    """Everything the documents of one topology need, read once (see :func:`read_topology`)."""

    name: str
    record: Mapping[str, Any]
    conf: Mapping[str, Any]
    status: Mapping[str, Any]
    plan: Plan | None
    beats: Mapping[str, Heartbeat]
    migrations: list[MigrationRecord]
    supervisors: Mapping[str, Mapping[str, Any]]
    otd_history: Mapping[str, Any] | None = None
    sampling: Mapping[str, float] = field(default_factory=dict)  # event sampling: component or "*" -> percent
    at: float = field(default_factory=time.time)

    def sampling_of(self, component: str) -> float:
        """The percentage of ``component``'s emitted tuples its executors log (0: none)."""
        return sampling_of(self.sampling, component)

    @property
    def definition(self) -> Mapping[str, Any]:
        return self.record["definition"]  # type: ignore[no-any-return]

    def executor_counters(self) -> dict[str, tuple[Mapping[str, Any], str]]:
        """Executor id -> (its counters, the worker that reported them). A moved executor reported
        by its old and its new worker counts as the copy where the plan puts it."""
        placed = self.plan.executors if self.plan else {}
        out: dict[str, tuple[Mapping[str, Any], str]] = {}
        for wid, beat in self.beats.items():
            for eid, c in beat.executors.items():
                if eid not in out or placed.get(eid) == wid:
                    out[eid] = (c, wid)
        return out


def read_topology(client: ClusterClient, name: str) -> TopologyView:
    """Read ``name`` (NotFoundError if there is no such topology)."""
    status = client.status(name)
    record = client.cluster.topology(name) or {}
    history, _ = client.cluster.read(client.paths.otd_rounds(name))
    return TopologyView(
        name=name, record=record, conf=merge_conf(record.get("definition", {}).get("conf"), record.get("conf")),
        status=status, plan=client.plan(name), beats=client.heartbeats(name), migrations=client.migrations(name),
        supervisors=client.cluster.supervisors(), otd_history=history if isinstance(history, dict) else None,
        sampling=client.event_sampling(name))


# -- cluster-wide ------------------------------------------------------------------------------
def _slots_used(plans: Mapping[str, Plan | None]) -> dict[str, str]:
    """Worker id -> the topology whose plan holds it."""
    return {wid: name for name, plan in plans.items() if plan for wid in plan.workers}


def cluster_summary(supervisors: Mapping[str, Mapping[str, Any]], plans: Mapping[str, Plan | None],
                    nimbuses: list[str]) -> dict[str, Any]:
    """``/api/v1/cluster/summary``."""
    total = sum(len(s.get("slots") or []) for s in supervisors.values())
    live = {f"{node}:{slot[0]}" for node, s in supervisors.items() for slot in s.get("slots") or []}
    used = len(live & set(_slots_used(plans)))
    executors = sum(len(p.executors) for p in plans.values() if p)
    return {"stormVersion": f"nstorm {__version__}", "nstormVersion": __version__, "supervisors": len(supervisors),
            "topologies": len(plans), "slotsTotal": total, "slotsUsed": used, "slotsFree": total - used,
            "executorsTotal": executors, "tasksTotal": executors, "nimbuses": len(nimbuses),
            "nimbusLeader": nimbuses[0] if nimbuses else None, "schedulerDisplayResource": False}


def supervisor_summary(supervisors: Mapping[str, Mapping[str, Any]], registered_at: Mapping[str, float],
                       plans: Mapping[str, Plan | None], now: float) -> dict[str, Any]:
    """``/api/v1/supervisor/summary``, each supervisor with its slots and what runs on them."""
    used = _slots_used(plans)
    rows = []
    for node, info in sorted(supervisors.items()):
        slots = []
        for slot in info.get("slots") or []:
            wid = f"{node}:{slot[0]}"
            slots.append({"id": wid, "port": slot[0], "topology": used.get(wid)})
        since = registered_at.get(node)
        up = now - since if since else None
        rows.append({"id": node, "host": info.get("host"), "uptime": pretty_secs(up),
                     "uptimeSeconds": int(up) if up is not None else None, "slotsTotal": len(slots),
                     "slotsUsed": sum(1 for s in slots if s["topology"]), "slots": slots,
                     "logLink": f"/api/v1/supervisor/{node}/log"})
    return {"supervisors": rows, "schedulerDisplayResource": False}


def nimbus_summary(contenders: list[str]) -> dict[str, Any]:
    """``/api/v1/nimbus/summary``: the leader first (contenders of the election lock, ``host:pid``)."""
    rows = []
    for i, identity in enumerate(contenders):
        host, _, pid = identity.rpartition(":")
        rows.append({"host": host or identity, "port": None, "pid": int(pid) if pid.isdigit() else None,
                     "status": "Leader" if i == 0 else "Not a Leader", "version": __version__, "id": identity})
    return {"nimbuses": rows}


def topology_summary(rows: Iterable[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """``/api/v1/topology/summary`` from ``(name, status, submitted_at, plan)`` rows."""
    out = []
    for r in rows:
        plan: Plan | None = r.get("plan")
        up = now - float(r["submitted_at"]) if r.get("submitted_at") else None
        executors = len(plan.executors) if plan else 0
        out.append({"id": r["name"], "encodedId": r["name"], "name": r["name"], "status": r["status"],
                    "uptime": pretty_secs(up),
                    "uptimeSeconds": int(up) if up is not None else None, "tasksTotal": executors,
                    "workersTotal": len(plan.workers) if plan else 0, "executorsTotal": executors,
                    "planVersion": plan.version if plan else None,
                    "scheduler": r.get("scheduler", "static"), "replicationCount": 1})
    return {"topologies": out, "schedulerDisplayResource": False}


# -- one topology -------------------------------------------------------------------------------
def _executor_ids(view: TopologyView, component: str) -> list[str]:
    """The component's executors now: the plan's (a live rescale adds ids and retires others),
    else the definition's ``component:0..parallelism-1``."""
    if view.plan is not None:
        ids = executors_of_component(view.plan, component)
        if ids:
            return ids
    return [f"{component}:{i}" for i in range(int(view.definition["components"][component]["parallelism"]))]


def _component_stats(view: TopologyView, component: str, counters: Mapping[str, tuple[Mapping[str, Any], str]]
                     ) -> dict[str, Any]:
    """Window figures of a component from its executors: rates, the busiest executor's capacity,
    execute latency weighted by what each executed, complete latency weighted by samples."""
    executed_rate = emitted_rate = 0.0
    busy_weight = busy_ms = 0.0
    capacity: float | None = None
    complete_n = 0
    complete_sum = 0.0
    for eid in _executor_ids(view, component):
        c = counters.get(eid, ({}, ""))[0]
        executed_rate += float(c.get("executed_rate") or 0.0)
        emitted_rate += float(c.get("emitted_rate") or 0.0)
        if c.get("capacity") is not None:
            capacity = max(capacity or 0.0, float(c["capacity"]))
        if c.get("execute_ms") is not None:
            weight = float(c.get("executed_rate") or 0.0) or 1e-9
            busy_weight += weight
            busy_ms += weight * float(c["execute_ms"])
        lat = c.get("latency_ms")
        if lat and lat.get("mean") is not None:
            n = int(lat.get("samples") or 1)
            complete_n += n
            complete_sum += n * float(lat["mean"])
    return {"executedRate": round(executed_rate, 3), "emittedRate": round(emitted_rate, 3), "capacity": capacity,
            "executeMs": busy_ms / busy_weight if busy_weight else None,
            "completeMs": complete_sum / complete_n if complete_n else None}


def _last_error(view: TopologyView, component: str, counters: Mapping[str, tuple[Mapping[str, Any], str]],
                now: float) -> dict[str, Any]:
    """Storm's lastError fields of a component: the newest error among its executors."""
    newest: tuple[float, Mapping[str, Any], str] | None = None
    for eid, (c, wid) in counters.items():
        if component_of(eid) != component or not c.get("last_error"):
            continue
        at = float(c.get("last_error_at") or 0.0)
        if newest is None or at > newest[0]:
            newest = (at, c, wid)
    if newest is None:
        return {"lastError": "", "errorHost": "", "errorPort": None, "errorWorkerLogLink": "", "errorTime": None,
                "errorLapsedSecs": None, "errorTrace": None}
    at, c, wid = newest
    slot = view.plan.workers.get(wid) if view.plan else None
    return {"lastError": c["last_error"], "errorHost": slot.host if slot else wid.rpartition(":")[0],
            "errorPort": slot.port if slot else None, "errorWorkerLogLink": _worker_log_link(view.name, wid),
            "errorTime": int(at) if at else None, "errorLapsedSecs": int(now - at) if at else None,
            "errorTrace": c.get("last_error_trace"), "errorWorker": wid}


def _extra(comp: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in comp.items() if k not in _KNOWN_COMPONENT}


def _spout_row(view: TopologyView, name: str, comp: Mapping[str, Any], stats: Mapping[str, Any],
               error: Mapping[str, Any]) -> dict[str, Any]:
    return {"spoutId": name, "encodedSpoutId": name, "executors": comp["parallelism"], "tasks": comp["parallelism"],
            "emitted": comp["emitted"], "transferred": comp["emitted"], "acked": comp["acked"],
            "failed": comp["failed"], "completeLatency": _f3(stats["completeMs"]),
            "emittedRate": stats["emittedRate"], "errors": comp.get("errors", 0), "latency": comp.get("latency_ms"),
            "metrics": comp.get("metrics"), "extra": _extra(comp), **error}


def _bolt_row(view: TopologyView, name: str, comp: Mapping[str, Any], stats: Mapping[str, Any],
              error: Mapping[str, Any]) -> dict[str, Any]:
    execute = stats["executeMs"]
    return {"boltId": name, "encodedBoltId": name, "executors": comp["parallelism"], "tasks": comp["parallelism"],
            "emitted": comp["emitted"], "transferred": comp["emitted"], "executed": comp["executed"],
            "acked": comp["acked"], "failed": comp["failed"], "capacity": _f3(stats["capacity"]),
            # nstorm acks a tuple as its process() returns (or when the bolt acks it by hand), so
            # the time from receipt to ack is the execute time.
            "executeLatency": _f3(execute), "processLatency": _f3(execute),
            "executedRate": stats["executedRate"], "emittedRate": stats["emittedRate"],
            "queue": comp.get("queue", 0), "errors": comp.get("errors", 0), "latency": comp.get("latency_ms"),
            "metrics": comp.get("metrics"), "extra": _extra(comp), **error}


def _executor_row(view: TopologyView, eid: str, c: Mapping[str, Any], reported_by: str) -> dict[str, Any]:
    placed = view.plan.executors.get(eid, reported_by) if view.plan else reported_by
    slot = view.plan.workers.get(placed) if view.plan else None
    lat = c.get("latency_ms") or {}
    return {"id": eid, "component": component_of(eid), "kind": c.get("kind"), "worker": placed,
            "node": slot.node if slot else placed.rpartition(":")[0], "host": slot.host if slot else None,
            "port": slot.port if slot else None, "emitted": int(c.get("emitted") or 0),
            "transferred": int(c.get("emitted") or 0), "executed": int(c.get("executed") or 0),
            "acked": int(c.get("acked") or 0), "failed": int(c.get("failed") or 0),
            "queue": int(c.get("queue") or 0), "errors": int(c.get("errors") or 0),
            "capacity": _f3(c.get("capacity")) if c.get("capacity") is not None else None,
            "executeLatency": _f3(c.get("execute_ms")), "processLatency": _f3(c.get("execute_ms")),
            "completeLatency": _f3(lat.get("mean")) if c.get("kind") == "spout" else None,
            "executedRate": c.get("executed_rate"), "emittedRate": c.get("emitted_rate"),
            "pending": c.get("pending"), "lastError": c.get("last_error") or "",
            "awaitingState": bool(c.get("awaiting_state")), "metrics": c.get("metrics")}


def _placement_row(eid: str, worker: str, c: Mapping[str, Any] | None) -> list[Any]:
    """One executor of the placement view, compact (a page with 1,000 of them stays small):
    ``[id, worker, capacity, executed/s, emitted/s, queue, errors]``."""
    c = c or {}
    return [eid, worker, c.get("capacity"), c.get("executed_rate"), c.get("emitted_rate"),
            int(c.get("queue") or 0), int(c.get("errors") or 0)]


def _dag(definition: Mapping[str, Any], components: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The DAG with each component's parallelism now (a live rescale changes it, not the definition)."""
    nodes = [{"id": n, "kind": c["kind"], "parallelism": components.get(n, c).get("parallelism", c["parallelism"]),
              "outputs": c.get("outputs") or {}} for n, c in definition["components"].items()]
    edges = [{"from": i["component"], "to": n, "stream": i.get("stream", "default"), "grouping": i.get("grouping"),
              "fields": i.get("fields") or []}
             for n, c in definition["components"].items() for i in c.get("inputs") or []]
    return {"nodes": nodes, "edges": edges}


def topology_document(view: TopologyView, now: float | None = None) -> dict[str, Any]:
    """``/api/v1/topology/:id``."""
    now = time.time() if now is None else now
    status = view.status
    counters = view.executor_counters()
    plan = view.plan
    submitted = view.record.get("submitted_at")
    spouts, bolts = [], []
    for name, comp in status["components"].items():
        stats = _component_stats(view, name, counters)
        error = _last_error(view, name, counters, now)
        if view.definition["components"][name]["kind"] == "spout":
            spouts.append(_spout_row(view, name, comp, stats, error))
        else:
            bolts.append(_bolt_row(view, name, comp, stats, error))
    by_worker: dict[str, list[str]] = {}
    for eid, wid in sorted((plan.executors if plan else {}).items()):
        by_worker.setdefault(wid, []).append(eid)
    workers = []
    for w in status["workers"]:
        beat = view.beats.get(w["id"])
        tasks: dict[str, int] = {}
        for eid in by_worker.get(w["id"], []):
            tasks[component_of(eid)] = tasks.get(component_of(eid), 0) + 1
        workers.append({"supervisorId": w["node"], "host": w["host"], "port": w["port"], "id": w["id"],
                        "topologyId": view.name, "topologyName": view.name,
                        "executorsTotal": len(by_worker.get(w["id"], [])), "componentNumTasks": tasks,
                        "pid": w["pid"], "alive": bool(beat and now - beat.time < ALIVE_SECS),
                        "cpu": w.get("cpu"), "cpuLimit": w.get("cpu_limit"), "core": w.get("core"),
                        "schedBatch": w.get("sched_batch"), "queue": beat.queue if beat else None,
                        "droppedFrames": beat.dropped_frames if beat else None,
                        "forwarded": beat.forwarded if beat else None, "planVersion": w.get("plan_version"),
                        "lastHeartbeatSecs": round(now - beat.time, 1) if beat else None,
                        "executors": by_worker.get(w["id"], []), "workerLogLink": _worker_log_link(view.name, w["id"])})
    placement = [_placement_row(eid, wid, counters.get(eid, (None, ""))[0])
                 for eid, wid in sorted((plan.executors if plan else {}).items())]
    emitted = sum(int(c["emitted"]) for n, c in status["components"].items())
    complete = [(s["completeLatency"], s["acked"]) for s in spouts]
    weight = sum(max(1, int(a)) for _, a in complete)
    complete_ms = sum(float(lat) * max(1, int(a)) for lat, a in complete) / weight if complete else None
    executors = len(plan.executors) if plan else 0
    document: dict[str, Any] = {
        "id": view.name, "encodedId": view.name, "name": view.name, "status": status["status"],
        "uptime": pretty_secs(now - submitted if submitted else None),
        "uptimeSeconds": int(now - submitted) if submitted else None,
        "tasksTotal": executors, "workersTotal": len(plan.workers) if plan else 0, "executorsTotal": executors,
        "msgTimeout": view.conf.get("topology.message.timeout.secs"), "window": ":all-time", "windowHint": "All time",
        "statsWindowSecs": view.conf.get("worker.stats.window.secs"), "planVersion": status["plan_version"],
        "scheduler": view.conf.get("topology.scheduler", "static"), "schedulerDisplayResource": False,
        "debug": flag(view.conf, "topology.debug") or bool(view.sampling.get("*")),
        "samplingPct": view.sampling.get("*", 0.0), "sampling": dict(view.sampling), "replicationCount": 1,
        "topologyStats": [{"windowPretty": "All time", "window": ":all-time", "emitted": emitted,
                           "transferred": emitted, "completeLatency": _f3(complete_ms),
                           "acked": status["spouts"]["acked"], "failed": status["spouts"]["failed"]}],
        "spoutTuples": status["spouts"],
        "spouts": spouts, "bolts": bolts, "workers": workers,
        "placement": {"columns": ["id", "worker", "capacity", "executedRate", "emittedRate", "queue", "errors"],
                      "executors": placement, "moving": sorted(m.executor for m in view.migrations if not m.completed_at)},
        "dag": _dag(view.definition, status["components"]),
        "otd": status.get("otd"),
        **latency_document(view),
        "migrationsTotal": len(view.migrations),
        "configuration": masked(view.conf),
    }
    sections = [k for k in status if k not in _KNOWN_STATUS]
    for key in sections:  # checkpoints, stalled, and what later features add to status --json
        document[key] = status[key]
    document["sections"] = sections
    return document


def component_document(view: TopologyView, component: str, now: float | None = None) -> dict[str, Any] | None:
    """``/api/v1/topology/:id/component/:component`` (None: no such component)."""
    now = time.time() if now is None else now
    spec = view.definition["components"].get(component)
    comp = view.status["components"].get(component)
    if spec is None or comp is None:
        return None
    counters = view.executor_counters()
    stats = _component_stats(view, component, counters)
    error = _last_error(view, component, counters, now)
    rows = []
    errors = []
    for eid in _executor_ids(view, component):
        c, wid = counters.get(eid, ({}, view.plan.executors.get(eid, "") if view.plan else ""))
        row = _executor_row(view, eid, c, wid)
        rows.append(row)
        if c.get("last_error"):
            at = c.get("last_error_at")
            errors.append({"error": c["last_error"], "trace": c.get("last_error_trace"), "executor": eid,
                           "errorTime": int(at) if at else None, "errorHost": row["host"], "errorPort": row["port"],
                           "errorLapsedSecs": int(now - at) if at else None,
                           "errorWorkerLogLink": _worker_log_link(view.name, row["worker"])})
    kind = spec["kind"]
    summary = {"windowPretty": "All time", "window": ":all-time", "emitted": comp["emitted"],
               "transferred": comp["emitted"], "acked": comp["acked"], "failed": comp["failed"]}
    doc: dict[str, Any] = {
        "id": component, "encodedId": component, "name": view.name, "topologyId": view.name,
        "encodedTopologyId": view.name, "topologyStatus": view.status["status"], "componentType": kind,
        "executors": comp["parallelism"], "tasks": comp["parallelism"], "window": ":all-time",
        "windowHint": "All time", "debug": view.sampling_of(component) > 0, "samplingPct": view.sampling_of(component),
        "eventLogLink": f"/api/v1/topology/{view.name}/events?component={component}", "componentErrors": sorted(errors, key=lambda e: -(e["errorTime"] or 0)),
        "executorStats": rows, "inputs": spec.get("inputs") or [], "outputs": spec.get("outputs") or {},
        "capacity": _f3(stats["capacity"]) if kind != "spout" else None, "metrics": comp.get("metrics"),
        "latency": comp.get("latency_ms"), "extra": _extra(comp), **error,
    }
    if kind == "spout":
        doc["spoutSummary"] = [{**summary, "completeLatency": _f3(stats["completeMs"])}]
    else:
        doc["boltStats"] = [{**summary, "executed": comp["executed"], "executeLatency": _f3(stats["executeMs"]),
                             "processLatency": _f3(stats["executeMs"]), "capacity": _f3(stats["capacity"])}]
    doc["outputStats"] = [{"stream": s, "emitted": comp["emitted"], "transferred": comp["emitted"]}
                          for s in (spec.get("outputs") or {"default": ()})][:1]
    return doc


def migrations_document(view: TopologyView) -> dict[str, Any]:
    """``/api/v1/topology/:id/migrations``: every move, oldest first (status --json's fields, and the
    record's id and whether the state was lost)."""
    rows = []
    for r in view.migrations:
        data = r.to_json()
        data.setdefault("stall_secs", None)
        data.setdefault("state_lost", None)
        data["id"] = r.id
        data["state"] = r.state.value
        rows.append(data)
    return {"topologyId": view.name, "migrations": rows, "moving": [r["executor"] for r in rows if not r["completed_at"]]}


def latency_document(view: TopologyView) -> dict[str, Any]:
    """``/api/v1/topology/:id/latency``: ``constraints`` and ``chains`` exactly as ``status --json``
    has them (:meth:`nstorm.client.ClusterClient.status` builds both), so that the CLI, the API
    and the page never disagree about a constraint."""
    return {"constraints": list(view.status.get("constraints") or []), "chains": dict(view.status.get("chains") or {})}


def otd_document(view: TopologyView) -> dict[str, Any]:
    """``/api/v1/topology/:id/otd``: the last round in full, then the history (oldest first)."""
    history = view.otd_history or {}
    return {"topologyId": view.name, "scheduler": view.conf.get("topology.scheduler", "static"),
            "periodSecs": view.conf.get("otd.period.secs"), "last": view.status.get("otd"),
            "rounds": list(history.get("rounds") or []), "cases": dict(history.get("cases") or {})}
