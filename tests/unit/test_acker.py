"""The acker executor and the choice of acker: handled in the putting thread, local to the spout.

An acker has no queue to wait on: what a local bolt or the control receiver puts on its
``ctl_q`` is handled at once, under its lock, and its answers leave at once. A spout picks
the bits of its roots so that they map to an acker in its own worker. These tests run
real executors in the test process (no worker, no sockets); a fake worker records the
control messages the acker sends.
"""

from __future__ import annotations

import random
import threading
from typing import Any

from nstorm import Bolt, Spout, TopologyBuilder, latency
from worker import wire
from worker.acker import AckerExecutor
from worker.routing import RoutingTable
from worker.spout import SpoutExecutor

from fakes import FakeHost, plan_of


class Sentences(Spout):
    outputs = ("sentence",)


class Sink(Bolt):
    outputs = ()


def _definition() -> dict[str, Any]:
    builder = TopologyBuilder("t")
    builder.set_spout("sentences", Sentences)
    builder.set_bolt("sink", Sink).shuffle_grouping("sentences")
    return builder.build(workers=2).definition


_plan = plan_of


PLACES = {"sentences:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1"}  # tasks 0, 1, 2


def test_an_acker_handles_a_message_in_the_thread_that_puts_it() -> None:
    """No acker thread runs here: the answer is there as soon as ``put`` returns."""
    worker = FakeHost(_plan(PLACES))
    acker = AckerExecutor(worker, "__acker:0", 2)  # type: ignore[arg-type]
    root = 12345 << wire.ROOT_TASK_BITS | 0  # a tree of the spout, task 0
    acker.ctl_q.put((wire.ACK, 1, [(root, 0b1010)]))
    assert worker.take(0, control=True) == [] and acker.counters()["pending"] == 1
    acker.ctl_q.put((wire.ACK, 1, [(root, 0b1010)]))  # the XOR returns to zero: complete
    assert worker.take(0, control=True) == [(wire.ACKED, 2, [root])]
    other = 777 << wire.ROOT_TASK_BITS | 0
    acker.ctl_q.put((wire.FAIL, 1, [other]))
    acker.ctl_q.put((wire.ACK, 1, [(other, 5), (other, 5)]))  # late acks of a failed tree: ignored
    assert worker.take(0, control=True) == [(wire.FAILED, 2, [other])]
    assert acker.acked == 1 and acker.failed == 1 and acker.counters()["queue"] == 0


def test_an_acker_fed_from_many_threads_completes_every_tree_once() -> None:
    """Two edges per tree, acked by different threads in random order: each tree completes once."""
    worker = FakeHost(_plan(PLACES))
    acker = AckerExecutor(worker, "__acker:0", 2)  # type: ignore[arg-type]
    rng = random.Random(7)
    roots = [rng.getrandbits(40) << wire.ROOT_TASK_BITS for _ in range(4000)]
    edges = {r: (rng.getrandbits(64) | 1, rng.getrandbits(64) | 1) for r in roots}
    entries = [(r, e) for r in roots for e in (edges[r][0], edges[r][0] ^ edges[r][1], edges[r][1])]
    rng.shuffle(entries)
    parts = [entries[i::4] for i in range(4)]

    def feed(part: list[tuple[int, int]]) -> None:
        for i in range(0, len(part), 7):
            acker.ctl_q.put((wire.ACK, 1, part[i:i + 7]))

    threads = [threading.Thread(target=feed, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [root for kind, _src, batch in worker.take(0, control=True) if kind == wire.ACKED for root in batch]
    assert sorted(done) == sorted(roots)
    assert acker.acked == len(roots) and acker.counters()["pending"] == 0


def test_a_stopped_acker_drops_what_is_put_on_it() -> None:
    worker = FakeHost(_plan(PLACES))
    acker = AckerExecutor(worker, "__acker:0", 2)  # type: ignore[arg-type]
    acker.stop()
    acker.ctl_q.put((wire.ACK, 1, [(99 << wire.ROOT_TASK_BITS, 0)]))
    assert worker.take(0, control=True) == [] and acker.executed == 0


def test_a_moved_acker_hands_its_open_trees_over_and_sends_on_what_reaches_it_later() -> None:
    """Nimbus moves the ackers off a worker it releases: the old copy's table merges into the new
    copy's (XOR commutes), so every tree completes once, wherever its acks went."""
    moved = {**PLACES, "__acker:0": "n2:1"}
    old_host = FakeHost(_plan(PLACES))
    old = AckerExecutor(old_host, "__acker:0", 2)  # type: ignore[arg-type]
    new_host = FakeHost(_plan(moved), worker_id="n2:1")
    new = AckerExecutor(new_host, "__acker:0", 2)  # type: ignore[arg-type]
    rng = random.Random(3)
    roots = [rng.getrandbits(40) << wire.ROOT_TASK_BITS for _ in range(50)]
    edges = {r: (rng.getrandbits(64) | 1, rng.getrandbits(64) | 1) for r in roots}
    for r in roots:
        old.ctl_q.put((wire.ACK, 1, [(r, edges[r][0])]))  # before the move: each tree's first ack
    old_host.routing = RoutingTable.from_plan(_plan(moved))  # the worker's swap, then the hand-over
    assert old.hand_over() == 50 and old.counters()["pending"] == 0
    late = roots[:10]
    old.ctl_q.put((wire.ACK, 1, [(r, edges[r][0] ^ edges[r][1]) for r in late]))  # sent before the senders swapped
    sent = [(wid, m) for wid, m in old_host.sockets.control_messages()]
    assert [(wid, m[0]) for wid, m in sent] == [("n2:1", wire.ACKER_TABLE), ("n2:1", wire.ACK)]
    for _wid, (kind, dst, _src, entries) in sent:
        assert dst == 2 and wire.control_entries_ok(kind, tuple(tuple(e) for e in entries))
        new.ctl_q.put((kind, 2, entries))
    new.ctl_q.put((wire.ACK, 1, [(r, edges[r][0] ^ edges[r][1]) for r in roots[10:]]))
    new.ctl_q.put((wire.ACK, 1, [(r, edges[r][1]) for r in roots]))  # the leaves
    answers = new_host.sockets.control_messages()  # to the spout, in the old worker
    done = [root for wid, (kind, dst, _src, batch) in answers if kind == wire.ACKED for root in batch]
    assert sorted(done) == sorted(roots) and new.counters()["pending"] == 0
    assert old.acked == 0 and old_host.take(0, control=True) == []


def _spout(worker: FakeHost, task: int = 0) -> SpoutExecutor:
    ex = SpoutExecutor(worker, "sentences:0", task, Sentences, _definition())  # type: ignore[arg-type]
    ex.setup()
    return ex


def _ackers_of(ex: SpoutExecutor, n: int = 300) -> set[int]:
    """The acker tasks the next ``n`` roots of ``ex`` map to (stamped ones included)."""
    ackers = ex.routing.ackers  # type: ignore[union-attr]
    out = set()
    for i in range(n):
        ex.now = float(i)  # every other root is due a stamp
        ex.next_stamp = float(i) if i % 2 else float(i) + 1
        root = ex._root()
        assert wire.root_task(root) == ex.task
        assert (root >= latency.STAMPED) == bool(i % 2)
        out.add(ackers[wire.acker_index(root, len(ackers))])
    return out


def test_a_spout_sends_its_trees_to_the_acker_in_its_own_worker() -> None:
    places = {"sentences:0": "n2:1", "sink:0": "n1:1", "__acker:0": "n1:1", "__acker:1": "n2:1",
              "__acker:2": "n1:1"}
    worker = FakeHost(_plan(places), worker_id="n2:1")
    ex = _spout(worker)
    assert _ackers_of(ex) == {3}  # __acker:1, the one in n2:1


def test_a_moved_spout_picks_its_new_workers_acker_and_old_trees_keep_theirs() -> None:
    places = {"sentences:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1", "__acker:1": "n2:1"}
    worker = FakeHost(_plan(places), worker_id="n1:1")
    ex = _spout(worker)
    old_roots = [ex._root() for _ in range(50)]
    assert _ackers_of(ex) == {2}
    worker.routing = RoutingTable.from_plan(_plan({**places, "sentences:0": "n2:1"}))
    worker.worker_id = "n2:1"  # the copy in the new worker sees itself there
    ex.refresh_routing()
    assert _ackers_of(ex) == {3}
    assert {wire.acker_index(r, 2) for r in old_roots} == {0}  # the choice is in the root itself


def test_a_spout_without_an_acker_in_its_worker_spreads_its_trees() -> None:
    places = {"sentences:0": "n3:1", "sink:0": "n1:1", "__acker:0": "n1:1", "__acker:1": "n2:1"}
    worker = FakeHost(_plan(places), worker_id="n3:1")
    ex = _spout(worker)
    assert _ackers_of(ex) == {2, 3}


def test_a_hand_over_keeps_the_groups_whose_message_ids_can_travel() -> None:
    """A moved spout's tracked tuples go with its state; a group whose ids are not msgpack data
    stays behind (logged), and the others still go."""
    worker = FakeHost(_plan(PLACES))
    ex = _spout(worker)
    ex.pending = {11 << wire.ROOT_TASK_BITS: [1, 2], 12 << wire.ROOT_TASK_BITS: [object()],
                  13 << wire.ROOT_TASK_BITS: ["a"]}
    moved = ex.snapshot_extra()["pending"]
    assert [(root >> wire.ROOT_TASK_BITS, ids) for root, ids, _left in moved] == [(11, [1, 2]), (13, ["a"])]
    wire.pack(moved)
