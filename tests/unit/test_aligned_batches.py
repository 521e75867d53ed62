"""A bolt's output batches leave with the unit of work that filled them (worker.batching's
AlignedFlush, ``topology.batch.align``): a chained split's words go with the hand-over that made
them instead of waiting for the next one, as many messages as without, and where units come
closer together than the fill time, the buffers wait for the last unit before it."""

from __future__ import annotations

from typing import Any

import pytest

from nstorm import Bolt, Spout, TopologyBuilder
from topologies.wordcount import PlainSplit
from worker.batching import ALIGNED_BURST, AlignedFlush, BatchPolicy
from worker.bolt import BoltExecutor

from fakes import FakeHost, plan_of

PLACES = {"sentences:0": "n1:1", "split:0": "n1:1", "count:0": "n1:1", "__acker:0": "n1:1"}
SPOUT, SPLIT, COUNT = 0, 1, 2


class _Sentences(Spout):
    outputs = ("sentence",)


class _Count(Bolt):
    outputs = ()

    def process(self, tup: Any) -> None:
        pass


@pytest.fixture(autouse=True)
def _frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-overs take no time (a slow machine would otherwise reach a deadline mid-test)."""
    monkeypatch.setattr("worker.bolt.time.monotonic", lambda: 1000.0)


def _split(**conf: Any) -> tuple[FakeHost, BoltExecutor]:
    """A split chained to its spout's task, its words for a count in the same worker."""
    builder = TopologyBuilder("t")
    builder.set_spout("sentences", _Sentences)
    builder.set_bolt("split", PlainSplit).local_or_shuffle_grouping("sentences")
    builder.set_bolt("count", _Count).shuffle_grouping("split")
    host = FakeHost(plan_of(PLACES), acking=False, **conf)
    ex = BoltExecutor(host, "split:0", SPLIT, PlainSplit, builder.build(workers=1).definition)  # type: ignore[arg-type]
    ex.setup()
    ex.inbox.guest, ex.inbox.host = ex, SPOUT
    ex.chained_version = ex.routing.version
    return host, ex


def _hand_over(ex: BoltExecutor, sentences: int) -> None:
    ex.take_chained(SPOUT, ([("a b c d e f g h i j",)] * sentences, None, None))


def _words(host: FakeHost) -> list[int]:
    """The sizes of the batches the count was sent."""
    return [len(batch[0]) for _, batch in host.take(COUNT)]


def _roomy(ex: BoltExecutor, limit: int) -> None:
    """Buffers whose limit the rate has grown to ``limit`` (a unit test has no rate to grow it)."""
    ex.outbox.flush()
    for buf in ex.outbox.buffers.values():
        buf.limit = limit


def test_a_chained_bolts_burst_leaves_with_its_hand_over() -> None:
    host, ex = _split()
    assert ex.align is not None and ex.outbox.policy.burst == ALIGNED_BURST
    _hand_over(ex, 1)  # the first words find the count's buffer (limit 1: they leave at once)
    host.take(COUNT)
    _roomy(ex, 10_000)
    ex.align.gap, ex.align.last = ex.outbox.policy.fill, None  # hand-overs a fill time apart (one upstream)
    _hand_over(ex, 150)
    assert _words(host) == [1500], "the hand-over's words left as it ended, in one batch"


def test_closer_units_wait_for_the_last_one_before_the_fill_time() -> None:
    host, ex = _split()
    assert ex.align is not None
    _hand_over(ex, 1)
    host.take(COUNT)
    _roomy(ex, 10_000)
    fill = ex.outbox.policy.fill
    ex.align.gap, ex.align.last = fill / 1000, None  # hand-overs far closer together than the fill time
    _hand_over(ex, 10)
    _hand_over(ex, 10)
    assert _words(host) == [], "the next hand-over comes well within the fill time: the words wait"
    # Once the oldest words are nearly a fill time old, the next hand-over would keep them past it.
    ex.outbox.deadline.at -= fill
    _hand_over(ex, 10)
    assert _words(host) == [300]


def test_without_alignment_the_words_wait_for_the_limit_or_the_deadline() -> None:
    host, ex = _split(**{"topology.batch.align": False})
    assert ex.align is None and ex.outbox.policy.burst == 1.0
    _hand_over(ex, 1)
    host.take(COUNT)
    _roomy(ex, 10_000)
    _hand_over(ex, 150)
    assert _words(host) == []


def test_a_bolt_fed_by_several_upstream_tasks_keeps_plain_limits() -> None:
    """Its bursts are smaller and their gaps uneven (at word count's peak, two spouts a split,
    aligned batches sent fewer words a second): only a bolt with one upstream task aligns."""
    builder = TopologyBuilder("t")
    builder.set_spout("sentences", _Sentences, parallelism=2)
    builder.set_bolt("split", PlainSplit).shuffle_grouping("sentences")
    places = {"sentences:0": "n1:1", "sentences:1": "n1:1", "split:0": "n1:1", "__acker:0": "n1:1"}
    host = FakeHost(plan_of(places), acking=False)
    ex = BoltExecutor(host, "split:0", 2, PlainSplit, builder.build(workers=1).definition)  # type: ignore[arg-type]
    ex.setup()
    assert ex.align is None and ex.outbox.policy.burst == 1.0


@pytest.mark.parametrize("conf", [{"topology.batch.adaptive": False}, {"topology.batch.size": 1}])
def test_fixed_or_per_tuple_batches_are_not_aligned(conf: dict[str, Any]) -> None:
    _, ex = _split(**conf)
    assert ex.align is None


def test_an_aligning_policy_lets_a_burst_twice_the_fill_time_in() -> None:
    policy = BatchPolicy(cap=4096, max_latency=0.005)

    class Dst:
        limit, rate, last = 1, 0.0, 0.0

    dst = Dst()
    for i in range(1, 1001):  # 400 tuples every 2.5 ms: 160,000 tuples/s, 400 a fill time
        policy.observe(dst, 400, i * 0.0025)
    plain = dst.limit
    policy.burst = ALIGNED_BURST
    policy.observe(dst, 400, 1001 * 0.0025)
    assert 390 <= plain <= 410 and dst.limit == pytest.approx(ALIGNED_BURST * plain, rel=0.02)


def test_the_gap_between_units_is_an_average_and_an_idle_spell_is_capped() -> None:
    a = AlignedFlush()
    a.began(1.0)
    assert a.gap == 0.0
    a.began(1.002)
    assert a.gap == pytest.approx(0.002)  # the first interval sets it
    a.began(11.0)  # ten idle seconds
    assert a.gap < 0.01
