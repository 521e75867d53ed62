"""An even placement over a number of workers: what ``nstorm rebalance NAME [--workers N]`` moves.

Storm's ``rebalance NAME`` with no option spreads a topology's executors evenly over its
workers again (after nodes were added, or moves left it lopsided), and ``rebalance NAME -n N``
does so over N workers. Storm stops the topology for it; here the result is a set of moves,
carried out like any other (live as threads by default), so nothing stops. Pure, so that both
the client (a bad request exits 2 before it reaches Nimbus) and Nimbus (which applies it, with
its own view of the free slots) compute it, and every rule is tested without a cluster.

The rules:

- Only user executors move and count; ackers stay, and a worker the moves empty is released
  once they complete, its ackers going to the workers left (``nimbus.rebalance``).
- More workers: the free slots in Nimbus's order (interleaved over nodes) become workers.
  Fewer: the workers with the most executors stay (the fewest moves).
- Every kept worker ends with the floor or the ceiling of the average; the ceilings go to the
  workers that hold the most now. Each move takes, from the worker most over its share, the
  executor whose component the receiving worker has least of: components spread too.
- A worker whose supervisor is down (``fixed``) reads no new plan: it keeps its executors and
  takes none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence

from nstorm.moves import RebalanceError
from nstorm.plan import Plan, Slot
from nstorm.topology import component_of, is_acker

__all__ = ["even_moves", "idle_dropped_workers"]



def _check(plan: Plan, workers: int) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        msg = f"--workers {workers!r}: expected an integer >= 1"
        raise RebalanceError(msg)
    if plan.rebalance:
        msg = f"topology {plan.topology!r} is in a stop-mode rebalance; wait for it to finish"
        raise RebalanceError(msg)
    if plan.rescales or plan.moved or plan.releasing:
        busy = ", ".join(sorted([*plan.rescales, *plan.moved, *plan.releasing])[:5])
        msg = (f"moves, rescales or worker releases ({busy}) are in progress in {plan.topology!r}; "
               "rebalance once they complete")
        raise RebalanceError(msg)


def _targets(plan: Plan, held: dict[str, list[str]], workers: int, free: Sequence[Slot], fixed: set[str]) -> list[str]:
    """The workers the topology ends with, in plan order (new ones last)."""
    current = list(plan.workers)
    if workers >= len(current):
        new = [s.worker_id for s in free if s.worker_id not in plan.workers][: workers - len(current)]
        if len(new) < workers - len(current):
            msg = f"--workers {workers}: {workers - len(current)} more workers wanted, {len(new)} free slots"
            raise RebalanceError(msg)
        return current + new
    if len(fixed) > workers:
        msg = (f"--workers {workers}: {len(fixed)} of its workers run on while their supervisors are down "
               "and keep their executors; bring the supervisors back first")
        raise RebalanceError(msg)
    rank = {w: i for i, w in enumerate(current)}
    others = sorted((w for w in current if w not in fixed), key=lambda w: (-len(held[w]), rank[w]))
    kept = fixed | set(others[: workers - len(fixed)])
    return [w for w in current if w in kept]


def even_moves(plan: Plan, workers: int, free: Sequence[Slot], fixed: Collection[str] = ()) -> list[tuple[str, str]]:
    """The moves that leave ``plan``'s user executors spread evenly over ``workers`` workers.

    :arg free: slots no topology uses, in Nimbus's order (for more workers than now).
    :arg fixed: workers whose supervisor is down (they keep their executors, take none).
    :returns: ``[(executor, target worker)]``, empty if the placement is even already.
    :raises RebalanceError: a count below 1, too few free slots, more workers than user
        executors, or moves or a rescale still open.
    """
    _check(plan, workers)
    fixed = set(fixed) & set(plan.workers)
    held: dict[str, list[str]] = {w: [] for w in plan.workers}
    for executor, worker in sorted(plan.executors.items()):
        if not is_acker(executor) and worker in held:
            held[worker].append(executor)
    targets = _targets(plan, held, workers, free, fixed)
    receivers = [w for w in targets if w not in fixed]
    pool = sum(len(v) for w, v in held.items() if w not in fixed)
    if pool < len(receivers):
        msg = (f"--workers {workers}: the topology has {pool + sum(len(held[w]) for w in fixed)} executors "
               "besides its ackers, fewer than the workers asked for")
        raise RebalanceError(msg)
    if not receivers:
        return []
    base, extra = divmod(pool, len(receivers))
    by_load = sorted(receivers, key=lambda w: (-len(held.get(w, ())), targets.index(w)))
    share = {w: base + (1 if i < extra else 0) for i, w in enumerate(by_load)}
    have = {w: list(held.get(w, ())) for w in receivers}
    kinds = {w: Counter(component_of(e) for e in have[w]) for w in receivers}
    # Executors of dropped workers all go; then kept workers give what exceeds their share.
    donors = {w: list(v) for w, v in held.items() if w not in fixed and w not in share and v}
    moves: list[tuple[str, str]] = []
    while True:
        if donors:
            donor = next(iter(donors))
            pool_of = donors[donor]
        else:
            over = [w for w in receivers if len(have[w]) > share[w]]
            if not over:
                return moves
            donor = max(over, key=lambda w: (len(have[w]) - share[w], -targets.index(w)))
            pool_of = have[donor]
        receiver = max((w for w in receivers if len(have[w]) < share[w]),
                       key=lambda w: (share[w] - len(have[w]), -targets.index(w)))
        counts = Counter(component_of(e) for e in pool_of)
        executor = min(pool_of, key=lambda e: (kinds[receiver][component_of(e)], -counts[component_of(e)], e))
        pool_of.remove(executor)
        if donor in kinds:
            kinds[donor][component_of(executor)] -= 1
        elif not pool_of:
            del donors[donor]
        have[receiver].append(executor)
        kinds[receiver][component_of(executor)] += 1
        moves.append((executor, receiver))


def idle_dropped_workers(plan: Plan, workers: int, moves: Sequence[tuple[str, str]],
                         fixed: Collection[str] = ()) -> list[str]:
    """Workers that an even placement over ``workers`` drops but no move empties (they hold only
    ackers): Nimbus releases them with the moves' plan, since no completed move will."""
    if workers >= len(plan.workers):
        return []
    holding = {w for e, w in plan.executors.items() if not is_acker(e)}
    targets = {t for _, t in moves}
    return sorted(w for w in plan.workers if w not in holding and w not in targets and w not in fixed)
