"""Live rescaling without a cluster: the plans a parallelism change makes, the checks that refuse a
bad one, the batch split that keeps acking exact, and the key-group hand-over between real bolt
executors of one worker (FakeHost)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from nstorm import Bolt, Spout, TopologyBuilder
from nstorm.moves import RebalanceError
from nstorm.plan import Plan, Rescale, Slot
from nstorm.rescale import gaining_executors, parse_parallelism, rescale_plan, validate_rescale
from nstorm.state.keyed import key_group
from worker import wire
from worker.bolt import BoltExecutor
from worker.rescale import KeyGroupShift, split_batch
from worker.routing import RoutingTable

from fakes import FakeHost, plan_of


class Numbers(Spout):
    outputs = ("n",)


class Sum(Bolt):
    outputs = ()

    def prepare(self, conf: Any, context: Any) -> None:
        self.heard: list[tuple[list[int], list[int]]] = []

    def process(self, tup: Any) -> None:
        n = tup["n"]
        self.keyed_state[n] = self.keyed_state.get(n, 0) + n

    def on_key_groups(self, assigned: list[int], released: list[int]) -> None:
        self.heard.append((assigned, released))


def _definition() -> dict[str, Any]:
    builder = TopologyBuilder("t")
    builder.set_spout("numbers", Numbers, parallelism=2)
    builder.set_bolt("sum", Sum, parallelism=2).fields_grouping("numbers", ["n"])
    return builder.build(workers=1).definition


def _plan(counts: int = 4) -> Plan:
    places = {"split:0": "n1:6700", "split:1": "n2:6700", **{f"count:{i}": f"n{1 + i % 2}:6700" for i in range(counts)},
              "__acker:0": "n1:6700", "__acker:1": "n2:6700"}
    slots = [Slot("n1", "127.0.0.1", 6700, 7700), Slot("n2", "127.0.0.1", 6700, 7700)]
    return Plan.first("wc", places, places, slots)


DEFINITION = {"components": {"split": {"kind": "bolt"}, "count": {"kind": "bolt"}}}


# -- requests and plans (nstorm.rescale) --------------------------------------------------------
def test_parse_parallelism_and_its_one_line_errors() -> None:
    assert parse_parallelism(["count=8", "split=2"]) == {"count": 8, "split": 2}
    for bad in (["count"], ["count=x"], ["=3"], ["count=1", "count=2"]):
        with pytest.raises(RebalanceError):
            parse_parallelism(bad)


def test_scaling_out_appends_task_ids_and_places_new_executors_on_the_least_loaded_workers() -> None:
    plan = _plan(4)
    new = rescale_plan(plan, {"count": 8}, [], True, {"count": "m-1"})
    assert new.version == plan.version + 1
    assert new.tasks[: len(plan.tasks)] == plan.tasks  # task ids are only appended
    assert new.tasks[len(plan.tasks):] == ("count:4", "count:5", "count:6", "count:7")
    per_worker = Counter(w for e, w in new.executors.items() if e.startswith("count:"))
    assert per_worker == {"n1:6700": 4, "n2:6700": 4}
    step = new.rescales["count"]
    assert step.old == ("count:0", "count:1", "count:2", "count:3") and len(step.new) == 8 and step.record == "m-1"
    assert Plan.from_json("wc", new.to_json()) == new


def test_scaling_in_retires_the_last_executors_and_new_ones_never_reuse_an_index() -> None:
    plan = rescale_plan(_plan(8), {"count": 2}, [], True, {})
    assert sorted(plan.retiring) == [f"count:{i}" for i in range(2, 8)]
    assert [e for e in plan.executors if e.startswith("count:")] == ["count:0", "count:1"]
    routing = RoutingTable.from_plan(plan)
    assert [routing.tasks[t] for t in routing.component_tasks["count"]] == ["count:0", "count:1"]
    assert all(routing.location[plan.tasks.index(e)] for e in plan.retiring)  # still reachable while they hand over
    done = plan.replace(rescales={}, retiring={})
    again = rescale_plan(done, {"count": 5}, [], True, {})
    assert [e for e in again.executors if e.startswith("count:")] == ["count:0", "count:1", "count:8", "count:9",
                                                                      "count:10"]
    assert len(again.tasks) == len(set(again.tasks))


def test_new_workers_take_the_new_executors_first() -> None:
    extra = Slot("n3", "127.0.0.1", 6700, 7700)
    new = rescale_plan(_plan(2), {"count": 3}, [extra], True, {})
    assert new.executors["count:2"] == "n3:6700" and "n3:6700" in new.workers


def test_a_stop_mode_change_has_no_step_and_nothing_retiring() -> None:
    new = rescale_plan(_plan(4), {"count": 2}, [], False, {})
    assert not new.rescales and not new.retiring and len([e for e in new.executors if e.startswith("count")]) == 2


@pytest.mark.parametrize(("changes", "workers", "words"), [
    ({"nope": 2}, None, "unknown component"),
    ({"__acker": 2}, None, "unknown component"),
    ({"count": 0}, None, ">= 1"),
    ({"count": 200}, None, "topology.max.parallelism=128"),
    ({"count": 4}, None, "already has 4"),
    ({"count": 8}, 5, "free slots"),
    ({"count": 8}, 1, "at least the 2 workers"),
])
def test_bad_requests_are_refused_naming_the_problem(changes: dict[str, int], workers: int | None, words: str) -> None:
    with pytest.raises(RebalanceError, match=words):
        validate_rescale(_plan(4), DEFINITION, changes, 128, 2, workers)


def test_a_component_above_max_parallelism_is_not_rescaled_live() -> None:
    """Its input is routed by hash, not by key group: no step could say who gives which keys."""
    with pytest.raises(RebalanceError, match="more than topology.max.parallelism=4: it cannot be rescaled live"):
        validate_rescale(_plan(6), DEFINITION, {"count": 4}, 4, 0, None)


def test_a_component_and_its_upstream_scaled_in_are_two_requests() -> None:
    wired = {"components": {"split": {"kind": "bolt"}, "count": {"kind": "bolt", "inputs": [{"component": "split"}]}}}
    with pytest.raises(RebalanceError, match="reads from 'split', which this request scales in"):
        validate_rescale(_plan(4), wired, {"count": 2, "split": 1}, 128, 0, None)
    validate_rescale(_plan(4), wired, {"count": 2, "split": 3}, 128, 0, None)  # the upstream scaled out: fine


def test_a_windowed_bolt_is_not_rescaled() -> None:
    windowed = {"components": {"split": {"kind": "bolt"}, "count": {"kind": "bolt", "window": {"kind": "tumbling"}}}}
    with pytest.raises(RebalanceError, match="windowed bolt"):
        validate_rescale(_plan(4), windowed, {"count": 8}, 128, 0, None)


def test_one_rescale_at_a_time_and_none_during_moves() -> None:
    busy = rescale_plan(_plan(4), {"count": 8}, [], True, {})
    with pytest.raises(RebalanceError, match="in progress"):
        validate_rescale(busy, DEFINITION, {"split": 3}, 128, 0, None)
    from nstorm.moves import validate_moves

    with pytest.raises(RebalanceError, match="rescale of count is in progress"):
        validate_moves(busy, [("split:0", "n2:6700")], dict(busy.workers), set(), {})


@pytest.mark.parametrize(("before", "after"), [(4, 8), (8, 2), (2, 5), (5, 4), (1, 128)])
def test_every_key_group_is_given_by_its_old_owner_to_its_new_one(before: int, after: int) -> None:
    old = tuple(range(before))
    new = tuple(range(before)) + tuple(range(100, 100 + max(0, after - before)))
    new = new[:after]
    step = Rescale("count", tuple(f"count:{t}" for t in old), tuple(f"count:{t}" for t in new), 2)
    routing_step = RoutingTable.from_plan(_plan(1)).rescales.get("count")
    assert routing_step is None
    from worker.routing import RescaleStep

    rs = RescaleStep("count", old, new, 2)
    shifts = {t: KeyGroupShift(rs, t, 128, (), 0.0, 1.0, 1.0) for t in set(old) | set(new)}
    for g in range(128):
        giver, taker = old[g % len(old)], new[g % len(new)]
        if giver == taker:
            assert all(g not in s.lost and g not in s.gained for s in shifts.values())
        else:
            assert shifts[giver].lost[g] == taker and shifts[taker].gained[g] == giver
    assert {f"count:{t}" for t, s in shifts.items() if s.gained} == set(gaining_executors(step, 128))
    assert all(s.retiring == (t not in new) for t, s in shifts.items())


def test_an_upstream_routes_by_the_old_layout_until_every_new_owner_is_ready() -> None:
    from worker.rescale import UpstreamShifts
    from worker.routing import RescaleStep

    plan = rescale_plan(_plan(2), {"count": 3}, [], True, {})
    routing = RoutingTable.from_plan(plan)
    step = routing.rescales["count"]
    shifts = UpstreamShifts(["count"], patience=5.0)
    shifts.ready(step.new[2], step.version)  # a READY may come before the upstream sees the step
    shifts.note(routing, now=0.0)
    assert shifts.layout("count") == step.old and not shifts.due(1.0)
    shifts.ready(step.new[0], step.version)
    shifts.ready(step.new[1], step.version)
    assert shifts.due(1.0) == ["count"]

    class Courier:
        marks: list[tuple[int, int]] = []

        def shift_mark(self, dst: int, wid: str, version: int) -> None:
            self.marks.append((dst, version))

    courier = Courier()
    shifts.switch("count", routing, {}, lambda buf: None, courier)
    assert shifts.layout("count") is None and sorted(d for d, _ in courier.marks) == sorted(step.old)
    shifts.note(routing, now=2.0)
    assert shifts.layout("count") is None, "a step switched to is not held again"
    late = UpstreamShifts(["count"], patience=5.0)
    late.note(routing, now=0.0)
    assert late.due(4.0) == [] and late.due(6.0) == ["count"], "no READY: switched after the patience"
    assert isinstance(step, RescaleStep)


def test_two_components_rescaled_in_one_request_each_take_their_own_readies() -> None:
    """The steps of one request share a version: a READY counts for the step whose new layout has
    its sender (before, every READY went to the first held step; the other waited its patience)."""
    import types

    from worker.rescale import UpstreamShifts
    from worker.routing import RescaleStep

    a = RescaleStep("a", old=(1, 2), new=(1, 2, 3), version=7)
    b = RescaleStep("b", old=(4, 5), new=(4, 5, 6), version=7)
    shifts = UpstreamShifts(["a", "b"], patience=5.0)
    shifts.ready(6, 7)  # before the plan: kept for b, not given to a
    shifts.note(types.SimpleNamespace(rescales={"a": a, "b": b}), now=0.0)
    for src in (1, 2, 3, 4, 5):
        shifts.ready(src, 7)
    assert sorted(shifts.due(1.0)) == ["a", "b"]


# -- splitting a batch keeps the acker's XOR -----------------------------------------------------
def _xor_per_root(runs: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    for k in range(0, len(runs or ()), 2):
        a = runs[k + 1]
        for q in range(0, len(a or ()), 2):
            out[a[q]] = out.get(a[q], 0) ^ a[q + 1]
    return out


def test_a_split_batch_keeps_order_streams_and_every_roots_xor() -> None:
    rng = random.Random(5)
    values = [(i,) for i in range(40)]
    runs: list[Any] = []
    i = 0
    while i < 40:
        n = rng.randint(1, 6)
        n = min(n, 40 - i)
        anchor = None if rng.random() < 0.2 else [rng.getrandbits(64), rng.getrandbits(64), rng.getrandbits(64),
                                                  rng.getrandbits(64)][: 2 * rng.randint(1, 2)]
        runs += [n, anchor]
        i += n
    streams = {3: "other", 17: "other"}
    hold = [rng.random() < 0.4 for _ in values]
    kept, held = split_batch(values, runs, streams, hold)
    assert kept is not None and held is not None
    assert kept[0] == [v for v, h in zip(values, hold, strict=True) if not h]
    assert held[0] == [v for v, h in zip(values, hold, strict=True) if h]
    assert sum(kept[1][0::2]) == len(kept[0]) and sum(held[1][0::2]) == len(held[0])
    original = _xor_per_root(runs)
    both = _xor_per_root(kept[1])
    for root, x in _xor_per_root(held[1]).items():
        both[root] = both.get(root, 0) ^ x
    assert {r: x for r, x in both.items()} == original
    for part, mask in ((kept, False), (held, True)):
        indices = [i for i, h in enumerate(hold) if h is mask]
        assert {j: s for j, s in (part[2] or {}).items()} == {indices.index(i): s for i, s in streams.items() if i in indices}
    assert split_batch(values, None, None, [False] * 40) == ((values, None, None), None)


# -- the hand-over between real bolt executors (one worker, FakeHost) ------------------------------
def _batch(values: list[int]) -> tuple[list[tuple[int]], None, None]:
    return [(n,) for n in values], None, None


def _sum(host: FakeHost, index: int, task: int, definition: dict[str, Any]) -> BoltExecutor:
    """A sum executor whose inbox is the one the host delivers to (as a worker's would be)."""
    ex = BoltExecutor(host, f"sum:{index}", task, Sum, definition)  # type: ignore[arg-type]
    ex.inbox = host.inbox(task)  # type: ignore[assignment]
    ex.data_q, ex.ctl_q = ex.inbox.data, ex.inbox.control
    ex.setup()
    return ex


@pytest.mark.parametrize("part_bytes", [None, 4])
def test_two_sums_become_three_and_every_total_stays_exact(monkeypatch: pytest.MonkeyPatch,
                                                          part_bytes: int | None) -> None:
    more: list[bool] = []
    if part_bytes is not None:  # every key group larger than a part: each goes in pieces, all but its last "more"
        monkeypatch.setattr(wire, "STATE_PART_BYTES", part_bytes)
        on_groups = BoltExecutor.on_groups

        def noting(self: BoltExecutor, src: int, entries: Any) -> None:
            more.append(bool(entries.get("more")))
            on_groups(self, src, entries)

        monkeypatch.setattr(BoltExecutor, "on_groups", noting)
    definition = _definition()
    places = {"numbers:0": "n1:1", "numbers:1": "n1:1", "sum:0": "n1:1", "sum:1": "n1:1"}
    host = FakeHost(plan_of(places), acking=False)
    sums = {t: _sum(host, t - 2, t, definition) for t in (2, 3)}
    first = list(range(1, 300))
    for n in first:  # routed as the upstream does: key group g, owner g % 2
        sums[2 + key_group(n, 128) % 2]._process_batch(n % 2, _batch([n]))
    # The step: sum:2 (task 4) joins; key group g now belongs to position g % 3.
    plan = plan_of({**places, "sum:2": "n1:1"}, version=2)
    plan = plan.replace(rescales={"sum": Rescale("sum", ("sum:0", "sum:1"), ("sum:0", "sum:1", "sum:2"), 2, None)})
    host.routing = RoutingTable.from_plan(plan)
    sums[4] = _sum(host, 2, 4, definition)
    for ex in sums.values():
        ex.refresh_routing()
    assert sums[4].shift is not None and sums[4].shift.gained and not sums[4].shift.lost
    second = list(range(300, 600))
    for n in second:  # the upstream switched: the new layout, before any state moved
        sums[2 + key_group(n, 128) % 3].take(n % 2, _batch([n]))
    assert sums[4].shift_held, "the new owner holds the tuples of groups whose state has not come"
    for ex in (sums[2], sums[3]):
        for src in (0, 1):
            ex._process_batch(src, wire.ShiftMark(2))  # every upstream task's marker
        ex.shift_step()
        assert ex.shift is None or ex.shift.released
    for ex in sums.values():
        ex._handle_control()  # GROUPS
        ex.shift_step()
    assert all(ex.shift is None for ex in sums.values())
    assert not sums[4].shift_held
    totals: dict[int, int] = {}
    for t, ex in sums.items():
        position = t - 2
        for key, value in ex.instance.keyed_state.items():
            assert key_group(key, 128) % 3 == position, f"key {key} on the wrong executor"
            assert key not in totals
            totals[key] = value
    assert totals == {n: n for n in first + second}
    assert sums[4].instance.heard[-1][0] and sums[2].instance.heard[0][1]  # on_key_groups told both sides
    if part_bytes is not None:
        assert more.count(True) > 10 and more.count(False) > 10  # groups of several keys went in pieces


class Echo(Bolt):
    outputs = ("n",)

    def process(self, tup: Any) -> None:
        self.emit((tup["n"],))


def test_input_from_an_executor_the_plan_did_not_name_yet_leaves_by_the_deadline() -> None:
    """A batch from an upstream executor a rescale added, come before this executor's plan names
    it, is taken once the plan does: what it emits leaves by the deadline, input or none, and a
    batch that is not what it claims is dropped there as in the loop."""
    builder = TopologyBuilder("t")
    builder.set_spout("numbers", Numbers, parallelism=2)
    builder.set_bolt("echo", Echo).shuffle_grouping("numbers")
    builder.set_bolt("sum", Sum).shuffle_grouping("echo")
    definition = builder.build(workers=1).definition
    places = {"numbers:0": "n1:1", "echo:0": "n1:1", "sum:0": "n1:1"}
    host = FakeHost(plan_of(places), acking=False)
    echo = BoltExecutor(host, "echo:0", 1, Echo, definition)  # type: ignore[arg-type]
    echo.setup()
    for buf in echo.outbox.buffers.values():
        buf.limit = 1000  # a rate that fills a batch in a fill time: a tuple waits for the deadline
    echo.take(3, (5, None, None))  # from numbers:1 (task 3), not in this executor's plan yet: garbage
    echo.take(3, _batch([7]))
    assert len(echo.unplaced) == 2 and not echo.outbox.holding()
    host.routing = RoutingTable.from_plan(plan_of({**places, "numbers:1": "n1:1"}, version=2))
    echo.refresh_routing()
    assert echo.errors == 1, "the garbage is dropped, not the executor or the batch after it"
    assert not echo.unplaced and echo.outbox.holding()
    assert echo.outbox.deadline.at is not None, "armed: the emitted tuple does not wait for more input"


def test_an_upstream_still_holding_a_step_the_plan_has_ended_switches_to_the_new_layout() -> None:
    """The step completed (its old owners' drain deadline is shorter than the upstream's patience)
    before every READY reached this upstream: the next plan, without the step, switches it."""
    from worker.spout import SpoutExecutor

    definition = _definition()
    places = {"numbers:0": "n1:1", "numbers:1": "n1:1", "sum:0": "n1:1", "sum:1": "n1:1"}
    host = FakeHost(plan_of(places), acking=False)
    spout = SpoutExecutor(host, "numbers:0", 0, Numbers, definition)  # type: ignore[arg-type]
    spout.refresh_routing()
    grown = {**places, "sum:2": "n1:1"}
    plan = plan_of(grown, version=2).replace(
        rescales={"sum": Rescale("sum", ("sum:0", "sum:1"), ("sum:0", "sum:1", "sum:2"), 2, None)})
    host.routing = RoutingTable.from_plan(plan)
    spout.refresh_routing()
    shifts = spout.outbox.shifts
    assert shifts.layout("sum") == (2, 3), "held at the old layout: no READY came"
    host.routing = RoutingTable.from_plan(plan_of(grown, version=3))  # the step completed meanwhile
    spout.refresh_routing()
    assert shifts.layout("sum") is None and not shifts.held and shifts.seen["sum"] == 2
    (target,) = spout.outbox.targets["default"]
    assert {buf.dst for buf in target.bufs} == {2, 3, 4}, "routed by the new layout"


def test_old_owners_that_gave_their_groups_before_every_marker_still_report_the_step_done() -> None:
    """An upstream that switched late (a new owner's worker was still starting): the old owners
    ran out of drain time, gave their groups away and fail what comes late; the markers that
    come afterwards end their step, and every executor that gained groups reports it."""
    definition = _definition()
    places = {"numbers:0": "n1:1", "numbers:1": "n1:1", "sum:0": "n1:1", "sum:1": "n1:1"}
    host = FakeHost(plan_of(places), acking=False)
    sums = {t: _sum(host, t - 2, t, definition) for t in (2, 3)}
    plan = plan_of({**places, "sum:2": "n1:1"}, version=2)
    plan = plan.replace(rescales={"sum": Rescale("sum", ("sum:0", "sum:1"), ("sum:0", "sum:1", "sum:2"), 2, "m-1")})
    host.routing = RoutingTable.from_plan(plan)
    sums[4] = _sum(host, 2, 4, definition)
    for ex in sums.values():
        ex.refresh_routing()
    for ex in (sums[2], sums[3]):
        ex.shift.drain_until = 0.0  # type: ignore[union-attr]  # out of drain time, no marker in
        ex.shift_step()
        assert ex.shift is not None and ex.shift.released and ex.shift.forced and not ex.shift.done
    for _ in range(2):
        for ex in sums.values():
            ex._handle_control()  # GROUPS
            ex.shift_step()
    assert sums[4].shift is None
    for ex in (sums[2], sums[3]):
        for src in (0, 1):
            ex._process_batch(src, wire.ShiftMark(2))  # the late markers
        assert ex.shift is None, "the last marker ends the step"
    arrived = {e for record, update in host.completions() if record == "m-1" for e in update["arrived"]}
    assert arrived == {"sum:0", "sum:1", "sum:2"}
