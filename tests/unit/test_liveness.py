"""Waits in the worker end by their deadlines, whatever arrives meanwhile (issue: stall after a move).

Unit tests with real executors and real zmq sockets in the test process, and a fake worker:
a moved-in copy waiting for its state, the old place's answer to a copy that asks for a state
it no longer has, a spout's timeouts while something holds it back, and sends to a peer that
takes nothing (its pipe is full) that never block an executor's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from nstorm import Bolt, Spout, TopologyBuilder
from nstorm.net import free_port
from nstorm.plan import Move
from nstorm.records import Heartbeat, MoveMode
from worker import wire
from worker.bolt import BoltExecutor
from worker.delivery import DATA_HWM, Sockets
from worker.migration import MigrationDesk, StateParts, state_parts
from worker.routing import RoutingTable
from worker.spout import SpoutExecutor

from conftest import wait_until
from fakes import FakeHost, plan_of


class Numbers(Spout):
    outputs = ("n",)

    def open(self, conf: Any, context: Any) -> None:
        self.next = 0
        self.limit = 10**9
        self.failed: list[int] = []
        self.calls = 0

    def next_tuple(self) -> None:
        self.calls += 1
        if self.next < self.limit:
            self.emit((self.next,), msg_id=self.next)
            self.next += 1

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)


class Sink(Bolt):
    outputs = ()

    def process(self, tup: Any) -> None:
        self.state["n"] = self.state.get("n", 0) + 1


def _definition() -> dict[str, Any]:
    builder = TopologyBuilder("t")
    builder.set_spout("numbers", Numbers)
    builder.set_bolt("sink", Sink).shuffle_grouping("numbers")
    return builder.build(workers=2).definition


_hosts: list[FakeHost] = []


def _host(plan: dict[str, Any], real_sockets: bool = False, **conf: Any) -> FakeHost:
    host = FakeHost(plan, sockets=Sockets() if real_sockets else None, **conf)
    _hosts.append(host)
    return host


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    """Every zmq context a test made is destroyed, even on failure (an open one hangs the exit)."""
    yield
    while _hosts:
        _hosts.pop().close()


@pytest.fixture
def running() -> Iterator[Callable[[Any], Any]]:
    """Start an executor's thread; stopped (and joined) at the end of the test, even on failure."""
    started: list[Any] = []

    def start(ex: Any) -> Any:
        started.append(ex)
        ex.start()
        return ex

    yield start
    for ex in started:
        ex.stop()
        ex.join(timeout=5)
        assert not ex.thread.is_alive(), f"{ex.executor_id} did not stop"


# -- a moved-in copy waiting for its state -------------------------------------------------------
MOVE = Move("n2:1", "n1:1", MoveMode.THREAD, 2, "m-1")
PLACES = {"numbers:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n2:1"}  # tasks 0, 1, 2; n2:1 is the old place


def _waiting_sink(worker: FakeHost, wait_secs: float) -> BoltExecutor:
    ex = BoltExecutor(worker, "sink:0", 1, Sink, _definition())  # type: ignore[arg-type]
    ex.handover.await_state(wait_secs, MOVE)
    return ex


def _lost(host: FakeHost) -> list[bool]:
    """``state_lost`` of every completion reported so far."""
    return [update["state_lost"] for _record, update in host.completions()]


def test_the_state_wait_ends_at_its_deadline_however_much_control_traffic_comes(running) -> None:
    worker = _host(plan_of(PLACES))
    ex = running(_waiting_sink(worker, wait_secs=1.0))
    stop = threading.Event()

    def chatter() -> None:  # a control message every millisecond: the queue is never empty for 10 ms
        while not stop.is_set():
            ex.ctl_q.put((wire.READY, 1, {"worker": "n9:9", "copy": 1}))
            time.sleep(0.001)

    feeder = threading.Thread(target=chatter, daemon=True)
    feeder.start()
    try:
        began = time.monotonic()
        wait_until(lambda: not ex.handover.awaiting, 10, interval=0.01, what="the copy to give up waiting")
        assert time.monotonic() - began < 5
        assert _lost(worker) == [True]  # started empty, reported as a lost state
    finally:
        stop.set()
        feeder.join()


def test_a_waiting_copy_asks_again_and_starts_empty_at_once_when_told_gone(running) -> None:
    worker = _host(plan_of(PLACES))
    ex = running(_waiting_sink(worker, wait_secs=30.0))
    sent = worker.sockets  # READY goes to task 1 at n2:1, on that worker's control port

    def readies() -> list[Any]:
        return [m for wid, m in sent.control_messages() if wid == "n2:1" and m[0] == wire.READY]

    wait_until(lambda: len(readies()) >= 3, 5, interval=0.01, what="READY to be sent again while waiting")
    assert all(m == (wire.READY, 1, 1, {"worker": "n1:1", "copy": ex.handover.copy_id}) for m in readies())
    ex.ctl_q.put((wire.GONE, -1, {"worker": "n2:1"}))
    wait_until(lambda: not ex.handover.awaiting, 2, interval=0.01, what="the copy to start empty after GONE")
    assert _lost(worker) == [True]
    ex.data_q.put((0, ([(1,), (2,)], None, None)))
    wait_until(lambda: ex.instance.state.get("n") == 2, 2, interval=0.01, what="the copy to process its input")


def test_a_state_that_arrives_in_time_is_taken_with_the_counters(running) -> None:
    worker = _host(plan_of(PLACES))
    ex = running(_waiting_sink(worker, wait_secs=30.0))
    ex.data_q.put((0, ([(1,)], None, None)))  # held until the state is in
    entry = {"state": wire.pack({"n": 41}), "sent_at": time.time(), "from": "n2:1", "error": None,
             "counters": {"executed": 41}, "copy": ex.handover.copy_id}
    ex.ctl_q.put((wire.STATE, 1, entry))
    wait_until(lambda: ex.instance.state.get("n") == 42, 2, interval=0.01, what="the held tuple to be processed on the state")
    assert _lost(worker) == [False]
    assert ex.executed == 42


def test_control_that_comes_before_the_state_is_applied_after_it_in_order(running) -> None:
    worker = _host(plan_of(PLACES))
    ex = _waiting_sink(worker, wait_secs=30.0)
    applied: list[tuple[int, int, Any, int]] = []
    apply = ex._apply_control

    def recording(kind: int, src: int, entries: Any) -> None:
        applied.append((kind, src, entries, ex.instance.state.get("n", 0)))
        apply(kind, src, entries)

    ex._apply_control = recording  # type: ignore[method-assign]
    running(ex)
    ex.ctl_q.put((wire.COMMITTED, 2, 7))
    ex.ctl_q.put((wire.COMMITTED, 2, 8))
    wait_until(lambda: ex.ctl_q.empty(), 2, interval=0.01, what="the waiting copy to read its control queue")
    assert applied == []  # held: they are about the state that has not come
    entry = {"state": wire.pack({"n": 41}), "sent_at": time.time(), "from": "n2:1", "error": None,
             "counters": {"executed": 41}, "copy": ex.handover.copy_id}
    ex.ctl_q.put((wire.STATE, 1, entry))
    wait_until(lambda: len(applied) == 2, 2, interval=0.01, what="the held control to be applied")
    assert applied == [(wire.COMMITTED, 2, 7, 41), (wire.COMMITTED, 2, 8, 41)]  # on the state, with their sender


def test_an_old_copy_hands_over_only_once_it_routes_by_the_plan_that_moved_it() -> None:
    """The worker marks a copy draining just before it swaps in the plan's routing table. A copy
    that handed over in between sent its state to its own worker (the old table's place for it),
    where nobody took it: its new copy was told GONE and started empty (found by random moves)."""
    here = {"numbers:0": "n1:1", "sink:0": "n2:1", "__acker:0": "n2:1"}
    worker = _host(plan_of(here), worker_id="n2:1")
    ex = BoltExecutor(worker, "sink:0", 1, Sink, _definition())  # type: ignore[arg-type]
    ex.refresh_routing()  # v1: sink:0 runs here
    moved = plan_of({**here, "sink:0": "n1:1"}, version=2)
    ex.handover.begin_drain([0], timeout=0.0, version=moved.version)  # DK already over, all in
    ex.handover.on_marker(0)
    ex.handover.ready_seen = True
    assert not ex.handover.drained(input_empty=True), "its loop still routes by v1"
    worker.routing = RoutingTable.from_plan(moved)  # the swap
    ex.refresh_routing()  # the loop's next pass
    assert ex.handover.drained(input_empty=True)
    ex.handover.hand_over()
    states = [(wid, m) for wid, m in worker.sockets.control_messages() if m[0] == wire.STATE]
    assert [wid for wid, _ in states] == ["n1:1"], "the state goes to the new place"


def test_a_state_in_parts_is_taken_whole_and_parts_that_do_not_fit_start_the_copy_empty(running) -> None:
    entry = {"state": wire.pack({"n": 41, "blob": bytes(range(256)) * 40}), "sent_at": time.time(), "from": "n2:1",
             "error": None, "counters": {"executed": 41}}
    assert state_parts(entry) is None  # fits a message: one STATE, as ever
    assert state_parts({"state": b"", "windows": b"w" * 3000}, part_bytes=1000)  # whatever is large in it
    parts = state_parts(entry, part_bytes=1000)
    assert parts is not None and len(parts) > 5 and [p["seq"] for p in parts] == list(range(len(parts)))
    assert b"".join(p["data"] for p in parts) == wire.pack(entry)

    worker = _host(plan_of(PLACES))
    ex = running(_waiting_sink(worker, wait_secs=30.0))
    ex.data_q.put((0, ([(1,)], None, None)))  # held until the whole state is in
    for part in parts:
        ex.ctl_q.put((wire.STATE_PART, 1, wire.unpack(wire.pack(part))))  # as the control socket decodes it
    wait_until(lambda: ex.instance.state.get("n") == 42, 2, interval=0.01, what="the held tuple to be processed")
    assert ex.instance.state["blob"] == bytes(range(256)) * 40 and _lost(worker) == [False] and ex.executed == 42

    other = _host(plan_of(PLACES))
    gap = running(_waiting_sink(other, wait_secs=30.0))
    gap.ctl_q.put((wire.STATE_PART, 1, parts[0]))
    gap.ctl_q.put((wire.STATE_PART, 1, parts[2]))  # part 2 never came: no state can be made
    wait_until(lambda: not gap.handover.awaiting, 2, interval=0.01, what="the copy to start empty")
    assert _lost(other) == [True]


def test_state_parts_restart_at_the_first_and_refuse_garbage() -> None:
    parts = state_parts({"state": b"x" * 5000, "counters": {}}, part_bytes=2000)
    assert parts is not None
    collector = StateParts()
    assert collector.add(parts[0]) is None and collector.add(parts[1]) is None
    assert collector.add(parts[0]) is None  # a hand-over that started again: from its first part
    other = state_parts({"state": b"y" * 5000, "counters": {}}, part_bytes=2000)
    assert other is not None and other[1]["id"] != parts[1]["id"]
    assert collector.add(other[1]) is None  # a part of another hand-over, whose first never came: not joined
    assert [collector.add(p) for p in parts[1:]][-1] == {"state": b"x" * 5000, "counters": {}}
    for garbage in ([1, 2], {"seq": "0", "parts": 1, "data": b""}, {"seq": 0, "parts": 0, "data": b""},
                    {"seq": 0, "parts": 1, "data": b"\xc1"}):
        with pytest.raises(ValueError):
            StateParts().add(garbage)


# -- the old place's answer to READY --------------------------------------------------------------
def test_the_old_place_answers_gone_unless_the_state_went_to_that_copy() -> None:
    gone: list[tuple[str, int, Any]] = []
    desk = MigrationDesk("n2:1", lambda wid, task, entries: gone.append((wid, task, entries)))
    ready = {"worker": "n1:1", "copy": 7}
    desk.answer_ready(1, ready)  # never hosted here since it started (a restarted worker)
    assert gone == [("n1:1", 1, {"worker": "n2:1"})]

    gone.clear()
    desk.handed_over(1, "n1:1", 7)  # the state went to that very copy: it is on its way
    desk.answer_ready(1, ready)
    desk.handed_over(1, "n1:1", None)  # sent before the copy announced itself: also on its way
    desk.answer_ready(1, ready)
    assert gone == []

    desk.handed_over(1, "n1:1", 5)  # to an earlier incarnation of the copy's worker
    desk.answer_ready(1, ready)
    desk.handed_over(1, "n3:1", None)  # to another worker
    desk.answer_ready(1, ready)
    assert [task for _wid, task, _e in gone] == [1, 1]

    gone.clear()
    desk.answer_ready(1, "garbage")
    desk.answer_ready(1, {"worker": 5})
    assert gone == []


# -- a spout's timeouts while it is held back ------------------------------------------------------
def _spout(worker: FakeHost) -> SpoutExecutor:
    ex = SpoutExecutor(worker, "numbers:0", 0, Numbers, _definition())  # type: ignore[arg-type]
    return ex


@pytest.mark.parametrize("held_by", ["backpressure", "inactive", "max_pending", "full_pipe"])
def test_spout_timeouts_fire_whatever_holds_the_spout_back(running, held_by: str) -> None:
    """Tracked tuples nobody acks time out and are failed on time while the spout may not emit."""
    ports = {"n2:1": free_port("127.0.0.1")}  # nobody listens there: its pipe fills and stays full
    places = {"numbers:0": "n1:1", "sink:0": "n2:1" if held_by == "full_pipe" else "n1:1", "__acker:0": "n1:1"}
    conf = {"topology.message.timeout.secs": 1, "topology.batch.adaptive": False, "topology.batch.size": 1,
            "topology.max.spout.pending": 50 if held_by == "max_pending" else 0}
    worker = _host(plan_of(places, ports), real_sockets=held_by == "full_pipe", **conf)
    ex = _spout(worker)
    spout: Numbers = ex.instance
    running(ex)
    if held_by in ("backpressure", "inactive"):
        wait_until(lambda: spout.next >= 50, 5, interval=0.01, what="tuples")
        worker.throttled = held_by == "backpressure"
        worker.active = held_by != "inactive"
    if held_by == "full_pipe":
        wait_until(lambda: ex.outbox.courier.backlog, 5, interval=0.01, what="the pipe to the sink to fill")
    emitted = wait_until(lambda: (n := spout.next) and time.sleep(0.2) is None and spout.next == n and n, 5,
                         interval=0.01, what="the spout to be held back")
    assert emitted >= (DATA_HWM if held_by == "full_pipe" else 50)
    wait_until(lambda: len(spout.failed) >= emitted, 6, interval=0.01, what=f"every tuple to time out (held by {held_by})")
    assert sorted(spout.failed[:emitted]) == list(range(emitted))


# -- sends to a peer that takes nothing ------------------------------------------------------------
def test_a_full_pipe_never_blocks_and_its_messages_leave_in_order_once_the_peer_is_up(running) -> None:
    port = free_port("127.0.0.1")
    places = {"numbers:0": "n1:1", "sink:0": "n2:1", "__acker:0": "n1:1"}
    worker = _host(plan_of(places, {"n2:1": port}), real_sockets=True, acking=False,
                   **{"topology.batch.adaptive": False, "topology.batch.size": 1})
    ex = _spout(worker)
    ex.setup()
    outbox, courier = ex.outbox, ex.outbox.courier
    for i in range(DATA_HWM * 3):
        outbox.emit((i,))  # a batch of one each: sent at once, or held
    assert courier.backlog and sum(len(q) for q in courier.backlog.values()) >= DATA_HWM
    assert not courier.drain()
    pull = worker.sockets.context.socket(zmq.PULL)
    pull.bind(f"tcp://127.0.0.1:{port}")
    try:
        got: list[int] = []
        deadline = time.monotonic() + 10
        while len(got) < DATA_HWM * 3 and time.monotonic() < deadline:
            courier.drain()
            if pull.poll(10):
                _header, payload = pull.recv_multipart()
                got.extend(v[0] for v in wire.decode_batch(payload)[0])
        assert got == list(range(DATA_HWM * 3))
        assert not courier.backlog and courier.undelivered == 0
    finally:
        pull.close(linger=0)


def test_messages_for_a_worker_that_left_the_plan_are_dropped() -> None:
    port = free_port("127.0.0.1")
    places = {"numbers:0": "n1:1", "sink:0": "n2:1", "__acker:0": "n1:1"}
    worker = _host(plan_of(places, {"n2:1": port}), real_sockets=True, acking=False,
                   **{"topology.batch.adaptive": False, "topology.batch.size": 1})
    ex = _spout(worker)
    ex.setup()
    courier = ex.outbox.courier
    for i in range(DATA_HWM * 2):
        ex.outbox.emit((i,))
    held = sum(len(q) for q in courier.backlog.values())
    assert held
    courier.routing = RoutingTable.from_plan(plan_of({**places, "sink:0": "n1:1"}))  # n2:1 left the plan
    assert courier.drain()
    assert courier.undelivered == held


# -- stall detection ---------------------------------------------------------------------------------
def _beat(**executors: dict[str, Any]) -> Heartbeat:
    return Heartbeat("w", 1, 0.0, 1, executors={eid.replace("_", ":"): c for eid, c in executors.items()})


def test_a_stall_is_pending_tuples_and_no_ack_for_two_message_timeouts() -> None:
    from nstorm.stall import find_stall

    now = 1000.0
    spout = {"kind": "spout", "pending": 300, "started_at": now - 100, "last_acked_at": now - 21, "queue": 0}
    beats = {"n1:1": _beat(numbers_0=spout, sum_1={"kind": "bolt", "queue": 40, "awaiting_state": True}),
             "n2:1": _beat(sum_0={"kind": "bolt", "queue": 0}, __acker_0={"kind": "acker", "pending": 9})}
    stall = find_stall(beats, timeout_secs=10, now=now)
    assert stall == {"since": now - 21, "pending": 300, "holding_input": ["sum:1"], "waiting_for_state": ["sum:1"],
                     "holding_windows": []}
    assert find_stall(beats, timeout_secs=11, now=now) is None  # 21 s is less than two timeouts
    beats["n1:1"].executors["numbers:0"] = {**spout, "pending": 0}
    assert find_stall(beats, timeout_secs=10, now=now) is None  # nothing pending: idle, not stalled
    restarted = {**spout, "started_at": now - 5, "last_acked_at": None}
    beats["n1:1"].executors["numbers:0"] = restarted
    assert find_stall(beats, timeout_secs=10, now=now) is None  # started 5 s ago: not yet
    beats["n3:1"] = _beat(numbers_1={**spout, "last_acked_at": now - 1})
    beats["n1:1"].executors["numbers:0"] = spout
    assert find_stall(beats, timeout_secs=10, now=now) is None  # another spout acks: the topology moves


def test_a_stall_names_the_windows_that_hold_the_spouts_tuples() -> None:
    """Spouts at their pending cap whose tuples sit in windows that wait for newer tuples: no
    queue holds anything, the windows do, and the stall says which."""
    from nstorm.stall import find_stall

    now = 1000.0
    spout = {"kind": "spout", "pending": 2000, "started_at": now - 100, "last_acked_at": now - 70, "queue": 0}
    window = {"watermark": now - 75, "open_windows": 3, "tuples": 2000, "late_tuples": 0, "fired": 4}
    beats = {"n1:1": _beat(numbers_0=spout, sum_0={"kind": "bolt", "queue": 0, "window": window}),
             "n2:1": _beat(sum_1={"kind": "bolt", "queue": 0, "window": {**window, "tuples": 0, "open_windows": 0}},
                           other_0={"kind": "bolt", "queue": 0, "window": "garbage"})}
    stall = find_stall(beats, timeout_secs=30, now=now)
    assert stall is not None and stall["holding_windows"] == ["sum:0"] and stall["holding_input"] == []


def test_the_watchdog_reads_heartbeats_every_few_seconds_and_logs_a_stall_once_a_minute(caplog) -> None:
    from nimbus.watchdog import StallWatchdog

    clock = [0.0]
    reads = []
    stalled = {"n1:1": _beat(numbers_0={"kind": "spout", "pending": 5, "started_at": 0.0, "last_acked_at": None})}

    def read() -> tuple[float, dict[str, Any]]:
        reads.append(clock[0])
        return 1.0, stalled

    dog = StallWatchdog(clock=lambda: clock[0])
    with caplog.at_level("WARNING", logger="nimbus.watchdog"):
        for t in range(0, 130):
            clock[0] = float(t)
            dog.check("t", read)
    assert reads == [float(t) for t in range(0, 130, 5)]
    assert [r.getMessage().startswith("topology t stalled") for r in caplog.records] == [True, True, True]


def test_a_sink_whose_input_always_waits_still_sends_its_acks(running) -> None:
    """A sink has no data to carry its acks at the data deadline: they leave at their own
    deadline even while input waits (else they would wait until its spouts stopped at their
    pending cap and its queue ran dry)."""
    places = {"numbers:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1"}
    worker = _host(plan_of(places))
    ex = BoltExecutor(worker, "sink:0", 1, Sink, _definition())  # type: ignore[arg-type]
    data = ex.data_q
    for i in range(20_000):  # far more than the sink takes before its acks are due
        root = (i + 1) << wire.ROOT_TASK_BITS  # a tree of the spout task 0, kept by acker 0
        data.put((0, ([(i,)] * 10, [10, [root, 7]], None)))
    running(ex)
    acks: list[Any] = []

    def acked() -> bool:
        acks.extend(worker.take(2, control=True))
        return bool(acks) or data.empty()

    wait_until(acked, 30, interval=0.001, what="the sink's first acks or its last input")
    left = data.qsize()
    assert acks, "the sink sent no ack before its queue ran dry"
    assert left > 0 and acks[0][0] == wire.ACK


def test_a_copy_that_handed_over_takes_no_more_frames_they_are_stashed_for_its_new_place(tmp_path) -> None:
    """A moved-away copy stays in the worker's ``draining`` until the main loop reaps it; frames
    given to it after its hand-over would sit in a queue nobody reads. The worker stashes them
    instead, to forward them where the task runs now."""
    import types

    from worker.process import Worker

    worker = Worker("n1", 1, "t", tmp_path / "store", None, "/nstorm")
    draining = types.SimpleNamespace(handed_over=False, inbox=object())
    worker.draining[5] = draining  # type: ignore[assignment]
    assert worker.inbox(5) is draining.inbox, "still draining: its input is its own"
    draining.handed_over = True
    assert worker.inbox(5) is None, "handed over: nothing more for it (the receivers stash it)"


def test_a_stall_names_an_incremental_window_that_holds_acks_but_no_tuples() -> None:
    from nstorm.stall import find_stall

    now = 1000.0
    spout = {"kind": "spout", "pending": 2000, "started_at": now - 100, "last_acked_at": now - 70, "queue": 0}
    incremental = {"watermark": now - 75, "open_windows": 3, "tuples": 0, "fired": 4, "holds_acks": True}
    durable = {**incremental, "holds_acks": False}  # acked on arrival: holds nothing
    beats = {"n1:1": _beat(numbers_0=spout, sum_0={"kind": "bolt", "queue": 0, "window": incremental},
                           avg_0={"kind": "bolt", "queue": 0, "window": durable})}
    stall = find_stall(beats, timeout_secs=30, now=now)
    assert stall is not None and stall["holding_windows"] == ["sum:0"]
