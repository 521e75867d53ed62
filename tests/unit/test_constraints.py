"""Unit tests of latency constraints (issue #17): the builder, ``-c`` JSON, and every error."""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from typing import Any

import pytest

import nstorm.constraints
from nstorm import Bolt, LatencyConstraint, Spout, TopologyBuilder, TopologyError, Tuple
from nstorm.config import DEFAULTS, merge_conf, parse_conf_options
from nstorm.constraints import check_submit, constraints_of, parse_constraints
from nstorm.errors import ConfigError, UsageError
from nstorm.loader import load_topology

ROOT = Path(__file__).parents[2]


class Sentences(Spout):
    outputs = {"default": ("sentence",), "side": ("x",)}

    def next_tuple(self) -> None:
        pass


class Split(Bolt):
    outputs = ("word",)

    def process(self, tup: Tuple) -> None:
        pass


class Count(Bolt):
    outputs = ("word", "n")

    def process(self, tup: Tuple) -> None:
        pass


def _builder() -> TopologyBuilder:
    """sentences -> split -> count, and sentences/side -> audit (a second stream, all grouping)."""
    b = TopologyBuilder("wc")
    b.set_spout("sentences", Sentences)
    b.set_bolt("split", Split, parallelism=2).shuffle_grouping("sentences")
    b.set_bolt("count", Count, parallelism=2).fields_grouping("split", ["word"])
    b.set_bolt("audit", Split).all_grouping("sentences", stream="side")
    return b


def _definition() -> dict[str, Any]:
    return dict(_builder().build().definition)


def _one(**entry: Any) -> list[dict[str, Any]]:
    return [{"path": ["sentences", "split", "count"], "p99_ms": 10, **entry}]


# -- happy paths ------------------------------------------------------------------------------
def test_builder_stores_checked_constraints_in_the_definition() -> None:
    b = _builder()
    assert b.latency_constraint(["sentences", "split", "count"], p99_ms=10) is b  # chainable
    b.latency_constraint(("split", "count"), p99_ms=2.5, window_secs=1, moves=True)
    topo = b.build()
    stored = topo.definition["latency_constraints"]
    assert stored == [
        {"path": ["sentences", "split", "count"], "p99_ms": 10.0, "window_secs": 5.0, "moves": False},
        {"path": ["split", "count"], "p99_ms": 2.5, "window_secs": 1.0, "moves": True},
    ]
    json.dumps(topo.definition)  # plain JSON, as Nimbus stores it
    found = constraints_of(topo.definition, merge_conf(topo.conf))
    assert found == [LatencyConstraint(("sentences", "split", "count"), 10.0),
                     LatencyConstraint(("split", "count"), 2.5, 1.0, True)]
    assert [c.name for c in found] == ["sentences>split>count", "split>count"]


def test_a_definition_without_constraints_is_unchanged() -> None:
    assert "latency_constraints" not in _definition()
    assert constraints_of(_definition(), merge_conf()) == []


def test_any_stream_and_grouping_make_a_path() -> None:
    [c] = parse_constraints([{"path": ["sentences", "audit"], "p99_ms": 1}], _definition())
    assert c.path == ("sentences", "audit")


def test_conf_json_string_as_c_gives_it() -> None:
    raw = '[{"path": ["sentences", "split", "count"], "p99_ms": 10, "window_secs": 2, "moves": true}]'
    overrides = parse_conf_options([f"topology.latency.constraints={raw}"])
    assert isinstance(overrides["topology.latency.constraints"], list)  # -c parses JSON itself
    expected = [LatencyConstraint(("sentences", "split", "count"), 10.0, 2.0, True)]
    assert check_submit(_definition(), merge_conf(overrides)) == expected
    assert parse_constraints(raw, _definition()) == expected  # a JSON string works the same


def test_to_json_round_trips() -> None:
    c = LatencyConstraint(("sentences", "split"), 3.0, 2.0, True)
    assert c.to_json() == {"path": ["sentences", "split"], "p99_ms": 3.0, "window_secs": 2.0, "moves": True}
    assert parse_constraints([c.to_json()], _definition()) == [c]
    with pytest.raises(AttributeError):
        c.p99_ms = 4.0  # type: ignore[misc]  # frozen


def test_conf_wins_for_the_same_path() -> None:
    b = _builder()
    b.latency_constraint(["sentences", "split", "count"], p99_ms=10)
    b.latency_constraint(["split", "count"], p99_ms=4)
    topo = b.build()
    conf = merge_conf(topo.conf, {"topology.latency.constraints": [
        {"path": ["split", "count"], "p99_ms": 1, "window_secs": 9},
        {"path": ["sentences", "audit"], "p99_ms": 7},
    ]})
    found = constraints_of(topo.definition, conf)
    assert [(c.name, c.p99_ms, c.window_secs) for c in found] == [
        ("sentences>split>count", 10.0, 5.0), ("split>count", 1.0, 9.0), ("sentences>audit", 7.0, 5.0)]


def test_defaults_and_empty_values() -> None:
    assert DEFAULTS["topology.latency.constraints"] == []
    assert DEFAULTS["topology.latency.sample.ms"] == 5
    for empty in (None, [], "", "[]"):
        assert parse_constraints(empty, _definition()) == []


def test_wordcount_file_with_c_constraint() -> None:
    topo = load_topology(ROOT / "topologies" / "wordcount.py", {})
    conf = merge_conf(topo.conf, parse_conf_options(
        ['topology.latency.constraints=[{"path": ["sentences", "split", "count"], "p99_ms": 5}]']))
    assert [c.name for c in check_submit(topo.definition, conf)] == ["sentences>split>count"]


def test_module_docstring_example() -> None:
    assert doctest.testmod(nstorm.constraints).failed == 0


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (_one(p99_ms=0), "p99_ms must be a positive, finite number"),
        (_one(p99_ms=-1), "p99_ms must be a positive, finite number"),
        (_one(p99_ms=float("nan")), "p99_ms must be a positive, finite number"),
        (_one(p99_ms=float("inf")), "p99_ms must be a positive, finite number"),
        ('[{"path": ["sentences", "split"], "p99_ms": Infinity}]', "p99_ms must be a positive, finite number"),
        (_one(p99_ms="10"), "p99_ms must be a positive, finite number"),
        (_one(p99_ms=True), "p99_ms must be a positive, finite number"),
        ('[{"path": ["sentences", "split"], "p99_ms": 1%s}]' % ("0" * 400), "p99_ms must be a positive, finite number"),
        (_one(window_secs=0), "window_secs must be a finite number of seconds, at least 1"),
        (_one(window_secs=-5), "window_secs must be a finite number of seconds, at least 1"),
        (_one(window_secs=0.5), "window_secs must be a finite number of seconds, at least 1"),
        (_one(window_secs=10**400), "window_secs must be a finite number of seconds, at least 1"),
        (_one(window_secs=float("inf")), "window_secs must be a finite number of seconds, at least 1"),
        (_one(window_secs=None), "window_secs must be a finite number of seconds, at least 1"),
        (_one(moves="yes"), "moves must be true or false"),
        (_one(moves=1), "moves must be true or false"),
        ([{"path": ["sentences", "nope"], "p99_ms": 1}], "unknown component 'nope'"),
        ([{"path": ["split"], "p99_ms": 1}], "needs at least 2 components"),
        ([{"path": [], "p99_ms": 1}], "needs at least 2 components"),
        ([{"path": ["sentences", "count"], "p99_ms": 1}],
         "'sentences>count' is not a path of the topology: 'count' has no input from 'sentences'"),
        ([{"path": ["count", "split"], "p99_ms": 1}], "is not a path of the topology"),  # backwards
        ([{"path": ["split", "split"], "p99_ms": 1}], "is not a path of the topology"),
        ([{"path": ["split", "count"], "p99_ms": 1, "p50_ms": 1}], "unknown key(s) ['p50_ms']"),
        ([{"path": ["split", "count"]}], "'p99_ms' is missing"),
        ([{"p99_ms": 1}], "'path' is missing"),
        ([{"path": "split>count", "p99_ms": 1}], "path must be a list of component names"),
        ([{"path": ["split", 3], "p99_ms": 1}], "path must be a list of component names"),
        ([{"path": 7, "p99_ms": 1}], "path must be a list of component names"),
        (["split>count"], "expected an object"),
        ({"path": ["split", "count"], "p99_ms": 1}, "expected a list of constraints"),
        (7, "expected a list of constraints"),
        ("[{not json", "not valid JSON"),
        ('"split>count"', "expected a list of constraints"),
        ([{"path": ["split", "count"], "p99_ms": 1}, {"path": ["split", "count"], "p99_ms": 2}],
         "'split>count' is constrained twice"),
    ],
)
def test_bad_constraints_raise_one_line(raw: Any, needle: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_constraints(raw, _definition())
    message = str(info.value)
    assert needle in message, message
    assert "\n" not in message and message.startswith("topology.latency.constraints")
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2


def test_builder_rejects_a_non_path_at_build() -> None:
    b = _builder()
    b.latency_constraint(["sentences", "count"], p99_ms=10)
    with pytest.raises(TopologyError, match=r"^latency_constraint\[0\]: 'sentences>count' is not a path"):
        b.build()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((["sentences", "split"], 0), "p99_ms must be a positive"),
        ((["sentences", "split"], 10, -1.0), "window_secs must be a finite number of seconds"),
        ((["sentences", "ghost"], 10), "unknown component 'ghost'"),
        ((["sentences"], 10), "needs at least 2 components"),
        (("sentences>split", 10), "path must be a list"),
        ((["sentences", "split"], 10, 5.0, "no"), "moves must be true or false"),
    ],
)
def test_builder_errors(args: tuple[Any, ...], needle: str) -> None:
    b = _builder()
    b.latency_constraint(*args)
    with pytest.raises(TopologyError, match="latency_constraint") as info:
        b.build()
    assert needle in str(info.value)


def test_build_conf_constraints_are_checked_at_build() -> None:
    with pytest.raises(TopologyError, match="topology.latency.constraints"):
        _builder().build(conf={"topology.latency.constraints": [{"path": ["count", "sentences"], "p99_ms": 1}]})


def test_conf_errors_at_submit_check() -> None:
    definition = _definition()
    with pytest.raises(TopologyError, match="unknown component 'ghost'"):
        check_submit(definition, merge_conf(
            {"topology.latency.constraints": '[{"path": ["sentences", "ghost"], "p99_ms": 3}]'}))
    for bad in (0, -1, "fast", None, float("nan"), 10**400):
        with pytest.raises(ConfigError, match="topology.latency.sample.ms must be a positive"):
            check_submit(definition, merge_conf({"topology.latency.sample.ms": bad}))
    for bad_flag in ("maybe", 2, None, "", [True], "off", "no"):
        with pytest.raises(ConfigError, match="topology.latency.control must be true or false"):
            check_submit(definition, merge_conf({"topology.latency.control": bad_flag}))
    for good in (False, True, 0, 1, "FALSE", "true", "0"):
        check_submit(definition, merge_conf({"topology.latency.control": good}))


def test_a_windowed_bolt_can_end_a_path_but_not_be_gone_through() -> None:
    """What a windowed bolt emits is a window's result: no tuple's latency goes through it."""
    from nstorm import Window, WindowedBolt

    class Totals(WindowedBolt):
        outputs = ("total",)
        window = Window.tumbling(10.0)

        def init_window(self) -> int:
            return 0

        def add_to_window(self, acc: int, tup: Tuple) -> int:
            return acc + 1

        def fire_window(self, acc: int, window: Any) -> None:
            self.emit((acc,))

    b = TopologyBuilder("w")
    b.set_spout("sentences", Sentences)
    b.set_bolt("totals", Totals).shuffle_grouping("sentences")
    b.set_bolt("report", Split).shuffle_grouping("totals")
    definition = dict(b.build().definition)
    assert [c.name for c in parse_constraints([{"path": ["sentences", "totals"], "p99_ms": 5}], definition)] == [
        "sentences>totals"]
    with pytest.raises(TopologyError, match="goes through windowed bolt 'totals'; a windowed bolt can only end a path"):
        parse_constraints([{"path": ["sentences", "totals", "report"], "p99_ms": 5}], definition)


def test_client_submit_checks_before_touching_zookeeper() -> None:
    from nstorm.client import ClusterClient

    client = object.__new__(ClusterClient)  # no connection: the check must come before any use of it
    with pytest.raises(TopologyError, match="'sentences>count' is not a path"):
        client.submit(ROOT / "topologies" / "wordcount.py", conf={
            "topology.latency.constraints": [{"path": ["sentences", "count"], "p99_ms": 10}]})
