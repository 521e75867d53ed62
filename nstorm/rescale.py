"""Parallelism changes as a user asks for them (``nstorm rebalance NAME --parallelism count=8``):
parsing, the checks that make a bad request fail fast, and the next plan.

Both the client (so that a bad request exits 2 before it reaches Nimbus) and Nimbus (which
applies it) check a request with :func:`validate_rescale`; :func:`rescale_plan` makes the plan
that carries it out. Pure functions, so that every rule is tested without a cluster.

The rules (``../shared/ARCHITECTURE.md`` 3.4):

- Task ids are only appended, never reused: a new executor of ``count`` is ``count:<n>`` with
  ``n`` one more than the largest index the component ever had, and its task id is the next
  free one. A removed executor's task id stays in ``tasks`` with no place.
- A component's executors *now* are the ones in ``executors``, in task order; their positions
  own the key groups (``g % n``, :mod:`nstorm.state.keyed`). Scaling in removes the last ones.
- New executors go into the topology's workers with the fewest user executors (new workers,
  from free slots, first when ``workers`` asks for more of them); ackers keep their count.
- One rescale at a time, never while moves are open (and no move while a rescale is open).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from nstorm.moves import RebalanceError
from nstorm.plan import Plan, Rescale, Slot
from nstorm.topology import ACKER, MAX_TASKS, component_of, is_acker

__all__ = ["executors_of_component", "gaining_executors", "new_worker_slots", "parse_parallelism", "rescale_plan",
           "validate_rescale"]



def parse_parallelism(items: Sequence[str]) -> dict[str, int]:
    """``["count=8", "split=2"]`` as ``{"count": 8, "split": 2}``; :class:`RebalanceError` (exit 2) if malformed."""
    changes: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        try:
            number = int(value)
        except ValueError:
            number = None
        if not sep or not name or number is None:
            msg = f"malformed --parallelism {item!r}: expected COMPONENT=N, e.g. count=8"
            raise RebalanceError(msg)
        if name in changes:
            msg = f"--parallelism names {name!r} twice"
            raise RebalanceError(msg)
        changes[name] = number
    return changes


def executors_of_component(plan: Plan, component: str) -> list[str]:
    """The component's executors now (the plan's ``executors``), in task order."""
    return [e for e in plan.tasks if e in plan.executors and component_of(e) == component]


def validate_rescale(plan: Plan, definition: Mapping[str, Any], changes: Mapping[str, int], max_parallelism: int,
                     free_slots: int, workers: int | None) -> None:
    """Check a rescale request; :class:`RebalanceError` naming the first problem.

    :arg free_slots: slots of live supervisors no topology uses (for ``workers``).
    :arg workers: the number of workers asked for (None: keep them).
    """
    if not changes:
        msg = "nothing to rescale: give --parallelism COMPONENT=N"
        raise RebalanceError(msg)
    if plan.rebalance:
        msg = f"topology {plan.topology!r} is in a stop-mode rebalance; wait for it to finish"
        raise RebalanceError(msg)
    if plan.rescales:
        busy = ", ".join(sorted(plan.rescales))
        msg = f"a rescale of {busy} is in progress in {plan.topology!r}; wait for it to complete"
        raise RebalanceError(msg)
    if plan.moved:
        msg = (f"moves of {', '.join(sorted(plan.moved))} are in progress in {plan.topology!r}; "
               "rescale once they complete")
        raise RebalanceError(msg)
    components = definition["components"]
    added = 0
    for name, n in changes.items():
        if name == ACKER or name not in components:
            known = ", ".join(sorted(components))
            msg = f"unknown component {name!r} (the topology has {known})"
            raise RebalanceError(msg)
        if components[name].get("window"):
            msg = (f"component {name!r} is a windowed bolt: its open windows are not split by key group yet, "
                   "so its parallelism does not change")
            raise RebalanceError(msg)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            msg = f"--parallelism {name}={n!r}: expected an integer >= 1"
            raise RebalanceError(msg)
        if n > max_parallelism:
            msg = (f"--parallelism {name}={n}: more than topology.max.parallelism={max_parallelism} "
                   "(the key groups its keyed state is split into)")
            raise RebalanceError(msg)
        now = len(executors_of_component(plan, name))
        if now > max_parallelism:
            # More executors than key groups: its input is routed by hash, not by key group, so
            # no step can say which executor gives which keys (and none would take a group).
            msg = (f"component {name!r} has {now} executors, more than topology.max.parallelism="
                   f"{max_parallelism}: it cannot be rescaled live")
            raise RebalanceError(msg)
        if n == now:
            msg = f"component {name!r} already has {n} executors"
            raise RebalanceError(msg)
        added += max(0, n - now)
    for name in changes:
        for source in {i.get("component") for i in components[name].get("inputs") or ()}:
            if source in changes and changes[source] < len(executors_of_component(plan, source)):
                # Its retiring executors would go on sending by the old layout after the old
                # owners handed their key groups over (they wait for the markers of the kept ones).
                msg = (f"component {name!r} reads from {source!r}, which this request scales in: "
                       f"rescale {source!r} and {name!r} in two requests")
                raise RebalanceError(msg)
    if len(plan.tasks) + added > MAX_TASKS:
        msg = f"the topology would have more than {MAX_TASKS} task ids (they are never reused)"
        raise RebalanceError(msg)
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < len(plan.workers):
            msg = (f"--workers {workers!r}: expected at least the {len(plan.workers)} workers it has "
                   "(fewer workers: move executors off them first)")
            raise RebalanceError(msg)
        if workers - len(plan.workers) > free_slots:
            msg = f"--workers {workers}: {workers - len(plan.workers)} more workers wanted, {free_slots} free slots"
            raise RebalanceError(msg)


def new_worker_slots(free: Sequence[Slot], count: int, hosts: Collection[str] = ()) -> list[Slot]:
    """The free slots a parallelism change's ``count`` new workers take: Nimbus's order (interleaved
    over nodes), those on ``hosts`` first (OTD's autoscaling names the machines with CPU to give)."""
    ordered = sorted(free, key=lambda s: s.host not in hosts) if hosts else list(free)
    return ordered[:max(0, count)]


def _new_index(plan: Plan, component: str) -> int:
    """The next executor index of ``component`` (never one it had before)."""
    return 1 + max((int(e.rpartition(":")[2]) for e in plan.tasks if component_of(e) == component), default=-1)


def rescale_plan(plan: Plan, changes: Mapping[str, int], new_slots: Sequence[Slot], live: bool,
                 records: Mapping[str, str]) -> Plan:
    """The next plan version with ``changes`` applied (validated before).

    :arg new_slots: slots that become workers of the topology (``--workers``).
    :arg live: a live rescale (thread mode): removed executors hand their key groups over
        (``retiring``) and the plan carries the step (``rescale``); else (stop mode) they
        are simply gone.
    :arg records: component -> migration record id.
    """
    version = plan.version + 1
    tasks = list(plan.tasks)
    executors = dict(plan.executors)
    workers = dict(plan.workers)
    for slot in new_slots:
        workers[slot.worker_id] = slot
    load = {w: 0 for w in workers if w not in plan.releasing}  # (a worker being released takes none)
    for e, w in executors.items():
        if not is_acker(e) and w in load:
            load[w] += 1
    retiring = dict(plan.retiring)
    steps = dict(plan.rescales)
    for component, n in changes.items():
        old = executors_of_component(plan, component)
        kept = old[:n]
        for e in old[n:]:
            if live:
                retiring[e] = executors[e]
            load[executors[e]] -= 1
            del executors[e]
        added = []
        index = _new_index(plan, component)
        for _ in range(n - len(kept)):
            eid = f"{component}:{index}"
            index += 1
            target = min(sorted(load), key=lambda w: load[w])
            tasks.append(eid)
            executors[eid] = target
            load[target] += 1
            added.append(eid)
        if live:
            steps[component] = Rescale(component, tuple(old), tuple(kept + added), version, records.get(component))
    return plan.replace(version=version, tasks=tuple(tasks), executors=executors, workers=workers,
                        retiring=retiring, rescales=steps)


def gaining_executors(step: Rescale, groups: int) -> list[str]:
    """The executors of ``step``'s new layout that take at least one key group from another."""
    old, new = step.old, step.new
    return sorted({new[g % len(new)] for g in range(groups) if new[g % len(new)] != old[g % len(old)]})
