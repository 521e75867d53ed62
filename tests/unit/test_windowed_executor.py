"""The windowed bolt executor without a cluster (the shared fake host): acks held until a tuple
leaves its last window, emits anchored to the window's roots, the late stream, malformed
tuples, the hand-over of open windows to a moved copy, acks on arrival with durable state,
and the build and submit checks of a WindowedBolt."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from nstorm import Bolt, Spout, TopologyBuilder, TopologyError, Window, WindowedBolt
from nstorm.errors import ConfigError
from nstorm.window.checks import check_submit
from worker import wire
from worker.windowed import WindowedBoltExecutor

from fakes import FakeHost, plan_of

PLACES = {"readings:0": "n1:1", "totals:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1"}
READINGS, TOTALS, SINK = 0, 1, 2


class Readings(Spout):
    outputs = ("sensor", "value", "ts")


class Totals(WindowedBolt):
    outputs = ("sensor", "total", "ts")
    window = Window.tumbling(10.0)
    timestamp_field = "ts"
    late_stream = "late"
    key_fields = ("sensor",)

    def process_window(self, window: Any) -> None:
        self.emit((window.key, sum(t["value"] for t in window.tuples), None))


class Sink(Bolt):
    def process(self, tup: Any) -> None:
        pass


def _definition(cls: type = Totals) -> dict[str, Any]:
    builder = TopologyBuilder("t")
    builder.set_spout("readings", Readings)
    builder.set_bolt("totals", cls).fields_grouping("readings", ["sensor"])
    sink = builder.set_bolt("sink", Sink).shuffle_grouping("totals")
    if getattr(cls, "late_stream", None):
        sink.shuffle_grouping("totals", stream="late")
    return builder.build().definition


class Acker:
    """The acker's XOR per root, fed from what the executor would send."""

    def __init__(self) -> None:
        self.value: dict[int, int] = {}
        self.failed: set[int] = set()
        self.rng = random.Random(3)

    def emit(self, n: int) -> list[Any]:
        """Runs for ``n`` tuples, each its own tree (a spout's tuples)."""
        runs: list[Any] = []
        for _ in range(n):
            root, edge = self.rng.getrandbits(63) | 1, self.rng.getrandbits(64) | 1
            self.value[root] = edge
            runs += [1, [root, edge]]
        return runs

    def collect(self, ex: WindowedBoltExecutor) -> None:
        for r, x in ex.outbox.acks.items():
            self.value[r] = self.value.get(r, 0) ^ x
        ex.outbox.acks.clear()
        for (kind, _dst), entries in ex.outbox.ctl_buffers.items():
            if kind == wire.FAIL:
                self.failed.update(entries)
        ex.outbox.ctl_buffers.clear()

    def children(self, host: FakeHost) -> list[Any]:
        """The sink's tuples; each is acked at once (its edges XOR into its roots)."""
        out = []
        for _src, (values, runs, _streams) in host.take(SINK):
            out.extend(values)
            for a in (runs or [])[1::2]:
                for q in range(0, len(a or ()), 2):
                    self.value[a[q]] ^= a[q + 1]
        return out

    def complete(self, roots: list[int]) -> list[bool]:
        return [self.value[r] == 0 for r in roots]


def _send(ex: WindowedBoltExecutor) -> None:
    """Send the data buffers (not the acks, which the test's acker model reads from the outbox)."""
    for buf in ex.outbox.buffers.values():
        if buf:
            ex.outbox.flush_buffer(buf)


def _executor(host: FakeHost, cls: type = Totals) -> WindowedBoltExecutor:
    ex = WindowedBoltExecutor(host, "totals:0", TOTALS, cls, _definition(cls))
    ex.setup()
    return ex


def test_acks_are_held_until_the_tuple_leaves_its_window_and_results_anchor_to_it() -> None:
    host = FakeHost(plan_of(PLACES))
    ex = _executor(host)
    acker = Acker()
    runs = acker.emit(3)
    roots = runs[1::2]
    ex.take(READINGS, ([("a", 1, 1.0), ("a", 2, 2.0), ("b", 5, 3.0)], runs, None))
    acker.collect(ex)
    assert acker.complete([a[0] for a in roots]) == [False, False, False], "held while their window is open"
    assert ex.counters()["window"]["open_windows"] == 2 and ex.counters()["window"]["tuples"] == 3
    runs2 = acker.emit(1)
    ex.take(READINGS, ([("a", 7, 12.0)], runs2, None))  # the watermark passes 10: [0, 10) fires and closes
    _send(ex)
    acker.collect(ex)
    results = acker.children(host)
    assert sorted(tuple(v) for v in results) == [("a", 3, 10.0), ("b", 5, 10.0)], "the window's end is its results' ts"
    assert acker.complete([a[0] for a in roots]) == [True, True, True]
    assert acker.complete([runs2[1][0]]) == [False]
    window = ex.counters()["window"]
    assert window["fired"] == 2 and window["watermark"] == 12.0 and window["open_windows"] == 1


def test_a_late_tuple_goes_to_the_late_stream_with_its_values_and_is_acked() -> None:
    host = FakeHost(plan_of(PLACES))
    ex = _executor(host)
    acker = Acker()
    ex.take(READINGS, ([("a", 1, 25.0)], acker.emit(1), None))
    runs = acker.emit(1)
    ex.take(READINGS, ([("a", 9, 3.0)], runs, None))
    _send(ex)
    acker.collect(ex)
    assert [tuple(v) for v in acker.children(host)] == [("a", 9, 3.0)]
    assert acker.complete([runs[1][0]]) == [True]
    assert ex.counters()["window"]["late_tuples"] == 1


def test_a_tuple_without_a_number_for_a_timestamp_is_counted_failed_and_not_fatal() -> None:
    host = FakeHost(plan_of(PLACES))
    ex = _executor(host)
    acker = Acker()
    runs = acker.emit(3)
    ex.take(READINGS, ([("a", 1, "noon"), ("a", 1, None), ("a", 1, math.nan)], runs, None))
    acker.collect(ex)
    assert acker.failed == {a[0] for a in runs[1::2]}
    assert ex.counters()["window"]["malformed"] == 3 and ex.errors == 0
    ex.take(READINGS, ([("a", 1, 1.0)], acker.emit(1), None))
    assert ex.counters()["window"]["tuples"] == 1


def test_open_windows_and_held_acks_move_with_the_hand_over() -> None:
    host = FakeHost(plan_of(PLACES))
    old = _executor(host)
    acker = Acker()
    runs = acker.emit(2)
    old.take(READINGS, ([("a", 1, 1.0), ("a", 2, 9.0)], runs, None))
    acker.collect(old)
    entry = wire.unpack_state(wire.pack(old.snapshot()))  # what goes over the control channel
    new = _executor(host)
    new.restore(entry)
    assert new.counters()["window"]["tuples"] == 2 and new.engine.watermark == 9.0
    runs2 = acker.emit(1)
    new.take(READINGS, ([("a", 4, 11.0)], runs2, None))
    _send(new)
    acker.collect(new)
    assert [tuple(v) for v in acker.children(host)] == [("a", 3, 10.0)], "fired once, by the new copy"
    assert acker.complete([a[0] for a in runs[1::2]]) == [True, True]
    assert new.counters()["window"]["fired"] == 1


def test_with_a_durable_provider_tuples_are_acked_on_arrival() -> None:
    host = FakeHost(plan_of(PLACES))
    host.checkpoints = object()  # any provider other than memory
    ex = _executor(host)
    acker = Acker()
    runs = acker.emit(2)
    ex.take(READINGS, ([("a", 1, 1.0), ("b", 2, 2.0)], runs, None))
    acker.collect(ex)
    assert acker.complete([a[0] for a in runs[1::2]]) == [True, True]
    assert "windows" in ex.checkpoint_extra() and ex.checkpoint_extra()["windows"]["engine"]["tuples"] == 2


def test_incremental_sliding_windows_sum_each_tuple_once_per_window() -> None:
    class Sums(WindowedBolt):
        outputs = ("sensor", "total", "ts")
        window = Window.sliding(length=4.0, slide=2.0)
        timestamp_field = "ts"
        key_fields = ("sensor",)

        def init_window(self) -> int:
            return 0

        def add_to_window(self, acc: int, tup: Any) -> int:
            return acc + tup["value"]

        def fire_window(self, acc: int, window: Any) -> None:
            self.emit((window.key, acc, window.start))

    host = FakeHost(plan_of(PLACES), acking=False)
    ex = _executor(host, Sums)
    ex.take(READINGS, ([("a", 1, 1.0), ("a", 10, 3.0), ("a", 100, 5.0)], None, None))
    ex.take(READINGS, ([("a", 0, 9.0)], None, None))
    _send(ex)
    got = sorted(tuple(v) for _s, (values, _r, _st) in host.take(SINK) for v in values)
    # [-2, 2) 1; [0, 4) 11, the ts field (the bolt's timestamp field) set to the window's end
    assert got == [("a", 1, 2.0), ("a", 11, 4.0), ("a", 100, 8.0), ("a", 110, 6.0)]


@pytest.mark.parametrize(("attrs", "message"), [
    ({"window": Window.tumbling(0)}, "length must be a positive number"),
    ({"window": Window.sliding(length=10.0, slide=-1.0)}, "slide must be a positive number"),
    ({"window": Window.session(gap=0.0)}, "gap must be a positive number"),
    ({"window": Window.sliding(count=0, slide_count=1)}, "count must be a positive integer"),
    ({"window": None}, "window must be Window"),
    ({"timestamp_field": "when"}, "timestamp field(s) ['when'] not declared by its input readings/default"),
    ({"key_fields": ("room",)}, "key field(s) ['room'] not declared"),
    ({"timestamp_field": None, "late_stream": None, "lag_secs": 2.0}, "lag_secs needs event time"),
    ({"lag_secs": -1}, "lag_secs must be a number of seconds >= 0"),
    ({"tick_secs": 1}, "takes no tick_secs"),
])
def test_bad_windowed_bolts_are_a_topology_error_naming_the_bolt(attrs: dict[str, Any], message: str) -> None:
    cls = type("Bad", (Totals,), dict(attrs))
    with pytest.raises(TopologyError) as err:
        _definition(cls)
    assert "bolt 'totals'" in str(err.value) and message in str(err.value), str(err.value)


def test_incremental_session_windows_need_merge_windows() -> None:
    class Sessions(WindowedBolt):
        outputs = ("n",)
        window = Window.session(gap=5.0)

        def fire_window(self, acc: Any, window: Any) -> None:
            pass

    with pytest.raises(TopologyError, match="merge_windows"):
        _definition(Sessions)


def test_the_engine_declares_the_late_stream_with_the_inputs_fields() -> None:
    definition = _definition()
    totals = definition["components"]["totals"]
    assert totals["outputs"]["late"] == ["sensor", "value", "ts"]
    assert totals["window"] == {"kind": "time", "length": 10.0, "slide": 10.0, "timestamp_field": "ts",
                                "lag_secs": 0.0, "allowed_lateness_secs": 0.0, "late_stream": "late",
                                "key_fields": ["sensor"], "incremental": False}


def test_the_message_timeout_must_outlast_a_time_window_with_the_memory_provider() -> None:
    class Long(Totals):
        window = Window.sliding(length=20.0, slide=10.0)
        lag_secs = 5.0

    definition = _definition(Long)
    with pytest.raises(ConfigError, match=r"timeout.secs=30 must exceed .* \(20 \+ 10 \+ 5 \+ 0 = 35 s\)"):
        check_submit(definition, {"topology.message.timeout.secs": 30})
    check_submit(definition, {"topology.message.timeout.secs": 36})
    check_submit(definition, {"topology.message.timeout.secs": 30, "topology.state.provider": "lmdb"})
    check_submit(definition, {"topology.message.timeout.secs": 30, "topology.acker.executors": 0})


class _Clock:
    """Stands in for the ``time`` module in worker.windowed: a wall clock the test moves."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


def test_processing_time_windows_fire_on_the_clock_and_the_timer_is_set_for_their_end(monkeypatch) -> None:
    import worker.windowed

    class Counts(WindowedBolt):
        outputs = ("sensor", "n")
        window = Window.tumbling(1.0)
        key_fields = ("sensor",)

        def process_window(self, window: Any) -> None:
            self.emit((window.key, len(window.tuples)))

    clock = _Clock(100.2)
    monkeypatch.setattr(worker.windowed, "time", clock)
    host = FakeHost(plan_of(PLACES), acking=False)
    ex = _executor(host, Counts)
    ex.take(READINGS, ([("a", 1, 0.0), ("a", 2, 0.0)], None, None))
    assert ex.next_tick == pytest.approx(101.0), "the timer is the window's end"
    clock.now = 100.6
    ex.take(READINGS, ([("b", 1, 0.0)], None, None))
    _send(ex)
    assert host.take(SINK) == []
    clock.now = 101.05
    ex._tick()
    _send(ex)
    got = sorted(tuple(v) for _s, (values, _r, _st) in host.take(SINK) for v in values)
    assert got == [("a", 2), ("b", 1)]
    assert ex.counters()["window"]["watermark"] == 101.05


def test_a_full_engine_still_moves_its_watermark_so_windows_fire_and_make_room() -> None:
    """At topology.window.max.tuples, refused tuples' timestamps did not count: no window could
    fire to make room and every later tuple (and replay) was refused for good."""
    host = FakeHost(plan_of(PLACES))
    ex = _executor(host)
    ex.engine.max_tuples = 3
    acker = Acker()
    for ts in (1.0, 2.0, 3.0, 4.0):
        ex.take(READINGS, ([("a", 1, ts)], acker.emit(1), None))
    assert ex.counters()["window"]["refused"] == 1
    refused = acker.emit(1)
    ex.take(READINGS, ([("a", 1, 11.0)], refused, None))  # refused too, but past [0, 10): it fires
    acker.collect(ex)
    assert refused[1][0] in acker.failed, "failed: the spout replays it"
    assert ex.counters()["window"]["fired"] == 1
    # [0, 10)'s tuples are kept as the next window's expired until [10, 20) ends: a refused 21
    # passes that too, and they go.
    ex.take(READINGS, ([("a", 1, 21.0)], acker.emit(1), None))
    assert ex.counters()["window"]["tuples"] == 0 and ex.counters()["window"]["refused"] == 3
    ex.take(READINGS, ([("a", 1, 22.0)], acker.emit(1), None))
    assert ex.counters()["window"]["tuples"] == 1 and ex.counters()["window"]["refused"] == 3, "room again"


class ExplicitTotals(Totals):
    """Storm's way: ``collector.emit(window.get(), values)``."""

    def process_window(self, window: Any) -> None:
        self.emit((window.key, sum(t["value"] for t in window.tuples), None), anchors=window.tuples)


@pytest.mark.parametrize("cls", [Totals, ExplicitTotals])
def test_results_are_anchored_to_the_window_whether_or_not_the_bolt_names_its_tuples(cls: type) -> None:
    """Naming the window's tuples as anchors made the results unanchored (they carry no anchors
    of their own): a lost result was never replayed."""
    host = FakeHost(plan_of(PLACES))
    ex = _executor(host, cls)
    acker = Acker()
    runs = acker.emit(2)
    ex.take(READINGS, ([("a", 1, 1.0), ("a", 2, 2.0)], runs, None))
    ex.take(READINGS, ([("a", 7, 12.0)], acker.emit(1), None))  # [0, 10) fires and closes
    _send(ex)
    acker.collect(ex)
    roots = [a[0] for a in runs[1::2]]
    assert acker.complete(roots) == [False, False], "the result is not acked yet: the trees wait for it"
    assert [tuple(v) for v in acker.children(host)] == [("a", 3, 10.0)]
    assert acker.complete(roots) == [True, True]


class Raising(Totals):
    def process_window(self, window: Any) -> None:
        raise RuntimeError("bad window")


class RaisingAdd(WindowedBolt):
    outputs = ("sensor", "total", "ts")
    window = Window.tumbling(10.0)
    timestamp_field = "ts"
    key_fields = ("sensor",)

    def init_window(self) -> Any:
        return 0

    def add_to_window(self, acc: Any, tup: Any) -> Any:
        if tup["value"] < 0:
            raise ValueError("negative")
        return acc + tup["value"]

    def fire_window(self, acc: Any, window: Any) -> None:
        self.emit((window.key, acc, None))


def test_a_window_whose_code_raises_fails_its_trees_and_is_not_acked() -> None:
    host = FakeHost(plan_of(PLACES))
    ex = _executor(host, Raising)
    acker = Acker()
    runs = acker.emit(2)
    ex.take(READINGS, ([("a", 1, 1.0), ("a", 2, 2.0)], runs, None))
    ex.take(READINGS, ([("a", 7, 12.0)], acker.emit(1), None))  # [0, 10) fires: it raises
    acker.collect(ex)
    assert {a[0] for a in runs[1::2]} <= acker.failed and ex.errors == 1
    ex = _executor(host, RaisingAdd)
    acker = Acker()
    good, bad = acker.emit(1), acker.emit(1)
    ex.take(READINGS, ([("a", 1, 1.0)], good, None))
    ex.take(READINGS, ([("a", -1, 2.0)], bad, None))
    acker.collect(ex)
    assert acker.failed == {bad[1][0]}, "the tuple add_to_window could not take fails, not the others"


def test_with_a_durable_provider_a_window_whose_code_raises_rolls_back() -> None:
    class Checkpoints:
        reasons: list[str] = []

        def request_rollback(self, reason: str) -> None:
            self.reasons.append(reason)

    host = FakeHost(plan_of(PLACES))
    host.checkpoints = Checkpoints()
    ex = _executor(host, Raising)
    acker = Acker()
    ex.take(READINGS, ([("a", 1, 1.0)], acker.emit(1), None))
    ex.take(READINGS, ([("a", 7, 12.0)], acker.emit(1), None))
    assert host.checkpoints.reasons == ["totals:0: a window's firing raised"]


def test_a_count_window_the_spouts_pending_cap_cannot_fill_is_refused_with_the_memory_provider() -> None:
    class Big(Totals):
        window = Window.tumbling(count=3000)

    definition = _definition(Big)
    conf = {"topology.message.timeout.secs": 30, "topology.max.spout.pending": 2000}
    with pytest.raises(ConfigError, match="count window of 3000 tuples cannot fill"):
        check_submit(definition, conf)
    check_submit(definition, {**conf, "topology.max.spout.pending": 3000})
    check_submit(definition, {**conf, "topology.max.spout.pending": None})
    check_submit(definition, {**conf, "topology.state.provider": "lmdb"})
