"""Routing tables: where every executor is, derived from one plan version.

A :class:`RoutingTable` is immutable; a worker swaps the whole table at once
(one attribute assignment) when a new plan arrives, so an emitting executor
always sees one consistent location for each downstream executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nstorm.plan import Plan
from nstorm.topology import ACKER

__all__ = ["Endpoint", "RescaleStep", "RoutingTable"]


@dataclass(frozen=True)
class Endpoint:
    """A worker's data and control addresses."""

    worker_id: str
    node: str
    host: str
    port: int
    ctl_port: int

    @property
    def data_address(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    @property
    def ctl_address(self) -> str:
        return f"tcp://{self.host}:{self.ctl_port}"


@dataclass(frozen=True)
class RescaleStep:
    """A component's rescale in progress (:class:`nstorm.plan.Rescale`) as task ids: key group ``g``
    goes from ``old[g % len(old)]`` to ``new[g % len(new)]``."""

    component: str
    old: tuple[int, ...]
    new: tuple[int, ...]
    version: int
    record: str | None = None

    def old_owner(self, group: int) -> int:
        return self.old[group % len(self.old)]

    def new_owner(self, group: int) -> int:
        return self.new[group % len(self.new)]


@dataclass(frozen=True)
class RoutingTable:
    """Executor locations of one plan version, indexed by task id."""

    version: int
    tasks: tuple[str, ...]
    location: tuple[str, ...]  # task id -> worker id
    endpoints: Mapping[str, Endpoint]
    component_tasks: Mapping[str, tuple[int, ...]]
    task_component: tuple[str, ...]
    task_index: tuple[int, ...]
    ackers: tuple[int, ...]
    restart: Mapping[str, int] = field(default_factory=dict)  # worker id -> the version that asked (process mode)
    rescales: Mapping[str, RescaleStep] = field(default_factory=dict)  # component -> its rescale in progress
    retiring: frozenset[int] = frozenset()  # removed by a rescale: they still have a place (acks, markers)
    tuning: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # channel -> buffer sizes (plan)
    chains: Mapping[int, int] = field(default_factory=dict)  # downstream task -> the upstream task running it

    @classmethod
    def from_plan(cls, plan: Plan) -> RoutingTable:
        tasks = tuple(plan.tasks)
        endpoints = {wid: Endpoint(wid, slot.node, slot.host, slot.port, slot.ctl_port)
                     for wid, slot in plan.workers.items()}
        comp_tasks: dict[str, list[int]] = {}
        task_component = []
        task_index = []
        for tid, eid in enumerate(tasks):
            comp, _, idx = eid.rpartition(":")
            if eid in plan.executors:  # the component's executors now (a rescale removes some)
                comp_tasks.setdefault(comp, []).append(tid)
            task_component.append(comp)
            task_index.append(int(idx))
        tid_of = {eid: tid for tid, eid in enumerate(tasks)}
        rescales = {c: RescaleStep(c, tuple(tid_of[e] for e in r.old), tuple(tid_of[e] for e in r.new), r.version,
                                   r.record) for c, r in plan.rescales.items()}
        return cls(
            version=plan.version,
            tasks=tasks,
            location=tuple(plan.executors.get(eid) or plan.retiring.get(eid, "") for eid in tasks),
            endpoints=endpoints,
            component_tasks={c: tuple(t) for c, t in comp_tasks.items()},
            task_component=tuple(task_component),
            task_index=tuple(task_index),
            ackers=tuple(comp_tasks.get(ACKER, ())),
            restart=dict(plan.restart),
            rescales=rescales,
            retiring=frozenset(tid_of[e] for e in plan.retiring),
            tuning=plan.tuning,
            chains={tid_of[d]: tid_of[u] for d, u in plan.chains.items()},
        )

    def position(self, task: int) -> int:
        """``task``'s place among its component's executors (what owns key groups), -1 if retiring."""
        tasks = self.component_tasks.get(self.task_component[task], ())
        return tasks.index(task) if task in tasks else -1

    def restart_asked(self, worker_id: str, first_version: int) -> int | None:
        """The plan version that asked a process-mode restart of ``worker_id``, if the process
        that started with plan ``first_version`` has not been restarted for it yet (later plans
        carry the ask on until it is done)."""
        asked = self.restart.get(worker_id)
        return asked if asked is not None and asked > first_version else None

    def executors_of(self, worker_id: str) -> list[str]:
        return [self.tasks[t] for t, w in enumerate(self.location) if w == worker_id]
