"""A tuple whose values do not match its stream's declared fields (Storm's "Tuple created with wrong
number of fields"): nstorm sent it on unchecked, and the first sign was an ``IndexError`` in some
downstream bolt. The emitter's batch is now checked (its first tuple: a ``len`` a batch, nothing a
tuple) and reported as the emitting executor's error, the batch still delivered; a receiver's
``tup["field"]`` of a short tuple says which component emitted too few values."""

from __future__ import annotations

from typing import Any

import pytest

from nstorm import Bolt, Spout, TopologyBuilder, Tuple
from nstorm.component import TupleMeta, delivered_tuple_class
from worker.spout import SpoutExecutor

from fakes import FakeHost, plan_of


class Pairs(Spout):
    outputs = {"default": ("word", "count"), "words": ("word",)}


class Sink(Bolt):
    outputs = ()


def _spout() -> tuple[FakeHost, SpoutExecutor]:
    builder = TopologyBuilder("t")
    builder.set_spout("pairs", Pairs)
    builder.set_bolt("sink", Sink).shuffle_grouping("pairs").shuffle_grouping("pairs", "words")
    definition = builder.build(workers=1).definition
    host = FakeHost(plan_of({"pairs:0": "n1:1", "sink:0": "n1:1"}), acking=False)
    ex = SpoutExecutor(host, "pairs:0", 0, Pairs, definition)  # type: ignore[arg-type]
    ex.setup()
    ex.refresh_routing()
    return host, ex


def _delivered(host: FakeHost) -> list[Any]:
    q, values = host.data(1), []
    while not q.empty():
        _src, batch, *_ = q.get()
        values.extend(batch[0])
    return values


@pytest.mark.parametrize(("values", "what"), [
    (("hello",), "(1 values)"), (("a", 1, 2), "(3 values)"), ("hello", "(5 values)"), (7, "(no sequence of values)"),
])
def test_a_wrong_number_of_values_is_the_emitter_s_error_and_still_delivered(values: Any, what: str) -> None:
    host, ex = _spout()
    for _ in range(3):
        ex.instance.emit(values)
    ex.outbox.flush()
    counters = ex.counters()
    assert counters["errors"] == 1 and counters["wrong_arity"] >= 1  # batches (the first ones are small)
    assert ex.last_error.startswith("emit: ValueError: pairs emitted") and what in ex.last_error
    assert "on stream 'default', which declares 2 fields ['word', 'count']" in ex.last_error
    assert len(_delivered(host)) == 3, "nothing dropped"
    for _ in range(3):  # reported at most once a second, counted every batch
        ex.instance.emit(values)
        ex.outbox.flush()
    assert ex.counters()["errors"] == 1 and ex.counters()["wrong_arity"] == counters["wrong_arity"] + 3


def test_the_declared_number_on_each_stream_is_no_error() -> None:
    host, ex = _spout()
    ex.instance.emit(("a", 1))
    ex.instance.emit(("b",), stream="words")
    ex.instance.emit(("c", 2))
    ex.outbox.flush()
    ex.instance.emit(("d",), stream="words")  # a batch that starts on another stream
    ex.instance.emit(("e", 3))
    ex.outbox.flush()
    assert ex.counters()["errors"] == 0 and "wrong_arity" not in ex.counters()
    assert len(_delivered(host)) == 5
    ex.instance.emit(("f", 4), stream="words")
    ex.outbox.flush()
    assert ex.counters()["wrong_arity"] == 1 and "on stream 'words', which declares 1 fields" in ex.last_error


def test_a_field_missing_from_a_short_tuple_names_the_emitter() -> None:
    cls = delivered_tuple_class(TupleMeta("split", 0, "default", {"word": 0, "count": 1}), anchored=False)
    tup: Tuple = cls()
    tup.values = ("hello",)
    assert tup["word"] == "hello"
    with pytest.raises(IndexError, match="field 'count' of stream split/default is missing: split emitted 1 values "
                                         "for 2 fields"):
        tup["count"]
