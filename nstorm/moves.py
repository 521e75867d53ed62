"""Executor moves as a user asks for them: the modes, and the checks that make a bad move fail fast.

Both the client (so that ``nstorm rebalance`` fails with exit code 2 before it asks Nimbus)
and Nimbus (which applies moves, :mod:`nimbus.rebalance`) check moves with
:func:`validate_moves`; pure, so that every check can be tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nstorm.errors import UsageError
from nstorm.plan import Plan, Slot
from nstorm.records import MoveMode
from nstorm.topology import is_acker

__all__ = ["LATENCY_COOLDOWN_SECS", "MODES", "RebalanceError", "recently_moved", "unwatched_workers", "validate_moves"]

MODES = (MoveMode.THREAD.value, MoveMode.PROCESS.value, MoveMode.STOP.value)  # how executors move


class RebalanceError(UsageError):
    """A move that cannot be done: unknown executor or worker, an acker, a busy executor."""


def unwatched_workers(workers: Mapping[str, Slot], supervisors: Iterable[str]) -> set[str]:
    """The workers of a plan (``workers``: id -> slot) whose supervisor is not registered
    (``supervisors``: node ids): they run on but read no new plan (:func:`validate_moves`)."""
    up = set(supervisors)
    return {w for w, slot in workers.items() if slot.node not in up}


def validate_moves(
    plan: Plan,
    moves: Sequence[tuple[str, str]],
    live: Mapping[str, Slot],
    busy_executors: set[str],
    other_workers: Mapping[str, str],
    unwatched: Iterable[str] = (),
) -> None:
    """Check every move; raise :class:`RebalanceError` naming the first bad one.

    :arg live: worker id -> slot, for every slot of every live supervisor.
    :arg busy_executors: executors with a migration not yet completed.
    :arg other_workers: worker id -> topology, for slots used by other topologies.
    :arg unwatched: workers of the plan that still run while their supervisor is down: they read
        no new plan (ZooKeeper -> supervisor -> LMDB -> worker), so a move from one would leave the
        executor running there beside its new copy, and a move to one would never start it.
    """
    unwatched = set(unwatched)
    if not moves:
        msg = "nothing to move: give --move EXECUTOR=WORKER or --random M"
        raise RebalanceError(msg)
    if plan.rebalance:
        msg = f"topology {plan.topology!r} is in a stop-mode rebalance; wait for it to finish"
        raise RebalanceError(msg)
    if plan.rescales:
        msg = f"a rescale of {', '.join(sorted(plan.rescales))} is in progress; move executors once it completes"
        raise RebalanceError(msg)
    seen: set[str] = set()
    for executor, target in moves:
        if executor not in plan.executors:
            msg = f"unknown executor {executor!r} (executors look like 'count:3'; see 'nstorm status')"
            raise RebalanceError(msg)
        if is_acker(executor):
            msg = f"{executor!r} is an acker; ackers are not moved (their in-flight tuple trees would be lost)"
            raise RebalanceError(msg)
        if executor in seen:
            msg = f"executor {executor!r} is moved twice in one request"
            raise RebalanceError(msg)
        seen.add(executor)
        if executor in busy_executors:
            msg = f"executor {executor!r} is already being migrated; wait for that move to complete"
            raise RebalanceError(msg)
        for worker in (plan.executors[executor], target):
            if worker in unwatched:
                node = worker.partition(":")[0]
                msg = (f"worker {worker!r} runs on, but its supervisor {node!r} is down: it would not see the move "
                       f"of {executor!r}; move it once the supervisor is back")
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
        if plan.executors[executor] == target:
            msg = f"executor {executor!r} already runs on {target!r}"
            raise RebalanceError(msg)


LATENCY_COOLDOWN_SECS = 60.0  # OTD and a latency constraint's controller leave each other's moves this long


def recently_moved(records: Iterable[Any], by: str, now: float, within: float = LATENCY_COOLDOWN_SECS) -> set[str]:
    """Executors that ``by`` (``otd``, ``latency``) moved less than ``within`` seconds before ``now``:
    OTD and a latency constraint's controller never undo each other's moves within a cool-down."""
    return {r.executor for r in records if r.by == by and now - float(r.requested_at or 0.0) < within}
