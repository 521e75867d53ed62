"""Allocation plans: Storm's even (round-robin) scheduler and repair after a node loss.

A plan is plain JSON data::

    {"topology": name, "version": 3, "status": "ACTIVE",
     "tasks": ["sentences:0", ..., "__acker:0"],       # index = task id on the wire
     "executors": {"split:0": "n1:6700", ...},
     "workers": {"n1:6700": {"node": "n1", "host": "127.0.0.1", "port": 6700, "ctl_port": 6701}}}

The functions here are pure so that they can be tested without a cluster;
the :class:`Scheduler` interface is what OTD (``scheduler_otd``) implements too.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ACKER",
    "EvenScheduler",
    "Scheduler",
    "Slot",
    "acker_count",
    "interleave_slots",
    "task_list",
]

ACKER = "__acker"


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

    def as_json(self) -> dict[str, Any]:
        return {"node": self.node, "host": self.host, "port": self.port, "ctl_port": self.ctl_port}


def acker_count(definition: Mapping[str, Any], conf: Mapping[str, Any]) -> int:
    """``topology.acker.executors``, defaulting to one per worker as in Storm."""
    value = conf.get("topology.acker.executors")
    if value is None:
        return int(definition["workers"])
    return max(0, int(value))


def task_list(definition: Mapping[str, Any], ackers: int) -> list[str]:
    """Every executor id in a fixed order; the index is the executor's task id."""
    tasks = [
        f"{name}:{i}"
        for name, comp in definition["components"].items()
        for i in range(int(comp["parallelism"]))
    ]
    tasks.extend(f"{ACKER}:{i}" for i in range(ackers))
    return tasks


def interleave_slots(supervisors: Mapping[str, Mapping[str, Any]]) -> list[Slot]:
    """All slots ordered n1:p0, n2:p0, n1:p1, n2:p1, ... so round-robin spreads over nodes."""
    per_node: list[list[Slot]] = []
    for node in sorted(supervisors):
        info = supervisors[node]
        slots = [Slot(node, info["host"], int(p), int(c)) for p, c in info["slots"]]
        per_node.append(sorted(slots, key=lambda s: s.port))
    ordered: list[Slot] = []
    for rank in range(max((len(s) for s in per_node), default=0)):
        ordered.extend(slots[rank] for slots in per_node if rank < len(slots))
    return ordered


def _round_robin(executors: Iterable[str], workers: list[str]) -> dict[str, str]:
    return {e: workers[i % len(workers)] for i, e in enumerate(executors)}


class Scheduler(abc.ABC):
    """What Nimbus asks of a scheduler: an initial plan, and a repaired one after losses."""

    @abc.abstractmethod
    def initial_plan(
        self, name: str, definition: Mapping[str, Any], conf: Mapping[str, Any], free: list[Slot]
    ) -> dict[str, Any] | None:
        """A first plan over ``free`` slots, or None if there is none to use."""

    @abc.abstractmethod
    def repair_plan(
        self, plan: Mapping[str, Any], live: Mapping[str, Slot], free: list[Slot]
    ) -> dict[str, Any] | None:
        """A plan without workers that are no longer ``live``; None if nothing changes."""


class EvenScheduler(Scheduler):
    """Storm's default scheduler: executors round-robin over workers spread over nodes."""

    def initial_plan(
        self, name: str, definition: Mapping[str, Any], conf: Mapping[str, Any], free: list[Slot]
    ) -> dict[str, Any] | None:
        if not free:
            return None
        slots = free[: int(definition["workers"])]
        tasks = task_list(definition, acker_count(definition, conf))
        worker_ids = [s.worker_id for s in slots]
        return {
            "topology": name,
            "version": 1,
            "tasks": tasks,
            "executors": _round_robin(tasks, worker_ids),
            "workers": {s.worker_id: s.as_json() for s in slots},
        }

    def repair_plan(
        self, plan: Mapping[str, Any], live: Mapping[str, Slot], free: list[Slot]
    ) -> dict[str, Any] | None:
        workers = dict(plan["workers"])
        lost = [w for w in workers if w not in live]
        if not lost:
            return None
        for w in lost:
            del workers[w]
        replacements = list(free[: len(lost)])
        for slot in replacements:
            workers[slot.worker_id] = slot.as_json()
        if not workers:
            return None  # nowhere to go: keep the plan until a supervisor returns
        targets = [s.worker_id for s in replacements] or sorted(workers)
        orphans = [e for e, w in plan["executors"].items() if w in lost]
        moved = _round_robin(orphans, targets)
        executors = {**plan["executors"], **moved}
        return {**plan, "executors": executors, "workers": workers, "version": int(plan["version"]) + 1}
