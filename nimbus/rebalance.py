"""Rebalance requests: validating executor moves and turning them into plans.

Three modes (paper section 3; ARCHITECTURE.md section 8):

- ``thread`` (N-Storm): only the moved executors change place; workers move them as threads.
- ``process`` (Storm*, T-Storm/TS-Storm): the supervisors restart exactly the workers whose
  executor sets changed (``Plan.restart``).
- ``stop`` (Storm's ``rebalance``): deactivate, wait, stop every worker, reassign, restart,
  activate (``Plan.rebalance`` carries the phase).

Pure functions, so that every check can be tested without a cluster.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

from nstorm.moves import MODES, RebalanceError, validate_moves
from nstorm.plan import Move, Plan, Slot
from nstorm.records import MoveMode, TopologyStatus
from nstorm.topology import is_acker

log = logging.getLogger(__name__)

__all__ = ["MODES", "RebalanceError", "apply_moves", "drained_workers", "hollow", "random_moves",
           "release_workers", "shed_ackers",
           "spread_moves", "stop_mode_restart", "validate_moves"]


def random_moves(plan: Plan, count: int, rng: random.Random | None = None,
                 exclude: set[str] | None = None, unwatched: set[str] | None = None) -> list[tuple[str, str]]:
    """``count`` moves of random executors between the plan's workers, keeping placement even.

    Each move takes an executor from a most-loaded worker to a least-loaded other one,
    so per-worker executor counts stay within one of each other (paper 5.2.2). Workers whose
    supervisor is down (``unwatched``: they read no new plan) neither give nor take one.
    """
    rng = rng or random.Random()
    unwatched = unwatched or set()
    workers = sorted(w for w in plan.workers if w not in unwatched)
    if len(workers) < 2:
        msg = "--random needs a topology with at least 2 workers" + (
            " whose supervisors are up" if unwatched else "")
        raise RebalanceError(msg)
    movable = [e for e, w in plan.executors.items()
               if not is_acker(e) and e not in (exclude or set()) and w not in unwatched]
    if count < 1 or count > len(movable):
        msg = f"--random {count}: expected 1 to {len(movable)} (movable executors)"
        raise RebalanceError(msg)
    where = {e: w for e, w in plan.executors.items() if not is_acker(e)}
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
    plan: Plan,
    moves: Sequence[tuple[str, str]],
    mode: str,
    live: Mapping[str, Slot],
    records: Mapping[str, str],
) -> Plan:
    """The next plan version with ``moves`` applied in ``mode`` (thread or process).

    :arg records: executor -> migration record name, stored with each move.
    """
    version = plan.version + 1
    executors = dict(plan.executors)
    workers = dict(plan.workers)
    moved = dict(plan.moved)
    # Restarts asked before stay asked (a supervisor may see only this version: each restart is
    # keyed by the version that asked it, and a worker started since then is not restarted again).
    restart = dict(plan.restart)
    for executor, target in moves:
        source = executors[executor]
        executors[executor] = target
        if target not in workers:
            workers[target] = live[target]
        moved[executor] = Move(source, target, MoveMode(mode), version, records.get(executor))
        if mode == MoveMode.PROCESS:
            restart[source] = version
            restart[target] = version
    # A worker left without executors stays in the plan while it may still be draining a
    # moved-away copy, whose state must reach the new place before the process ends; Nimbus
    # releases it once its moves are complete (shed_ackers, then release_workers).
    added = len(set(workers) - set(plan.workers))  # slots taken again after a node loss, or new ones
    return plan.replace(version=version, executors=executors, workers=workers, moved=moved, restart=restart,
                        missing_workers=max(0, plan.missing_workers - added))


def drained_workers(plan: Plan, done: Sequence[str]) -> list[str]:
    """The workers that the completed moves of ``done`` (executors) left with no executor but
    ackers, and with no other move of theirs still open. Never every worker."""
    sources = {plan.moved[e].source for e in done if e in plan.moved}
    open_moves = [m for e, m in plan.moved.items() if e not in done]
    busy = {m.source for m in open_moves} | {m.target for m in open_moves}
    holding = {w for e, w in plan.executors.items() if not is_acker(e)} | set(plan.retiring.values())
    empty = sorted(w for w in sources if w in plan.workers and w not in holding and w not in busy)
    return empty if len(empty) < len(plan.workers) else empty[:-1]


def shed_ackers(plan: Plan, workers: Sequence[str], version: int) -> Plan:
    """The plan (to be written as ``version``) with the ackers of ``workers`` moved to the other
    workers with the fewest ackers. ``workers`` stay, holding nothing, in ``releasing`` until
    every worker runs ``version`` (:func:`release_workers`): a moved acker hands its open trees
    to its new copy and its old worker sends on what still reaches it (worker.acker), so no
    tree is lost or replayed. Ackers keep their count and task ids (roots pick an acker by task)."""
    gone = set(workers)
    ackers = {w: 0 for w in plan.workers if w not in gone}
    if not ackers:
        return plan
    executors = dict(plan.executors)
    for e, w in executors.items():
        if is_acker(e) and w in ackers:
            ackers[w] += 1
    for e in sorted(e for e, w in executors.items() if w in gone and is_acker(e)):
        target = min(sorted(ackers), key=lambda w: ackers[w])
        executors[e] = target
        ackers[target] += 1
    return plan.replace(executors=executors, releasing={**plan.releasing, **{w: version for w in sorted(gone)}})


def hollow(plan: Plan, worker: str) -> bool:
    """True if ``worker`` holds no executor (not even an acker), none retiring, and no open move."""
    return (worker not in plan.executors.values() and worker not in plan.retiring.values()
            and not any(worker in (m.source, m.target) for m in plan.moved.values()))


def release_workers(plan: Plan, released: Sequence[str]) -> Plan:
    """The next plan without the ``released`` workers (and their ``releasing`` entries)."""
    workers = {w: s for w, s in plan.workers.items() if w not in released}
    restart = {w: v for w, v in plan.restart.items() if w not in released}
    releasing = {w: v for w, v in plan.releasing.items() if w not in released}
    return plan.replace(workers=workers, restart=restart, releasing=releasing)


def spread_moves(plan: Plan, wanted_workers: int, free: Sequence[Slot]) -> list[tuple[str, str]]:
    """Moves that give a topology running on too few workers its free slots back.

    After a node loss with no spare slot, the repaired plan packs the lost executors
    onto the remaining workers. When slots free up again (the node returned), these
    moves fill the missing workers with executors taken from the busiest workers,
    until every worker has about the same number of movable executors. Ackers stay
    where they are. Empty when nothing is missing or nothing is free.
    """
    missing = wanted_workers - len(plan.workers)
    targets = [s.worker_id for s in free if s.worker_id not in plan.workers][: max(0, missing)]
    if not targets:
        return []
    load: dict[str, list[str]] = {w: [] for w in plan.workers}
    for executor, worker in sorted(plan.executors.items()):
        if not is_acker(executor) and worker in load:
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


def stop_mode_restart(plan: Plan, status: TopologyStatus, supervisors: Mapping[str, Mapping[str, Any]]) -> Plan:
    """The plan that starts a topology again after a stop-mode rebalance stopped every worker:
    the workers it had, the moves applied (recorded with ``mode: stop``), ``status`` restored.

    :arg supervisors: the registered supervisors (``supervisors/<node>``), for a target slot
        the topology did not hold before.
    """
    rb = plan.rebalance or {}
    executors = dict(plan.executors)
    workers = {wid: Slot.from_json(plan.topology, wid, w) for wid, w in (rb.get("workers") or {}).items()}
    moved = dict(plan.moved)
    version = plan.version + 1
    for executor, target in rb.get("moves", []):
        if target not in workers:
            node, _, port = target.partition(":")
            sup = supervisors.get(node) or {}
            slot = next((s for s in sup.get("slots", []) if int(s[0]) == int(port)), None)
            if not (sup and slot):
                # Its node went away during the stop: the executor restarts where it was (a plan
                # naming a worker it has not would be refused, and the topology stay stopped);
                # its record, named by no plan, is completed by Nimbus a minute later.
                log.warning("topology %s: the stop-mode move of %s to %s is dropped: that slot is gone",
                            plan.topology, executor, target)
                continue
            workers[target] = Slot(node, str(sup["host"]), int(port), int(slot[1]))
        moved[executor] = Move(executors[executor], target, MoveMode.STOP, version, (rb.get("records") or {}).get(executor))
        executors[executor] = target
    return plan.replace(version=version, executors=executors, workers=workers, moved=moved, status=status,
                        restart={}, rebalance=None)
