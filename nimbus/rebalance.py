"""Rebalance requests: validating executor moves and turning them into plans.

Three modes (paper section 3; ARCHITECTURE.md section 8):

- ``thread`` (N-Storm): only the moved executors change place; workers move them as threads.
- ``process`` (Storm*, T-Storm/TS-Storm): the supervisors restart exactly the workers whose
  executor sets changed (``plan["restart"]``).
- ``stop`` (Storm's ``rebalance``): deactivate, wait, stop every worker, reassign, restart,
  activate (``plan["rebalance"]`` carries the phase).

Pure functions, so that every check can be tested without a cluster.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from nimbus.scheduler import ACKER, Slot
from nstorm.errors import UsageError

__all__ = ["MODES", "RebalanceError", "apply_moves", "random_moves", "spread_moves", "validate_moves"]

MODES = ("thread", "process", "stop")


class RebalanceError(UsageError):
    """A move that cannot be done: unknown executor or worker, an acker, a busy executor."""


def validate_moves(
    plan: Mapping[str, Any],
    moves: Sequence[tuple[str, str]],
    live: Mapping[str, Slot],
    busy_executors: set[str],
    other_workers: Mapping[str, str],
) -> None:
    """Check every move; raise :class:`RebalanceError` naming the first bad one.

    :arg live: worker id -> slot, for every slot of every live supervisor.
    :arg busy_executors: executors with a migration not yet completed.
    :arg other_workers: worker id -> topology, for slots used by other topologies.
    """
    if not moves:
        msg = "nothing to move: give --move EXECUTOR=WORKER or --random M"
        raise RebalanceError(msg)
    if plan.get("rebalance"):
        msg = f"topology {plan['topology']!r} is in a stop-mode rebalance; wait for it to finish"
        raise RebalanceError(msg)
    seen: set[str] = set()
    for executor, target in moves:
        if executor not in plan["executors"]:
            msg = f"unknown executor {executor!r} (executors look like 'count:3'; see 'nstorm status')"
            raise RebalanceError(msg)
        if executor.startswith(f"{ACKER}:"):
            msg = f"{executor!r} is an acker; ackers are not moved (their in-flight tuple trees would be lost)"
            raise RebalanceError(msg)
        if executor in seen:
            msg = f"executor {executor!r} is moved twice in one request"
            raise RebalanceError(msg)
        seen.add(executor)
        if executor in busy_executors:
            msg = f"executor {executor!r} is already being migrated; wait for that move to complete"
            raise RebalanceError(msg)
        if target not in live:
            node = target.partition(":")[0]
            if any(s.node == node for s in live.values()):
                msg = f"worker {target!r} is not a slot of supervisor {node!r}"
            else:
                msg = f"unknown or dead worker {target!r} (workers look like 'n1:6701'; no live supervisor {node!r})"
            raise RebalanceError(msg)
        if target in other_workers:
            msg = f"worker {target!r} runs topology {other_workers[target]!r}"
            raise RebalanceError(msg)
        if plan["executors"][executor] == target:
            msg = f"executor {executor!r} already runs on {target!r}"
            raise RebalanceError(msg)


def random_moves(plan: Mapping[str, Any], count: int, rng: random.Random | None = None,
                 exclude: set[str] | None = None) -> list[tuple[str, str]]:
    """``count`` moves of random executors between the plan's workers, keeping placement even.

    Each move takes an executor from a most-loaded worker to a least-loaded other one,
    so per-worker executor counts stay within one of each other (paper 5.2.2).
    """
    rng = rng or random.Random()
    workers = sorted(plan["workers"])
    if len(workers) < 2:
        msg = "--random needs a topology with at least 2 workers"
        raise RebalanceError(msg)
    movable = [e for e in plan["executors"] if not e.startswith(f"{ACKER}:") and e not in (exclude or set())]
    if count < 1 or count > len(movable):
        msg = f"--random {count}: expected 1 to {len(movable)} (movable executors)"
        raise RebalanceError(msg)
    where = {e: w for e, w in plan["executors"].items() if not e.startswith(f"{ACKER}:")}
    load = {w: sum(1 for x in where.values() if x == w) for w in workers}
    chosen: set[str] = set()
    moves: list[tuple[str, str]] = []
    for _ in range(count):
        candidates = [e for e in movable if e not in chosen]
        top = max(load[where[e]] for e in candidates)
        executor = rng.choice(sorted(e for e in candidates if load[where[e]] == top))
        source = where[executor]
        others = [w for w in workers if w != source]
        low = min(load[w] for w in others)
        target = rng.choice([w for w in others if load[w] == low])
        chosen.add(executor)
        load[source] -= 1
        load[target] += 1
        where[executor] = target
        moves.append((executor, target))
    return moves


def apply_moves(
    plan: Mapping[str, Any],
    moves: Sequence[tuple[str, str]],
    mode: str,
    live: Mapping[str, Slot],
    records: Mapping[str, str],
) -> dict[str, Any]:
    """The next plan version with ``moves`` applied in ``mode`` (thread or process).

    :arg records: executor -> migration record name, stored with each move.
    """
    version = int(plan["version"]) + 1
    executors = dict(plan["executors"])
    workers = dict(plan["workers"])
    moved = dict(plan.get("moved") or {})
    restart: dict[str, int] = {}
    for executor, target in moves:
        source = executors[executor]
        executors[executor] = target
        if target not in workers:
            workers[target] = live[target].as_json()
        moved[executor] = {"from": source, "to": target, "mode": mode, "version": version,
                           "record": records.get(executor)}
        if mode == "process":
            restart[source] = version
            restart[target] = version
    # A worker left without executors stays in the plan: it may still be draining a
    # moved-away copy, whose state must reach the new place before the process ends.
    new = {**plan, "version": version, "executors": executors, "workers": workers, "moved": moved}
    new["restart"] = restart
    return new


def spread_moves(plan: Mapping[str, Any], wanted_workers: int, free: Sequence[Slot]) -> list[tuple[str, str]]:
    """Moves that give a topology running on too few workers its free slots back.

    After a node loss with no spare slot, the repaired plan packs the lost executors
    onto the remaining workers. When slots free up again (the node returned), these
    moves fill the missing workers with executors taken from the busiest workers,
    until every worker has about the same number of movable executors. Ackers stay
    where they are. Empty when nothing is missing or nothing is free.
    """
    missing = wanted_workers - len(plan["workers"])
    targets = [s.worker_id for s in free if s.worker_id not in plan["workers"]][: max(0, missing)]
    if not targets:
        return []
    load: dict[str, list[str]] = {w: [] for w in plan["workers"]}
    for executor, worker in sorted(plan["executors"].items()):
        if not executor.startswith(f"{ACKER}:") and worker in load:
            load[worker].append(executor)
    movable = sum(len(v) for v in load.values())
    share = movable // (len(load) + len(targets))
    moves: list[tuple[str, str]] = []
    for target in targets:
        for _ in range(share):
            donor = max(load, key=lambda w: (len(load[w]), w))
            if len(load[donor]) <= share:
                break
            moves.append((load[donor].pop(), target))
    return moves
