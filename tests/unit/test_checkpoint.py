"""An executor's side of checkpoints, without a cluster: barrier alignment in a real bolt
executor, keyed state's change tracking, incremental snapshots into a real LMDB store, and a
restore that maps key groups to their owners whatever the layout was."""

from __future__ import annotations

import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from nstorm import Bolt, Spout, TopologyBuilder
from nstorm.state.config import StateConfig
from nstorm.state.keyed import KeyedState, key_group, owned_groups, owner_of
from nstorm.state.lmdb_store import LMDBStateStore
from nstorm.state.store import StateError, unpack_snapshot
from worker import wire
from worker.bolt import BoltExecutor
from worker.checkpoint import BarrierAligner

from fakes import FakeHost, plan_of


class Numbers(Spout):
    outputs = ("n",)


class Sum(Bolt):
    outputs = ("n",)

    def process(self, tup: Any) -> None:
        n = tup["n"]
        self.keyed_state[n] = self.keyed_state.get(n, 0) + n
        self.state["seen"] = self.state.get("seen", 0) + 1
        self.emit((n,))


class Sink(Bolt):
    outputs = ()

    def process(self, tup: Any) -> None:
        pass


def _definition(sums: int = 1) -> dict[str, Any]:
    builder = TopologyBuilder("t")
    builder.set_spout("numbers", Numbers, parallelism=2)
    builder.set_bolt("sum", Sum, parallelism=sums).fields_grouping("numbers", ["n"])
    builder.set_bolt("sink", Sink).shuffle_grouping("sum")
    return builder.build(workers=1).definition


class Checkpoints:
    """A worker's checkpoints (worker.host.Checkpoints) over a real LMDB store."""

    def __init__(self, path: Path) -> None:
        self.store = LMDBStateStore(StateConfig(provider="lmdb", directory=path), "t-1")
        self.groups = 128
        self.tainted = False
        self.requests: list[str] = []

    def write(self, cid: int, executor: str, blob: bytes, groups: Any) -> int:
        return self.store.write(cid, executor, blob, groups)

    def read(self, cid: int, executor: str) -> bytes | None:
        return self.store.executor(cid, executor)

    def chain(self, component: str, group: int, upto: int) -> list[tuple[int, bool, bytes]]:
        return self.store.group_chain(component, group, upto)

    def request_rollback(self, reason: str) -> None:
        self.tainted = True
        self.requests.append(reason)


PLACES = {"numbers:0": "n1:1", "numbers:1": "n1:1", "sum:0": "n1:1", "sink:0": "n1:1", "__acker:0": "n1:1"}


@pytest.fixture
def bolt(tmp_path: Path) -> Any:
    host = FakeHost(plan_of(PLACES), acking=False)
    host.checkpoints = Checkpoints(tmp_path)
    ex = BoltExecutor(host, "sum:0", 2, Sum, _definition())  # type: ignore[arg-type]
    ex.setup()
    yield ex
    host.checkpoints.store.close()


def _batch(*ns: int) -> tuple[list[tuple[int]], None, None]:
    return [(n,) for n in ns], None, None


def _sink_items(ex: Any) -> list[Any]:
    inbox = ex.host.inbox(3)
    out = []
    while not inbox.data.empty():
        out.append(inbox.data.get())
    return out


def test_a_bolt_aligns_barriers_holds_what_comes_after_and_passes_the_barrier_on(bolt) -> None:
    bolt.take(0, _batch(1, 2))
    bolt.take(0, 1)  # numbers:0's barrier for checkpoint 1
    bolt.take(0, _batch(100))  # after the barrier: held
    bolt.take(1, _batch(3))  # numbers:1 has not sent its barrier: processed
    assert dict(bolt.instance.keyed_state) == {1: 1, 2: 2, 3: 3}
    assert bolt.checkpoint.written == 0
    bolt.take(1, 1)  # aligned: snapshot, barrier on, then the held batch
    assert bolt.checkpoint.written == 1
    assert dict(bolt.instance.keyed_state) == {1: 1, 2: 2, 3: 3, 100: 100}
    store = bolt.host.checkpoints.store
    assert unpack_snapshot(store.executor(1, "sum:0"))["state"] == {"seen": 3}  # not the held tuple
    # The sink got the three tuples processed before the barrier, then the barrier, then 100.
    items = _sink_items(bolt)
    kinds = ["barrier" if type(b) is int else [v[0] for v in b[0]] for _src, b in items]
    assert kinds[-2:] == ["barrier", [100]] and sorted(n for k in kinds[:-2] for n in k) == [1, 2, 3]


def test_a_barrier_in_the_executor_loop_is_no_error(bolt) -> None:
    """The aligning barrier, taken first in a loop iteration, flushes the outbox and clears the
    flush deadline the loop then reads to keep taking input: that was a TypeError (float < None)
    recorded at every checkpoint (``last_error`` in status)."""
    thread = threading.Thread(target=bolt.loop, daemon=True)

    def wait(what: Any) -> None:
        deadline = time.monotonic() + 10
        while not what() and time.monotonic() < deadline:
            time.sleep(0.01)

    for item in [(0, _batch(1)), (0, 1), (1, _batch(2))]:
        bolt.data_q.put(item)
    thread.start()
    try:
        wait(lambda: 2 in bolt.instance.keyed_state and bolt.data_q.empty())
        bolt.data_q.put((1, 1))  # alone: the first item of an iteration
        wait(lambda: bolt.checkpoint.written == 1)
        bolt.data_q.put((0, _batch(3)))
        wait(lambda: 3 in bolt.instance.keyed_state)
    finally:
        bolt.stop()
        thread.join(5)
    assert bolt.checkpoint.written == 1 and dict(bolt.instance.keyed_state) == {1: 1, 2: 2, 3: 3}
    assert (bolt.errors, bolt.last_error) == (0, None)


def test_a_newer_barrier_replaces_an_unfinished_alignment() -> None:
    aligner = BarrierAligner()
    assert aligner.on_barrier(0, 5, {0, 1}) == (False, [])
    aligner.held.append((0, "after-5"))
    aligned, released = aligner.on_barrier(1, 6, {0, 1})  # 5 was abandoned: 6 from another input
    assert not aligned and released == [(0, "after-5")] and aligner.cid == 6
    assert aligner.on_barrier(0, 5, {0, 1}) == (False, [])  # a stale barrier is ignored
    assert aligner.on_barrier(0, 6, {0, 1})[0]


def test_an_alignment_in_progress_moves_with_the_state() -> None:
    aligner = BarrierAligner()
    aligner.on_barrier(0, 3, {0, 1})
    aligner.held.append((0, _batch(7)))
    moved = wire.unpack(wire.pack(aligner.export()))
    other = BarrierAligner()
    other.adopt(moved)
    assert other.cid == 3 and other.seen == {0}
    assert wire.decode_batch(other.held[0][1])[0] == ((7,),)


def test_changed_keys_are_found_against_the_last_checkpoints_copy() -> None:
    from nstorm.state.keyed import changed_keys

    state = KeyedState({"a": 1, "b": [1], "c": 3, "d": 400})
    previous = dict(state)
    assert changed_keys(state, previous) == set()
    state["a"] = 5
    state["d"] = int("400")  # an equal value that is another object: written once more, harmless
    del state["c"]
    state["e"] = 1
    state["b"].append(2)  # in place: not seen ...
    assert changed_keys(state, previous) == {"a", "c", "d", "e"}
    state.touch("b")  # ... unless touched
    assert changed_keys(state, previous, state.touched) == {"a", "b", "c", "d", "e"}


def test_a_large_state_that_changes_little_switches_to_noting_assignments_and_back(bolt) -> None:
    from nstorm.state.keyed import KeyedState, TrackedKeyedState

    keyed = bolt.instance.keyed_state
    for k in range(20_000):
        keyed[k] = k + 1000
    assert bolt.checkpoint.take(1)
    assert type(bolt.instance.keyed_state) is TrackedKeyedState, "no tuple processed: assignments are noted"
    assert bolt.instance.keyed_state is keyed, "the same object: code holding it keeps working"
    for k in range(100):
        keyed[k] = -k - 1000
    del keyed[500]
    assert keyed.touched == set(range(100)) | {500}
    assert bolt.checkpoint.take(2)
    bolt.executed += 50_000  # many tuples since: a pass over the state costs less than noting each
    assert bolt.checkpoint.take(3)
    assert type(keyed) is KeyedState
    keyed[7] = 7
    assert bolt.checkpoint.take(4)
    store = bolt.host.checkpoints.store
    restored: dict[int, int] = {}
    for g in range(128):
        from nstorm.state.keyed import apply_entries

        apply_entries(restored, [(f, wire.unpack_state(d)) for _c, f, d in store.group_chain("sum", g, 4)])
    expected = {k: k + 1000 for k in range(20_000)}
    expected.update({k: -k - 1000 for k in range(100)})
    del expected[500]
    expected[7] = 7
    assert restored == expected


def test_checkpoints_write_only_changed_keys_and_restore_to_any_layout(tmp_path: Path) -> None:
    host = FakeHost(plan_of(PLACES), acking=False)
    host.checkpoints = Checkpoints(tmp_path)
    ex = BoltExecutor(host, "sum:0", 2, Sum, _definition())  # type: ignore[arg-type]
    ex.setup()
    keyed = ex.instance.keyed_state
    for k in range(10_000):
        keyed[k] = k
    assert ex.checkpoint.take(1)
    full = ex.checkpoint.last_bytes
    for k in range(100):  # 1% of the keys change
        keyed[k] = -k
    assert ex.checkpoint.take(2)
    assert ex.checkpoint.last_bytes < full / 20
    # The same state restored by two executors: each gets exactly its key groups' keys.
    definition = _definition(sums=2)
    places = {"numbers:0": "n1:1", "numbers:1": "n1:1", "sum:0": "n1:1", "sum:1": "n1:1", "sink:0": "n1:1",
              "__acker:0": "n1:1"}
    host2 = FakeHost(plan_of(places), acking=False)
    host2.checkpoints = host.checkpoints
    restored = {}
    for index in range(2):
        copy = BoltExecutor(host2, f"sum:{index}", 2 + index, Sum, definition)  # type: ignore[arg-type]
        copy.setup()
        copy.restore_checkpoint_extra(copy.checkpoint.restore(2, host.checkpoints.read, lambda c, g, u: host.checkpoints.chain("sum", g, u)))
        restored[index] = dict(copy.instance.keyed_state)
    assert restored[0].keys().isdisjoint(restored[1])
    assert {**restored[0], **restored[1]} == {k: (-k if k < 100 else k) for k in range(10_000)}
    for index, part in restored.items():
        assert all(owner_of(key_group(k, 128), 2, 128) == index for k in part)
    assert owned_groups(0, 2, 128) == list(range(0, 128, 2))
    host.checkpoints.store.close()


def test_state_that_is_not_msgpack_fails_its_checkpoint_naming_the_key(bolt) -> None:
    bolt.instance.state["bad"] = object()
    assert not bolt.checkpoint.take(1)
    assert "self.state key 'bad'" in bolt.checkpoint.last_error
    assert bolt.host.checkpoints.store.written(1) == {}


def test_a_key_of_another_executors_group_fails_the_checkpoint_saying_why(tmp_path: Path) -> None:
    places = {**PLACES, "sum:1": "n1:1"}
    host = FakeHost(plan_of(places), acking=False)
    host.checkpoints = Checkpoints(tmp_path)
    ex = BoltExecutor(host, "sum:0", 2, Sum, _definition(sums=2))  # type: ignore[arg-type]
    ex.setup()
    ex.refresh_routing()
    ex.instance.keyed_state[2] = 1  # group 2: sum:0's
    assert ex.checkpoint.take(1)
    ex.instance.keyed_state[3] = 1  # group 3 belongs to sum:1 (a bolt whose input is not keyed on it)
    assert not ex.checkpoint.take(2)
    assert "key 3 is in key group 3" in ex.checkpoint.last_error and "fields-grouped" in ex.checkpoint.last_error
    assert not ex.checkpoint.take(3), "the full entries that follow a failure find it again"
    del ex.instance.keyed_state[3]
    assert ex.checkpoint.take(4)
    host.checkpoints.store.close()


def test_a_tainted_worker_writes_no_checkpoint_and_a_failed_tuple_taints(bolt) -> None:
    bolt._fail(bolt._classes(0)["default"].__new__(bolt._classes(0)["default"]))
    assert bolt.host.checkpoints.tainted and "failed" in bolt.host.checkpoints.requests[0]
    assert not bolt.checkpoint.take(1)


def test_a_tainted_worker_passes_no_barrier_on(bolt, tmp_path: Path) -> None:
    """A restarted worker is tainted until the rollback: its killed copy may have written its part
    of a checkpoint before that checkpoint's barrier left, so a barrier from the new copy would let
    downstream complete the checkpoint around a part whose pending trees died with the old copy."""
    from worker.spout import SpoutExecutor

    bolt.host.checkpoints.request_rollback("worker n1:1 restarted")
    bolt.take(0, 1)
    bolt.take(1, 1)  # aligned: the held input goes on, the barrier does not
    bolt.take(0, _batch(7))
    items = _sink_items(bolt)
    assert [type(b) for _src, b in items if type(b) is int] == [] and bolt.checkpoint.written == 0
    spout = SpoutExecutor(bolt.host, "numbers:0", 0, Numbers, _definition())  # type: ignore[arg-type]
    spout.setup()
    spout._take_checkpoint(1)
    to_sum = bolt.host.inbox(2).data
    sent = [to_sum.get_nowait()[1] for _ in range(to_sum.qsize())]
    assert 1 not in sent and spout.checkpoint.last == 0


def test_an_unreachable_store_fails_the_checkpoint_and_the_next_entries_are_full(bolt) -> None:
    def refuse(*_: Any) -> int:
        raise StateError("Redis at redis://nowhere: ConnectionError")

    bolt.instance.keyed_state[1] = 1
    bolt.host.checkpoints.write = refuse
    assert not bolt.checkpoint.take(1)
    assert "ConnectionError" in bolt.checkpoint.last_error and bolt.checkpoint.need_full


# -- the coordinator's decisions (nimbus/checkpoints.py), over a real LMDB store ----------------
def _coordinator() -> Any:
    from nimbus.checkpoints import CheckpointCoordinator
    from nstorm.zkschema import ZkPaths

    return CheckpointCoordinator(None, ZkPaths("/t"))  # type: ignore[arg-type]


class _RecordNode:
    """The coordinator's ZooKeeper node, as a worker's makepath left it: there, and empty."""

    def __init__(self) -> None:
        self.data, self.version = b"", 0

    def get(self, _path: str) -> tuple[bytes, Any]:
        return self.data, types.SimpleNamespace(version=self.version)

    def get_children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        raise NoNodeError(path)

    def set(self, _path: str, data: bytes, version: int) -> None:
        assert version == self.version
        self.data, self.version = data, version + 1


def test_the_coordinator_writes_its_record_into_a_node_a_worker_created_first() -> None:
    """Workers register under ``<checkpoints>/<name>/lives`` with makepath, which can create the
    record's node, empty, before the coordinator's first pass. That pass took the empty node for
    an unchanged record and wrote nothing, pass after pass: no checkpoint was ever ordered (seen in
    the compose cluster: 3 runs of 12)."""
    from nimbus.checkpoints import CheckpointCoordinator
    from nstorm.records import TopologyStatus
    from nstorm.state.record import CheckpointRecord
    from nstorm.zkschema import ZkPaths

    node = _RecordNode()
    coordinator = CheckpointCoordinator(node, ZkPaths("/t"))  # type: ignore[arg-type]
    conf = {"topology.state.provider": "redis", "topology.state.checkpoint.interval.ms": 1000}
    topo = {"definition": {"conf": {}}, "conf": conf, "submission": "s1"}
    plan = types.SimpleNamespace(submission="s1", executors={"a:0": "w1"}, status=TopologyStatus.ACTIVE,
                                 rescales={})
    coordinator.cluster = types.SimpleNamespace(  # type: ignore[assignment]
        topology=lambda _n: topo, plan=lambda _n: (plan, None), status=lambda _n: (TopologyStatus.ACTIVE, 0.0))
    coordinator.step("t")
    record = CheckpointRecord.from_json(node.data)
    assert record is not None and record.submission == "s1" and not record.pending  # written
    record.pending_at -= 2.0  # an interval later
    node.data = record.to_json()
    coordinator.step("t")
    record = CheckpointRecord.from_json(node.data)
    assert record is not None and record.pending == 1  # and a checkpoint ordered


def test_a_checkpoint_commits_when_every_executor_wrote_it_and_old_ones_are_pruned(tmp_path: Path) -> None:
    import time

    from nstorm.state.record import CheckpointRecord

    store = LMDBStateStore(StateConfig(provider="lmdb", directory=tmp_path), "t-1")
    config = StateConfig(provider="lmdb", timeout_secs=30)
    record = CheckpointRecord(submission="s", provider="lmdb")
    coordinator = _coordinator()
    for cid in (1, 2, 3):
        record.pending, record.pending_at = cid, time.time()
        store.write(cid, "a:0", wire.pack({"state": {"cid": cid}}), {})
        coordinator._check_pending("t", record, store, ["a:0", "b:0"], config)
        assert record.pending == cid and record.committed == cid - 1  # b:0 has not written it
        store.write(cid, "b:0", wire.pack({"state": {}}), {})
        coordinator._check_pending("t", record, store, ["a:0", "b:0"], config)
        assert record.committed == cid and record.pending == 0 and record.bytes > 0
    assert store.executor(1, "a:0") is None and store.executor(2, "a:0") is not None  # the last two kept
    store.close()


def test_an_unfinished_checkpoint_is_abandoned_at_its_timeout(tmp_path: Path) -> None:
    import time

    from nstorm.state.record import CheckpointRecord

    store = LMDBStateStore(StateConfig(provider="lmdb", directory=tmp_path), "t-1")
    store.write(4, "b:0", wire.pack({"state": {}}), {})  # one executor wrote its part
    record = CheckpointRecord(submission="s", provider="lmdb", pending=4, pending_at=time.time() - 5)
    _coordinator()._check_pending("t", record, store, ["a:0", "b:0"], StateConfig(provider="lmdb", timeout_secs=1))
    assert record.pending == 0 and record.abandoned == 1 and "no snapshot from a:0" in record.last_error
    assert store.written(4) == {} and store.executor(4, "b:0") is None, "an abandoned checkpoint's snapshots go"
    store.close()


def test_a_rollback_skips_a_damaged_checkpoint_for_the_one_before(tmp_path: Path) -> None:
    from nstorm.state.record import CheckpointRecord

    store = LMDBStateStore(StateConfig(provider="lmdb", directory=tmp_path), "t-1")
    store.write(7, "a:0", wire.pack({"state": {}}), {})
    store.write(8, "a:0", b"\xc1garbage", {})
    record = CheckpointRecord(submission="s", provider="lmdb", committed=8, previous=7, pending=9,
                              committed_executors=1, previous_executors=1)
    _coordinator()._roll_back("t", record, store, "a test")
    assert (record.epoch, record.restore, record.pending, record.restores) == (1, 7, 0, 1)
    record.committed, record.previous = 8, 0  # neither usable: the empty start
    _coordinator()._roll_back("t", record, store, "a test")
    assert (record.epoch, record.restore) == (2, 0)
    record.committed, record.committed_executors = 7, 2  # committed by two executors, one snapshot left
    _coordinator()._roll_back("t", record, store, "a test")
    assert (record.epoch, record.restore) == (3, 0)
    store.close()


def _rolling_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real Worker with PLACES' executors planned and LMDB checkpoints, whose executors start no
    thread (their queues are looked at): what ``_roll_back`` needs, without ZooKeeper or sockets."""
    from nstorm.config import merge_conf
    from worker.executor import Executor
    from worker.process import Worker
    from worker.recovery import WorkerCheckpoints
    from worker.routing import RoutingTable

    monkeypatch.setattr(Executor, "start", lambda self: None)  # no threads: the queues are looked at
    definition = _definition()
    plan = plan_of(PLACES)
    worker = Worker("n1", 1, "t", tmp_path / "store", None, "/nstorm")
    worker.conf = merge_conf(definition.get("conf"))
    worker.definition = definition
    worker.classes = {"numbers": Numbers, "sum": Sum, "sink": Sink}
    worker.routing = RoutingTable.from_plan(plan)
    worker.local = types.SimpleNamespace(plan=plan)  # type: ignore[assignment]
    worker.checkpoints = WorkerCheckpoints(StateConfig(provider="lmdb", directory=tmp_path), "t", "1", "n1:1",
                                           lambda: None)
    return worker


def test_a_worker_that_rolls_back_after_the_next_checkpoint_was_ordered_has_its_spouts_take_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted or loaded worker can see the rollback's epoch only once the coordinator has
    ordered the next checkpoint: its new spouts must take that one, or no checkpoint commits
    until it is abandoned (30 s) and every failure meanwhile restores the same old checkpoint."""
    from nstorm.state.record import CheckpointRecord
    from worker.spout import SpoutExecutor
    from worker.transport import WORKER_TASK

    worker = _rolling_worker(tmp_path, monkeypatch)
    worker._roll_back(CheckpointRecord(submission="1", provider="lmdb", epoch=1, restore=0, pending=7, next_id=8))
    spouts = [ex for ex in worker.executors.values() if isinstance(ex, SpoutExecutor)]
    assert len(spouts) == 2 and worker.ordered == 7
    for ex in spouts:
        assert ex.ctl_q.get_nowait() == (wire.CHECKPOINT, WORKER_TASK, 7)
    bolts = [ex for ex in worker.executors.values() if isinstance(ex, BoltExecutor)]
    assert bolts and all(ex.ctl_q.empty() for ex in bolts), "only spouts take orders"


def test_a_frame_of_an_epoch_rolled_back_while_it_is_received_reaches_no_new_executor(tmp_path: Path) -> None:
    """A receiver that compared a frame's epoch just before its worker rolled back must not hand
    it to an executor the rollback made (a tuple counted twice, or an old barrier that makes a new
    bolt hold an input until the next checkpoint), neither directly nor through the stash."""
    from worker.delivery import DATA, Inbox
    from worker.process import Worker
    from worker.transport import Transport

    host = FakeHost(plan_of(PLACES))
    host.epoch = 1
    lookup = host.inbox

    def rolled_back_meanwhile(task: int, wid: str | None = None) -> Any:
        host.epoch = 2  # the main loop rolls back while the receiver looks: new executors, new inboxes
        return lookup(task, wid)

    host.inbox = rolled_back_meanwhile  # type: ignore[method-assign]
    transport = object.__new__(Transport)
    transport.host, transport.dropped, transport.stale = host, 0, 0
    transport._on_data([wire.data_header(2, 0, 0, 1, 1), wire.pack([[(1,)], None, None])])
    assert host.data(2).empty() and transport.stale == 1

    # The other way round: the lookup found the old executor's inbox, then the rollback moved to
    # the frame's (new) epoch and made a new executor: the frame goes to the new one.
    host = FakeHost(plan_of(PLACES))
    host.epoch = 1
    old_inbox = host.inbox(2)
    new_inbox = Inbox(16)
    looked: list[int] = []

    def rolled_back_after_the_lookup(task: int, wid: str | None = None) -> Any:
        if looked:
            return new_inbox
        looked.append(task)
        host.epoch = 2
        return old_inbox

    host.inbox = rolled_back_after_the_lookup  # type: ignore[method-assign]
    transport.host = host
    transport._on_data([wire.data_header(2, 0, 0, 1, 2), wire.pack([[(1,)], None, None])])
    assert old_inbox is not None and old_inbox.data.empty() and new_inbox.data.get_nowait()[0] == 0

    worker = Worker("n1", 1, "t", tmp_path / "store", None, "/nstorm")
    worker.epoch = 2
    worker.stash(5, DATA, (0, b"x"), (0, 1), 1)  # compared before the rollback, stashed after it
    assert not worker.stashed
    worker.stash(5, DATA, (0, b"x"), (0, 1), 2)
    assert list(worker.stashed) == [5]


def test_a_frame_of_the_next_epoch_that_comes_while_its_worker_rolls_back_is_delivered_not_kept(
        tmp_path: Path) -> None:
    """A frame found to be of a newer epoch is kept until its worker rolls back; if the rollback
    happens between that comparison and the keeping, it is delivered (kept, it waited for the
    next rollback and was dropped then: its tuple trees timed out)."""
    from worker.process import Worker
    from worker.transport import Transport

    host = FakeHost(plan_of(PLACES))
    host.epoch = 1
    keep = host.hold_newer

    def rolled_back_meanwhile(frames: list[bytes], epoch: int) -> bool:
        host.epoch = 2  # the main loop took the kept frames and moved to epoch 2 meanwhile
        return keep(frames, epoch)

    host.hold_newer = rolled_back_meanwhile  # type: ignore[method-assign]
    transport = object.__new__(Transport)
    transport.host, transport.dropped, transport.stale = host, 0, 0
    transport._on_data([wire.data_header(2, 0, 0, 1, 2), wire.pack([[(1,)], None, None])])
    assert not host.newer and host.data(2).get_nowait()[0] == 0

    worker = Worker("n1", 1, "t", tmp_path / "store", None, "/nstorm")
    worker.epoch = 2
    worker.checkpoints = object()  # type: ignore[assignment]  # a worker of a topology with checkpoints
    assert not worker.hold_newer([b"h", b"p"], 2) and not worker.newer
    assert worker.hold_newer([b"h", b"p"], 3) and worker.newer == [[b"h", b"p"]]


def test_frames_of_a_newer_epoch_are_kept_within_a_bound_and_only_with_checkpoints(tmp_path: Path) -> None:
    """Review, session 31: any data frame with a larger epoch in its header was kept until a
    rollback, which never comes without checkpoints: a peer could grow a worker's memory at will."""
    from worker.process import Worker

    worker = Worker("n1", 1, "t", tmp_path / "store", None, "/nstorm")
    worker.transport = types.SimpleNamespace(dropped=0)  # type: ignore[assignment]
    assert worker.hold_newer([b"h", b"p"], 99) and not worker.newer  # handled: dropped
    worker.checkpoints = object()  # type: ignore[assignment]
    big = b"x" * (wire.MAX_FRAME_BYTES // 2)
    assert worker.hold_newer([b"h", big], 1) and len(worker.newer) == 1
    assert worker.hold_newer([b"h", big], 1) and len(worker.newer) == 1  # beyond the bound: dropped
    assert worker.transport.dropped == 2


class _Nodes:
    """The few ZooKeeper nodes the coordinator reads and writes, as a dict."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}

    def get(self, path: str) -> tuple[bytes, Any]:
        from kazoo.exceptions import NoNodeError

        if path not in self.nodes:
            raise NoNodeError(path)
        data, version = self.nodes[path]
        return data, types.SimpleNamespace(version=version)

    def get_children(self, path: str) -> list[str]:
        return []

    def create(self, path: str, data: bytes, makepath: bool = False) -> None:
        self.nodes[path] = (data, 0)

    def set(self, path: str, data: bytes, version: int = -1) -> None:
        old = self.nodes.get(path, (b"", -1))[1]
        assert version in (-1, old)
        self.nodes[path] = (data, old + 1)


def _coordinator_on(tmp_path: Path, desired: list[Any], conf: dict[str, Any] | None = None) -> tuple[Any, _Nodes, Any]:
    """A coordinator over :class:`_Nodes` for a one-executor LMDB topology (with ``conf`` too) whose
    asked-for status is ``desired[0]`` (a test changes it)."""
    from nimbus.checkpoints import CheckpointCoordinator
    from nstorm.records import TopologyStatus
    from nstorm.zkschema import ZkPaths

    zk = _Nodes()
    paths = ZkPaths("/t")
    coordinator = CheckpointCoordinator(zk, paths)  # type: ignore[arg-type]
    topo = {"definition": {"conf": {}}, "submission": "s1",
            "conf": {"topology.state.provider": "lmdb", "topology.state.dir": str(tmp_path),
                     **(conf or {})}}
    plan = types.SimpleNamespace(submission="s1", executors={"a:0": "w1"}, status=TopologyStatus.ACTIVE,
                                 rescales={})
    coordinator.cluster = types.SimpleNamespace(  # type: ignore[assignment]
        topology=lambda _n: topo, plan=lambda _n: (plan, None), status=lambda _n: (desired[0], 0.0))
    return coordinator, zk, paths


def test_too_many_rollbacks_in_a_row_deactivate_the_topology_and_a_commit_resets_the_count(tmp_path: Path) -> None:
    """A poison tuple fails on every replay: each failure rolls back to the same checkpoint, without
    end. After ``topology.state.max.rollbacks`` in a row the coordinator deactivates the topology
    (its spouts stop) and says why; a checkpoint that commits starts the count again."""
    import json
    import time

    from nstorm.records import TopologyStatus
    from nstorm.state.record import CheckpointRecord

    coordinator, zk, paths = _coordinator_on(tmp_path, [TopologyStatus.ACTIVE], {"topology.state.max.rollbacks": 3,
                                                                                "topology.state.rollback.backoff.ms": 0})

    def record() -> CheckpointRecord:
        got = CheckpointRecord.from_json(zk.get(paths.checkpoints("poison"))[0])
        assert got is not None
        return got

    zk.create(paths.status("poison"), json.dumps({"status": "ACTIVE"}).encode())
    coordinator.step("poison")
    for n in (1, 2):
        coordinator.roll_back("poison", "sum:0: a tuple failed")
        coordinator.step("poison")
        assert record().rollbacks_in_a_row == n and json.loads(zk.get(paths.status("poison"))[0])["status"] == "ACTIVE"
    coordinator.roll_back("poison", "sum:0: a tuple failed")
    coordinator.step("poison")
    got = record()
    assert got.restores == 3 and got.rollbacks_in_a_row == 0, "a fresh count once a user activates it again"
    assert "rolled back 3 times in a row" in got.last_error and "nstorm activate poison" in got.last_error
    assert json.loads(zk.get(paths.status("poison"))[0])["status"] == "INACTIVE"

    # One commit after a rollback is no progress (a late worker's spouts take the checkpoint already
    # ordered at their restored position); two are.
    store = LMDBStateStore(StateConfig(provider="lmdb", directory=tmp_path), "t-1")
    again = CheckpointRecord(submission="s", provider="lmdb", rollbacks_in_a_row=2)
    for cid, left in ((5, 2), (6, 0)):
        again.pending, again.pending_at = cid, time.time()
        store.write(cid, "a:0", wire.pack({"state": {}}), {})
        coordinator._check_pending("t", again, store, ["a:0"], StateConfig(provider="lmdb"))
        assert again.committed == cid and again.rollbacks_in_a_row == left
    store.close()


def test_the_coordinator_leaves_a_killed_or_inactive_topologys_status_alone(tmp_path: Path) -> None:
    """Rollbacks of an inactive topology do not count, and a kill that lands before the coordinator
    deactivates a topology stays a kill."""
    import json

    from nstorm.records import TopologyStatus
    from nstorm.state.record import CheckpointRecord

    desired = [TopologyStatus.INACTIVE]
    coordinator, zk, paths = _coordinator_on(tmp_path, desired, {"topology.state.max.rollbacks": 1})
    zk.create(paths.status("t"), json.dumps({"status": "INACTIVE"}).encode())
    coordinator.roll_back("t", "w1: a tuple failed")
    coordinator.step("t")
    got = CheckpointRecord.from_json(zk.get(paths.checkpoints("t"))[0])
    assert got is not None and got.restores == 1 and got.rollbacks_in_a_row == 0 and not got.last_error
    desired[0] = TopologyStatus.ACTIVE  # activated, and then killed before the coordinator writes
    zk.create(paths.status("t"), json.dumps({"status": "KILLED", "kill_at": 0}).encode())
    coordinator.roll_back("t", "w1: a tuple failed")
    coordinator.step("t")
    got = CheckpointRecord.from_json(zk.get(paths.checkpoints("t"))[0])
    assert got is not None and "deactivated" in got.last_error
    assert json.loads(zk.get(paths.status("t"))[0])["status"] == "KILLED"


def test_a_rollback_keeps_each_channels_order_into_the_new_executors(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames of the new epoch that came before this worker rolled back (its sender rolled back
    first), then frames that came during the rollback, reach the new executor in that order,
    ahead of what comes after: a barrier overtaken by data sent after it would put that data in
    the bolt's snapshot while the spout's snapshot says it is still to come (counted twice)."""
    from nstorm.state.record import CheckpointRecord
    from worker.transport import Transport

    worker = _rolling_worker(tmp_path, monkeypatch)
    transport = object.__new__(Transport)
    transport.host, transport.dropped, transport.stale = worker, 0, 0
    worker.transport = transport  # type: ignore[assignment]

    def frame(n: int) -> list[bytes]:
        return [wire.data_header(2, 0, 0, 1, 1), wire.pack([[(n,)], None, None])]

    worker.epoch = 0
    transport._on_data(frame(1))  # epoch 1 while the worker is at 0: held
    transport._on_data(frame(2))
    assert len(worker.newer) == 2
    rolled_back = worker.checkpoints.rolled_back

    def a_frame_comes_meanwhile(epoch: int) -> None:
        transport._on_data(frame(3))  # the old executors are gone, the new ones not made yet
        rolled_back(epoch)

    worker.checkpoints.rolled_back = a_frame_comes_meanwhile  # type: ignore[method-assign]
    worker._roll_back(CheckpointRecord(submission="1", provider="lmdb", epoch=1, restore=0))
    transport._on_data(frame(4))  # after the rollback: straight into the new inbox
    queued = worker.executors[2].data_q
    got = [wire.unpack(queued.get_nowait()[1])[0][0][0] for _ in range(queued.qsize())]
    assert got == [1, 2, 3, 4]


def test_rollbacks_in_a_row_wait_out_a_backoff_that_doubles_and_progress_resets_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first rollback is at once; each further one in a row waits (1 s, then 2 s, up to the
    max), with the due time in the record and no checkpoint ordered meanwhile; requests that come
    while one waits join it. Two commits (progress) and the next rollback is at once again."""
    import json

    import nimbus.checkpoints as checkpoints
    from nstorm.records import TopologyStatus
    from nstorm.state.record import CheckpointRecord

    now = [1000.0]
    monkeypatch.setattr(checkpoints, "time", types.SimpleNamespace(time=lambda: now[0]))
    coordinator, zk, paths = _coordinator_on(tmp_path, [TopologyStatus.ACTIVE], {
        "topology.state.max.rollbacks": 0, "topology.state.rollback.backoff.ms": 1000,
        "topology.state.rollback.backoff.max.ms": 2000})
    zk.create(paths.status("t"), json.dumps({"status": "ACTIVE"}).encode())

    def record() -> CheckpointRecord:
        got = CheckpointRecord.from_json(zk.get(paths.checkpoints("t"))[0])
        assert got is not None
        return got

    coordinator.step("t")
    coordinator.roll_back("t", "w1: a tuple failed")
    coordinator.step("t")
    assert record().restores == 1 and record().rollback_at == 0, "the first rollback is at once"
    for wait in (1.0, 2.0, 2.0):  # doubled, up to backoff.max
        restores = record().restores
        coordinator.roll_back("t", "w1: a tuple failed again")
        coordinator.step("t")
        got = record()
        assert got.restores == restores and got.rollback_at == pytest.approx(now[0] + wait)
        assert got.status()["rollback_at"] == got.rollback_at and not got.pending
        coordinator.roll_back("t", "w2: lost its executors")  # joins the one that waits
        now[0] += wait - 0.01
        coordinator.step("t")
        assert record().restores == restores and not record().pending, "nothing happens before it is due"
        now[0] += 0.01
        coordinator.step("t")
        got = record()
        assert got.restores == restores + 1 and got.rollback_at == 0 and got.rollback_reason == ""
        assert got.last_restore is not None and got.last_restore["reason"] == "w1: a tuple failed again"
        coordinator.step("t")
        assert record().restores == restores + 1, "the requests that joined it are not rolled back again"
    # A due time from a clock ahead of this one (another leader's) waits no longer than the backoff.
    got = record()
    coordinator.roll_back("t", "w1: and again")
    coordinator.step("t")
    got = record()
    got.rollback_at = now[0] + 3600.0
    zk.set(paths.checkpoints("t"), got.to_json())
    coordinator.step("t")
    assert record().rollback_at == pytest.approx(now[0] + 2.0)
    now[0] += 2.0
    coordinator.step("t")
    assert record().restores == got.restores + 1 and record().rollback_at == 0
    # A checkpoint being taken cannot complete (the worker that lost data passes no barrier on), and
    # the bolts aligning it hold their other inputs: a rollback asked for then does not wait.
    got = record()
    got.pending, got.pending_at, got.next_id = got.next_id, now[0], got.next_id + 1
    zk.set(paths.checkpoints("t"), got.to_json())
    coordinator.roll_back("t", "w1: lost data during a checkpoint")
    coordinator.step("t")
    assert record().restores == got.restores + 1 and record().rollback_at == 0 and not record().pending
    # Nor does one during a rescale (a rescale's rollbacks are not counted).
    plan = coordinator.cluster.plan("t")[0]
    plan.rescales = {"a": 2}
    got = record()
    coordinator.roll_back("t", "w1: lost data during a rescale")
    coordinator.step("t")
    assert record().restores == got.restores + 1 and record().rollback_at == 0
    plan.rescales = {}
    # Progress (two commits) resets the count: the next rollback is at once.
    got = record()
    got.rollbacks_in_a_row, got.commits_since_rollback = 0, 2
    zk.set(paths.checkpoints("t"), got.to_json())
    coordinator.roll_back("t", "w1: a tuple failed, much later")
    coordinator.step("t")
    assert record().restores == got.restores + 1 and record().rollback_at == 0


def test_backoff_settings_are_checked_at_submit() -> None:
    from nstorm.config import merge_conf
    from nstorm.errors import ConfigError
    from nstorm.state.config import state_config

    assert state_config(merge_conf({})).backoff_secs(2) == 2.0
    assert state_config(merge_conf({"topology.state.rollback.backoff.ms": 0})).backoff_secs(5) == 0.0
    for bad in (-1, "soon", True):
        with pytest.raises(ConfigError, match="topology.state.rollback.backoff.ms"):
            state_config(merge_conf({"topology.state.rollback.backoff.ms": bad}))
    with pytest.raises(ConfigError, match="backoff.max.ms=500 is below topology.state.rollback.backoff.ms=1000"):
        state_config(merge_conf({"topology.state.rollback.backoff.max.ms": 500}))
    assert state_config(merge_conf({"topology.state.rollback.backoff.ms": 0,
                                    "topology.state.rollback.backoff.max.ms": 0})).backoff_secs(3) == 0.0


def test_an_unanswered_rollback_request_is_made_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tainted worker passes no barrier on, so a request lost on the coordinator's side would
    hold the other workers' bolts at every checkpoint: it is made again until the rollback comes."""
    import worker.recovery as recovery
    from nstorm.zkschema import ZkPaths
    from worker.recovery import WorkerCheckpoints

    made: list[bytes] = []
    zk = types.SimpleNamespace(create=lambda _path, data, **_kw: made.append(data))
    clock = [100.0]
    monkeypatch.setattr(recovery.time, "monotonic", lambda: clock[0])
    cp = WorkerCheckpoints(StateConfig(provider="lmdb", directory=tmp_path), "t", "1", "n1:1", lambda: None)
    paths = ZkPaths("/t")
    cp.send_requests(zk, paths)
    assert made == [], "nothing asked, nothing sent"
    cp.request_rollback("a tuple failed")
    cp.send_requests(zk, paths)
    clock[0] += recovery.RESEND_SECS - 1
    cp.send_requests(zk, paths)
    assert len(made) == 1
    clock[0] += 1
    cp.send_requests(zk, paths)
    assert len(made) == 2 and b"a tuple failed" in made[1]
    cp.rolled_back(1)
    clock[0] += 2 * recovery.RESEND_SECS
    cp.send_requests(zk, paths)
    assert len(made) == 2


def test_activating_a_topology_again_gives_it_as_many_tries_again(tmp_path: Path) -> None:
    """Rollbacks in a row count on across a user's deactivate and activate only until the
    activation: then the count starts again, as after the coordinator's own deactivation."""
    import json

    from nstorm.records import TopologyStatus
    from nstorm.state.record import CheckpointRecord

    desired = [TopologyStatus.INACTIVE]
    coordinator, zk, paths = _coordinator_on(tmp_path, desired)
    zk.create(paths.checkpoints("t"), CheckpointRecord(submission="s1", provider="lmdb", rollbacks_in_a_row=2,
                                                       pending_at=9e12).to_json())
    coordinator.step("t")
    assert json.loads(zk.get(paths.checkpoints("t"))[0])["rollbacks_in_a_row"] == 2
    desired[0] = TopologyStatus.ACTIVE
    coordinator.step("t")
    assert json.loads(zk.get(paths.checkpoints("t"))[0])["rollbacks_in_a_row"] == 0


def test_what_the_batches_held_in_an_alignment_emit_leaves_by_a_deadline(tmp_path: Path) -> None:
    """The barrier sends every buffer and disarms the deadlines; the held batches then emit into
    buffers that nothing would send until more input came (none may: a stream's end), their
    trees timing out and replayed. Their deadlines are armed again."""
    host = FakeHost(plan_of(PLACES), acking=False, **{"topology.batch.adaptive": False})
    host.checkpoints = Checkpoints(tmp_path)
    ex = BoltExecutor(host, "sum:0", 2, Sum, _definition())  # type: ignore[arg-type]
    ex.setup()
    try:
        ex.take(0, _batch(1, 2))
        ex.take(0, 1)
        ex.take(0, _batch(100, 101))  # held
        ex.take(1, 1)  # aligned: the barrier on, then the held batch into a fresh buffer
        assert ex.outbox.holding()
        assert ex.outbox.deadline.at is not None and ex.outbox.ctl_deadline.at is not None
    finally:
        host.checkpoints.store.close()


def test_an_alignment_ends_when_a_rescale_of_any_component_starts(bolt) -> None:
    """A rescaled spout takes no checkpoint: had numbers:0 sent its barrier just before it saw
    the plan and numbers:1 just after, the bolt held numbers:0's input until a newer checkpoint,
    and none is ordered until the rescale is done (its open trees timed out: a rollback)."""
    from nstorm.rescale import rescale_plan
    from worker.routing import RoutingTable

    bolt.take(0, 1)  # numbers:0's barrier for checkpoint 1
    bolt.take(0, _batch(100))  # held
    assert bolt.aligner.aligning and dict(bolt.instance.keyed_state) == {}
    plan = rescale_plan(plan_of(PLACES), {"numbers": 3}, [], True, {})
    bolt.host.routing = RoutingTable.from_plan(plan)
    bolt.refresh_routing()
    assert not bolt.aligner.aligning and dict(bolt.instance.keyed_state) == {100: 100}, "abandoned, taken"
    bolt.take(1, 1)  # numbers:1's barrier: no alignment starts during the rescale
    bolt.take(0, _batch(5))
    assert not bolt.aligner.aligning and bolt.checkpoint.written == 0 and 5 in bolt.instance.keyed_state


def test_a_store_that_cannot_be_read_delays_the_rollback_instead_of_restoring_nothing() -> None:
    """An unreachable Redis made both committed checkpoints "damaged": the topology rolled back
    to checkpoint 0, every executor empty and the spouts at their start."""
    from nstorm.state.record import CheckpointRecord
    from nstorm.state.store import StateError

    class Unreachable:
        def written(self, cid: int) -> dict[str, int]:
            raise StateError("the executors of checkpoint 8: Redis at redis://127.0.0.1:1/0: ConnectionError")

    record = CheckpointRecord(submission="s", provider="redis", committed=8, previous=7, pending=9,
                              committed_executors=1, previous_executors=1)
    with pytest.raises(StateError):
        _coordinator()._roll_back("t", record, Unreachable(), "a test")  # type: ignore[arg-type]
    assert (record.epoch, record.restore, record.pending, record.restores) == (0, 0, 9, 0), "nothing changed"


def test_tuple_keys_come_back_as_tuples_from_a_checkpoint(tmp_path: Path) -> None:
    """msgpack has arrays only: ``self.state[(day, page)]`` was written and then could not be read
    back (a list is no dict key), so every restore of it failed or went back to checkpoint 0."""
    from nstorm.state.store import unpack_snapshot

    host = FakeHost(plan_of(PLACES), acking=False)
    host.checkpoints = Checkpoints(tmp_path)
    ex = BoltExecutor(host, "sum:0", 2, Sum, _definition())  # type: ignore[arg-type]
    ex.setup()
    ex.instance.state[("2024-01-01", "page")] = 3
    ex.instance.state["nested"] = {(1, (2, 3)): [4, 5]}
    ex.instance.keyed_state[7] = {("a", "b"): 1}
    assert ex.checkpoint.take(1)
    assert unpack_snapshot(host.checkpoints.read(1, "sum:0"))["state"][("2024-01-01", "page")] == 3
    copy = BoltExecutor(host, "sum:0", 2, Sum, _definition())  # type: ignore[arg-type]
    copy.setup()
    copy.restore_checkpoint_extra(copy.checkpoint.restore(1, host.checkpoints.read,
                                                          lambda c, g, u: host.checkpoints.chain("sum", g, u)))
    assert copy.instance.state[("2024-01-01", "page")] == 3
    assert copy.instance.state["nested"] == {(1, (2, 3)): [4, 5]}, "values stay lists: user code mutates them"
    assert dict(copy.instance.keyed_state) == {7: {("a", "b"): 1}}
    host.checkpoints.store.close()


def test_a_spouts_tuple_message_ids_come_back_as_tuples(tmp_path: Path) -> None:
    from worker.spout import SpoutExecutor

    class Acks(Numbers):
        acked: list[Any] = []

        def ack(self, msg_id: Any) -> None:
            self.acked.append(msg_id)

    host = FakeHost(plan_of(PLACES), acking=True)
    spout = SpoutExecutor(host, "numbers:0", 0, Acks, _definition())  # type: ignore[arg-type]
    spout.setup()
    spout.pending = {11: [("partition-3", 42)]}
    extra = wire.unpack_state(wire.pack(spout.checkpoint_extra()))  # as a checkpoint stores it
    spout.restore_checkpoint_extra(extra)
    assert Acks.acked == [("partition-3", 42)]


def test_nimbuss_own_rollback_request_outlives_a_fail_over() -> None:
    """Nimbus's "workers lost" rollback was asked in memory only: a Nimbus that stopped right
    after writing the repaired plan lost it, and the lost executors started from the epoch's
    first checkpoint beside the others' live state."""
    from kazoo.exceptions import NoNodeError

    from nimbus.checkpoints import CheckpointCoordinator
    from nstorm.state.record import CheckpointRecord
    from nstorm.zkschema import ZkPaths

    class Zk:
        def __init__(self) -> None:
            self.nodes: dict[str, bytes] = {}
            self.seq = 0

        def get(self, path: str) -> tuple[bytes, Any]:
            if path not in self.nodes:
                raise NoNodeError(path)
            return self.nodes[path], types.SimpleNamespace(version=0)

        def create(self, path: str, data: bytes, sequence: bool = False, makepath: bool = False) -> str:
            path = f"{path}{self.seq:010d}" if sequence else path
            self.seq += 1
            self.nodes[path] = data
            return path

        def get_children(self, path: str) -> list[str]:
            return [p[len(path) + 1:] for p in self.nodes if p.startswith(path + "/")]

        def delete(self, path: str) -> None:
            del self.nodes[path]

    zk, paths = Zk(), ZkPaths("/t")
    record = CheckpointRecord(submission="s", provider="lmdb", epoch=3)
    zk.nodes[paths.checkpoints("t")] = record.to_json()
    CheckpointCoordinator(zk, paths).roll_back("t", "workers ['n2:1'] lost with their executors")  # type: ignore[arg-type]
    taken_over = CheckpointCoordinator(zk, paths)  # type: ignore[arg-type]  # a new leader: nothing in memory
    assert taken_over._requested("t", record) == "nimbus: workers ['n2:1'] lost with their executors"
    assert taken_over._requested("t", record) is None, "taken once"
    CheckpointCoordinator(zk, paths).roll_back("m", "lost")  # type: ignore[arg-type]  # no record: memory state
    assert not any("/m" in p and "rollback" in p for p in zk.nodes)


def test_a_store_that_lost_its_entries_gets_whole_ones_not_deltas_on_nothing(tmp_path: Path) -> None:
    """After the store lost its data (a Redis restarted without persistence), every executor went
    on writing deltas: the next checkpoint committed, and a restore of it had only the keys
    changed since (99 of 100 lost, no error)."""
    host = FakeHost(plan_of(PLACES), acking=False)
    host.checkpoints = Checkpoints(tmp_path / "a")
    ex = BoltExecutor(host, "sum:0", 2, Sum, _definition())  # type: ignore[arg-type]
    ex.setup()
    for k in range(100):
        ex.instance.keyed_state[k] = k
    assert ex.checkpoint.take(1)
    host.checkpoints.store.drop()
    host.checkpoints = Checkpoints(tmp_path / "b")  # the same store, empty
    ex.instance.keyed_state[5] = 500
    assert not ex.checkpoint.take(2) and "no earlier entries" in (ex.checkpoint.last_error or "")
    assert ex.checkpoint.take(3), "whole entries this time"
    copy = BoltExecutor(host, "sum:0", 2, Sum, _definition())  # type: ignore[arg-type]
    copy.setup()
    copy.restore_checkpoint_extra(copy.checkpoint.restore(3, host.checkpoints.read,
                                                          lambda c, g, u: host.checkpoints.chain("sum", g, u)))
    assert dict(copy.instance.keyed_state) == {k: (500 if k == 5 else k) for k in range(100)}
    host.checkpoints.store.close()
