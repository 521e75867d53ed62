"""Allocation plans as types: what Nimbus writes to ``assignments/<name>`` and every daemon reads.

A plan is versioned; each version is a whole :class:`Plan`. In JSON::

    {"topology": name, "version": 3, "status": "ACTIVE", "code_sha256": "...", "submission": "...",
     "tasks": ["sentences:0", ..., "__acker:0"],       # index = task id on the wire
     "executors": {"split:0": "n1:6700", ...},
     "workers": {"n1:6700": {"node": "n1", "host": "127.0.0.1", "port": 6700, "ctl_port": 7700}},
     "moved": {"count:3": {"from": "n1:6700", "to": "n2:6701", "mode": "thread", "version": 3,
                           "record": "m-0000000004"}},
     "restart": {"n1:6700": 3},                           # process mode: workers to restart, and the version that asked
     "retiring": {"count:7": "n2:6701"},                  # removed by a rescale, handing its key groups over
     "rescale": {"count": {"from": ["count:0", ...], "to": [...], "version": 5, "record": "m-0000000007"}},
     "missing_workers": 1,                                 # lost with a node, no slot to replace them
     "releasing": {"n3:6700": 6},                          # emptied, ackers moved off in v6: released once all have v6
     "tuning": {"split>count": {"latency_ms": 2.5, "cap": 512}},   # a latency constraint's buffer sizes
     "chains": {"split:0": "sentences:0"},                 # split:0 runs in sentences:0's thread
     "rebalance": {...}}                                   # stop mode: the phase Nimbus is in

Nimbus is the only writer of plans, but ZooKeeper is shared: a plan damaged by hand, by a
buggy tool or by a hostile client is rejected by :meth:`Plan.from_json` (the one place the
shape is checked) with a :class:`PlanError` saying what is wrong, never half-applied. A
supervisor mirrors each plan of its node, with the topology's definition and code, into
its LMDB store as a :class:`LocalPlan`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from nstorm.records import MoveMode, TopologyStatus

__all__ = ["LocalPlan", "Move", "Plan", "PlanError", "Rescale", "Slot", "interleave_slots"]


class PlanError(ValueError):
    """A plan that does not have the documented shape (see the module docstring)."""


def _fail(name: str, why: str) -> PlanError:
    return PlanError(f"malformed plan for {name}: {why}")


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


@dataclass(frozen=True, order=True)
class Slot:
    """A worker slot of a supervisor: one worker process binds ``port`` and ``ctl_port``."""

    node: str
    host: str
    port: int
    ctl_port: int

    @property
    def worker_id(self) -> str:
        return f"{self.node}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "host": self.host, "port": self.port, "ctl_port": self.ctl_port}

    @classmethod
    def from_json(cls, name: str, wid: str, data: Any) -> Slot:
        if not isinstance(data, Mapping) or not isinstance(data.get("node"), str) or not isinstance(data.get("host"), str):
            raise _fail(name, f"worker {wid!r} needs a node and a host")
        if not _is_port(data.get("port")) or not _is_port(data.get("ctl_port")):
            raise _fail(name, f"worker {wid!r} has a bad port")
        return cls(data["node"], data["host"], int(data["port"]), int(data["ctl_port"]))


def interleave_slots(supervisors: Mapping[str, Mapping[str, Any]]) -> list[Slot]:
    """All slots of the registered supervisors (``supervisors/<node>``), ordered n1:p0, n2:p0,
    n1:p1, n2:p1, ... so that round-robin spreads over nodes."""
    per_node: list[list[Slot]] = []
    for node in sorted(supervisors):
        info = supervisors[node]
        slots = [Slot(node, info["host"], int(p), int(c)) for p, c in info["slots"]]
        per_node.append(sorted(slots, key=lambda s: s.port))
    ordered: list[Slot] = []
    for rank in range(max((len(s) for s in per_node), default=0)):
        ordered.extend(slots[rank] for slots in per_node if rank < len(slots))
    return ordered


@dataclass(frozen=True)
class Move:
    """The last move of one executor, kept in the plan until its record is completed: a worker
    that starts the executor's new copy knows from it where the state comes from."""

    source: str
    target: str
    mode: MoveMode
    version: int
    record: str | None = None

    @classmethod
    def from_json(cls, name: str, executor: str, data: Any) -> Move:
        if not isinstance(data, Mapping) or not isinstance(data.get("from"), str) or not isinstance(data.get("to"), str):
            raise _fail(name, f"the move of {executor!r} needs from and to")
        try:
            mode = MoveMode(data.get("mode", "thread"))
        except ValueError:
            raise _fail(name, f"the move of {executor!r} has an unknown mode {data.get('mode')!r}") from None
        record = data.get("record")
        return cls(data["from"], data["to"], mode, int(data.get("version") or 0),
                   record if isinstance(record, str) else None)

    def to_json(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "mode": self.mode.value, "version": self.version,
                "record": self.record}


@dataclass(frozen=True)
class Rescale:
    """A component's parallelism change in progress, kept in the plan until its record is
    completed: the executors before (``old``) and after (``new``), in task order. Key group
    ``g`` belongs to ``old[g % len(old)]`` before and ``new[g % len(new)]`` after
    (:mod:`nstorm.state.keyed`), so every worker derives who hands which group to whom."""

    component: str
    old: tuple[str, ...]
    new: tuple[str, ...]
    version: int
    record: str | None = None

    @classmethod
    def from_json(cls, name: str, component: str, data: Any) -> Rescale:
        if not isinstance(data, Mapping):
            raise _fail(name, f"the rescale of {component!r} must be an object")
        old, new = data.get("from"), data.get("to")
        for what in (old, new):
            if not isinstance(what, list) or not what or not all(isinstance(e, str) for e in what):
                raise _fail(name, f"the rescale of {component!r} needs non-empty from and to executor lists")
        record = data.get("record")
        return cls(component, tuple(old), tuple(new), int(data.get("version") or 0),
                   record if isinstance(record, str) else None)

    def to_json(self) -> dict[str, Any]:
        return {"from": list(self.old), "to": list(self.new), "version": self.version, "record": self.record}


@dataclass(frozen=True)
class Plan:
    """One version of a topology's allocation plan (see the module docstring)."""

    topology: str
    version: int
    tasks: tuple[str, ...]
    executors: Mapping[str, str]
    workers: Mapping[str, Slot]
    status: TopologyStatus = TopologyStatus.ACTIVE
    code_sha256: str = ""
    submission: str | None = None
    moved: Mapping[str, Move] = field(default_factory=dict)
    restart: Mapping[str, int] = field(default_factory=dict)
    missing_workers: int = 0  # workers lost with their node and not replaced yet (Nimbus spreads back)
    retiring: Mapping[str, str] = field(default_factory=dict)  # executor -> worker: removed, handing over
    # worker -> the version that moved its ackers off: it holds nothing, released once every worker has it
    releasing: Mapping[str, int] = field(default_factory=dict)
    rescales: Mapping[str, Rescale] = field(default_factory=dict)  # component -> its rescale in progress
    rebalance: Mapping[str, Any] | None = None
    updated_at: float | None = None
    # channel "src>dst" -> {"latency_ms", "cap"}: output buffers a latency constraint's controller sized
    tuning: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # downstream executor -> the upstream executor whose thread runs it (nstorm.chaining)
    chains: Mapping[str, str] = field(default_factory=dict)

    def replace(self, **changes: Any) -> Plan:
        return replace(self, **changes)

    def next(self, **changes: Any) -> Plan:
        """The next version, with ``changes``."""
        return replace(self, version=self.version + 1, **changes)

    def executors_of(self, worker_id: str) -> list[str]:
        return [e for e, w in self.executors.items() if w == worker_id]

    @classmethod
    def from_json(cls, name: str, data: Any) -> Plan:
        """Check ``data`` and make it a plan; :class:`PlanError` saying what is wrong otherwise."""
        if not isinstance(data, Mapping):
            raise _fail(name, f"expected an object, got {type(data).__name__}")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise _fail(name, f"version must be a positive integer, got {version!r}")
        try:
            status = TopologyStatus(data.get("status", "ACTIVE"))
        except ValueError:
            raise _fail(name, f"unknown status {data.get('status')!r}") from None
        if status is TopologyStatus.KILLED:
            raise _fail(name, "a plan is ACTIVE or INACTIVE")
        if not isinstance(data.get("code_sha256"), str):
            raise _fail(name, "code_sha256 is missing")
        submission = data.get("submission")
        if submission is not None and not isinstance(submission, str):
            raise _fail(name, "submission must be a string")
        tasks = data.get("tasks")
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            raise _fail(name, "tasks must be a list of executor ids")
        raw_workers = data.get("workers")
        if not isinstance(raw_workers, Mapping):
            raise _fail(name, "workers must be an object")
        workers = {wid: Slot.from_json(name, wid, w) for wid, w in raw_workers.items()}
        executors = data.get("executors")
        if not isinstance(executors, Mapping):
            raise _fail(name, "executors must be an object")
        rebalance = data.get("rebalance")
        if rebalance is not None and not isinstance(rebalance, Mapping):
            raise _fail(name, "rebalance must be an object")
        known = set(tasks)
        for executor, wid in executors.items():
            if executor not in known:
                raise _fail(name, f"executor {executor!r} is not in tasks")
            if wid not in workers and not (rebalance and isinstance(wid, str)):
                raise _fail(name, f"executor {executor!r} is on unknown worker {wid!r}")
        moved = data.get("moved") or {}
        restart = data.get("restart") or {}
        if not isinstance(moved, Mapping) or not isinstance(restart, Mapping):
            raise _fail(name, "moved and restart must be objects")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in restart.values()):
            raise _fail(name, "restart must map worker ids to versions")
        retiring = data.get("retiring") or {}
        if not isinstance(retiring, Mapping) or not all(e in known and w in workers for e, w in retiring.items()):
            raise _fail(name, "retiring must map executors to workers of the plan")
        releasing = data.get("releasing") or {}
        if not isinstance(releasing, Mapping) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in releasing.values()):
            raise _fail(name, "releasing must map worker ids to versions")
        rescales = data.get("rescale") or {}
        if not isinstance(rescales, Mapping):
            raise _fail(name, "rescale must be an object")
        steps = {c: Rescale.from_json(name, c, r) for c, r in rescales.items()}
        for step in steps.values():
            if not set(step.old) | set(step.new) <= known:
                raise _fail(name, f"the rescale of {step.component!r} names executors that are not in tasks")
        updated = data.get("updated_at")
        missing = data.get("missing_workers", 0)
        if not isinstance(missing, int) or isinstance(missing, bool) or missing < 0:
            raise _fail(name, f"missing_workers must be a count, got {missing!r}")
        tuning = data.get("tuning") or {}
        if not isinstance(tuning, Mapping) or not all(
                isinstance(k, str) and isinstance(v, Mapping) and all(
                    key in ("latency_ms", "cap") and isinstance(x, (int, float)) and not isinstance(x, bool)
                    and 0 < x < math.inf for key, x in v.items()) for k, v in tuning.items()):
            raise _fail(name, "tuning must map channels to positive, finite latency_ms and cap")
        chains = data.get("chains") or {}
        if not isinstance(chains, Mapping) or not all(
                isinstance(d, str) and isinstance(u, str) and d in known and u in known for d, u in chains.items()):
            raise _fail(name, "chains must map executors to executors of the plan")
        return cls(topology=str(data.get("topology") or name), version=version, tasks=tuple(tasks),
                   executors=dict(executors), workers=workers, status=status, code_sha256=data["code_sha256"],
                   submission=submission, moved={e: Move.from_json(name, e, m) for e, m in moved.items()},
                   restart=dict(restart), missing_workers=missing, retiring=dict(retiring),
                   releasing={str(w): v for w, v in releasing.items()}, rescales=steps,
                   rebalance=dict(rebalance) if rebalance else None,
                   updated_at=float(updated) if isinstance(updated, (int, float)) else None,
                   tuning={k: dict(v) for k, v in tuning.items()}, chains=dict(chains))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "topology": self.topology, "version": self.version, "status": self.status.value,
            "code_sha256": self.code_sha256, "submission": self.submission, "tasks": list(self.tasks),
            "executors": dict(self.executors), "workers": {w: s.to_json() for w, s in self.workers.items()},
            "moved": {e: m.to_json() for e, m in self.moved.items()}, "restart": dict(self.restart),
            "missing_workers": self.missing_workers,
        }
        if self.retiring:
            data["retiring"] = dict(self.retiring)
        if self.releasing:
            data["releasing"] = dict(self.releasing)
        if self.rescales:
            data["rescale"] = {c: r.to_json() for c, r in self.rescales.items()}
        if self.rebalance:
            data["rebalance"] = dict(self.rebalance)
        if self.updated_at is not None:
            data["updated_at"] = self.updated_at
        if self.tuning:
            data["tuning"] = {k: dict(v) for k, v in self.tuning.items()}
        if self.chains:
            data["chains"] = dict(self.chains)
        return data

    @classmethod
    def first(cls, topology: str, tasks: Iterable[str], executors: Mapping[str, str], slots: Iterable[Slot],
              **extra: Any) -> Plan:
        """Version 1 of a plan."""
        return cls(topology=topology, version=1, tasks=tuple(tasks), executors=dict(executors),
                   workers={s.worker_id: s for s in slots}, **extra)


@dataclass(frozen=True)
class LocalPlan:
    """What a supervisor writes into its node's LMDB store for one plan version: the plan, and
    what its workers need to run it (the definition, the merged conf, the unpacked code)."""

    plan: Plan
    definition: Mapping[str, Any]
    conf: Mapping[str, Any]
    user_conf: Mapping[str, Any]
    code_dir: str
    main: str

    @classmethod
    def from_json(cls, name: str, data: Any) -> LocalPlan:
        if not isinstance(data, Mapping):
            raise _fail(name, "a local plan must be an object")
        for key in ("definition", "conf"):
            if not isinstance(data.get(key), Mapping):
                raise _fail(name, f"the local plan has no {key}")
        if not isinstance(data.get("code_dir"), str) or not isinstance(data.get("main"), str):
            raise _fail(name, "the local plan has no code")
        return cls(Plan.from_json(name, data), data["definition"], data["conf"], data.get("user_conf") or {},
                   data["code_dir"], data["main"])

    def to_json(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "definition": dict(self.definition), "conf": dict(self.conf),
                "user_conf": dict(self.user_conf), "code_dir": self.code_dir, "main": self.main}
