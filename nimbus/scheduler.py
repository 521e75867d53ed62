"""Allocation plans: Storm's even (round-robin) scheduler and repair after a node loss.

The even scheduler deals out units, not executors: a ``local_or_shuffle`` channel's two ends
are one unit (:func:`local_units`), so that the channel stays in one process and can be chained.

Plans are :class:`nstorm.plan.Plan` s. The functions here are pure so that they can be tested
without a cluster; the :class:`Scheduler` interface is what OTD (``scheduler_otd``) implements too.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import Any

from nstorm.plan import Plan, Slot, interleave_slots
from nstorm.topology import ACKER, LOCAL_OR_SHUFFLE

__all__ = [
    "EvenScheduler",
    "Scheduler",
    "Slot",
    "acker_count",
    "interleave_slots",
    "local_units",
    "task_list",
]


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


def _round_robin(executors: Iterable[str], workers: list[str]) -> dict[str, str]:
    return {e: workers[i % len(workers)] for i, e in enumerate(executors)}


def local_units(definition: Mapping[str, Any], tasks: list[str]) -> list[list[str]]:
    """``tasks`` grouped into the units placed on one worker each, in task order.

    A bolt whose only input is ``local_or_shuffle`` from one component asks for its tuples to stay
    in their process: its executor ``i`` goes with that component's executor ``i`` modulo its
    parallelism, so that the channel never crosses a process and may be chained (Flink places a
    chain's operators in one slot). Every other executor is a unit of its own.
    """
    components = definition.get("components") or {}
    parent: dict[str, str] = {}
    for task in tasks:
        name, _, index = task.rpartition(":")
        inputs = (components.get(name) or {}).get("inputs") or []
        if len(inputs) == 1 and inputs[0].get("grouping") == LOCAL_OR_SHUFFLE:
            up = inputs[0].get("component")
            ups = int((components.get(up) or {}).get("parallelism") or 0)
            if ups and up != name:
                parent[task] = f"{up}:{int(index) % ups}"
    units: dict[str, list[str]] = {}
    for task in tasks:
        root = task
        while root in parent:  # a DAG: the walk ends
            root = parent[root]
        units.setdefault(root, []).append(task)
    return list(units.values())


class Scheduler(abc.ABC):
    """What Nimbus asks of a scheduler: an initial plan, and a repaired one after losses."""

    @abc.abstractmethod
    def initial_plan(
        self, name: str, definition: Mapping[str, Any], conf: Mapping[str, Any], free: list[Slot]
    ) -> Plan | None:
        """A first plan over ``free`` slots, or None if there is none to use."""

    @abc.abstractmethod
    def repair_plan(self, plan: Plan, live: Mapping[str, Slot], free: list[Slot]) -> Plan | None:
        """A plan without workers that are no longer ``live``; None if nothing changes."""


class EvenScheduler(Scheduler):
    """Storm's default scheduler: executors round-robin over workers spread over nodes."""

    def initial_plan(
        self, name: str, definition: Mapping[str, Any], conf: Mapping[str, Any], free: list[Slot]
    ) -> Plan | None:
        if not free:
            return None
        slots = free[: int(definition["workers"])]
        tasks = task_list(definition, acker_count(definition, conf))
        workers = [s.worker_id for s in slots]
        units = local_units(definition, tasks)
        executors = {e: workers[i % len(workers)] for i, unit in enumerate(units) for e in unit}
        return Plan.first(name, tasks, executors, slots)

    def repair_plan(self, plan: Plan, live: Mapping[str, Slot], free: list[Slot]) -> Plan | None:
        workers = dict(plan.workers)
        lost = [w for w in workers if w not in live]
        if not lost:
            return None
        for w in lost:
            del workers[w]
        releasing = {w: v for w, v in plan.releasing.items() if w not in lost}
        lost = [w for w in lost if w not in plan.releasing]  # one being released holds nothing to replace
        if not lost:
            return plan.next(workers=workers, releasing=releasing)
        replacements = list(free[: len(lost)])
        for slot in replacements:
            workers[slot.worker_id] = slot
        if not workers:
            return None  # nowhere to go: keep the plan until a supervisor returns
        targets = [s.worker_id for s in replacements] or sorted(workers)
        orphans = [e for e, w in plan.executors.items() if w in lost]
        executors = {**plan.executors, **_round_robin(orphans, targets)}
        missing = plan.missing_workers + len(lost) - len(replacements)
        # Executors a rescale removes that were on a lost worker have nothing left to hand over:
        # their key groups' new owners stop waiting at their deadline (or the topology rolls back).
        retiring = {e: w for e, w in plan.retiring.items() if w not in lost}
        return plan.next(executors=executors, workers=workers, missing_workers=missing, retiring=retiring,
                         releasing=releasing)
