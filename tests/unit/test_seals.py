"""A moved executor's old copy seals its output before it hands over, with checkpoints on.

Its new copy sends on other pipes than its last tuples took: a downstream task of another worker
could take the new copy's barrier before those tuples, and checkpoint a state without tuples the
spout's part of the same checkpoint counts as done (a restore then loses them: the keyed sums of
tests/test_durable_state.py came out short once in CI). So the old copy sends every downstream
task of another worker a SEAL behind its data, and hands over (the new copy starts) only once
each has answered SEALED. Unit tests with real executors and a fake worker.
"""

from __future__ import annotations

from typing import Any

from nstorm import Bolt, Spout, TopologyBuilder
from worker import wire
from worker.bolt import BoltExecutor
from worker.routing import RoutingTable

from fakes import FakeHost, plan_of


class Numbers(Spout):
    outputs = ("n",)

    def next_tuple(self) -> None:
        pass


class Mid(Bolt):
    outputs = ("n",)

    def process(self, tup: Any) -> None:
        self.emit((tup["n"],))


class Sink(Bolt):
    outputs = ()

    def process(self, tup: Any) -> None:
        self.state["n"] = self.state.get("n", 0) + 1


def _definition() -> dict[str, Any]:
    builder = TopologyBuilder("t")
    builder.set_spout("numbers", Numbers)
    builder.set_bolt("mid", Mid).shuffle_grouping("numbers")
    builder.set_bolt("sink", Sink, parallelism=2).shuffle_grouping("mid").shuffle_grouping("numbers")
    return builder.build(workers=3).definition


# tasks: numbers:0 = 0, mid:0 = 1, sink:0 = 2, sink:1 = 3; mid:0 moves from n1:1 to n2:1
BEFORE = {"numbers:0": "n1:1", "mid:0": "n1:1", "sink:0": "n3:1", "sink:1": "n1:1", "__acker:0": "n1:1"}
AFTER = {**BEFORE, "mid:0": "n2:1"}


class Checkpoints:
    """What a handover asks of a worker's checkpoints: whether it lost data."""

    def __init__(self) -> None:
        self.tainted = False
        self.reasons: list[str] = []

    def request_rollback(self, reason: str) -> None:
        self.tainted = True
        self.reasons.append(reason)


def _draining_mid(checkpoints: bool = True, dk: float = 5.0) -> tuple[FakeHost, BoltExecutor]:
    """mid:0's old copy at n1:1, moved to n2:1: markers in, input empty, its new copy ready."""
    worker = FakeHost(plan_of(BEFORE), worker_id="n1:1")
    if checkpoints:
        worker.checkpoints = Checkpoints()
    ex = BoltExecutor(worker, "mid:0", 1, Mid, _definition())  # type: ignore[arg-type]
    worker.adopt(1, ex.inbox)
    ex.refresh_routing()
    ex.take(0, ([[7]], None, None))  # a tuple, its output buffered for sink:0 or sink:1
    moved = plan_of(AFTER, version=2)
    ex.handover.begin_drain([0], timeout=dk, version=moved.version)
    worker.routing = RoutingTable.from_plan(moved)
    ex.refresh_routing()
    ex.handover.on_marker(0)
    ex.handover.ready_seen = True
    return worker, ex


def _data_to(worker: FakeHost, wid: str) -> list[Any]:
    """The headers of the data messages (two frames) sent to ``wid``, in order."""
    return [wire.unpack(frames[0]) for w, frames in worker.sockets.sent if w == wid and len(frames) == 2]


def test_the_old_copy_seals_every_downstream_task_of_another_worker_then_waits() -> None:
    worker, ex = _draining_mid()
    handover = ex.handover
    assert not handover.drained(input_empty=True), "its seals are out: it waits for their answers"
    assert handover.sealing
    to_n3 = _data_to(worker, "n3:1")
    assert to_n3[-1][:3] == (wire.SEAL, 2, 1), "sink:0's seal, behind anything sent it"
    frames = [f for w, f in worker.sockets.sent if w == "n3:1"][-1]
    assert frames[1] == b"n1:1", "it names where the old copy waits"
    assert all(h[0] != wire.SEAL for h in _data_to(worker, "n2:1")), "nobody downstream at the new place"
    assert not any(type(item) is wire.Seal for _src, item in worker.take(3)), "sink:1 is here: no seal"
    assert handover.unsealed == {2}
    assert not handover.wait_sealed()
    ex.ctl_q.put((wire.ACKED, 4, [123]))  # a message for the executor: goes to the new copy with the state
    ex.ctl_q.put((wire.SEALED, 2, 2))
    assert not handover.wait_sealed()  # (one message a step)
    assert handover.wait_sealed(), "every seal answered"
    sent = [(wid, m[0], m[2], m[3]) for wid, m in worker.sockets.control_messages()]
    kinds = [(wid, kind) for wid, kind, _src, _e in sent]
    assert kinds.index(("n2:1", wire.STATE)) < kinds.index(("n2:1", wire.ACKED)), "the state first"
    assert ("n2:1", wire.ACKED, 4, (123,)) in sent, "passed on with its sender"
    assert not worker.checkpoints.reasons


def test_a_receiver_answers_a_seal_to_the_old_copys_worker_even_while_aligning() -> None:
    worker = FakeHost(plan_of(AFTER), worker_id="n3:1")
    worker.checkpoints = Checkpoints()
    sink = BoltExecutor(worker, "sink:0", 2, Sink, _definition())  # type: ignore[arg-type]
    sink.refresh_routing()
    sink.take(1, 5)  # checkpoint 5's barrier from mid:0: what mid:0 sends now waits for numbers:0's
    assert sink.aligner.aligning
    sink.take(1, wire.Seal("n1:1"))
    assert not sink.aligner.held, "a seal never waits"
    answers = [(wid, m[0], m[1], m[2], m[3]) for wid, m in worker.sockets.control_messages()]
    assert answers == [("n1:1", wire.SEALED, 1, 2, 2)], "to mid:0 at n1:1, from sink:0"


def test_without_checkpoints_nothing_is_sealed() -> None:
    worker, ex = _draining_mid(checkpoints=False)
    assert ex.handover.drained(input_empty=True)
    assert not ex.handover.sealing
    assert all(h[0] != wire.SEAL for h in _data_to(worker, "n3:1"))


def test_a_seal_unanswered_by_its_deadline_hands_over_and_rolls_back() -> None:
    worker, ex = _draining_mid(dk=0.0)
    assert not ex.handover.drained(input_empty=True)
    ex.handover.seal_until = 0.0  # the deadline passed
    assert ex.handover.wait_sealed()
    assert worker.checkpoints.reasons and "seals unanswered" in worker.checkpoints.reasons[0]


def test_without_checkpoints_control_queued_at_the_hand_over_goes_behind_the_state() -> None:
    """What was put on the old copy's control queue after its loop's last look at it (a spout's
    completions, acks, a commit) goes to the new copy behind the state, as while sealing; it used
    to stay on a queue nobody read."""
    worker, ex = _draining_mid(checkpoints=False)
    assert ex.handover.drained(input_empty=True)
    ex.ctl_q.put((wire.COMMITTED, 4, 9))
    ex.ctl_q.put((wire.READY, 1, {"worker": "n2:1", "copy": 1}))  # the new copy's own: not sent back to it
    ex.handover.hand_over()
    sent = [(wid, m[0], m[2], m[3]) for wid, m in worker.sockets.control_messages()]
    kinds = [(wid, kind) for wid, kind, _src, _e in sent]
    assert kinds.index(("n2:1", wire.STATE)) < kinds.index(("n2:1", wire.COMMITTED)), "the state first"
    assert ("n2:1", wire.COMMITTED, 4, 9) in sent, "passed on with its sender"
    assert ("n2:1", wire.READY) not in kinds
    assert ex.ctl_q.empty()


def test_a_control_message_put_into_the_old_copy_after_its_hand_over_is_refused() -> None:
    """A sender looks the inbox up, then puts into it: a copy that handed over in between refuses
    the message (the sender sends it on) instead of keeping it on a queue nobody reads."""
    worker, ex = _draining_mid(checkpoints=False)
    assert ex.handover.drained(input_empty=True)
    worker.local_tasks = {0, 1, 3, 4}  # as the old plan has it: mid:0 still looks local
    looked_up = worker.inbox(1)
    assert looked_up is ex.inbox
    ex.inbox.put_control(wire.ACKED, 4, [11])  # before the hand-over: passed on behind the state
    ex.handover.hand_over()
    assert looked_up.put_control(wire.ACKED, 4, [12]) is False
    assert looked_up.put("ctl", (wire.ACKED, 4, [13])) is False
    assert ex.ctl_q.empty()
    sent = [(wid, m[0], m[3]) for wid, m in worker.sockets.control_messages()]
    assert ("n2:1", wire.ACKED, (11,)) in sent
    assert all(entries not in ((12,), (13,)) for _w, _k, entries in sent)


def test_a_local_sender_refused_by_a_handed_over_copy_sends_the_message_to_its_own_worker() -> None:
    """A local executor's courier that finds the old copy (its routing not yet the new plan's)
    and is refused sends the message through this worker's control port: its receiver stashes it
    and the worker forwards it to the new place."""
    from worker.delivery import Courier

    worker, ex = _draining_mid(checkpoints=False)
    assert ex.handover.drained(input_empty=True)
    ex.handover.hand_over()
    worker.local_tasks = {0, 1, 3, 4}  # as the old plan has it: mid:0 still looks local
    courier = Courier(worker, 3)  # type: ignore[arg-type]
    courier.routing = RoutingTable.from_plan(plan_of(BEFORE))
    courier.control(1, "n1:1", wire.ACK, [[5, 6]])
    sent = [(wid, m[0], m[1], m[3]) for wid, m in worker.sockets.control_messages()]
    assert ("n1:1", wire.ACK, 1, ((5, 6),)) in sent
    assert ex.ctl_q.empty()


def test_the_receiver_stashes_a_control_message_a_handed_over_copy_refused() -> None:
    """The control receiver looked the old copy up just before its hand-over: the refused message
    is stashed (and forwarded by the worker), not lost."""
    from worker.transport import Transport

    worker, ex = _draining_mid(checkpoints=False)
    assert ex.handover.drained(input_empty=True)
    ex.handover.hand_over()
    worker.local_tasks = {0, 1, 3, 4}
    transport = object.__new__(Transport)  # its receiving path, without bound sockets
    transport.host, transport.dropped, transport.stale = worker, 0, 0
    transport._on_control([wire.control_message(wire.ACK, 1, 3, [[5, 6]])])
    assert [(dst, channel, item) for dst, channel, item, _f in worker.stashed] == [
        (1, "ctl", (wire.ACK, 3, ((5, 6),)))]
    assert ex.ctl_q.empty() and transport.dropped == 0


def test_the_worker_keeps_stashed_what_an_inbox_closed_meanwhile_refuses(tmp_path: Any) -> None:
    """``Worker.stash`` and ``_settle`` look an inbox up under the worker's lock, which a hand-over
    does not take: what a closed inbox refuses stays stashed (forwarded once the worker sees the
    copy gone), the rest of a stashed run included."""
    from types import SimpleNamespace

    from nstorm.config import merge_conf
    from worker.delivery import CONTROL, Inbox
    from worker.process import Worker

    worker = Worker("n1", 1, "t", tmp_path / "store", None, "/nstorm")
    worker.conf = merge_conf({})
    inbox = Inbox(16)
    worker.executors[1] = SimpleNamespace(inbox=inbox)  # type: ignore[assignment]  # still listed here
    assert worker.stash(1, CONTROL, (wire.ACKED, 0, [1]), b"f1")
    assert inbox.control.get_nowait() == (wire.ACKED, 0, [1]) and not worker.stashed
    inbox.close()  # its hand-over, between the worker's look-up and its put
    assert worker.stash(1, CONTROL, (wire.ACKED, 0, [2]), b"f2")
    worker._settle()
    assert [item for _at, (_c, item, _f) in worker.stashed[1]] == [(wire.ACKED, 0, [2])]

    class ClosesAfterOne(Inbox):
        __slots__ = ()

        def put(self, channel: str, item: Any) -> bool:
            taken = super().put(channel, item)
            self.closed = True
            return taken

    second = ClosesAfterOne(16)
    worker.executors[2] = SimpleNamespace(inbox=second)  # type: ignore[assignment]
    worker.stashed[2] = [(0.0, (CONTROL, (wire.ACKED, 0, [n]), b"f")) for n in (3, 4, 5)]
    worker._settle()
    assert second.control.get_nowait() == (wire.ACKED, 0, [3])
    assert [item for _at, (_c, item, _f) in worker.stashed[2]] == [(wire.ACKED, 0, [4]), (wire.ACKED, 0, [5])]


def test_a_copy_that_leaves_without_handing_over_closes_its_inbox_and_logs_what_it_left(caplog: Any) -> None:
    """A draining copy whose loop ended another way (it raised, or a rescale retired it) refuses
    what comes after (senders stash it for the task's place) and names what it left unread; a
    copy that stops with its worker keeps its inbox as it is."""
    _worker, ex = _draining_mid(checkpoints=False)
    ex.inbox.put_control(wire.COMMITTED, -1, 3)
    ex.teardown()
    assert ex.inbox.closed
    assert ex.inbox.put_control(wire.COMMITTED, -1, 4) is False
    assert "1 control messages left unread" in caplog.text

    worker = FakeHost(plan_of(BEFORE), worker_id="n1:1")
    running = BoltExecutor(worker, "mid:0", 1, Mid, _definition())  # type: ignore[arg-type]
    running.teardown()
    assert not running.inbox.closed

    retired = BoltExecutor(worker, "mid:0", 1, Mid, _definition())  # type: ignore[arg-type]
    retired.retired = True
    retired.teardown()
    assert retired.inbox.closed
