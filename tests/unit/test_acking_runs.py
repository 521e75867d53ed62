"""The acker's bookkeeping with anchor runs and ``process_batch``, on real executors in one process.

A spout's outbox, a split bolt and a count bolt run in the test thread (no threads, no
sockets: every batch goes through the wire format once, as between two workers); the
acker is replaced by its ledger: per root, the XOR of the spout's init and of every ack
entry. Storm's rule is that a tree is complete exactly when that XOR returns to zero, so
the tests check that every root reaches zero once every tuple was processed, that none
does while a tuple of its tree is still unprocessed, and that a failure fails its root.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest

from nstorm import Batch, Bolt, Spout, TopologyBuilder, Tuple
from nstorm.plan import Plan
from worker import bolt, wire
from worker.bolt import BoltExecutor
from worker.outbox import Outbox
from worker.runs import SpoutGroup
from worker.spout import SpoutExecutor

from fakes import FakeHost, plan_of

SENTENCES = [" ".join(f"w{(i * 7 + k) % 13}" for k in range(10)) for i in range(40)]


class Sentences(Spout):
    outputs = ("sentence",)


class Split(Bolt):
    outputs = ("word",)

    def process(self, tup: Tuple) -> None:
        for w in tup[0].split():
            self.emit((w,))


class ManySplit(Bolt):
    """Split with ``emit_many``: a sentence's words in one call."""

    outputs = ("word",)

    def process(self, tup: Tuple) -> None:
        self.emit_many(zip(tup[0].split()))


class BatchSplit(Bolt):
    """Split over whole batches: each word anchored to its sentence by iterating the batch."""

    outputs = ("word",)

    def process_batch(self, batch: Batch) -> None:
        for tup in batch:
            for w in tup[0].split():
                self.emit((w,))


class Count(Bolt):
    outputs = ("word", "count")

    def prepare(self, conf: Mapping[str, Any], context: Any) -> None:
        self.counts: dict[str, int] = {}

    def process(self, tup: Tuple) -> None:
        self.counts[tup[0]] = self.counts.get(tup[0], 0) + 1


class BatchCount(Count):
    def process_batch(self, batch: Batch) -> None:
        for (w,) in batch.values:
            self.counts[w] = self.counts.get(w, 0) + 1


class ManualCount(Count):
    """Acks words itself, three at a time (so the words of a run are acked in different calls)."""

    auto_ack = False

    def process(self, tup: Tuple) -> None:
        super().process(tup)
        self.held = getattr(self, "held", [])
        self.held.append(tup)
        if len(self.held) >= 3:
            for t in self.held:
                self.ack(t)
            self.held = []


class ForgetfulCount(Count):
    """Acks every word but ``w5`` (which it never acks nor fails)."""

    auto_ack = False

    def process(self, tup: Tuple) -> None:
        super().process(tup)
        if tup[0] != "w5":
            self.ack(tup)


class BatchTotals(Bolt):
    """Counts a batch, then emits one total anchored to the whole batch (no iteration)."""

    outputs = ("n",)

    def process_batch(self, batch: Batch) -> None:
        self.emit((len(batch),))


class FailingCount(Count):
    def process(self, tup: Tuple) -> None:
        if tup[0] == "w3":
            raise ValueError("no w3")
        super().process(tup)


def _topology(split: type[Bolt], count: type[Bolt], counts: int = 2) -> tuple[dict[str, Any], dict[str, Any]]:
    builder = TopologyBuilder("t")
    builder.set_spout("sentences", Sentences)
    builder.set_bolt("split", split).shuffle_grouping("sentences")
    builder.set_bolt("count", count, parallelism=counts).fields_grouping("split", ["word"])
    return builder.build(workers=1).definition, _plan(["sentences:0", "split:0", *[f"count:{i}" for i in range(counts)]])


def _plan(executors: list[str]) -> Plan:
    """A plan that puts ``executors`` and one acker (the task ids in this order) on one worker."""
    return plan_of({t: "n1:1" for t in [*executors, "__acker:0"]})


class _Ledger:
    """What the acker would compute: per root, the XOR of the init and every ack; failed roots."""

    def __init__(self) -> None:
        self.xor: dict[int, int] = {}
        self.failed: set[int] = set()
        self.seen: set[int] = set()
        self.entries = 0

    def add(self, root: int, x: int) -> None:
        self.entries += 1
        self.xor[root] = self.xor.get(root, 0) ^ x
        self.seen.add(root)

    def take(self, worker: FakeHost) -> None:
        """Everything the executors sent the acker so far."""
        for inbox in worker.inboxes():
            q = inbox.control
            while not q.empty():
                kind, _src, entries = q.get()
                if kind == wire.ACK:
                    for root, x in entries:
                        self.add(root, x)
                elif kind == wire.FAIL:
                    self.failed.update(entries)

    def complete(self) -> set[int]:
        """Roots some ack reached whose XOR is back to zero (the acker's rule)."""
        return {r for r, x in self.xor.items() if x == 0 and r in self.seen}


def _root(i: int, group: int) -> int:
    """The root of sentence ``i`` when the spout groups ``group`` tracked tuples a tree."""
    return 1000 + i // group


def _run(split: type[Bolt], count: type[Bolt], conf: Mapping[str, Any] | None = None,
         drop_first_count_batch: bool = False, group: int = 1,
         late_close: bool = False, counts: int = 2) -> tuple[_Ledger, list[int], list[BoltExecutor]]:
    """Emit SENTENCES ``group`` to a tree; ``late_close``: each group's buffers are sent before
    it closes (its last run has left, so its XOR goes to the acker as an entry)."""
    definition, plan = _topology(split, count, counts)
    worker = FakeHost(plan, wire_format=True, **{"topology.batch.adaptive": False, "topology.batch.size": 16, **(conf or {})})
    spout = Outbox(worker, 0, "sentences", definition)  # type: ignore[arg-type]
    spout.rebuild(worker.routing)
    executors = _executors(worker, definition, plan, {"split": split, "count": count})
    ledger = _Ledger()
    roots: list[int] = []
    open_group: SpoutGroup | None = None
    for i, sentence in enumerate(SENTENCES):
        root = _root(i, group)
        if open_group is None or open_group.root != root:
            if open_group is not None:
                _close(spout, open_group, late_close)
            open_group = SpoutGroup(root)
            roots.append(root)
        assert spout.emit_tracked((sentence,), "default", open_group) == 1
    _close(spout, open_group, late_close)  # type: ignore[arg-type]
    spout.flush()
    ledger.take(worker)
    dropped = False
    for _ in range(10):  # until every queue is empty
        busy = False
        for task, ex in executors.items():
            q = worker.data(task)
            while not q.empty():
                busy = True
                src, batch = q.get()
                if drop_first_count_batch and not dropped and ex.component == "count":
                    dropped = True
                    continue
                ex._process_batch(src, batch)
            ex.outbox.flush()
            ledger.take(worker)
        if not busy:
            break
    for ex in executors.values():  # a manual-acking bolt acks what it still holds
        for tup in getattr(ex.instance, "held", []):
            ex.instance.ack(tup)
        ex.outbox.flush()
    ledger.take(worker)
    return ledger, roots, list(executors.values())


def _close(spout: Outbox, group: SpoutGroup, late: bool) -> None:
    if late:
        spout.flush()
    assert spout.close_group(group)


@pytest.mark.parametrize(("split", "count"), [(Split, Count), (Split, BatchCount), (BatchSplit, BatchCount),
                                                (BatchSplit, Count), (Split, ManualCount), (Split, BatchTotals),
                                                (ManySplit, BatchCount), (ManySplit, ManualCount)])
def test_every_tree_completes_exactly(split: type[Bolt], count: type[Bolt]) -> None:
    ledger, roots, executors = _run(split, count)
    assert ledger.complete() == set(roots)
    assert not ledger.failed
    if count is not BatchTotals:
        counted: dict[str, int] = {}
        for ex in executors:
            for w, n in getattr(ex.instance, "counts", {}).items():
                counted[w] = counted.get(w, 0) + n
        expected: dict[str, int] = {}
        for s in SENTENCES:
            for w in s.split():
                expected[w] = expected.get(w, 0) + 1
        assert counted == expected


@pytest.mark.parametrize("split", [Split, ManySplit, BatchSplit])
@pytest.mark.parametrize("group", [1, 4])
def test_one_downstream_task_takes_the_single_buffer_emits(split: type[Bolt], group: int) -> None:
    """With one count the split's emits (and the spout's tracked emit to its one split) append to
    that task's buffer without a cycle; trees still complete exactly and every word is counted."""
    ledger, roots, executors = _run(split, Count, counts=1, group=group)
    assert ledger.complete() == set(roots)
    assert not ledger.failed
    split_ex = next(ex for ex in executors if ex.component == "split")
    assert split_ex.outbox.emit_anchored.__name__ == "emit_single"
    assert split_ex.outbox.emit_many.__name__ == "emit_many_anchored_single"
    counted = next(ex for ex in executors if ex.component == "count").instance.counts
    assert sum(counted.values()) == sum(len(s.split()) for s in SENTENCES)


class KeepingCount(Count):
    """Counts, keeping every third tuple it is given (the others it only reads)."""

    def process(self, tup: Tuple) -> None:
        super().process(tup)
        self.seen = getattr(self, "seen", 0) + 1
        # The same object as the tuple before (only if that was not kept: two live objects never
        # share an id), counted without keeping a reference.
        self.same = getattr(self, "same", 0) + (id(tup) == getattr(self, "last_id", None))
        self.last_id = id(tup)
        if self.seen % 3 == 0:
            self.kept = getattr(self, "kept", [])
            self.kept.append((tup, tup.values, tup.anchors))


class RaisingKeepingCount(KeepingCount):
    def process(self, tup: Tuple) -> None:
        super().process(tup)
        if tup[0] == "w3":
            raise ValueError("no w3")


@pytest.mark.parametrize("acking", [True, False], ids=["acking-on", "acking-off"])
@pytest.mark.parametrize("count", [KeepingCount, RaisingKeepingCount])
def test_a_tuple_process_keeps_stays_as_it_was_given(acking: bool, count: type[Bolt]) -> None:
    """The executor fills the Tuple that ``process`` did not keep again for the next one: the ones
    it kept keep their values and anchors, and no kept one is given again."""
    _ledger, _roots, executors = _run(Split, count, conf={"acking": acking})
    words = sum(len(s.split()) for s in SENTENCES)
    counters = [ex.instance for ex in executors if ex.component == "count"]
    assert sum(sum(c.counts.values()) for c in counters) == words
    for c in counters:
        kept = c.kept
        assert len({id(t) for t, _v, _a in kept}) == len(kept)
        assert all(t.values is v and t.anchors is a for t, v, a in kept)
        assert all(len(v) == 1 and v[0] in c.counts for _t, v, _a in kept)
        assert c.same > 0 if bolt._UNKEPT > 0 else c.same == 0


def test_runs_cost_one_edge_per_destination_not_per_word() -> None:
    """A split's ten words of one sentence go to two counters: two runs, so at most two ack entries
    per sentence from the counters (one per run), not ten."""
    ledger, roots, _ = _run(Split, BatchCount)
    assert ledger.complete() == set(roots)
    # per sentence: no init from the spout, the split's ack rides with a word, at most one entry
    # per counter and batch
    assert ledger.entries <= len(SENTENCES) * 2 * 2


def test_a_lost_batch_leaves_its_trees_incomplete() -> None:
    ledger, roots, _ = _run(Split, BatchCount, drop_first_count_batch=True)
    incomplete = set(roots) - ledger.complete()
    assert incomplete, "the roots of the lost batch must not complete"
    assert len(incomplete) < len(roots)


def test_a_failing_tuple_fails_its_root_and_only_its_root() -> None:
    ledger, roots, _ = _run(Split, FailingCount)
    with_w3 = {1000 + i for i, s in enumerate(SENTENCES) if "w3" in s.split()}
    assert ledger.failed == with_w3
    assert ledger.complete() == set(roots) - with_w3  # the run that held w3 was not acked


def test_per_tuple_sending_keeps_exact_acks() -> None:
    ledger, roots, _ = _run(Split, Count, conf={"topology.batch.size": 1})
    assert ledger.complete() == set(roots)


def test_a_run_is_acked_only_with_its_last_tuple() -> None:
    """The words of one sentence that go to one counter share a run; if one of them is never
    acked, the run is not, and its root never completes."""
    ledger, roots, _ = _run(Split, ForgetfulCount)
    with_w5 = {1000 + i for i, s in enumerate(SENTENCES) if "w5" in s.split()}
    assert with_w5 and not ledger.failed
    assert ledger.complete() == set(roots) - with_w5


@pytest.mark.parametrize("late_close", [False, True])
@pytest.mark.parametrize("group", [7, 40])
@pytest.mark.parametrize(("split", "count"), [(Split, Count), (BatchSplit, BatchCount), (Split, ManualCount)])
def test_grouped_trees_complete_exactly(split: type[Bolt], count: type[Bolt], group: int, late_close: bool) -> None:
    """Tracked tuples sharing a tree (topology.acking.group.size): every group completes, whether
    its last run was still buffered when it closed or had left (then its XOR is an ack entry)."""
    ledger, roots, _ = _run(split, count, group=group, late_close=late_close)
    assert roots == sorted({_root(i, group) for i in range(len(SENTENCES))})
    assert ledger.complete() == set(roots)
    assert not ledger.failed


def test_a_group_is_not_complete_while_one_of_its_tuples_is_unprocessed() -> None:
    ledger, roots, _ = _run(Split, BatchCount, group=8, drop_first_count_batch=True)
    incomplete = set(roots) - ledger.complete()
    assert incomplete
    assert len(incomplete) < len(roots)


class FailingOnceCount(Count):
    """Fails the first "w3" it sees, counts the rest."""

    def process(self, tup: Tuple) -> None:
        if tup[0] == "w3" and not getattr(self, "failed_one", False):
            self.failed_one = True
            raise ValueError("no w3, once")
        super().process(tup)


def test_a_failing_tuple_fails_its_whole_group() -> None:
    ledger, roots, _ = _run(Split, FailingOnceCount, group=5)
    assert 1 <= len(ledger.failed) <= 2  # one per counter at most
    assert ledger.failed < set(roots)
    assert ledger.complete() == set(roots) - ledger.failed


def test_groups_cost_a_few_entries_per_group() -> None:
    """A group's sentences to one split form one run, and the split's words of that run to one
    counter form one run too: the ack entries scale with groups, not sentences."""
    per_tuple, _, _ = _run(Split, BatchCount, group=1)
    grouped, roots, _ = _run(Split, BatchCount, group=20)
    assert grouped.complete() == set(roots)
    assert grouped.entries <= len(roots) * 2 * 4
    assert grouped.entries * 5 <= per_tuple.entries


class RecordingSpout(Spout):
    outputs = ("sentence",)

    def open(self, conf: Mapping[str, Any], context: Any) -> None:
        self.acked: list[int] = []
        self.failed: list[int] = []

    def ack(self, msg_id: int) -> None:
        self.acked.append(msg_id)

    def fail(self, msg_id: int) -> None:
        self.failed.append(msg_id)


def test_a_spout_acks_and_fails_whole_groups() -> None:
    """SpoutExecutor: groups of ``topology.acking.group.size`` tracked tuples, one root each;
    the acker's answer for a root acks (or fails) every tuple of its group, one call each."""
    definition, plan = _topology(Split, Count)
    worker = FakeHost(plan, wire_format=True, **{"topology.acking.group.size": 4})
    ex = SpoutExecutor(worker, "sentences:0", 0, RecordingSpout, definition)  # type: ignore[arg-type]
    ex.setup()
    ex.refresh_routing()
    spout = ex.instance
    for i in range(10):
        spout.emit((f"s{i}",), msg_id=i)
    ex._close_group()  # the end of a loop iteration closes the open group (8, 9)
    assert ex.pending_n == 10 and ex.counters()["pending"] == 10  # tuples, not groups
    assert [sorted(ids) for ids in ex.pending.values()] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    first, second, third = ex.pending
    assert {r & 0xFFFF for r in ex.pending} == {0}  # the spout's task rides in every root
    ex._control(wire.ACKED, [first])
    ex._control(wire.FAILED, [second])
    assert spout.acked == [0, 1, 2, 3]
    assert spout.failed == [4, 5, 6, 7]
    assert ex.pending_n == 2 and list(ex.pending) == [third]
    ex._expire(time.monotonic() + 3600)  # past topology.message.timeout.secs
    assert spout.failed == [4, 5, 6, 7, 8, 9]
    assert ex.pending_n == 0 and not ex.pending
    assert ex.acked == 4 and ex.failed == 6


# -- regressions found in review: trees that looked complete too early ------------------------


def _executors(worker: FakeHost, definition: Mapping[str, Any], plan: Plan,
               classes: Mapping[str, type[Bolt]]) -> dict[int, BoltExecutor]:
    out = {}
    for task, eid in enumerate(plan.tasks):
        comp = eid.rpartition(":")[0]
        if comp in classes:
            ex = BoltExecutor(worker, eid, task, classes[comp], definition)  # type: ignore[arg-type]
            ex.setup()
            out[task] = ex
    return out


def _drain(worker: FakeHost, ex: BoltExecutor, ledger: _Ledger) -> None:
    q = worker.data(ex.task)
    while not q.empty():
        ex._process_batch(*q.get())
    ex.outbox.flush()
    ledger.take(worker)


def _pipeline(definition: Mapping[str, Any], plan: Mapping[str, Any], classes: Mapping[str, type[Bolt]],
              spout: str = "sentences") -> tuple[FakeHost, dict[int, BoltExecutor], Outbox, _Ledger]:
    """The bolts of ``plan`` as executors, the spout (task 0) as an outbox, and an empty ledger."""
    worker = FakeHost(plan, wire_format=True, **{"topology.batch.adaptive": False, "topology.batch.size": 16})
    exs = _executors(worker, definition, plan, classes)
    outbox = Outbox(worker, 0, spout, definition)  # type: ignore[arg-type]
    outbox.rebuild(worker.routing)
    return worker, exs, outbox, _Ledger()


def _wordcount(split: type[Bolt], count: type[Bolt] = Count,
               counts: int = 2) -> tuple[FakeHost, dict[int, BoltExecutor], Outbox, _Ledger]:
    definition, plan = _topology(split, count, counts)
    return _pipeline(definition, plan, {"split": split, "count": count})


def _send_group(worker: FakeHost, spout: Outbox, ledger: _Ledger, root: int, values: list[Any],
                streams: list[str] | None = None) -> None:
    """Emit ``values`` as one spout group, close it and send it."""
    group = SpoutGroup(root)
    for i, v in enumerate(values):
        spout.emit_tracked((v,), streams[i] if streams else "default", group)
    assert spout.close_group(group)
    spout.flush()
    ledger.take(worker)


class HoldingSplit(Split):
    """Acks by hand and holds every sentence until told; splits only the first three (the rest
    it would write elsewhere)."""

    auto_ack = False

    def process(self, tup: Tuple) -> None:
        self.held = getattr(self, "held", [])
        if len(self.held) < 3:
            super().process(tup)
        self.held.append(tup)


def test_a_run_acked_in_parts_completes_only_with_its_last_tuple() -> None:
    """A group's sentences reach a hand-acking split as one run (its edge is 0: the group's only
    run). Acking the three that had children, and counting those, must not complete the tree."""
    worker, exs, spout, ledger = _wordcount(HoldingSplit)
    _send_group(worker, spout, ledger, 1000, SENTENCES[:10])
    split = exs[1]
    _drain(worker, split, ledger)
    held = split.instance.held
    for tup in held[:3]:  # the three that had children: those children are counted next
        split.instance.ack(tup)
    for _ in range(2):
        for ex in exs.values():
            _drain(worker, ex, ledger)
    assert 1000 not in ledger.complete()  # seven sentences are not acked
    for tup in held[3:]:
        split.instance.ack(tup)
    for ex in exs.values():
        _drain(worker, ex, ledger)
    assert ledger.complete() == {1000}


class TwoStreams(Spout):
    outputs = {"default": ("s",), "other": ("s",)}


class BatchSink(Bolt):
    outputs = ("n",)

    def process_batch(self, batch: Batch) -> None:
        pass


def test_a_group_on_two_streams_completes_only_when_every_tuple_is_processed() -> None:
    """A group's tuples on two streams never share a run: a process_batch bolt gets each
    stream's tuples apart and would otherwise ack the run twice."""
    builder = TopologyBuilder("t")
    builder.set_spout("sp", TwoStreams)
    builder.set_bolt("c", BatchSink, parallelism=2).shuffle_grouping("sp").shuffle_grouping("sp", "other")
    worker, exs, spout, ledger = _pipeline(builder.build(workers=1).definition, _plan(["sp:0", "c:0", "c:1"]),
                                           {"c": BatchSink}, spout="sp")
    values = list("abcdefg")
    _send_group(worker, spout, ledger, 1000, values, ["default" if v in "aceg" else "other" for v in values])
    _drain(worker, exs[1], ledger)
    assert 1000 not in ledger.complete()
    _drain(worker, exs[2], ledger)
    assert ledger.complete() == {1000}


class Pair(Bolt):
    """Joins tuples two by two: one word anchored to both."""

    outputs = ("word",)
    auto_ack = False

    def send(self, values: tuple[Any, ...], anchors: list[Tuple]) -> None:
        self.emit(values, anchors=anchors)

    def process(self, tup: Tuple) -> None:
        held = getattr(self, "h", None)
        if held is None:
            self.h = tup
            return
        self.send((held[0].split()[0],), [held, tup])
        self.ack(held)
        self.ack(tup)
        self.h = None


def test_a_tuple_anchored_to_two_tuples_of_one_group_keeps_the_tree_open() -> None:
    worker, exs, spout, ledger = _wordcount(Pair)
    _send_group(worker, spout, ledger, 1000, SENTENCES[:2])
    _drain(worker, exs[1], ledger)  # the join is emitted, not yet counted
    assert 1000 not in ledger.complete()
    for task in (2, 3):
        _drain(worker, exs[task], ledger)
    assert ledger.complete() == {1000}


def test_iterating_an_unanchored_batch_with_acking_on() -> None:
    """Untracked spout tuples (no msg id) reach a process_batch bolt with no anchors at all: its
    loop still emits and acks."""
    worker, exs, spout, ledger = _wordcount(BatchSplit)
    for s in SENTENCES[:5]:
        spout.emit((s,))
    spout.flush()
    for _ in range(3):
        for ex in exs.values():
            _drain(worker, ex, ledger)
    assert exs[1].errors == 0
    assert sum(sum(getattr(ex.instance, "counts", {}).values()) for ex in exs.values()) == 50


class KeepLast(Bolt):
    """Reads the batch it kept from its previous call, then emits a summary after the loop."""

    outputs = ("word",)

    def process_batch(self, batch: Batch) -> None:
        prev = getattr(self, "prev", None)
        n = sum(1 for _ in prev) if prev is not None else 0
        self.emit((f"w{len(batch)}-{n}",))  # anchored to the whole current batch
        self.prev = batch


def test_an_emit_after_iterating_another_batch_anchors_to_the_current_one() -> None:
    worker, exs, spout, ledger = _wordcount(KeepLast, counts=1)
    split, count = exs[1], exs[2]
    for k in range(2):
        _send_group(worker, spout, ledger, 1000 + k, SENTENCES[k * 3:(k + 1) * 3])
        _drain(worker, split, ledger)
        assert 1000 + k not in ledger.complete()  # its summary is not counted yet
    _drain(worker, count, ledger)
    assert ledger.complete() == {1000, 1001}


class DirectJoin(Pair):
    """Joins tuples two by two and sends the join to counter 1, anchored to both."""

    def send(self, values: tuple[Any, ...], anchors: list[Tuple]) -> None:
        self.emit_direct(1, values, anchors=anchors)


def _direct(split: type[Bolt]) -> tuple[FakeHost, dict[int, BoltExecutor], Outbox, _Ledger]:
    """sentences -> ``split`` -> two counts that take ``split``'s ``emit_direct``."""
    builder = TopologyBuilder("t")
    builder.set_spout("sentences", Sentences)
    builder.set_bolt("split", split).shuffle_grouping("sentences")
    builder.set_bolt("count", Count, parallelism=2).direct_grouping("split")
    return _pipeline(builder.build(workers=1).definition, _plan(["sentences:0", "split:0", "count:0", "count:1"]),
                     {"split": split, "count": Count})


def test_emit_direct_anchors_to_the_tuples_given() -> None:
    worker, exs, spout, ledger = _direct(DirectJoin)
    for i, s in enumerate(SENTENCES[:2]):  # two trees, joined into one word
        _send_group(worker, spout, ledger, 1000 + i, [s])
    _drain(worker, exs[1], ledger)
    assert not ledger.complete() & {1000, 1001}  # the join is not counted yet
    _drain(worker, exs[3], ledger)
    assert ledger.complete() == {1000, 1001}
    assert sum(exs[3].instance.counts.values()) == 1


class AnchoringSplit(Bolt):
    """Acked by the executor (``auto_ack``), anchors each word to its sentence by hand, and with
    ``also_held`` to the sentence of the previous run as well (already acked by then)."""

    outputs = ("word",)
    also_held = False

    def process(self, tup: Tuple) -> None:
        held = getattr(self, "held", None)
        for w in tup[0].split():
            anchors = [tup, held] if self.also_held and held is not None and held.anchors is not tup.anchors else [tup]
            self.emit((w,), anchors=anchors)
        self.held = tup


class AnchoringDirect(AnchoringSplit):
    def process(self, tup: Tuple) -> None:
        for w in tup[0].split():
            self.emit_direct(int(w[1:]) % 2, (w,), anchors=[tup])


def test_an_auto_acked_bolt_anchoring_by_hand_keeps_the_tree_open_until_the_children_are_acked() -> None:
    """The tuples of an auto-acked run have no ``_ackval`` of their own: an emit anchored to one by
    hand XORs its edge into the run's, so the tree completes only after the words are counted."""
    worker, exs, spout, ledger = _wordcount(AnchoringSplit)
    for k in range(3):  # three trees of a few sentences each: each a run at the split
        _send_group(worker, spout, ledger, 1000 + k, SENTENCES[k * 4:(k + 1) * 4])
    _drain(worker, exs[1], ledger)
    assert not ledger.complete() & {1000, 1001, 1002}  # the split acked its runs; the words are pending
    assert exs[1].errors == 0
    for task in (2, 3):
        _drain(worker, exs[task], ledger)
    assert ledger.complete() == {1000, 1001, 1002}
    assert sum(sum(ex.instance.counts.values()) for ex in (exs[2], exs[3])) == 120


def test_anchoring_by_hand_to_a_tuple_of_an_acked_run_does_not_break_the_current_tree() -> None:
    """A held tuple's run was acked when it ended: an edge anchored to it later goes nowhere (as in
    Storm, anchoring to an acked tuple); the current tree still completes."""
    class Held(AnchoringSplit):
        also_held = True

    worker, exs, spout, ledger = _wordcount(Held)
    _send_group(worker, spout, ledger, 1000, SENTENCES[:2])
    _drain(worker, exs[1], ledger)
    _send_group(worker, spout, ledger, 1001, SENTENCES[2:4])
    _drain(worker, exs[1], ledger)
    for task in (2, 3):
        _drain(worker, exs[task], ledger)
    assert 1001 in ledger.complete()
    assert exs[1].errors == 0


def test_emit_direct_from_an_auto_acked_bolt_anchors_to_the_run() -> None:
    worker, exs, spout, ledger = _direct(AnchoringDirect)
    _send_group(worker, spout, ledger, 1000, SENTENCES[:3])
    _drain(worker, exs[1], ledger)
    assert 1000 not in ledger.complete()
    for task in (2, 3):
        _drain(worker, exs[task], ledger)
    assert ledger.complete() == {1000}
    assert exs[1].errors == 0
