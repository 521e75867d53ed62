"""Moves from or to a worker whose supervisor is down (it runs on, its heartbeat keeps it in
Nimbus's live set, but it reads no new plan: ZooKeeper -> supervisor -> LMDB -> worker): a move
from one left the executor running there beside its new copy, a move to one never started it."""

from __future__ import annotations

import random

import pytest

from nimbus.rebalance import random_moves
from nstorm.moves import RebalanceError, validate_moves

from fakes import plan_of

PLACES = {"split:0": "n1:1", "split:1": "n1:1", "split:2": "n2:1", "split:3": "n3:1", "__acker:0": "n1:1"}


def test_a_move_from_or_to_a_worker_whose_supervisor_is_down_is_refused() -> None:
    plan = plan_of(PLACES)
    live = dict(plan.workers)  # n2:1 is still there by its heartbeat only
    with pytest.raises(RebalanceError, match="worker 'n2:1' runs on, but its supervisor 'n2' is down"):
        validate_moves(plan, [("split:2", "n1:1")], live, set(), {}, {"n2:1"})
    with pytest.raises(RebalanceError, match="would not see the move of 'split:0'"):
        validate_moves(plan, [("split:0", "n2:1")], live, set(), {}, {"n2:1"})
    validate_moves(plan, [("split:0", "n3:1")], live, set(), {}, {"n2:1"})  # the others move as before


def test_random_moves_leave_workers_whose_supervisor_is_down_alone() -> None:
    plan = plan_of(PLACES)
    for seed in range(20):
        moves = random_moves(plan, 2, random.Random(seed), unwatched={"n2:1"})
        assert all(e != "split:2" and t != "n2:1" for e, t in moves), moves
    with pytest.raises(RebalanceError, match="at least 2 workers whose supervisors are up"):
        random_moves(plan, 1, unwatched={"n2:1", "n3:1"})


def test_new_workers_take_free_slots_on_the_hosts_asked_for_first() -> None:
    """A parallelism change's new workers take free slots in Nimbus's order (interleaved over
    nodes), those on the machines OTD names first (the ones with CPU to give)."""
    from nstorm.plan import Slot
    from nstorm.rescale import new_worker_slots

    free = [Slot("n1", "10.0.0.1", 1, 2), Slot("n2", "10.0.0.2", 1, 2), Slot("n1", "10.0.0.1", 3, 4)]
    assert new_worker_slots(free, 2) == free[:2]
    assert [s.worker_id for s in new_worker_slots(free, 2, ["10.0.0.2"])] == ["n2:1", "n1:1"]
    assert new_worker_slots(free, 0, ["10.0.0.2"]) == []
