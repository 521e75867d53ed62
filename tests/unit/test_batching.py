"""Adaptive batching: the policy and the flush deadline with a fake clock, and what an outbox sends.

The cluster side (order between every pair of executors, a lone tuple, exact acking at every
rate) is in ``tests/test_batching_order.py``. Nothing here asserts wall-clock time.
"""

from __future__ import annotations

from typing import Any

import pytest

from nstorm.config import merge_conf
from worker import wire
from worker.batching import BatchPolicy, FlushDeadline
from worker.outbox import Outbox
from worker.routing import RoutingTable
from worker.runs import SpoutGroup

from fakes import FakeHost, plan_of

# -- the policy, with a fake clock ----------------------------------------------------------------


class _Dst:
    def __init__(self, policy: BatchPolicy) -> None:
        self.limit = policy.initial_limit()
        self.rate = 0.0
        self.last = 0.0


def _feed(policy: BatchPolicy, dst: _Dst, rate: float, secs: float, start: float = 0.0) -> list[int]:
    """Emit at ``rate`` tuples/s for ``secs`` (fake time), sending whenever the limit is reached."""
    sizes, held, t, step = [], 0, start, 1.0 / rate
    while t < start + secs:
        t += step
        held += 1
        if held >= dst.limit:
            policy.observe(dst, held, t)
            sizes.append(held)
            held = 0
    return sizes


def test_limits_follow_the_rate_up_to_the_cap() -> None:
    policy = BatchPolicy(cap=256, max_latency=0.005)
    dst = _Dst(policy)
    assert dst.limit == 1  # a new destination sends its first tuple at once
    _feed(policy, dst, 1000.0, 2.0)
    assert 2 <= dst.limit <= 4  # 1,000/s * 2.5 ms
    _feed(policy, dst, 40_000.0, 2.0, start=2.0)
    assert 90 <= dst.limit <= 110  # 40,000/s * 2.5 ms
    _feed(policy, dst, 1_000_000.0, 1.0, start=4.0)
    assert dst.limit == 256  # capped
    _feed(policy, dst, 200.0, 3.0, start=5.0)
    assert dst.limit == 1  # a slow destination sends every tuple at once again


def test_per_tuple_and_fixed_modes() -> None:
    per_tuple = BatchPolicy.from_conf(merge_conf({"topology.batch.size": 1}))
    assert per_tuple.per_tuple and not per_tuple.adaptive and per_tuple.max_latency == 0.0
    assert per_tuple.initial_limit() == 1
    fixed = BatchPolicy.from_conf(merge_conf({"topology.batch.adaptive": "false"}))
    dst = _Dst(fixed)
    assert dst.limit == fixed.cap == merge_conf({})["topology.batch.size"]
    _feed(fixed, dst, 1000.0, 1.0)
    assert dst.limit == fixed.cap  # never adapts
    interleaved = BatchPolicy(cap=100, max_latency=0.005, unit=2)
    assert interleaved.initial_limit() == 2  # limits count list slots: values and anchors


def test_flush_deadline_bounds_the_wait() -> None:
    d = FlushDeadline(0.005)
    assert not d.due(100.0) and d.wait(100.0, 0.1) == 0.1
    d.worked(1.0)
    d.worked(1.004)  # later work does not move an armed deadline
    assert d.wait(1.002, 0.1) == pytest.approx(0.003)
    assert not d.due(1.0049) and d.due(1.005) and d.wait(1.006, 0.1) == 0.0
    d.flushed()
    assert not d.due(2.0)


# -- an outbox driven the way a spout's loop drives it, with a fake clock ------------------------


def _outbox(conf: dict[str, Any], acking: bool = True, bolts: int = 2) -> tuple[Outbox, FakeHost, list[float]]:
    from nstorm import Bolt, Spout, TopologyBuilder

    class S(Spout):
        outputs = ("k",)

    class B(Bolt):
        pass

    builder = TopologyBuilder("t")
    builder.set_spout("s", S, parallelism=1)
    builder.set_bolt("b", B, parallelism=bolts).fields_grouping("s", ["k"])
    definition = builder.build(workers=1).definition
    tasks = ["s:0", *[f"b:{i}" for i in range(bolts)], "__acker:0"]
    plan = plan_of({t: "n1:1" for t in tasks})
    worker = FakeHost(plan, acking=acking, **conf)
    clock = [0.0]
    outbox = Outbox(worker, 0, "s", definition)  # type: ignore[arg-type]
    outbox.clock = lambda: clock[0]
    outbox.rebuild(RoutingTable.from_plan(plan))
    return outbox, worker, clock


def _run_spout_like(outbox: Outbox, worker: FakeHost, clock: list[float], emits: list[float],
                    step: float) -> dict[int, float]:
    """Emit a tracked tuple at each time in ``emits``; every ``step`` seconds of fake time run one
    loop iteration as :class:`~worker.executor.SpoutExecutor` does; return each tuple's wait
    (from its emit to the moment its batch reached the destination queue)."""
    emitted_at: dict[int, float] = {}
    waited: dict[int, float] = {}
    pending = list(emits)
    i = 0
    end = emits[-1] + 1.0
    while clock[0] < end:
        now = clock[0]
        emitted = False
        while pending and pending[0] <= now:
            pending.pop(0)
            emitted_at[i] = now
            if outbox.acking:  # what SpoutExecutor._emit does, with topology.acking.group.size 1
                group = SpoutGroup(i)
                assert outbox.emit_tracked((i,), "default", group) == 1
                assert outbox.close_group(group)
            else:
                outbox.emit((i,))
            i += 1
            emitted = True
        if emitted:
            outbox.deadline.worked(now)
            outbox.ctl_deadline.worked(now)
        if outbox.deadline.due(now):
            outbox.flush()
        elif outbox.ctl_deadline.due(now):
            outbox.flush_control()
        for dst in (1, 2):
            for _src, (values, runs, _streams) in worker.take(dst):
                if outbox.acking:  # one run of one per tracked tuple, the root its value, edge 0
                    assert [(k,) for k, _e in runs[1::2]] == list(values) and set(runs[0::2]) == {1}
                    assert {e for _k, e in runs[1::2]} == {0}
                for (k,) in values:
                    waited[k] = now - emitted_at[k]
        clock[0] = now + step
    return waited


@pytest.mark.parametrize("conf", [{}, {"topology.batch.adaptive": False}], ids=["adaptive", "fixed"])
def test_no_tuple_waits_past_the_bound_at_low_rates(conf: dict[str, Any]) -> None:
    outbox, worker, clock = _outbox(conf)
    bound = outbox.policy.max_latency
    step = 0.0005  # one loop iteration of the fake spout
    # A burst (large batches), then a trickle of 50 tuples/s, then single tuples far apart.
    emits = [i * 1e-5 for i in range(5000)] + [1.0 + i / 50 for i in range(100)] + [4.0, 6.5, 9.0]
    waited = _run_spout_like(outbox, worker, clock, emits, step)
    assert len(waited) == len(emits), "every tuple is delivered"
    assert max(waited.values()) <= bound + step + 1e-9
    if outbox.policy.adaptive:
        # The limits left by the burst hold the first tuples of the trickle until the deadline;
        # the rate measured at that send brings them down, and each tuple then leaves at once.
        trickle = [waited[k] for k in range(5000, 5100)]
        assert max(trickle[5:]) <= step + 1e-9, "a slow destination gets each tuple out at once"


def test_batches_are_large_at_high_rates_and_spouts_send_the_acker_nothing() -> None:
    outbox, worker, clock = _outbox({})
    _run_spout_like(outbox, worker, clock, [i * 1e-6 for i in range(100_000)], 0.0005)
    assert outbox.emitted == 100_000
    assert outbox.emitted / outbox.batches > 50  # the limits grew towards the cap
    assert worker.control(3).empty()  # no "ack init": the copies' edges XOR to zero


def test_per_tuple_sending_sends_every_tuple_alone() -> None:
    outbox, worker, clock = _outbox({"topology.batch.size": 1}, acking=False)
    waited = _run_spout_like(outbox, worker, clock, [i * 1e-4 for i in range(500)], 0.0005)
    assert len(waited) == 500 and outbox.batches == 500


def test_batches_keep_emit_order_across_streams() -> None:
    """One buffer per destination, named streams noted by index: the batch is the emit order."""
    from nstorm import Bolt, Spout, TopologyBuilder

    class S(Spout):
        outputs = {"default": ("k",), "side": ("k",)}

    class B(Bolt):
        pass

    builder = TopologyBuilder("t")
    builder.set_spout("s", S)
    builder.set_bolt("b", B).global_grouping("s").global_grouping("s", stream="side")
    tasks = ["s:0", "b:0", "__acker:0"]
    plan = plan_of({t: "n1:1" for t in tasks})
    worker = FakeHost(plan, **{"topology.batch.adaptive": False})
    outbox = Outbox(worker, 0, "s", builder.build(workers=1).definition)  # type: ignore[arg-type]
    outbox.rebuild(RoutingTable.from_plan(plan))
    for i in range(10):
        group = SpoutGroup(1000 + i)
        outbox.emit_tracked((i,), "side" if i % 3 == 0 else "default", group)
        outbox.close_group(group)
    outbox.flush()
    _src, batch = worker.data(1).get()
    values, runs, streams = wire.decode_batch(wire.pack(batch))  # as a remote worker sees it
    assert [v[0] for v in values] == list(range(10))
    assert streams == {0: "side", 3: "side", 6: "side", 9: "side"}
    assert [a[0] for a in wire.expand_runs(runs, len(values))] == [1000 + i for i in range(10)]


@pytest.mark.parametrize("batch", [
    [[("w1",), ("w2", 3, -7, 2.5, None, True, b"\x00\xff")], [1, (2**64 - 1, 5), 1, [9, 8, 7, 6]], {1: "side"}],
    [[(["nested", ("list", 1)], {"k": {2: [3.0]}})], None, None],
    [[("é" * 40, -(2**63), 2**63)], [1, None], None],
])
def test_a_batch_crosses_in_the_bytes_msgpack_writes(batch: Any) -> None:
    """Data batches are encoded by msgspec, state and control by msgpack: for all msgpack encodes,
    the very same bytes, so either side decodes what the other wrote."""
    assert wire.pack_batch(batch) == wire.pack(batch)
    assert wire.batch_encoder()(batch) == wire.pack(batch)  # a Courier's own encoder
    assert wire.decode_batch(wire.pack_batch(batch))[0] == wire.decode_batch(wire.pack(batch))[0]


def test_values_msgpack_refuses_cross_a_process_as_arrays() -> None:
    """A set in a tuple crosses a process as an array (a tuple), as lists do; state stays strict."""
    values, _runs, _streams = wire.decode_batch(wire.pack_batch([[({3},)], None, None]))
    assert values == (((3,),),)
    with pytest.raises(TypeError):
        wire.pack({"state": {3}})


@pytest.mark.parametrize("garbage", [b"\x93\x01", wire.pack([1, 2]), wire.pack([[1], [1, 2], None]),
                                     wire.pack([[1], None, [5]]), wire.pack(7),
                                     wire.pack([[[1], [2]], [1, None], None]),  # runs count 1 of 2 tuples
                                     wire.pack([[[1], [2]], [3, None, -1, None], None]),  # a negative run
                                     wire.pack([[[1], [2]], [1.5, None, 0.5, None], None]),  # counts not ints
                                     wire.pack([[[1]], [1, "x"], None])])  # an anchor that is not an array
def test_garbage_batches_are_rejected(garbage: bytes) -> None:
    with pytest.raises(Exception):  # noqa: B017 - any decoding error; executors count and drop it
        wire.decode_batch(garbage)


@pytest.mark.parametrize("bolts", [2, 1], ids=["two-buffers", "single-buffer"])
@pytest.mark.parametrize("acking", [False, True], ids=["acking-off", "acking-on"])
def test_emit_many_sends_what_emit_per_tuple_sends(acking: bool, bolts: int) -> None:
    """``emit_many`` (compiled) and ``emit`` tuple by tuple: the same batches, in the same order,
    with runs of the same lengths and roots, across full buffers (the fixed limit is the cap);
    with one downstream task both are the single-buffer emits."""
    from worker.runs import InputRun

    sent = []
    for many in (True, False):
        outbox, worker, _clock = _outbox({"topology.batch.adaptive": False}, acking=acking, bolts=bolts)
        emit = outbox.emit_anchored if acking else outbox.emit
        assert (emit.__name__ == "emit_single") == (bolts == 1)
        assert outbox.emit_many.__name__.endswith("_single") == (bolts == 1)
        outbox.current = InputRun([5 << 16, 9]) if acking else None
        tuples = [(f"k{i % 37}",) for i in range(3 * outbox.policy.cap)]
        if many:
            outbox.emit_many(iter(tuples))
        else:
            for t in tuples:
                emit(t)
        outbox.flush()
        batches = {}
        for dst in range(1, bolts + 1):
            batches[dst] = []
            for _src, (values, runs, _streams) in worker.take(dst):
                batches[dst].append((values, runs[0::2] if runs else None, [a[0] for a in runs[1::2]] if runs else None))
        sent.append(batches)
    assert sent[0] == sent[1]
    assert sum(len(v) for b in sent[0].values() for v, _n, _r in b) == 3 * merge_conf({})["topology.batch.size"]
