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

__all__ = ["Endpoint", "RoutingTable"]


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
    restart: Mapping[str, int] = field(default_factory=dict)  # worker id -> version (process mode)

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
            comp_tasks.setdefault(comp, []).append(tid)
            task_component.append(comp)
            task_index.append(int(idx))
        return cls(
            version=plan.version,
            tasks=tasks,
            location=tuple(plan.executors.get(eid, "") for eid in tasks),
            endpoints=endpoints,
            component_tasks={c: tuple(t) for c, t in comp_tasks.items()},
            task_component=tuple(task_component),
            task_index=tuple(task_index),
            ackers=tuple(comp_tasks.get(ACKER, ())),
            restart=dict(plan.restart),
        )

    def executors_of(self, worker_id: str) -> list[str]:
        return [self.tasks[t] for t, w in enumerate(self.location) if w == worker_id]
