"""Unit tests of the public API: building, validating, tuples."""

from __future__ import annotations

import pytest

from nstorm import Batch, Bolt, Spout, TopologyBuilder, TopologyError, Tuple
from nstorm.component import TupleMeta


class S(Spout):
    outputs = ("word", "n")

    def next_tuple(self) -> None:
        pass


class Multi(Spout):
    outputs = {"default": ("a",), "errors": ("msg",)}

    def next_tuple(self) -> None:
        pass


class B(Bolt):
    outputs = ("word",)

    def process(self, tup: Tuple) -> None:
        pass


def _builder() -> TopologyBuilder:
    b = TopologyBuilder("t")
    b.set_spout("s", S, parallelism=2)
    return b


def test_build_gives_json_definition() -> None:
    b = _builder()
    b.set_bolt("split", B, parallelism=3).shuffle_grouping("s")
    b.set_bolt("count", B, parallelism=4).fields_grouping("split", ["word"])
    topo = b.build(workers=2, conf={"x.y": 1})
    d = topo.definition
    assert d["workers"] == 2 and d["conf"]["x.y"] == 1
    assert d["components"]["count"]["inputs"] == [
        {"component": "split", "stream": "default", "grouping": "fields", "fields": ["word"]}
    ]
    assert d["components"]["s"]["outputs"] == {"default": ["word", "n"]}
    assert topo.executors()[:2] == ["s:0", "s:1"]
    assert topo.classes["count"] is B


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda b: b.set_bolt("a", B).shuffle_grouping("nope"), "unknown component 'nope'"),
        (lambda b: b.set_bolt("a", B).fields_grouping("s", ["missing"]), "undeclared field"),
        (lambda b: b.set_bolt("a", B, parallelism=0).shuffle_grouping("s"), "parallelism must be an integer >= 1"),
        (lambda b: b.set_bolt("s", B).shuffle_grouping("s"), "duplicate component name 's'"),
        (lambda b: b.set_bolt("a", B), "bolt 'a' has no inputs"),
        (lambda b: b.set_bolt("a:b", B).shuffle_grouping("s"), "component name 'a:b' is invalid"),
        (lambda b: b.set_bolt("a", B).shuffle_grouping("s", stream="nope"), "stream 'nope'"),
        (lambda b: b.set_bolt("a", S).shuffle_grouping("s"), "is not a Bolt subclass"),
        (lambda b: b.set_bolt("a", B).fields_grouping("s", []), "names no field"),
        (lambda b: b.set_bolt("a", B, parallelism=70_000).shuffle_grouping("s"), "exceed 65536 tasks"),
    ],
)
def test_build_rejects_bad_graphs(make, message) -> None:
    b = _builder()
    make(b)
    with pytest.raises(TopologyError) as info:
        b.build()
    assert message in str(info.value)


def test_cycle_is_named() -> None:
    b = _builder()
    b.set_bolt("a", B).shuffle_grouping("s").shuffle_grouping("c")
    b.set_bolt("c", B).shuffle_grouping("a")
    with pytest.raises(TopologyError, match="cycle in topology: .*a.*c"):
        b.build()


def test_no_spout_and_bad_workers() -> None:
    with pytest.raises(TopologyError, match="has no spout"):
        TopologyBuilder("t").build()
    with pytest.raises(TopologyError, match="workers must be"):
        _builder().build(workers=0)


def test_named_streams() -> None:
    b = TopologyBuilder("t")
    b.set_spout("m", Multi)
    b.set_bolt("e", B).shuffle_grouping("m", stream="errors")
    topo = b.build()
    assert topo.definition["components"]["m"]["outputs"] == {"default": ["a"], "errors": ["msg"]}


def test_tuple_access() -> None:
    t = Tuple(("hello", 3), "s", 1, "default", None, {"word": 0, "n": 1})
    assert t[0] == "hello" and t["n"] == 3 and t.values == ("hello", 3)
    assert t.fields == ("word", "n") and not t.is_tick and len(t) == 2
    with pytest.raises(KeyError, match="no field 'x'"):
        t["x"]
    assert Tuple((), "__system", -1, "__tick", None, {}).is_tick


def test_emit_outside_executor_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="outside a running executor"):
        B().emit(("x",))


def test_batch_access_without_an_executor() -> None:
    """``Batch`` gives the values as they came, a column by name, and tuples when iterated."""
    meta = TupleMeta("split", 1, "default", {"word": 0, "n": 1})
    batch = Batch([("a", 1), ("b", 2)], meta)
    assert len(batch) == 2 and batch.values == [("a", 1), ("b", 2)]
    assert batch.column("word") == ["a", "b"] and batch.column(1) == [1, 2]
    assert batch.source == "split" and batch.source_task == 1 and batch.stream == "default"
    assert [t["word"] for t in batch] == ["a", "b"]
    assert batch.anchors is None  # nothing to anchor to without acking
    with pytest.raises(KeyError, match="no field 'x'"):
        batch.column("x")


def test_process_batch_defaults_to_process() -> None:
    seen = []

    class P(Bolt):
        def process(self, tup: Tuple) -> None:
            seen.append(tup[0])

    P().process_batch(Batch([("x",), ("y",)], TupleMeta("s", 0, "default", {"w": 0})))
    assert seen == ["x", "y"]
