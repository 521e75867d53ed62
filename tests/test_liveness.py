"""Waits in the worker end by their deadlines, whatever arrives meanwhile (issue: stall after a move).

Unit tests with real executors and real zmq sockets in the test process, and a fake worker:
a moved-in copy waiting for its state, the old place's answer to a copy that asks for a state
it no longer has, a spout's timeouts while something holds it back, and sends to a peer that
takes nothing (its pipe is full) that never block an executor's thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from nstorm import Bolt, Spout, TopologyBuilder
from nstorm.config import merge_conf
from nstorm.net import free_port
from worker import wire
from worker.executor import BoltExecutor, SpoutExecutor
from worker.process import Worker
from worker.routing import RoutingTable
from worker.transport import DATA_HWM


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


def _plan(places: dict[str, str], ports: dict[str, int] | None = None) -> dict[str, Any]:
    """``places``: executor id -> worker id, the task ids in this order; ``ports``: data ports."""
    workers = {}
    for i, w in enumerate(sorted(set(places.values()))):
        port = (ports or {}).get(w, 1 + i)
        workers[w] = {"node": w.split(":")[0], "host": "127.0.0.1", "port": port, "ctl_port": port + 1}
    return {"version": 1, "tasks": list(places), "executors": dict(places), "workers": workers}


class _Transport:
    """Real zmq sockets, made the way the worker's transport makes them."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        _transports.append(self)
        self.sent_control: list[tuple[str, int, int, Any]] = []

    def data_socket(self, endpoint: Any) -> zmq.Socket:
        sock = self.context.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, DATA_HWM)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint.data_address)
        return sock

    def send_control(self, wid: str, kind: int, dst: int, entries: Any) -> None:
        self.sent_control.append((wid, kind, dst, entries))

    def close(self) -> None:
        self.context.destroy(linger=0)  # closes every socket made here too


_transports: list[_Transport] = []


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    """Every zmq context a test made is destroyed, even on failure (an open one hangs the exit)."""
    yield
    while _transports:
        _transports.pop().close()


class _Worker:
    """What executors need of a worker; every local destination is a plain queue."""

    def __init__(self, plan: dict[str, Any], worker_id: str = "n1:1", **conf: Any) -> None:
        self.conf = merge_conf(conf)
        self.acking = True
        self.worker_id = worker_id
        self.routing = RoutingTable.from_plan(plan)
        self.data: dict[int, queue.SimpleQueue[Any]] = {}
        self.controls: dict[int, queue.SimpleQueue[Any]] = {}
        self.active = True
        self.throttled = False
        self.transport = _Transport()
        self.done: list[tuple[str, float, bool]] = []
        self.handovers: list[tuple[int, str, Any]] = []

    def _local(self, wid: str) -> bool:
        return wid == self.worker_id

    def local_target(self, dst: int, wid: str) -> Any:
        if not self._local(wid):
            return None

        class _Target:
            data_q = self.data.setdefault(dst, queue.SimpleQueue())
            in_size = 0

        return _Target

    def local_queue(self, dst: int, wid: str) -> Any:
        return self.data.setdefault(dst, queue.SimpleQueue()) if self._local(wid) else None

    def local_control(self, dst: int, wid: str) -> Any:
        return self.controls.setdefault(dst, queue.SimpleQueue())

    def migration_done(self, ex: Any, stall: float, lost: bool) -> None:
        self.done.append((ex.executor_id, stall, lost))

    def handed_over(self, task: int, to: str, copy: Any) -> None:
        self.handovers.append((task, to, copy))


def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.01)


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
MOVE = {"from": "n2:1", "to": "n1:1", "mode": "thread", "version": 2, "record": "m-1"}
PLACES = {"numbers:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1"}  # tasks 0, 1, 2


def _waiting_sink(worker: _Worker, wait_secs: float) -> BoltExecutor:
    ex = BoltExecutor(worker, "sink:0", 1, Sink, _definition())  # type: ignore[arg-type]
    ex.await_state(wait_secs, MOVE)
    return ex


def test_the_state_wait_ends_at_its_deadline_however_much_control_traffic_comes(running) -> None:
    worker = _Worker(_plan(PLACES))
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
        _wait(lambda: worker.done, 10, "the copy to give up waiting")
        assert time.monotonic() - began < 5
        assert worker.done == [("sink:0", 0.0, True)]  # started empty, reported as a lost state
    finally:
        stop.set()
        feeder.join()


def test_a_waiting_copy_asks_again_and_starts_empty_at_once_when_told_gone(running) -> None:
    worker = _Worker(_plan(PLACES))
    ex = running(_waiting_sink(worker, wait_secs=30.0))
    asked = worker.controls.setdefault(1, queue.SimpleQueue())  # READY goes to task 1 at n2:1

    seen: list[Any] = []

    def readies() -> bool:
        while not asked.empty():
            seen.append(asked.get())
        return len(seen) >= 3

    _wait(readies, 5, "READY to be sent again while waiting")
    assert all(m == (wire.READY, 1, {"worker": "n1:1", "copy": ex.copy_id}) for m in seen)
    ex.ctl_q.put((wire.GONE, -1, {"worker": "n2:1"}))
    _wait(lambda: worker.done, 2, "the copy to start empty after GONE")
    assert worker.done == [("sink:0", 0.0, True)]
    ex.data_q.put((0, ([(1,), (2,)], None, None)))
    _wait(lambda: ex.instance.state.get("n") == 2, 2, "the copy to process its input")


def test_a_state_that_arrives_in_time_is_taken_with_the_counters(running) -> None:
    worker = _Worker(_plan(PLACES))
    ex = running(_waiting_sink(worker, wait_secs=30.0))
    ex.data_q.put((0, ([(1,)], None, None)))  # held until the state is in
    entry = {"state": wire.pack({"n": 41}), "sent_at": time.time(), "from": "n2:1", "error": None,
             "counters": {"executed": 41}, "copy": ex.copy_id}
    ex.ctl_q.put((wire.STATE, 1, entry))
    _wait(lambda: ex.instance.state.get("n") == 42, 2, "the held tuple to be processed on the state")
    assert worker.done[0][0] == "sink:0" and worker.done[0][2] is False
    assert ex.executed == 42


# -- the old place's answer to READY --------------------------------------------------------------
def _old_place() -> tuple[Worker, _Transport]:
    worker = Worker("n2", 1, "t", store_path=None, zk_address=None, zk_root="/t")  # type: ignore[arg-type]
    transport = _Transport()
    worker.transport = transport  # type: ignore[assignment]
    return worker, transport


def test_the_old_place_answers_gone_unless_the_state_went_to_that_copy() -> None:
    worker, transport = _old_place()
    ready = {"worker": "n1:1", "copy": 7}
    worker.answer_ready(1, ready)  # never hosted here since it started (a restarted worker)
    assert transport.sent_control == [("n1:1", wire.GONE, 1, {"worker": "n2:1"})]

    transport.sent_control.clear()
    worker.handed_over(1, "n1:1", 7)  # the state went to that very copy: it is on its way
    worker.answer_ready(1, ready)
    worker.handed_over(1, "n1:1", None)  # sent before the copy announced itself: also on its way
    worker.answer_ready(1, ready)
    assert transport.sent_control == []

    worker.handed_over(1, "n1:1", 5)  # to an earlier incarnation of the copy's worker
    worker.answer_ready(1, ready)
    worker.handed_over(1, "n3:1", None)  # to another worker
    worker.answer_ready(1, ready)
    assert [m[1] for m in transport.sent_control] == [wire.GONE, wire.GONE]

    transport.sent_control.clear()
    worker.answer_ready(1, "garbage")
    worker.answer_ready(1, {"worker": 5})
    assert transport.sent_control == []


# -- a spout's timeouts while it is held back ------------------------------------------------------
def _spout(worker: _Worker) -> SpoutExecutor:
    ex = SpoutExecutor(worker, "numbers:0", 0, Numbers, _definition())  # type: ignore[arg-type]
    return ex


@pytest.mark.parametrize("held_by", ["backpressure", "inactive", "max_pending", "full_pipe"])
def test_spout_timeouts_fire_whatever_holds_the_spout_back(running, held_by: str) -> None:
    """Tracked tuples nobody acks time out and are failed on time while the spout may not emit."""
    ports = {"n2:1": free_port("127.0.0.1")}  # nobody listens there: its pipe fills and stays full
    places = {"numbers:0": "n1:1", "sink:0": "n2:1" if held_by == "full_pipe" else "n1:1", "__acker:0": "n1:1"}
    conf = {"topology.message.timeout.secs": 1, "topology.batch.adaptive": False, "topology.batch.size": 1,
            "topology.max.spout.pending": 50 if held_by == "max_pending" else 0}
    worker = _Worker(_plan(places, ports), **conf)
    ex = _spout(worker)
    spout: Numbers = ex.instance
    running(ex)
    if held_by in ("backpressure", "inactive"):
        _wait(lambda: spout.next >= 50, 5, "tuples")
        worker.throttled = held_by == "backpressure"
        worker.active = held_by != "inactive"
    if held_by == "full_pipe":
        _wait(lambda: ex.outbox.backlog, 5, "the pipe to the sink to fill")
    emitted = _wait(lambda: (n := spout.next) and time.sleep(0.2) is None and spout.next == n and n, 5,
                    "the spout to be held back")
    assert emitted >= (DATA_HWM if held_by == "full_pipe" else 50)
    _wait(lambda: len(spout.failed) >= emitted, 6, f"every tuple to time out (held by {held_by})")
    assert sorted(spout.failed[:emitted]) == list(range(emitted))


# -- sends to a peer that takes nothing ------------------------------------------------------------
def test_a_full_pipe_never_blocks_and_its_messages_leave_in_order_once_the_peer_is_up(running) -> None:
    port = free_port("127.0.0.1")
    places = {"numbers:0": "n1:1", "sink:0": "n2:1", "__acker:0": "n1:1"}
    worker = _Worker(_plan(places, {"n2:1": port}), **{"topology.batch.adaptive": False, "topology.batch.size": 1})
    worker.acking = False
    ex = _spout(worker)
    ex.setup()
    outbox = ex.outbox
    for i in range(DATA_HWM * 3):
        outbox.emit((i,))  # a batch of one each: sent at once, or held
    assert outbox.backlog and sum(len(q) for q in outbox.backlog.values()) >= DATA_HWM
    assert not outbox.drain_backlog()
    pull = worker.transport.context.socket(zmq.PULL)
    pull.bind(f"tcp://127.0.0.1:{port}")
    try:
        got: list[int] = []
        deadline = time.monotonic() + 10
        while len(got) < DATA_HWM * 3 and time.monotonic() < deadline:
            outbox.drain_backlog()
            if pull.poll(10):
                _header, payload = pull.recv_multipart()
                got.extend(v[0] for v in wire.decode_batch(payload)[0])
        assert got == list(range(DATA_HWM * 3))
        assert not outbox.backlog and outbox.undelivered == 0
    finally:
        pull.close(linger=0)


def test_messages_for_a_worker_that_left_the_plan_are_dropped() -> None:
    port = free_port("127.0.0.1")
    places = {"numbers:0": "n1:1", "sink:0": "n2:1", "__acker:0": "n1:1"}
    worker = _Worker(_plan(places, {"n2:1": port}), **{"topology.batch.adaptive": False, "topology.batch.size": 1})
    worker.acking = False
    ex = _spout(worker)
    ex.setup()
    for i in range(DATA_HWM * 2):
        ex.outbox.emit((i,))
    held = sum(len(q) for q in ex.outbox.backlog.values())
    assert held
    ex.outbox.routing = RoutingTable.from_plan(_plan({**places, "sink:0": "n1:1"}))  # n2:1 left the plan
    assert ex.outbox.drain_backlog()
    assert ex.outbox.undelivered == held


# -- stall detection ---------------------------------------------------------------------------------
def _beat(**executors: dict[str, Any]) -> dict[str, Any]:
    return {"executors": {eid.replace("_", ":"): c for eid, c in executors.items()}}


def test_a_stall_is_pending_tuples_and_no_ack_for_two_message_timeouts() -> None:
    from nstorm.stall import find_stall

    now = 1000.0
    spout = {"kind": "spout", "pending": 300, "started_at": now - 100, "last_acked_at": now - 21, "queue": 0}
    beats = {"n1:1": _beat(numbers_0=spout, sum_1={"kind": "bolt", "queue": 40, "awaiting_state": True}),
             "n2:1": _beat(sum_0={"kind": "bolt", "queue": 0}, __acker_0={"kind": "acker", "pending": 9})}
    stall = find_stall(beats, timeout_secs=10, now=now)
    assert stall == {"since": now - 21, "pending": 300, "holding_input": ["sum:1"], "waiting_for_state": ["sum:1"]}
    assert find_stall(beats, timeout_secs=11, now=now) is None  # 21 s is less than two timeouts
    beats["n1:1"]["executors"]["numbers:0"] = {**spout, "pending": 0}
    assert find_stall(beats, timeout_secs=10, now=now) is None  # nothing pending: idle, not stalled
    restarted = {**spout, "started_at": now - 5, "last_acked_at": None}
    beats["n1:1"]["executors"]["numbers:0"] = restarted
    assert find_stall(beats, timeout_secs=10, now=now) is None  # started 5 s ago: not yet
    beats["n3:1"] = _beat(numbers_1={**spout, "last_acked_at": now - 1})
    beats["n1:1"]["executors"]["numbers:0"] = spout
    assert find_stall(beats, timeout_secs=10, now=now) is None  # another spout acks: the topology moves


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
