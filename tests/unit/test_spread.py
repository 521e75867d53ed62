"""An even placement over N workers (``nstorm rebalance NAME [--workers N]``, Storm's rebalance
that redistributes): the moves it asks for, and the requests it refuses."""

from __future__ import annotations

from collections import Counter

import pytest

from nstorm.moves import RebalanceError
from nstorm.plan import Move, Slot
from nstorm.records import MoveMode
from nstorm.spread import even_moves, idle_dropped_workers

from fakes import plan_of

# Storm's default placement of word count over two workers: one of each component in each.
TWO = {"spout:0": "n1:1", "split:0": "n1:1", "count:0": "n1:1", "__acker:0": "n1:1",
       "spout:1": "n2:1", "split:1": "n2:1", "count:1": "n2:1", "__acker:1": "n2:1"}
FREE = [Slot("n3", "127.0.0.1", 1, 2), Slot("n4", "127.0.0.1", 1, 2)]


def _after(places: dict[str, str], moves: list[tuple[str, str]]) -> dict[str, list[str]]:
    out = dict(places)
    out.update(moves)
    held: dict[str, list[str]] = {}
    for executor, worker in sorted(out.items()):
        if not executor.startswith("__acker"):
            held.setdefault(worker, []).append(executor)
    return held


def test_more_workers_take_free_slots_and_every_worker_ends_with_its_share_of_each_component() -> None:
    plan = plan_of(TWO)
    moves = even_moves(plan, 3, FREE)
    assert len(moves) == 2 and {t for _, t in moves} == {"n3:1"}  # one from each old worker
    held = _after(TWO, moves)
    assert sorted(len(v) for v in held.values()) == [2, 2, 2]
    assert len({e.partition(":")[0] for e in held["n3:1"]}) == 2, held  # two components, not two spouts
    assert not any(e.startswith("__acker") for e, _ in moves)


def test_fewer_workers_empty_the_dropped_ones_and_keep_the_busiest() -> None:
    places = {**TWO, "count:2": "n2:1", "split:2": "n3:1", "__acker:2": "n3:1"}
    plan = plan_of(places)
    moves = even_moves(plan, 2, [])
    assert moves == [("split:2", "n1:1")]  # n2:1 holds 4 of the 8 already
    assert sorted(len(v) for v in _after(places, moves).values()) == [4, 4]
    assert idle_dropped_workers(plan, 2, moves) == []  # n3:1 is emptied by a move, released when it completes


def test_an_even_placement_asks_for_nothing_and_a_lopsided_one_is_evened() -> None:
    assert even_moves(plan_of(TWO), 2, FREE) == []
    lopsided = {**TWO, "spout:1": "n1:1", "split:1": "n1:1"}
    moves = even_moves(plan_of(lopsided), 2, FREE)
    assert len(moves) == 2 and {t for _, t in moves} == {"n2:1"}
    assert sorted(len(v) for v in _after(lopsided, moves).values()) == [3, 3]


def test_a_dropped_worker_with_only_ackers_is_released_with_the_moves() -> None:
    places = {**TWO, "__acker:2": "n3:1"}
    plan = plan_of(places)
    moves = even_moves(plan, 2, [])
    assert moves == []
    assert idle_dropped_workers(plan, 2, moves) == ["n3:1"]


def test_a_worker_whose_supervisor_is_down_keeps_its_executors_and_takes_none() -> None:
    places = {**TWO, "split:2": "n1:1", "count:2": "n1:1"}
    moves = even_moves(plan_of(places), 3, FREE, fixed={"n1:1"})
    assert all(e not in ("spout:0", "split:0", "count:0", "split:2", "count:2") for e, _ in moves)
    assert all(t != "n1:1" for _, t in moves)
    assert Counter(len(v) for w, v in _after(places, moves).items() if w != "n1:1") == Counter({2: 1, 1: 1})
    with pytest.raises(RebalanceError, match="supervisors are down"):
        even_moves(plan_of(places), 1, FREE, fixed={"n1:1", "n2:1"})


@pytest.mark.parametrize(("workers", "free", "words"), [
    (0, FREE, "expected an integer >= 1"),
    (True, FREE, "expected an integer >= 1"),
    (5, FREE, "3 more workers wanted, 2 free slots"),
    (7, [Slot(f"n{i}", "127.0.0.1", 1, 2) for i in range(3, 9)], "fewer than the workers asked for"),
])
def test_bad_counts_are_refused_with_one_line(workers: int, free: list[Slot], words: str) -> None:
    with pytest.raises(RebalanceError, match=words):
        even_moves(plan_of(TWO), workers, free)


def test_open_moves_are_waited_for() -> None:
    plan = plan_of(TWO)
    plan = plan.replace(moved={"count:0": Move("n2:1", "n1:1", MoveMode.THREAD, 1)})
    with pytest.raises(RebalanceError, match="in progress"):
        even_moves(plan, 3, FREE)
