"""A chain's host keeps its guests' output deadlines (worker.chaining.tend_guests): a guest's
buffers leave when due from the host's loop, and the host never sleeps past a guest's deadline,
so the guest's own thread need not be woken each time a hand-over arms its deadline."""

from __future__ import annotations

import queue
import time
from typing import Any

from nstorm import Bolt, Spout, TopologyBuilder
from worker.batching import FlushDeadline
from worker.bolt import GUEST_CHECK_SECS, BoltExecutor
from worker.chaining import tend_guests
from worker.delivery import Inbox

from fakes import FakeHost, plan_of


class _Outbox:
    def __init__(self) -> None:
        self.deadline = FlushDeadline(0.002)
        self.ctl_deadline = FlushDeadline(0.008)
        self.sent: list[str] = []
        self.guest_inboxes: list[Inbox] = []  # its own guests (a chain of three)

    def flush(self) -> None:
        self.sent.append("data")
        self.deadline.flushed()
        self.ctl_deadline.flushed()

    def flush_control(self) -> None:
        self.sent.append("control")
        self.ctl_deadline.flushed()


class _Guest:
    def __init__(self, task: int = 7) -> None:
        self.task = task
        self.outbox = _Outbox()


def _chained(host: int, task: int = 7) -> tuple[Inbox, _Guest]:
    inbox = Inbox(100)
    guest = _Guest(task)
    inbox.guest, inbox.host = guest, host
    return inbox, guest


def test_a_due_guest_buffer_leaves_from_the_hosts_loop() -> None:
    inbox, guest = _chained(host=3)
    guest.outbox.deadline.worked(10.0)  # a hand-over at 10.0 armed it: due at 10.002
    assert abs(tend_guests([inbox], 3, 10.001, 0.1) - 0.001) < 1e-9
    assert guest.outbox.sent == []
    assert tend_guests([inbox], 3, 10.003, 0.1) == 0.1, "flushed: nothing left to wait for"
    assert guest.outbox.sent == ["data"]


def test_the_host_never_sleeps_past_a_guests_deadline() -> None:
    inbox, guest = _chained(host=3)
    guest.outbox.deadline.worked(10.0)
    wait = tend_guests([inbox], 3, 10.0005, 0.1)
    assert abs(wait - 0.0015) < 1e-9
    guest.outbox.ctl_deadline.worked(10.0)  # acks only: due at 10.008
    guest.outbox.deadline.flushed()
    assert abs(tend_guests([inbox], 3, 10.005, 0.1) - 0.003) < 1e-9
    assert tend_guests([inbox], 3, 10.009, 0.1) == 0.1
    assert guest.outbox.sent == ["control"]


def test_a_guest_chained_elsewhere_or_released_is_left_alone() -> None:
    inbox, guest = _chained(host=4)  # chained to another host
    guest.outbox.deadline.worked(10.0)
    assert tend_guests([inbox], 3, 11.0, 0.1) == 0.1
    inbox.host, inbox.guest = -1, None  # released
    assert tend_guests([inbox], 3, 11.0, 0.1) == 0.1
    assert guest.outbox.sent == []


def test_a_guests_own_guest_is_kept_too() -> None:
    """A chain of three (spout -> split -> lower): the middle one runs no loop while chained, so
    the first host keeps the last one's deadlines as well."""
    middle_inbox, middle = _chained(host=3, task=7)
    last_inbox, last = _chained(host=7, task=8)
    middle.outbox.guest_inboxes = [last_inbox]
    last.outbox.deadline.worked(10.0)  # due at 10.002
    assert abs(tend_guests([middle_inbox], 3, 10.0005, 0.1) - 0.0015) < 1e-9
    assert tend_guests([middle_inbox], 3, 10.003, 0.1) == 0.1
    assert last.outbox.sent == ["data"] and middle.outbox.sent == []


class _Recording:
    """A control queue that records how long its taker would wait."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def empty(self) -> bool:
        return True

    def get(self, timeout: float) -> Any:
        self.timeouts.append(timeout)
        raise queue.Empty


class _Sink(Bolt):
    outputs = ()

    def process(self, tup: Any) -> None:
        pass


class _Numbers(Spout):
    outputs = ("n",)


def test_a_chained_guests_thread_does_not_wake_for_its_own_deadlines() -> None:
    """The guest's thread waits its fallback period even when its buffers are due sooner: its
    host keeps those deadlines, and a wake-up for each cost a switch and the inbox's lock per
    deadline (session 26: 180-600 wake-ups a second of the split's thread at half of the peak)."""
    builder = TopologyBuilder("t")
    builder.set_spout("numbers", _Numbers)
    builder.set_bolt("sink", _Sink).local_or_shuffle_grouping("numbers")
    places = {"numbers:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1"}
    host = FakeHost(plan_of(places), acking=False)
    ex = BoltExecutor(host, "sink:0", 1, _Sink, builder.build(workers=1).definition)  # type: ignore[arg-type]
    ex.setup()
    ex.ctl_q = recording = _Recording()
    ex.inbox.guest, ex.inbox.host = ex, 0  # chained to the spout's task 0 ...
    ex.chained_version = ex.routing.version  # ... since this plan (no newer one has let go)
    ex.outbox.deadline.worked(time.monotonic())  # a hand-over armed it: due within 5 ms
    ex._guest_pass()
    assert recording.timeouts == [GUEST_CHECK_SECS]
    ex.inbox.host, ex.inbox.guest = -1, None  # released: its own loop takes over, no wait here
    ex._guest_pass()
    assert recording.timeouts == [GUEST_CHECK_SECS]


def test_a_released_guests_buffers_leave_at_once() -> None:
    """The host ends the chain: what the guest holds leaves then, not when its thread next looks
    (up to GUEST_CHECK_SECS later)."""
    from worker.delivery import Courier

    host = FakeHost(plan_of({"numbers:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1"}), acking=False)
    inbox = host.inbox(1)
    guest = _Guest(task=1)
    inbox.guest, inbox.host = guest, 0
    Courier(host, 0).release(1)  # type: ignore[arg-type]
    assert inbox.host == -1 and inbox.guest is None
    assert guest.outbox.sent == ["data"]


class _Mid(Bolt):
    outputs = ("n",)

    def process(self, tup: Any) -> None:
        self.emit((tup["n"],))


def _mid() -> BoltExecutor:
    """numbers:0 -> mid:0 (local_or_shuffle, chainable) -> sink:0, all in one worker; batches of 100."""
    builder = TopologyBuilder("t")
    builder.set_spout("numbers", _Numbers)
    builder.set_bolt("mid", _Mid).local_or_shuffle_grouping("numbers")
    builder.set_bolt("sink", _Sink).shuffle_grouping("mid")
    places = {"numbers:0": "n1:1", "mid:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1"}
    host = FakeHost(plan_of(places), acking=False, **{"topology.batch.adaptive": False})
    ex = BoltExecutor(host, "mid:0", 1, _Mid, builder.build(workers=1).definition)  # type: ignore[arg-type]
    host.adopt(1, ex.inbox)
    ex.setup()
    ex.ctl_q = _Recording()  # no control: a guest pass does not wait for it
    return ex


def test_batches_a_guest_takes_in_its_own_pass_leave_by_a_deadline() -> None:
    """Batches queued behind the host's chain mark (or sent back while the guest's peer took
    nothing) are taken in the guest's own pass: their output used to wait in its buffers with no
    deadline armed until the host handed over something more (a quiet source: never)."""
    ex = _mid()
    ex.inbox.offer = 0  # the spout's task offered to run it
    ex.guest_pending = 0  # its chain mark taken
    ex.data_q.put((0, ([(1,), (2,)], None, None)))  # queued behind the mark
    ex._guest_pass()
    assert ex.inbox.host == 0, "chained"
    assert ex.outbox.holding()
    assert ex.outbox.deadline.at is not None, "what it emitted leaves at the deadline the host keeps"


def test_a_bad_queued_batch_is_dropped_and_the_hosts_item_still_taken() -> None:
    """A queued batch that decoded but is not what it claims is dropped as in the loop: the host's
    own item after it is taken (it was lost: a move's marker, or a checkpoint's barrier), and a
    guest's own pass goes on (its loop ended)."""
    ex = _mid()
    ex.inbox.guest, ex.inbox.host = ex, 0
    ex.chained_version = ex.routing.version
    ex.data_q.put((0, "not a batch"))
    ex.take_chained(0, ([(5,)], None, None))
    assert ex.executed == 1 and ex.errors == 1
    ex.data_q.put((0, "not a batch either"))
    ex.data_q.put((0, ([(6,)], None, None)))
    ex._guest_pass()  # raised out of the executor's loop before
    assert ex.executed == 2 and ex.errors == 2


def test_a_guest_that_let_go_itself_is_offered_again_by_a_plan_that_chains_it() -> None:
    """A guest ends its chain itself when its own (newer) plan has none; a host that then jumps to
    a plan that chains the pair again offered nothing (it still counted it a guest): the plan said
    chained, the executors were not."""
    from worker.chaining import CHAIN_MARK
    from worker.outbox import Outbox
    from worker.routing import RoutingTable

    ex = _mid()
    host = ex.host
    plan = plan_of({"numbers:0": "n1:1", "mid:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1"})
    chained = RoutingTable.from_plan(plan.replace(version=2, chains={"mid:0": "numbers:0"}))
    spout = Outbox(host, 0, "numbers", ex.definition)
    spout.rebuild(chained)
    assert spout.guests == {1} and ex.inbox.offer == 0
    assert ex.data_q.get_nowait() == (0, CHAIN_MARK)
    ex.guest_pending = 0
    ex._guest_pass()
    assert ex.inbox.host == 0
    host.routing = RoutingTable.from_plan(plan.replace(version=3))  # the guest's newer plan: no chain
    ex._guest_pass()
    assert ex.inbox.host == -1 and ex.inbox.offer == -1, "it let go"
    spout.rebuild(RoutingTable.from_plan(plan.replace(version=4, chains={"mid:0": "numbers:0"})))
    assert ex.inbox.offer == 0 and ex.data_q.get_nowait() == (0, CHAIN_MARK), "offered again"
