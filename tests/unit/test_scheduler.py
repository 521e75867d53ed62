"""Unit tests of the even scheduler and plan repair."""

from __future__ import annotations

from nimbus.rebalance import spread_moves
from nimbus.scheduler import EvenScheduler, local_units, task_list
from nstorm.plan import Plan, Slot, interleave_slots

DEFINITION = {
    "workers": 2,
    "components": {"s": {"parallelism": 2}, "b": {"parallelism": 3}},
}
SUPERVISORS = {
    "n1": {"host": "10.0.0.1", "slots": [[6701, 7701], [6700, 7700]]},
    "n2": {"host": "10.0.0.2", "slots": [[6700, 7700], [6701, 7701]]},
}


def test_slots_interleave_nodes() -> None:
    assert [s.worker_id for s in interleave_slots(SUPERVISORS)] == ["n1:6700", "n2:6700", "n1:6701", "n2:6701"]


def test_task_list_includes_ackers() -> None:
    assert task_list(DEFINITION, 2) == ["s:0", "s:1", "b:0", "b:1", "b:2", "__acker:0", "__acker:1"]


def test_initial_plan_round_robin_over_nodes() -> None:
    plan = EvenScheduler().initial_plan("t", DEFINITION, {}, interleave_slots(SUPERVISORS))
    assert plan is not None
    assert set(plan.workers) == {"n1:6700", "n2:6700"}
    assert plan.executors["s:0"] == "n1:6700" and plan.executors["s:1"] == "n2:6700"
    counts = [list(plan.executors.values()).count(w) for w in plan.workers]
    assert sorted(counts) == [3, 4]  # 7 executors (2 ackers by default) evenly
    assert EvenScheduler().initial_plan("t", DEFINITION, {}, []) is None


def test_repair_moves_only_lost_executors() -> None:
    slots = interleave_slots(SUPERVISORS)
    plan = EvenScheduler().initial_plan("t", DEFINITION, {}, slots)
    live = {s.worker_id: s for s in slots if s.node == "n1"}
    free = [s for s in live.values() if s.worker_id not in plan.workers]
    repaired = EvenScheduler().repair_plan(plan, live, free)
    assert repaired.version == plan.version + 1
    assert set(repaired.workers) == {"n1:6700", "n1:6701"}
    for e, w in plan.executors.items():
        if w == "n1:6700":
            assert repaired.executors[e] == "n1:6700"
        else:
            assert repaired.executors[e] == "n1:6701"
    assert EvenScheduler().repair_plan(repaired, live, []) is None


def test_slot_ids() -> None:
    assert Slot("n1", "h", 1, 2).worker_id == "n1:1"


def test_spread_moves_refill_returned_slots_from_the_busiest_workers() -> None:
    executors = {**{f"split:{i}": "n2:1" for i in range(4)}, **{f"count:{i}": "n2:2" for i in range(4)},
                 "__acker:0": "n2:1", "__acker:1": "n2:2"}
    plan = Plan.first("t", executors, executors, [Slot("n2", "h", 1, 11), Slot("n2", "h", 2, 12)])
    free = [Slot("n1", "h", 1, 11), Slot("n1", "h", 2, 12), Slot("n3", "h", 1, 11)]
    moves = spread_moves(plan, 4, free)
    targets = [t for _, t in moves]
    assert targets.count("n1:1") == 2 and targets.count("n1:2") == 2  # 8 movable over 4 workers
    assert not any(e.startswith("__acker") for e, _ in moves)
    assert len({e for e, _ in moves}) == 4
    assert spread_moves(plan, 2, free) == []  # nothing missing
    assert spread_moves(plan, 4, []) == []  # nowhere to go


def test_a_worker_that_moves_emptied_is_released_and_its_ackers_keep_their_tasks() -> None:
    from nimbus.rebalance import apply_moves, drained_workers, hollow, release_workers, shed_ackers

    slots = [Slot("n1", "h", 1, 11), Slot("n2", "h", 1, 11), Slot("n3", "h", 1, 11)]
    places = {"s:0": "n1:1", "b:0": "n2:1", "b:1": "n3:1", "__acker:0": "n1:1", "__acker:1": "n2:1",
              "__acker:2": "n3:1"}
    plan = Plan.first("t", places, places, slots)
    live = {s.worker_id: s for s in slots}
    moved = apply_moves(plan, [("b:1", "n2:1")], "thread", live, {"b:1": "m-1"})
    assert "n3:1" in moved.workers  # it still drains the moved-away copy
    assert drained_workers(moved, []) == []  # the move is still open
    assert drained_workers(moved, ["b:1"]) == ["n3:1"]  # done: only an acker is left there
    moved = moved.replace(moved={})
    # First its ackers move (handing their open trees over), the worker stays, holding nothing...
    shed = shed_ackers(moved, ["n3:1"], 3)
    assert set(shed.workers) == {"n1:1", "n2:1", "n3:1"} and shed.releasing == {"n3:1": 3}
    assert shed.tasks == plan.tasks  # ackers keep their count and task ids
    assert shed.executors["__acker:2"] in ("n1:1", "n2:1") and hollow(shed, "n3:1") and not hollow(shed, "n2:1")
    assert Plan.from_json("t", shed.to_json()).releasing == {"n3:1": 3}
    # ... then, once every worker has that plan, it goes.
    released = release_workers(shed, ["n3:1"])
    assert set(released.workers) == {"n1:1", "n2:1"} and not released.releasing
    # Lost with its node meanwhile: gone, and no worker is missing (it held nothing to replace).
    repaired = EvenScheduler().repair_plan(shed, {w: s for w, s in live.items() if w != "n3:1"}, [])
    assert repaired is not None and set(repaired.workers) == {"n1:1", "n2:1"}
    assert not repaired.releasing and repaired.missing_workers == 0 and repaired.executors == shed.executors
    # An initial plan's worker with only an acker (more workers than executors) is not "emptied".
    assert drained_workers(plan, []) == []


def test_only_workers_lost_with_a_node_are_spread_back() -> None:
    slots = interleave_slots(SUPERVISORS)
    plan = EvenScheduler().initial_plan("t", DEFINITION, {}, slots)
    live = {s.worker_id: s for s in slots if s.node == "n1" and s.port == 6700}
    repaired = EvenScheduler().repair_plan(plan, live, [])  # n2 lost, no free slot to replace it
    assert repaired.missing_workers == 1 and set(repaired.workers) == {"n1:6700"}
    back = spread_moves(repaired, 2, [slots[1]])
    assert back and {t for _, t in back} == {"n2:6700"}
    from nimbus.rebalance import apply_moves

    refilled = apply_moves(repaired, back, "thread", {s.worker_id: s for s in slots}, {})
    assert refilled.missing_workers == 0


LOCAL = {
    "workers": 2,
    "components": {
        "sentences": {"parallelism": 1},
        "split": {"parallelism": 1, "inputs": [{"component": "sentences", "grouping": "local_or_shuffle"}]},
        "count": {"parallelism": 1, "inputs": [{"component": "split", "grouping": "fields"}]},
    },
}


def test_a_local_or_shuffle_channel_is_placed_in_one_worker() -> None:
    """Round robin alone would put split:0 beside count:0, away from its spout; a unit keeps the
    channel in one process (chainable), and the next unit goes to the other worker."""
    tasks = task_list(LOCAL, 2)
    assert local_units(LOCAL, tasks) == [["sentences:0", "split:0"], ["count:0"], ["__acker:0"], ["__acker:1"]]
    plan = EvenScheduler().initial_plan("t", LOCAL, {}, interleave_slots(SUPERVISORS))
    assert plan is not None
    assert plan.executors["split:0"] == plan.executors["sentences:0"] != plan.executors["count:0"]


def test_local_units_follow_chains_of_channels_and_wrap_parallelism() -> None:
    definition = {"components": {
        "a": {"parallelism": 2},
        "b": {"parallelism": 3, "inputs": [{"component": "a", "grouping": "local_or_shuffle"}]},
        "c": {"parallelism": 3, "inputs": [{"component": "b", "grouping": "local_or_shuffle"}]},
        "d": {"parallelism": 1, "inputs": [{"component": "c", "grouping": "local_or_shuffle"},
                                          {"component": "a", "grouping": "shuffle"}]},
    }}
    tasks = task_list({**definition, "workers": 2}, 0)
    assert local_units(definition, tasks) == [["a:0", "b:0", "b:2", "c:0", "c:2"], ["a:1", "b:1", "c:1"], ["d:0"]]


def test_a_process_mode_restart_is_carried_on_until_the_worker_runs_its_version() -> None:
    """``restart`` was replaced by the next move (and cleared by a rescale): a supervisor that read
    only the later of two versions written in one Nimbus pass never restarted the first's
    workers. The ask is carried on, keyed by the version that asked; a worker waits for it while
    its process started before that version (session 33's item)."""
    from nimbus.rebalance import apply_moves
    from nstorm.rescale import rescale_plan
    from worker.routing import RoutingTable

    slots = [Slot("n1", "h", 1, 11), Slot("n2", "h", 1, 11), Slot("n3", "h", 1, 11)]
    places = {"a:0": "n1:1", "a:1": "n2:1", "b:0": "n3:1", "__acker:0": "n1:1"}
    plan = Plan.first("t", places, places, slots)
    live = {s.worker_id: s for s in slots}
    first = apply_moves(plan, [("a:0", "n2:1")], "process", live, {})
    assert first.restart == {"n1:1": 2, "n2:1": 2}
    second = apply_moves(first, [("b:0", "n1:1")], "process", live, {})
    assert second.restart == {"n1:1": 3, "n2:1": 2, "n3:1": 3}
    third = apply_moves(second, [("a:1", "n3:1")], "thread", live, {})
    assert third.restart == second.restart
    assert rescale_plan(third, {"a": 3}, [], True, {}).restart == second.restart
    routing = RoutingTable.from_plan(third)
    assert routing.restart_asked("n2:1", 1) == 2, "started with v1: waits for its restart"
    assert routing.restart_asked("n2:1", 2) is None, "started with v2 (restarted for it)"
    assert routing.restart_asked("n1:1", 2) == 3 and routing.restart_asked("n1:1", 3) is None
    assert routing.restart_asked("n3:1", 4) is None and RoutingTable.from_plan(plan).restart_asked("n1:1", 1) is None
