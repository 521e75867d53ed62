"""Values and frames that used to end an executor's thread (review, session 31).

An executor whose loop raised stopped for good: nothing restarted it, its queue filled and
backpressure paused every spout of the topology. A value with no msgpack form (numpy's scalars,
an object, an int beyond 64 bits) raised in the flush that sends it to another worker, after
the buffer was emptied; well-formed msgpack with the wrong contents (a float root, a string
checkpoint id) raised in the executor that handled it. Now such a batch is dropped and counted
(its trees time out and are replayed), such a control frame is dropped, and an engine error in an
executor's loop ends its worker, which its supervisor restarts.
"""

from __future__ import annotations

from typing import Any

import pytest

from nstorm import Bolt, Spout, TopologyBuilder
from worker import wire
from worker.bolt import BoltExecutor
from worker.spout import SpoutExecutor

from fakes import FakeHost, plan_of


class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf: Any, context: Any) -> None:
        self.acked: list[Any] = []
        self.failed: list[Any] = []

    def ack(self, msg_id: Any) -> None:
        self.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)


class Sink(Bolt):
    outputs = ()


def _spout(**conf: Any) -> tuple[FakeHost, SpoutExecutor]:
    builder = TopologyBuilder("t")
    builder.set_spout("numbers", Numbers)
    builder.set_bolt("sink", Sink).shuffle_grouping("numbers")
    definition = builder.build(workers=2).definition
    places = {"numbers:0": "n1:1", "sink:0": "n2:1", "__acker:0": "n1:1"}  # the sink in another worker
    host = FakeHost(plan_of(places), **conf)
    ex = SpoutExecutor(host, "numbers:0", 0, Numbers, definition)  # type: ignore[arg-type]
    ex.setup()
    ex.refresh_routing()
    return host, ex


def test_a_value_with_no_wire_form_is_dropped_counted_and_replayed_not_fatal() -> None:
    host, ex = _spout(**{"topology.acking.group.size": 4})
    spout = ex.instance
    for i in range(8):
        spout.emit((object() if i == 1 else i,), msg_id=i)
    ex._close_group()  # flushes what the full groups left: no exception, the loop goes on
    ex.outbox.flush()
    assert ex.pending_n == 8 and sorted(i for ids in ex.pending.values() for i in ids) == list(range(8))
    counters = ex.counters()
    assert counters["unencodable"] >= 1 and counters["errors"] >= 1
    assert "cannot be sent to another worker" in ex.last_error and "object" in ex.last_error
    ex._expire(10**9)  # the dropped tuples' trees time out and are failed: the spout replays them
    assert sorted(spout.failed) == list(range(8)) and ex.pending_n == 0


def test_an_int_beyond_64_bits_is_reported_not_fatal() -> None:
    host, ex = _spout(acking=False)
    ex.instance.emit((2**70,))
    ex.outbox.flush()
    assert ex.counters()["unencodable"] == 1 and "int" in ex.last_error


@pytest.mark.parametrize(("kind", "entries"), [
    (wire.ACK, ((1.5, 3),)), (wire.ACK, ((1, 2, 3),)), (wire.ACK, 7), (wire.ACK, (("a", 1),)),
    (wire.FAIL, (1.5,)), (wire.ACKED, ((1, 2),)), (wire.FAILED, 5), (wire.ACKED, (-1,)), (wire.FAIL, (2**64,)),
    (wire.CHECKPOINT, "x"), (wire.COMMITTED, 1.0), (wire.SHIFT_READY, None), (wire.SEALED, "t"),
    (wire.STATE, (1, 2)), (wire.READY, "n1:1"), (wire.GROUPS, 3), (99, ()),
])
def test_control_entries_of_the_wrong_shape_are_refused(kind: int, entries: Any) -> None:
    assert not wire.control_entries_ok(kind, entries)


@pytest.mark.parametrize(("kind", "entries"), [
    (wire.ACK, ((1, 2), (3, 4))), (wire.ACK, ()), (wire.FAIL, (1, 2)), (wire.ACKED, (5,)), (wire.FAILED, ()),
    (wire.CHECKPOINT, 3), (wire.COMMITTED, 2), (wire.SHIFT_READY, 4), (wire.SEALED, 1),
    (wire.STATE, {"state": b""}), (wire.READY, {"worker": "n1:1"}), (wire.GONE, {"worker": "n1:1"}),
    (wire.GROUPS, {"version": 1}), (wire.STATE_PART, {"id": 1}),
])
def test_control_entries_as_the_engine_sends_them_pass(kind: int, entries: Any) -> None:
    frame = wire.pack([kind, 1, 0, entries])
    _kind, _dst, _src, decoded = wire.unpack(frame)
    assert wire.control_entries_ok(kind, decoded)


def test_a_batch_whose_anchors_are_not_arrays_is_garbage_and_their_contents_are_left_to_the_ack() -> None:
    """Anchors' containers are checked as a batch is decoded; their contents are not (every root
    and edge: 2-3% of word count's words/s): a worker only sends integer pairs, and what else
    comes is dropped where it breaks (the next test)."""
    with pytest.raises(ValueError, match="anchor"):
        wire.decode_batch(wire.pack_batch([[[1]], [1, "x"], None]))
    values, runs, _ = wire.decode_batch(wire.pack_batch([[[1], [2]], [1, [5, 6, 7, 8], 1, None], None]))
    assert len(values) == 2 and runs[1] == (5, 6, 7, 8)


class Quiet(Bolt):
    outputs = ()

    def process(self, tup: Any) -> None:
        pass


def _sink_in_another_worker() -> tuple[FakeHost, BoltExecutor]:
    builder = TopologyBuilder("t")
    builder.set_spout("numbers", Numbers)
    builder.set_bolt("sink", Quiet).shuffle_grouping("numbers")
    places = {"numbers:0": "n1:1", "sink:0": "n2:1", "__acker:0": "n1:1"}  # its acker elsewhere: acks packed
    host = FakeHost(plan_of(places), worker_id="n2:1", wire_format=True)
    ex = BoltExecutor(host, "sink:0", 1, Quiet, builder.build(workers=2).definition)  # type: ignore[arg-type]
    ex.setup()
    return host, ex


def _acks_sent(host: FakeHost) -> list[Any]:
    return [entry for _wid, (kind, _dst, _src, entries) in host.sockets.control_messages() if kind == wire.ACK
            for entry in entries]


@pytest.mark.parametrize(("bad", "whole_batch"), [
    ((1.5, 7), False),  # a root of the wrong kind that the run's ack takes
    ((9 << 8, -(1 << 63), 9 << 8, (1 << 64) - 1), False),  # edges whose XOR has no msgpack form
    (("x", 7), True), ((None, 7), True), ((b"r", 7), True),  # roots the run's check refuses: the rest of the batch goes
])
def test_anchors_that_are_no_integer_pairs_lose_their_acks_not_the_worker(bad: tuple[Any, ...],
                                                                         whole_batch: bool) -> None:
    """A peer's batch whose anchors hold something else than integer pairs: where they broke out of
    the executor's loop as the acks left (the worker restarted), those acks are dropped and
    counted now (their trees time out) and the batch's good tuples are acked; what breaks while
    the batch is taken drops the rest of the batch (recorded), as before. A fail of such a root
    sends nothing."""
    host, ex = _sink_in_another_worker()
    good = (5 << 8, 11)
    runs = [1, good, 1, bad] if len(bad) == 2 else [1, good, 1, bad[:2], 1, bad[2:]]
    values = [[i] for i in range(len(runs) // 2)]
    try:
        ex.take(0, wire.pack_batch([values, runs, None]))
    except Exception as exc:  # noqa: BLE001 - what the executor's loop does with it
        ex._drop_batch(exc)
    ex.outbox.flush_control()
    counters = ex.counters()
    assert _acks_sent(host) == [good], "the good tuple's ack left, the others were dropped"
    if whole_batch:
        assert counters["errors"] == 1 and "garbage_acks" not in counters
    else:
        assert counters["garbage_acks"] >= 1 and counters["errors"] == 0
    sent = len(host.sockets.sent)
    ex.outbox.fail_anchors(bad)
    ex.outbox.flush_control()
    fails = [entries for _wid, (kind, _dst, _src, entries) in host.sockets.control_messages()[sent:] if kind == wire.FAIL]
    assert all(type(r) is int for entries in fails for r in entries)


def test_a_bolt_that_subscribes_to_one_stream_twice_is_refused() -> None:
    from nstorm import TopologyError

    builder = TopologyBuilder("t")
    builder.set_spout("numbers", Numbers)
    builder.set_bolt("sink", Sink).shuffle_grouping("numbers").all_grouping("numbers")
    with pytest.raises(TopologyError, match="twice"):
        builder.build()


def _direct_spout(direct: bool) -> SpoutExecutor:
    builder = TopologyBuilder("t")
    builder.set_spout("numbers", Numbers)
    sink = builder.set_bolt("sink", Sink)
    sink.direct_grouping("numbers") if direct else sink.shuffle_grouping("numbers")
    definition = builder.build().definition
    host = FakeHost(plan_of({"numbers:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1"}))
    ex = SpoutExecutor(host, "numbers:0", 0, Numbers, definition)  # type: ignore[arg-type]
    ex.setup()
    ex.refresh_routing()
    return ex


def test_a_regular_emit_on_a_direct_stream_and_a_direct_emit_on_a_regular_one_are_errors() -> None:
    """They went nowhere, and a tracked tuple was acked as if delivered (Storm raises)."""
    ex = _direct_spout(direct=True)
    with pytest.raises(ValueError, match="use emit_direct"):
        ex.instance.emit((1,), msg_id=1)
    assert ex.instance.acked == [] and ex.pending_n == 0
    ex = _direct_spout(direct=False)
    with pytest.raises(ValueError, match="direct_grouping"):
        ex.instance.emit_direct(0, (1,), msg_id=1)


def test_an_unhashable_msg_id_after_a_failure_is_tracked() -> None:
    _host, ex = _spout()
    ex._fail("a")
    ex.instance.emit((1,), msg_id=["unhashable"])
    ex.instance.emit((2,), msg_id="a")
    ex._close_group()
    assert ex.pending_n == 2 and ex.replayed == 1 and not ex.failed_ids


def test_an_executor_whose_loop_fails_ends_its_worker_to_be_restarted(tmp_path: Any, monkeypatch: Any) -> None:
    """Its thread ended and nothing restarted it: the worker ran on with a hole that filled up
    (backpressure paused every spout). As Storm does, the worker now exits with code 1."""
    from worker.process import Worker

    host, ex = _spout()
    died: list[str] = []
    host.executor_failed = died.append  # type: ignore[attr-defined]

    def broken() -> None:
        raise RuntimeError("a bug in the engine")

    monkeypatch.setattr(ex, "loop", broken)
    ex._run()
    assert died == ["numbers:0"] and "a bug in the engine" in ex.last_error
    worker = Worker("n1", 1, "t", tmp_path / "store", None, "/nstorm")
    worker.state = "RUNNING"
    worker.executor_failed("numbers:0")
    assert worker.exit_code == 1 and worker._stop.is_set()


def test_acks_of_the_wrong_shape_reach_a_spout_and_are_dropped() -> None:
    """The transport checks only that ack messages are arrays (a check per ack cost 4% of word
    count's CPU); a spout drops what then raises, and the acker already did."""
    assert wire.control_entries_plausible(wire.ACKED, ({"a": 1},))
    assert not wire.control_entries_plausible(wire.ACKED, 5)
    assert not wire.control_entries_plausible(wire.COMMITTED, "x")
    _host, ex = _spout()
    ex.instance.emit((1,), msg_id=1)
    ex._close_group()
    root = next(iter(ex.pending))
    ex.ctl_q.put((wire.ACKED, 0, ({"a": 1},)))
    ex.ctl_q.put((wire.ACKED, 0, (root,)))
    ex._handle_control()
    assert ex.instance.acked == [1]
