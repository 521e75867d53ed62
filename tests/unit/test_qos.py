"""Latency constraints without a cluster: the tracer's traces (worker.qos), the controller's
rules (nstorm.qospolicy), buffer sizes in the plan and the batching policy."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from nstorm import latency
from nstorm.constraints import LatencyConstraint
from nstorm.plan import Plan, PlanError, Slot
from nstorm.qospolicy import FLOOR_MS, ConstraintState, PathWindow, decide, path_window
from worker import wire
from worker.batching import BatchPolicy
from worker.qos import QosTracer, trace_from_header
from worker.runs import Buffer

PATH = ("sentences", "split", "count")
WORDCOUNT = LatencyConstraint(PATH, 10.0)


def _outbox(tasks: dict[str, list[int]]) -> Any:
    buffers = {t: Buffer(t, 0, 100, 0.0, [0, 0]) for ts in tasks.values() for t in ts}
    return SimpleNamespace(routing=SimpleNamespace(component_tasks=tasks), buffers=buffers)


def test_a_trace_goes_with_the_first_buffer_of_the_next_component_that_grew() -> None:
    outbox = _outbox({"split": [1, 2, 3]})
    tracer = QosTracer("sentences", [WORDCOUNT], outbox, 0.005)
    assert tracer.starts == (0,) and tracer.next_of == {0: "split"}
    outbox.buffers[1].append(("old",))  # held before the sample: not the sampled tuple's
    tracer.start()
    outbox.buffers[2].append(("new",))
    tracer.resolve()
    assert outbox.buffers[1].trace is None and outbox.buffers[3].trace is None  # nothing of it came
    trace = outbox.buffers[2].trace
    (cid, origin), = trace.origins.items()
    assert cid == 0 and 0 <= trace.buffered - origin < 1_000_000
    assert not tracer.pending


def _send(buf: Buffer) -> Any:
    """What ``Outbox.flush_buffer`` and ``Courier.traced_batch`` do: the batch leaves with the
    buffer's trace, unless another batch took that trace already."""
    trace, buf.trace = buf.trace, None
    buf.clear()
    buf.sent += 1
    if trace is None or trace.sent:
        return None
    trace.sent = True
    return trace


def test_a_trace_leaves_with_a_batch_sent_within_the_unit_of_work() -> None:
    """A low rate sends each tuple at once: the trace waits on the empty buffers before the work,
    goes with the batch that leaves, and is taken off the buffers that got nothing."""
    outbox = _outbox({"split": [1, 2, 3]})
    tracer = QosTracer("sentences", [WORDCOUNT], outbox, 0.005)
    outbox.buffers[3].append(("old",))
    tracer.start()
    buf = outbox.buffers[1]
    buf.append(("x",))
    trace = _send(buf)
    assert list(trace.origins) == [0] and 0 <= trace.buffered - trace.origins[0] < 1_000_000
    tracer.resolve()
    assert all(b.trace is None for b in outbox.buffers.values())  # it left once, and only once
    assert not tracer.pending


def test_only_the_first_batch_of_a_unit_takes_its_trace() -> None:
    """At a low rate every emit leaves at once: the unit's first batch carries the sample, the
    others go untraced (no sample counted twice)."""
    outbox = _outbox({"split": [1, 2, 3]})
    tracer = QosTracer("sentences", [WORDCOUNT], outbox, 0.005)
    tracer.start()
    sent = []
    for t in (2, 1, 3):
        outbox.buffers[t].append(("x",))
        sent.append(_send(outbox.buffers[t]))
    tracer.resolve()
    assert sent[0] is not None and sent[1:] == [None, None]
    assert all(b.trace is None for b in outbox.buffers.values())


def test_a_later_sample_on_a_buffer_keeps_the_older_origin() -> None:
    """A buffer that is never empty when a sample starts: two samples fall back to it, and the
    trace keeps the first origin (its oldest tuples), never the later one."""
    outbox = _outbox({"split": [1]})
    tracer = QosTracer("sentences", [WORDCOUNT], outbox, 0.005)
    buf = outbox.buffers[1]
    buf.append(("old",))
    tracer.arm(((0, 1_000),))
    buf.append(("a",))
    tracer.resolve()
    tracer.arm(((0, 6_000),))
    buf.append(("b",))
    tracer.resolve()
    trace = _send(buf)
    assert trace.origins == {0: 1_000} and trace.buffered >= 1_000


def test_a_buffer_that_held_tuples_sends_the_trace_on_behind_them() -> None:
    """The buffer held tuples when the sample started; it reached its limit in the unit: the batch
    that left carries the trace, one tuple ahead of the sampled one, and nothing after it does."""
    outbox = _outbox({"split": [1, 2]})
    tracer = QosTracer("sentences", [WORDCOUNT], outbox, 0.005)
    buf = outbox.buffers[1]
    buf.append(("old",))
    tracer.start()
    buf.append(("sampled",))
    n = len(buf)
    trace = _send(buf)
    assert trace is not None and trace.leaving(2_000, n)[3:] == (1, 2)
    buf.append(("later",))
    tracer.resolve()
    assert buf.trace is None and outbox.buffers[2].trace is None


def test_an_older_trace_stays_where_it_waits() -> None:
    """A buffer with an older sample's trace: a new sample neither replaces it nor takes it off."""
    outbox = _outbox({"split": [1]})
    tracer = QosTracer("sentences", [WORDCOUNT], outbox, 0.005)
    buf = outbox.buffers[1]
    tracer.arm(((0, 1_000),))
    buf.append(("a",))
    tracer.resolve()
    older = buf.trace
    tracer.arm(((0, 6_000),))
    tracer.resolve()  # nothing of this unit came
    assert buf.trace is older and older.origins == {0: 1_000}


def test_a_bolt_that_starts_a_path_and_passes_another_on_sends_both_in_one_trace() -> None:
    """``split`` starts ``split > count`` and is in the middle of ``sentences > split > count``:
    a traced batch from the spout arrives as a sample is due; the batch sent to count carries
    both paths, each with its own origin."""
    constraints = [WORDCOUNT, LatencyConstraint(("split", "count"), 10.0)]
    outbox = _outbox({"count": [4, 5]})
    tracer = QosTracer("split", constraints, outbox, 0.005)
    assert tracer.starts == (1,) and tracer.next_of == {0: "count", 1: "count"}
    tracer.start()  # the loop's sample, before the batch
    tracer.arm(((0, 123),))  # take_traced: the spout's trace, origin 123
    buf = outbox.buffers[5]
    buf.append(("w",))
    trace = _send(buf)
    assert trace.origins[0] == 123 and trace.origins[1] > 123
    outbox.buffers[4].append(("v",))
    assert _send(outbox.buffers[4]) is None  # the first batch took it for both paths
    tracer.resolve()
    tracer.resolve()
    assert outbox.buffers[4].trace is None and buf.trace is None
    count = QosTracer("count", constraints, _outbox({}), 0.005)
    count.record_done(tuple(trace.origins.items()), trace.origins[1] + 10, trace.origins[1] + 20)
    assert set(count.hists) == {"exec/count", "e2e/sentences>split>count", "e2e/split>count"}
    assert count.samples == 2


def test_the_last_component_counts_end_to_end_and_its_parts() -> None:
    tracer = QosTracer("count", [WORDCOUNT], _outbox({}), 0.005)
    assert tracer.ends == {0: "sentences>split>count"} and not tracer.starts
    tracer.record_channel("split", 1_000, 3_000, 4_000)
    tracer.record_done(((0, 0),), 4_000, 9_000)
    hists = tracer.hists
    assert latency.percentile(hists["buffer/split>count"], 0.5) == pytest.approx(0.002, rel=0.1)
    assert latency.percentile(hists["queue/split>count"], 0.5) == pytest.approx(0.001, rel=0.1)
    assert latency.percentile(hists["exec/count"], 0.5) == pytest.approx(0.005, rel=0.1)
    assert latency.percentile(hists["e2e/sentences>split>count"], 0.5) == pytest.approx(0.009, rel=0.1)


def test_the_last_component_counts_end_to_end_to_when_the_traced_run_was_processed() -> None:
    tracer = QosTracer("count", [WORDCOUNT], _outbox({}), 0.005)
    tracer.record_done(((0, 0),), 4_000, 9_000, 5_000)
    assert latency.percentile(tracer.hists["e2e/sentences>split>count"], 0.5) == pytest.approx(0.005, rel=0.1)
    assert latency.percentile(tracer.hists["exec/count"], 0.5) == pytest.approx(0.005, rel=0.1)  # the batch's


def test_a_trace_comes_behind_what_its_buffer_held() -> None:
    outbox = _outbox({"split": [1]})
    tracer = QosTracer("sentences", [WORDCOUNT], outbox, 0.005)
    buf = outbox.buffers[1]
    for w in "abc":
        buf.append((w,))
    tracer.arm(((0, 1_000),))
    for w in "defg":
        buf.append((w,))
    tracer.resolve()
    assert buf.trace.leaving(2_000, len(buf)) == (buf.trace.buffered, 2_000, ((0, 1_000),), 3, 7)
    assert buf.trace.leaving(2_000, 2)[3:] == (1, 2)  # never out of its batch


@pytest.mark.parametrize(("runs", "index", "bounds"), [
    (None, 3, (3, 4)), (None, 9, (4, 5)), ([2, [1, 1], 3, [2, 2]], 0, (0, 2)), ([2, [1, 1], 3, [2, 2]], 2, (2, 5)),
    ([2, [1, 1], 3, [2, 2]], 4, (2, 5)),
])
def test_a_batch_is_cut_around_the_run_of_a_tuple(runs: Any, index: int, bounds: tuple[int, int]) -> None:
    assert wire.run_around(runs, index, 5) == bounds


def test_a_slice_of_a_batch_keeps_its_runs_and_streams() -> None:
    values = [(w,) for w in "abcde"]
    runs = [2, [1, 1], 3, [2, 2]]
    assert wire.slice_batch(values, runs, {1: "x", 3: "y"}, 2, 5) == (values[2:], [3, [2, 2]], {1: "y"})
    assert wire.slice_batch(values, runs, {1: "x"}, 2, 5) == (values[2:], [3, [2, 2]], None)
    assert wire.slice_batch(values, None, None, 0, 2) == (values[:2], None, None)


def test_a_traced_batch_is_processed_around_its_traced_run() -> None:
    """The split takes a batch of three sentences whose second is traced: the words of the first
    are already in the buffer to count when the trace is armed, so the trace comes behind them,
    and every sentence is split once, in order."""
    from nstorm.topology import TopologyBuilder
    from topologies.wordcount import Count, Sentences, Split
    from worker.bolt import BoltExecutor
    from worker.qos import Traced

    from fakes import FakeHost, plan_of

    builder = TopologyBuilder("t")
    builder.set_spout("sentences", Sentences)
    builder.set_bolt("split", Split).shuffle_grouping("sentences")
    builder.set_bolt("count", Count).fields_grouping("split", ["word"])
    builder.latency_constraint(list(PATH), p99_ms=10)
    definition = builder.build(workers=1).definition
    plan = plan_of({e: "n1:1" for e in ["sentences:0", "split:0", "count:0", "__acker:0"]})
    host = FakeHost(plan, acking=False, **{"topology.batch.adaptive": False, "topology.batch.size": 100})
    split = BoltExecutor(host, "split:0", 1, Split, definition)  # type: ignore[arg-type]
    split.setup()
    split.outbox._buffer(2)
    batch = ([("a b",), ("c d e",), ("f",)], None, None)
    split.take_traced(0, Traced(batch, (1, 2, ((0, 1),), 1, 3)))
    buf = split.outbox.buffers[2]
    assert list(buf) == [("a",), ("b",), ("c",), ("d",), ("e",), ("f",)]
    assert buf.trace is not None and buf.trace.ahead == 2 and buf.trace.origins == {0: 1}
    assert split.executed == 3
def test_an_executor_off_every_path_has_no_tracer() -> None:
    assert QosTracer.for_executor("other", [WORDCOUNT], _outbox({}), {}) is None
    assert QosTracer.for_executor("split", [WORDCOUNT], _outbox({}), {}) is not None


def test_sampling_waits_its_interval() -> None:
    tracer = QosTracer("sentences", [WORDCOUNT], _outbox({}), 0.005)
    assert tracer.sample_due(1.0)
    assert not tracer.sample_due(1.004)
    assert tracer.sample_due(1.005)
    assert not QosTracer("split", [WORDCOUNT], _outbox({}), 0.005).sample_due(9.0)  # starts nothing


@pytest.mark.parametrize("value", [None, 3, [1, 2, 3, 0, 1], [1, 2, [], 0, 1], [1, "2", [[0, 1]], 0, 1],
                                   [1, 2, [["x", 1]], 0, 1], [1, 2, [[0]], 0, 1], [1, 2, [0, 1], 0, 1],
                                   [1, 2, [[0, 1]]], [1, 2, [[0, 1]], 5, 5], [1, 2, [[0, 1]], -1, 5],
                                   [1, 2, [[0, 1]], 0, 0], [1, 2, [[0, 1]], 0.5, 5]])
def test_a_header_trace_that_is_not_one_is_ignored(value: Any) -> None:
    assert trace_from_header(value) is None


def test_a_header_carries_a_trace_as_its_seventh_element() -> None:
    header = wire.unpack(wire.data_header(5, 6, 0, 10, 0, (2, 3, ((0, 1), (1, 2)), 4, 10)))
    assert len(header) == 7 and trace_from_header(header[6]) == (2, 3, ((0, 1), (1, 2)), 4, 10)
    assert len(wire.unpack(wire.data_header(5, 6, 0, 10, 0))) == 6  # untraced batches are unchanged


def _window(e2e_ms: list[float], buffer_ms: dict[str, float]) -> dict[str, dict[int, int]]:
    w: dict[str, dict[int, int]] = {"e2e/sentences>split>count": {}}
    for ms in e2e_ms:
        latency.add(w["e2e/sentences>split>count"], ms / 1000)
    for ch, ms in buffer_ms.items():
        w[f"buffer/{ch}"] = {}
        latency.add(w[f"buffer/{ch}"], ms / 1000)
    return w


def test_a_chained_channel_shrinks_first_while_it_holds_a_fair_share_of_the_wait() -> None:
    """Its smaller batches cost calls in one thread, not messages: it goes first unless its
    buffers hold under a quarter of the largest wait."""
    win = path_window(PATH, "sentences>split>count", _window([20.0] * 100, {"sentences>split": 1.0, "split>count": 3.0}))
    step = decide(PATH, 10.0, win, ConstraintState(), {}, 5.0, moves=False, chained=["sentences>split"])
    assert step is not None and step.tuning == {"sentences>split": {"latency_ms": 2.5}}
    win = path_window(PATH, "sentences>split>count", _window([20.0] * 100, {"sentences>split": 0.5, "split>count": 3.0}))
    step = decide(PATH, 10.0, win, ConstraintState(), {}, 5.0, moves=False, chained=["sentences>split"])
    assert step is not None and step.tuning == {"split>count": {"latency_ms": 2.5}}
    floor = {"sentences>split": {"latency_ms": FLOOR_MS}}  # as small as it goes: the other one
    win = path_window(PATH, "sentences>split>count", _window([20.0] * 100, {"sentences>split": 1.0, "split>count": 3.0}))
    step = decide(PATH, 10.0, win, ConstraintState(), floor, 5.0, moves=False, chained=["sentences>split"])
    assert step is not None and step.tuning == {**floor, "split>count": {"latency_ms": 2.5}}


def test_a_violated_bound_shrinks_the_channel_that_waits_longest() -> None:
    win = path_window(PATH, "sentences>split>count", _window([20.0] * 100, {"sentences>split": 2.0, "split>count": 8.0}))
    state = ConstraintState()
    step = decide(PATH, 10.0, win, state, {}, 5.0, moves=False)
    assert step is not None and step.kind == "buffer"
    assert step.tuning == {"split>count": {"latency_ms": 2.5}}
    assert state.windows == 1 and state.windows_met == 0
    assert decide(PATH, 10.0, win, state, step.tuning, 5.0, moves=False) is None  # the next window mixes both
    better = path_window(PATH, "sentences>split>count", _window([15.0] * 100, {"sentences>split": 2.0, "split>count": 6.0}))
    step = decide(PATH, 10.0, better, state, step.tuning, 5.0, moves=False)  # it helped, not enough: again
    assert step is not None and step.tuning == {"split>count": {"latency_ms": 1.25}}


def test_a_shrink_that_did_not_help_is_undone_and_its_channel_left_alone() -> None:
    """p99 no lower after halving a buffer: the smaller batches cost CPU for nothing, so the step
    goes back, and the bound is then reported as not met (warnings), never shrunk in a loop."""
    win = path_window(PATH, "sentences>split>count", _window([20.0] * 100, {"sentences>split": 2.0, "split>count": 8.0}))
    state = ConstraintState()
    step = decide(PATH, 10.0, win, state, {}, 5.0, moves=False)
    assert step is not None and step.tuning == {"split>count": {"latency_ms": 2.5}}
    assert decide(PATH, 10.0, win, state, step.tuning, 5.0, moves=False) is None  # the window it took effect in
    undo = decide(PATH, 10.0, win, state, step.tuning, 5.0, moves=False)
    assert undo is not None and undo.kind == "buffer" and undo.tuning == {} and "no better" in undo.detail
    assert "split>count" in state.held
    kinds = []
    tuning: dict[str, Any] = {}
    for _ in range(8):
        later = decide(PATH, 10.0, win, state, tuning, 5.0, moves=False)
        if later is not None:
            kinds.append((later.kind, later.channel))
            tuning = later.tuning if later.tuning is not None else tuning
    assert ("buffer", "split>count") not in kinds, kinds  # left alone while held


def test_with_cpu_to_spare_a_shrink_that_did_not_help_stays_and_the_next_channel_shrinks() -> None:
    """Two channels that hold about the same wait: halving one moves p99 by less than a bucket. With
    no worker of the path busy, that step stays and the next window halves the other one; one that
    made p99 worse still goes back."""
    waits = {"sentences>split": 2.0, "split>count": 2.2}
    win = path_window(PATH, "sentences>split>count", _window([20.0] * 100, waits))
    state = ConstraintState()
    step = decide(PATH, 10.0, win, state, {}, 5.0, moves=False, busy=False)
    assert step is not None and step.tuning == {"split>count": {"latency_ms": 2.5}}
    assert decide(PATH, 10.0, win, state, step.tuning, 5.0, moves=False, busy=False) is None
    after = path_window(PATH, "sentences>split>count", _window([20.0] * 100, {**waits, "split>count": 1.1}))
    nxt = decide(PATH, 10.0, after, state, step.tuning, 5.0, moves=False, busy=False)
    assert nxt is not None and nxt.tuning == {"split>count": {"latency_ms": 2.5}, "sentences>split": {"latency_ms": 2.5}}
    assert decide(PATH, 10.0, after, state, nxt.tuning, 5.0, moves=False, busy=False) is None
    worse = path_window(PATH, "sentences>split>count", _window([30.0] * 100, {"sentences>split": 1.0, "split>count": 1.1}))
    assert decide(PATH, 10.0, worse, state, nxt.tuning, 5.0, moves=False, busy=False) is None  # once may be noise
    undo = decide(PATH, 10.0, worse, state, nxt.tuning, 5.0, moves=False, busy=False)
    assert undo is not None and undo.tuning == {"split>count": {"latency_ms": 2.5}} and "worse" in undo.detail


def test_with_cpu_to_spare_one_bad_window_after_a_step_does_not_undo_it() -> None:
    """A 2-s window's p99 jumps 2-3x now and then whatever the buffers are: with CPU to spare a step
    is undone only when two judged windows in a row say so; where CPU may be short, at once."""
    waits = {"sentences>split": 2.0, "split>count": 2.2}
    win = path_window(PATH, "sentences>split>count", _window([20.0] * 100, waits))
    spike = path_window(PATH, "sentences>split>count", _window([40.0] * 100, waits))
    state = ConstraintState()
    step = decide(PATH, 10.0, win, state, {}, 5.0, moves=False, busy=False)
    assert step is not None and step.kind == "buffer"
    assert decide(PATH, 10.0, win, state, step.tuning, 5.0, moves=False, busy=False) is None  # mixes both sizes
    assert decide(PATH, 10.0, spike, state, step.tuning, 5.0, moves=False, busy=False) is None  # doubted
    nxt = decide(PATH, 10.0, win, state, step.tuning, 5.0, moves=False, busy=False)  # not confirmed: the step stays
    assert nxt is not None and "undone" not in nxt.detail and nxt.tuning is not None
    assert nxt.tuning["split>count"]["latency_ms"] <= 2.5  # kept (and halved again: it still waits longest)
    busy = ConstraintState()
    step = decide(PATH, 10.0, win, busy, {}, 5.0, moves=False, busy=True)
    assert step is not None
    decide(PATH, 10.0, win, busy, step.tuning, 5.0, moves=False, busy=True)
    undo = decide(PATH, 10.0, spike, busy, step.tuning, 5.0, moves=False, busy=True)
    assert undo is not None and "undone" in undo.detail and undo.tuning == {}


def test_with_cpu_to_spare_queue_waits_do_not_stop_a_shrink_nor_grow_a_buffer_back() -> None:
    tuning = {"split>count": {"latency_ms": 2.5}}
    win = PathWindow(20.0, 100, {"sentences>split": 0.5, "split>count": 0.6}, {"sentences>split": 0.6, "split>count": 0.7},
                     {"split": 0.1, "count": 0.1})
    busy = decide(PATH, 10.0, win, ConstraintState(), tuning, 5.0, moves=False)
    assert busy is not None and busy.kind == "buffer" and "short of CPU" in busy.detail  # grown back
    spare = decide(PATH, 10.0, win, ConstraintState(), tuning, 5.0, moves=False, busy=False)
    assert spare is not None and spare.tuning == {"split>count": {"latency_ms": 1.25}}


def test_cpu_counts_as_spare_only_for_a_path_in_one_worker_under_the_mark() -> None:
    from nimbus.latency import _busy
    from nstorm.qospolicy import BUSY_CORES

    a, b = Slot("n1", "127.0.0.1", 6700, 7700), Slot("n2", "127.0.0.1", 6701, 7701)
    one = {"sentences:0": a.worker_id, "split:0": a.worker_id, "count:0": a.worker_id, "__acker:0": b.worker_id}
    plan = Plan.first("t", sorted(one), one, [a, b], code_sha256="x")
    light = {a.worker_id: SimpleNamespace(cpu=BUSY_CORES - 0.1), b.worker_id: SimpleNamespace(cpu=0.9)}
    assert not _busy(plan, PATH, light)  # the acker's worker is not the path's
    assert _busy(plan, PATH, {**light, a.worker_id: SimpleNamespace(cpu=BUSY_CORES)})
    two = plan.replace(executors={**one, "count:0": b.worker_id})
    assert _busy(two, PATH, {a.worker_id: SimpleNamespace(cpu=0.1), b.worker_id: SimpleNamespace(cpu=0.1)})
    assert _busy(None, PATH, light)


def test_a_grow_step_is_not_undone_for_not_lowering_p99() -> None:
    """Growing a buffer back (queues dominate: the receivers are short of CPU) saves CPU; it is
    undone only if p99 got worse."""
    tuning = {"sentences>split": {"latency_ms": 1.0}, "split>count": {"latency_ms": 2.0}}
    win = PathWindow(20.0, 100, {"sentences>split": 0.3, "split>count": 0.5}, {"sentences>split": 6.0, "split>count": 3.0},
                     {"split": 0.1, "count": 0.1})
    state = ConstraintState()
    step = decide(PATH, 10.0, win, state, tuning, 5.0, moves=False)
    assert step is not None and "short of CPU" in step.detail and step.tuning is not None
    assert decide(PATH, 10.0, win, state, step.tuning, 5.0, moves=False) is None  # skipped
    after = decide(PATH, 10.0, win, state, step.tuning, 5.0, moves=False)
    assert after is None or "undone" not in after.detail


def test_with_every_buffer_at_its_floor_it_warns_and_backs_off() -> None:
    tuning = {"sentences>split": {"latency_ms": FLOOR_MS}, "split>count": {"latency_ms": FLOOR_MS}}
    win = path_window(PATH, "sentences>split>count", _window([20.0] * 100, {"split>count": 0.4}))
    state = ConstraintState()
    steps = [decide(PATH, 10.0, win, state, tuning, 5.0, moves=False) for _ in range(12)]
    warnings = [s for s in steps if s is not None]
    assert all(s.kind == "warn" for s in warnings)
    assert "split>count" in warnings[0].detail and "dominates" in warnings[0].detail
    assert len(warnings) == 4  # after 0, then 1, 2 and 4 windows of backing off
    assert state.warning is not None


def test_queues_that_wait_longer_than_buffers_grow_a_shrunk_buffer_back() -> None:
    tuning = {"sentences>split": {"latency_ms": 1.0}, "split>count": {"latency_ms": 2.0}}
    win = PathWindow(20.0, 100, {"sentences>split": 0.3, "split>count": 0.5}, {"sentences>split": 6.0, "split>count": 3.0},
                     {"split": 0.1, "count": 0.1})
    step = decide(PATH, 10.0, win, ConstraintState(), tuning, 5.0, moves=False)
    assert step is not None and step.kind == "buffer" and "short of CPU" in step.detail
    assert step.tuning == {"sentences>split": {"latency_ms": 2.0}, "split>count": {"latency_ms": 2.0}}


def test_with_moves_allowed_the_longest_queue_is_kept_in_one_worker() -> None:
    tuning: dict[str, Any] = {}
    win = PathWindow(20.0, 100, {"sentences>split": 0.1, "split>count": 0.1}, {"sentences>split": 1.0, "split>count": 9.0},
                     {"split": 0.1, "count": 0.1})
    step = decide(PATH, 10.0, win, ConstraintState(), tuning, 5.0, moves=True)
    assert step is not None and step.kind == "move" and step.channel == "split>count"


def test_slack_grows_the_tightest_buffer_back_to_the_configured_one() -> None:
    tuning = {"split>count": {"latency_ms": 4.0}}
    win = path_window(PATH, "sentences>split>count", _window([2.0] * 100, {}))
    state = ConstraintState()
    assert decide(PATH, 10.0, win, state, tuning, 5.0, moves=False) is None  # one window of slack
    step = decide(PATH, 10.0, win, state, tuning, 5.0, moves=False)
    assert step is not None and step.kind == "buffer" and step.tuning == {}  # 4 * 1.5 > 5: back to the configured
    assert state.windows_met == 2


def test_a_window_without_samples_is_not_judged() -> None:
    state = ConstraintState()
    assert decide(PATH, 10.0, PathWindow(None, 0), state, {}, 5.0, moves=False) is None
    assert state.windows == 0


def _plan(**extra: Any) -> Plan:
    slot = Slot("n1", "127.0.0.1", 6700, 7700)
    return Plan.first("t", ["a:0", "b:0"], {"a:0": slot.worker_id, "b:0": slot.worker_id}, [slot], code_sha256="x",
                      **extra)


def test_buffer_sizes_travel_in_the_plan() -> None:
    plan = _plan(tuning={"a>b": {"latency_ms": 2.5, "cap": 256}})
    again = Plan.from_json("t", plan.to_json())
    assert again.tuning == {"a>b": {"latency_ms": 2.5, "cap": 256}}
    assert again.next().tuning == again.tuning  # kept from version to version
    assert "tuning" not in _plan().to_json()


@pytest.mark.parametrize("tuning", [{"a>b": {"latency_ms": 0}}, {"a>b": {"other": 1}}, {"a>b": 3}, [1]])
def test_a_damaged_tuning_is_refused(tuning: Any) -> None:
    data = _plan().to_json()
    data["tuning"] = tuning
    with pytest.raises(PlanError, match="tuning"):
        Plan.from_json("t", data)


def test_the_batching_policy_takes_a_tuned_bound_and_goes_back() -> None:
    policy = BatchPolicy(cap=4096, max_latency=0.005)
    policy.tune(0.001, 128)
    assert (policy.max_latency, policy.fill, policy.cap) == (0.001, 0.0005, 128)
    policy.tune(None, None)
    assert (policy.max_latency, policy.cap) == (0.005, 4096)
    per_tuple = BatchPolicy(cap=1, max_latency=0.005)
    per_tuple.tune(0.001, 8)
    assert per_tuple.cap == 1


def test_a_latency_move_brings_a_downstream_executor_to_its_upstream_worker() -> None:
    from nimbus.latency import colocating_move

    a, b = Slot("n1", "127.0.0.1", 6700, 7700), Slot("n2", "127.0.0.1", 6701, 7701)
    plan = Plan.first("t", ["split:0", "split:1", "count:0", "count:1"],
                      {"split:0": a.worker_id, "split:1": a.worker_id, "count:0": a.worker_id, "count:1": b.worker_id},
                      [a, b], code_sha256="x")
    assert colocating_move(plan, "split>count") == ("count:1", a.worker_id)
    together = plan.replace(executors={**plan.executors, "count:1": a.worker_id})
    assert colocating_move(together, "split>count") is None


def _definition(grouping: str = "local_or_shuffle", chainable: bool = True, parallelism: int = 2) -> dict[str, Any]:
    from nstorm import Bolt, Spout, TopologyBuilder

    class Src(Spout):
        outputs = ("x",)

    class Op(Bolt):
        outputs = ("x",)

    Op.chainable = chainable
    builder = TopologyBuilder("t")
    builder.set_spout("src", Src, parallelism=parallelism)
    getattr(builder.set_bolt("op", Op, parallelism=parallelism), f"{grouping}_grouping")("src", *(
        [["x"]] if grouping == "fields" else []))
    return builder.build(workers=2).definition


def _two_workers(placement: dict[str, str]) -> Plan:
    slots = [Slot("n1", "127.0.0.1", 6700, 7700), Slot("n2", "127.0.0.1", 6701, 7701)]
    return Plan.first("t", sorted(placement), placement, slots, code_sha256="x")


def test_only_a_pointwise_channel_is_chained() -> None:
    from nstorm.chaining import kept_chains, pointwise_pairs

    spread = {"src:0": "n1:6700", "src:1": "n2:6701", "op:0": "n1:6700", "op:1": "n2:6701"}
    plan = _two_workers(spread)
    assert pointwise_pairs(_definition(), plan, "src", "op") == {"op:0": "src:0", "op:1": "src:1"}
    assert pointwise_pairs(_definition("shuffle"), plan, "src", "op") == {}  # routing is never changed
    assert pointwise_pairs(_definition(chainable=False), plan, "src", "op") == {}
    crowded = _two_workers({**spread, "src:1": "n1:6700"})  # n1: two spouts feed op:0; n2's op gets nothing
    assert pointwise_pairs(_definition(), crowded, "src", "op") == {}
    lonely = _two_workers({**spread, "op:1": "n1:6700"})  # src:1 has no local op: it shuffles to both
    assert pointwise_pairs(_definition(), lonely, "src", "op") == {}
    chained = plan.replace(chains={"op:0": "src:0", "op:1": "src:1"})
    assert kept_chains(_definition(), chained) == chained.chains
    assert kept_chains(_definition(), lonely.replace(chains={"op:0": "src:0"})) == {}


@pytest.mark.parametrize("grouping", ["shuffle", "fields", "global", "all"])
def test_one_executor_at_each_end_in_one_worker_is_pointwise_whatever_the_grouping(grouping: str) -> None:
    """Every tuple goes to the one executor whatever the grouping says: nothing about routing
    changes. Two executors at either end, two workers, a rescale or an opt-out: no chain."""
    from nstorm.chaining import kept_chains, pointwise_pairs

    one = _definition(grouping, parallelism=1)
    together = _two_workers({"src:0": "n1:6700", "op:0": "n1:6700"})
    assert pointwise_pairs(one, together, "src", "op") == {"op:0": "src:0"}
    assert kept_chains(one, together.replace(chains={"op:0": "src:0"})) == {"op:0": "src:0"}
    assert pointwise_pairs(one, _two_workers({"src:0": "n1:6700", "op:0": "n2:6701"}), "src", "op") == {}
    assert pointwise_pairs(_definition(grouping, chainable=False, parallelism=1), together, "src", "op") == {}
    scaled = _two_workers({"src:0": "n1:6700", "op:0": "n1:6700", "op:1": "n1:6700"})
    assert pointwise_pairs(one, scaled, "src", "op") == {}
    assert kept_chains(one, scaled.replace(chains={"op:0": "src:0"})) == {}
    two = _two_workers({"src:0": "n1:6700", "src:1": "n1:6700", "op:0": "n1:6700"})
    assert pointwise_pairs(one, two, "src", "op") == {}


def test_topology_chaining_chains_every_pointwise_pair_of_the_even_schedulers_first_plan() -> None:
    from nimbus.scheduler import EvenScheduler
    from nstorm.chaining import every_pointwise_pair
    from nstorm.plan import interleave_slots

    slots = interleave_slots({"n1": {"host": "h", "slots": [[6700, 7700]]}, "n2": {"host": "h", "slots": [[6701, 7701]]}})
    plan = EvenScheduler().initial_plan("t", _definition(), {}, slots)
    assert plan is not None and every_pointwise_pair(_definition(), plan) == {"op:0": "src:0", "op:1": "src:1"}
    assert plan.executors["op:0"] == plan.executors["src:0"] != plan.executors["op:1"]
    assert every_pointwise_pair(_definition("shuffle"), plan) == {}


def test_a_violated_bound_chains_a_chainable_channel_before_touching_buffers() -> None:
    win = PathWindow(20.0, 100, {"sentences>split": 3.0, "split>count": 1.0}, {"sentences>split": 2.0, "split>count": 0.5},
                     {"split": 0.1, "count": 0.1})
    step = decide(PATH, 10.0, win, ConstraintState(), {}, 5.0, moves=False, chainable=["sentences>split"])
    assert step is not None and step.kind == "chain" and step.channel == "sentences>split"


def test_a_chain_whose_thread_saturates_a_core_is_undone_even_when_met() -> None:
    win = path_window(PATH, "sentences>split>count", _window([2.0] * 100, {}))
    step = decide(PATH, 10.0, win, ConstraintState(), {}, 5.0, moves=False, hot=["sentences>split"])
    assert step is not None and step.kind == "unchain" and step.channel == "sentences>split"


def test_the_controller_offers_only_channels_it_may_chain() -> None:
    from nimbus.latency import _chain_options

    plan = _two_workers({"src:0": "n1:6700", "src:1": "n2:6701", "op:0": "n1:6700", "op:1": "n2:6701"})
    assert _chain_options(_definition(), plan, ("src", "op"), {}) == (["src>op"], [], [])
    assert _chain_options(_definition(), plan, ("src", "op"), {"src:0": 0.7}) == ([], [], [])  # a busy host
    chained = plan.replace(chains={"op:0": "src:0", "op:1": "src:1"})
    assert _chain_options(_definition(), chained, ("src", "op"), {"src:1": 0.95}, {"src:0", "src:1"}) == (
        [], ["src>op"], ["src>op"])
    # Under the GIL a worker's threads share one core's Python, chained or not: never hot.
    assert _chain_options(_definition(), chained, ("src", "op"), {"src:1": 0.95}) == ([], [], ["src>op"])
    assert _chain_options(_definition(), chained, ("src", "op"), {"src:1": 0.5}) == ([], [], ["src>op"])


def test_a_chained_host_s_cpu_is_its_own_host_s_thread_s() -> None:
    """sentences -> split -> count in one thread: count's host (split) runs in the spout's thread,
    so the spout's CPU decides whether count may be chained and whether that chain saturates."""
    from nimbus.latency import _chain_options
    from nstorm import Bolt, Spout, TopologyBuilder

    class Src(Spout):
        outputs = ("x",)

    class Op(Bolt):
        outputs = ("x",)

    builder = TopologyBuilder("t")
    builder.set_spout("sentences", Src, parallelism=1)
    builder.set_bolt("split", Op, parallelism=1).shuffle_grouping("sentences")
    builder.set_bolt("count", Op, parallelism=1).fields_grouping("split", ["x"])
    definition = builder.build(workers=1).definition
    plan = _two_workers({"sentences:0": "n1:6700", "split:0": "n1:6700", "count:0": "n1:6700"})
    half = plan.replace(chains={"split:0": "sentences:0"})
    busy_spout = {"sentences:0": 0.7, "split:0": 0.0}  # split's own thread idles
    assert _chain_options(definition, half, PATH, busy_spout) == ([], [], ["sentences>split"])
    assert _chain_options(definition, half, PATH, {"sentences:0": 0.3}) == (["split>count"], [], ["sentences>split"])
    whole = plan.replace(chains={"split:0": "sentences:0", "count:0": "split:0"})
    assert _chain_options(definition, whole, PATH, {"sentences:0": 0.95}, set(plan.executors)) == (
        [], ["sentences>split", "split>count"], ["sentences>split", "split>count"])


@pytest.mark.parametrize(("value", "read"), [(True, True), (False, False), (None, None), ("no", None)])
def test_a_heartbeat_says_whether_its_worker_has_a_gil(value: Any, read: bool | None) -> None:
    from nimbus.latency import _parallel
    from nstorm.records import Heartbeat

    beat = Heartbeat.from_json({"worker_id": "n1:1", "gil": value, "executors": {"src:0": {}}})
    assert beat.gil is read and Heartbeat.from_json(beat.to_json()).gil is read
    assert _parallel({"n1:1": beat}) == ({"src:0"} if read is False else set())


def test_otd_and_the_controller_leave_each_other_s_moves_alone_for_a_cool_down() -> None:
    from nimbus.latency import colocating_move
    from nstorm.moves import recently_moved
    from nstorm.records import MigrationRecord, MoveMode

    records = [MigrationRecord("count:1", "n1:6700", "n2:6701", MoveMode.THREAD, by="otd", requested_at=100.0),
               MigrationRecord("count:2", "n1:6700", "n2:6701", MoveMode.THREAD, by="latency", requested_at=100.0)]
    assert recently_moved(records, "otd", 130.0) == {"count:1"}
    assert recently_moved(records, "latency", 130.0) == {"count:2"}
    assert recently_moved(records, "otd", 200.0) == set()
    a, b = Slot("n1", "127.0.0.1", 6700, 7700), Slot("n2", "127.0.0.1", 6701, 7701)
    plan = Plan.first("t", ["split:0", "count:1"], {"split:0": a.worker_id, "count:1": b.worker_id}, [a, b],
                      code_sha256="x")
    assert colocating_move(plan, "split>count", {"count:1"}) is None


def test_a_buffer_step_that_made_p99_worse_is_undone_and_its_channel_left_alone() -> None:
    before = path_window(PATH, "sentences>split>count", _window([20.0] * 100, {"sentences>split": 2.0, "split>count": 8.0}))
    state = ConstraintState()
    step = decide(PATH, 10.0, before, state, {}, 5.0, moves=False)
    assert step is not None and step.tuning == {"split>count": {"latency_ms": 2.5}}
    worse = path_window(PATH, "sentences>split>count", _window([40.0] * 100, {"sentences>split": 2.0, "split>count": 8.0}))
    assert decide(PATH, 10.0, worse, state, step.tuning, 5.0, moves=False) is None  # the window the step took effect in
    undo = decide(PATH, 10.0, worse, state, step.tuning, 5.0, moves=False)
    assert undo is not None and undo.kind == "buffer" and undo.tuning == {} and "undone" in undo.detail
    decide(PATH, 10.0, worse, state, {}, 5.0, moves=False)  # skipped after the undo
    again = decide(PATH, 10.0, worse, state, {}, 5.0, moves=False)
    assert again is not None and again.channel == "sentences>split"  # split>count is left alone


def test_shrinking_and_growing_one_channel_in_turn_stops() -> None:
    state = ConstraintState()
    tuning: dict[str, Any] = {}
    buffers = PathWindow(20.0, 100, {"sentences>split": 0.1, "split>count": 3.0}, {"sentences>split": 0.1, "split>count": 1.0},
                         {"split": 0.1, "count": 0.1})
    queues = PathWindow(20.0, 100, {"sentences>split": 0.1, "split>count": 1.0}, {"sentences>split": 0.1, "split>count": 3.0},
                        {"split": 0.1, "count": 0.1})
    kinds = []
    for i in range(40):
        step = decide(PATH, 10.0, buffers if i % 4 < 2 else queues, state, tuning, 5.0, moves=False)
        if step is not None:
            kinds.append((step.kind, step.channel))
            tuning = step.tuning if step.tuning is not None else tuning
    flips = [k for k in kinds if k == ("buffer", "split>count")]
    assert len(flips) <= 4, kinds  # shrink, grow back, then left alone


def test_an_undo_puts_back_only_its_own_channel() -> None:
    state = ConstraintState()
    before = path_window(PATH, "sentences>split>count", _window([20.0] * 100, {"sentences>split": 2.0, "split>count": 8.0}))
    step = decide(PATH, 10.0, before, state, {}, 5.0, moves=False)
    assert step is not None and step.tuning is not None
    decide(PATH, 10.0, before, state, step.tuning, 5.0, moves=False)  # skipped
    others = {**step.tuning, "other>x": {"latency_ms": 1.0}}  # another constraint's step meanwhile
    worse = path_window(PATH, "sentences>split>count", _window([40.0] * 100, {"sentences>split": 2.0, "split>count": 8.0}))
    undo = decide(PATH, 10.0, worse, state, others, 5.0, moves=False)
    assert undo is not None and undo.tuning == {"other>x": {"latency_ms": 1.0}}


def test_a_saturated_chain_is_undone_without_samples_and_not_chained_again_at_once() -> None:
    state = ConstraintState()
    step = decide(PATH, 10.0, PathWindow(None, 0), state, {}, 5.0, moves=False, hot=["sentences>split"])
    assert step is not None and step.kind == "unchain"
    broken = path_window(PATH, "sentences>split>count", _window([20.0] * 100, {"split>count": 8.0}))
    kinds = [getattr(decide(PATH, 10.0, broken, state, {}, 5.0, moves=False, chainable=["sentences>split"]), "kind", None)
             for _ in range(6)]
    assert "chain" not in kinds, kinds


def test_a_batch_that_fails_leaves_no_trace_behind() -> None:
    """A traced batch whose processing raises: the trace armed on the next buffers is taken back,
    so that no later batch carries its (by then absurd) origin."""
    from nstorm.topology import TopologyBuilder
    from topologies.wordcount import Count, Sentences, Split
    from worker.bolt import BoltExecutor
    from worker.qos import Traced

    from fakes import FakeHost, plan_of

    builder = TopologyBuilder("t")
    builder.set_spout("sentences", Sentences)
    builder.set_bolt("split", Split).shuffle_grouping("sentences")
    builder.set_bolt("count", Count, parallelism=2).fields_grouping("split", ["word"])
    builder.latency_constraint(list(PATH), p99_ms=10)
    definition = builder.build(workers=1).definition
    plan = plan_of({e: "n1:1" for e in ["sentences:0", "split:0", "count:0", "count:1", "__acker:0"]})
    host = FakeHost(plan)
    split = BoltExecutor(host, "split:0", 1, Split, definition)  # type: ignore[arg-type]
    split.setup()
    assert split.qos is not None
    split.outbox._buffer(2), split.outbox._buffer(3)  # the count buffers exist (empty): the trace waits on them
    with pytest.raises(TypeError):
        split.take_traced(0, Traced((5, None, None), (1, 2, ((0, 1),), 0, 1)))  # values that are not a sequence
    assert not split.qos.pending
    assert all(b.trace is None for b in split.outbox.buffers.values())


def test_a_data_header_that_is_a_map_is_dropped_not_raised() -> None:
    """A msgpack map with the keys 0-5 and 7 (no 6) used to reach ``header[6]`` and kill the
    receiving thread; it is a malformed frame like any other."""
    from worker.transport import Transport

    transport = object.__new__(Transport)
    transport.host, transport.dropped, transport.stale = None, 0, 0
    header = wire.pack({0: wire.DATA, 1: 1, 2: 0, 3: 0, 4: 1, 5: 0, 7: 0})
    transport._on_data([header, wire.pack([[("x",)], None, None])])
    assert transport.dropped == 1
