"""Live task chaining on a real cluster: chain, unchain and move a chained executor, counts exact."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

from nstorm.moves import RebalanceError
from topologies.sentences import sentences

from conftest import TOPOLOGIES, read_outputs, wait_until

PER_SPOUT = 4000


def _expected(spouts: int = 2) -> collections.Counter[str]:
    expected: collections.Counter[str] = collections.Counter()
    for i in range(spouts):
        for s in sentences(PER_SPOUT, seed=100 + i):
            expected.update(s.split())
    return expected


def _chained(client: Any, name: str) -> dict[str, str]:
    """Executor -> its host, as the workers report it (the chain runs, not only planned)."""
    return {eid: c["chained_to"] for beat in client.heartbeats(name).values()
            for eid, c in beat.executors.items() if c.get("chained_to")}


def _pairs(plan: Any, up: str = "sentences", down: str = "split") -> dict[str, str]:
    """``down`` executor -> the ``up`` executor of its worker (one of each per worker)."""
    up_of = {w: e for e, w in plan.executors.items() if e.startswith(up + ":")}
    return {e: up_of[w] for e, w in plan.executors.items() if e.startswith(down + ":")}


def _wait_exact(client: Any, directory: Path, expected: collections.Counter[str], spouts: int = 2) -> None:
    def finished() -> dict[str, Any] | None:
        out = read_outputs(directory)
        acked = sum(len(v["acks"]) for k, v in out.items() if k.startswith("spout-"))
        counted = sum(sum(v.values()) for k, v in out.items() if k.startswith("count-"))
        return out if acked >= spouts * PER_SPOUT and counted >= sum(expected.values()) else None

    out = wait_until(finished, 180, interval=0.5, what="every sentence acked and counted")
    counts: collections.Counter[str] = collections.Counter()
    for k, v in out.items():
        if k.startswith("count-"):
            counts.update(v)
    assert counts == expected  # nothing lost, nothing counted twice
    for i in range(spouts):
        acks = out[f"spout-{i}"]["acks"]
        assert sorted(int(k) for k in acks) == list(range(PER_SPOUT))
        assert set(acks.values()) == {1}  # every sentence acked exactly once


def test_chain_unchain_and_move_a_chained_executor_live_with_exact_counts(client, tmp_path: Path) -> None:
    name = "chainwc"
    client.submit(TOPOLOGIES / "chained_wordcount.py", name=name,
                  conf={"test.output.dir": str(tmp_path), "test.sentences": PER_SPOUT, "test.rate": 400})
    try:
        plan = client.wait_running(name, 60)
        pairs = {**_pairs(plan), **_pairs(plan, "split", "lower")}  # a chain of three in each worker
        assert len(pairs) == 4 and len(set(pairs.values())) == 4, plan.executors
        wait_until(lambda: any(k.startswith("count-") for k in read_outputs(tmp_path)), 30, what="counting to start")
        pids = {w["id"]: w["pid"] for w in client.status(name)["workers"]}

        client.chain(name, pairs)
        wait_until(lambda: _chained(client, name) == pairs, 30, what="both splits running in their spouts' threads")
        assert client.status(name)["chains"] == pairs

        with pytest.raises(RebalanceError, match="cannot chain"):  # count's input is fields-grouped
            client.chain(name, {"count:0": "split:0"})

        client.chain(name, _pairs(plan, "split", "lower"))  # unchain the spouts' guests live
        wait_until(lambda: _chained(client, name) == _pairs(plan, "split", "lower"), 30, what="split unchained")
        client.chain(name, {})
        wait_until(lambda: not _chained(client, name), 30, what="every chain ended")

        client.chain(name, pairs)
        wait_until(lambda: _chained(client, name) == pairs, 30, what="chained again")
        moved = "split:0"  # a guest and a host: both of its chains end
        target = next(w for w in sorted(plan.workers) if w != plan.executors[moved])
        result = client.rebalance(name, moves=[(moved, target)])
        client.wait_migrations(name, result["records"], timeout=30)
        assert client.plan(name).chains == {}  # no channel is pointwise any more
        wait_until(lambda: not _chained(client, name), 30, what="the moved executor left its chains")

        _wait_exact(client, tmp_path, _expected())
        assert {w["id"]: w["pid"] for w in client.status(name)["workers"]} == pids  # no worker restarted
    finally:
        client.kill(name, wait_secs=0)


def test_a_broken_constraint_makes_the_controller_chain_the_pointwise_channel(client, tmp_path: Path) -> None:
    """A bound no buffer size can meet at first: the controller's first step is the chain, by: latency."""
    name = "chainlat"
    constraint = {"path": ["sentences", "split", "lower", "count"], "p99_ms": 1, "window_secs": 1}
    client.submit(TOPOLOGIES / "chained_wordcount.py", name=name,
                  conf={"test.output.dir": str(tmp_path), "test.sentences": PER_SPOUT, "test.rate": 400,
                        "topology.batch.max.latency.ms": 50, "topology.latency.constraints": [constraint]})
    try:
        plan = client.wait_running(name, 60)
        pairs = {"sentences>split": _pairs(plan), "split>lower": _pairs(plan, "split", "lower")}

        def chained_by_the_controller() -> dict[str, Any] | None:
            c = client.status(name)["constraints"][0]
            return c if any(a["kind"] == "chain" for a in c["actions"]) else None

        c = wait_until(chained_by_the_controller, 60, interval=0.5, what="a chain action")
        first = next(a for a in c["actions"] if a["kind"] == "chain")
        channel = first["detail"].partition(":")[0]
        assert channel in pairs, first
        wait_until(lambda: pairs[channel].items() <= _chained(client, name).items(), 30,
                   what=f"{channel} running in one thread per worker")
        _wait_exact(client, tmp_path, _expected())
    finally:
        client.kill(name, wait_secs=0)


def test_topology_chaining_runs_every_pointwise_channel_chained_from_the_first_plan(client, tmp_path: Path) -> None:
    """``topology.chaining=true`` (Flink chains at submit): the even scheduler puts each
    ``local_or_shuffle`` channel's ends in one worker and plan v1 chains them; counts stay exact."""
    name = "chainsubmit"
    client.submit(TOPOLOGIES / "chained_wordcount.py", name=name,
                  conf={"test.output.dir": str(tmp_path), "test.sentences": PER_SPOUT, "test.rate": 400,
                        "topology.chaining": True})
    try:
        plan = client.wait_running(name, 60)
        pairs = {**_pairs(plan), **_pairs(plan, "split", "lower")}
        assert len(pairs) == 4 and client.plan(name).chains == pairs
        wait_until(lambda: _chained(client, name) == pairs, 30, what="every pointwise channel running chained")
        _wait_exact(client, tmp_path, _expected())
        assert _chained(client, name) == pairs  # and it stayed so
    finally:
        client.kill(name, wait_secs=0)


def test_one_executor_at_each_end_chains_whatever_the_grouping_and_a_rescale_ends_it(client, tmp_path: Path) -> None:
    """One spout shuffling to one split, fields-grouped to one ``lower``, in one worker: every tuple
    goes to the one executor, so ``topology.chaining`` runs all three in one thread. Scaling
    ``lower`` to two live ends its chain in the plan that starts the rescale (routing is never
    changed for a chain); the counts stay exact and every sentence is acked once."""
    name = "chainone"
    client.submit(TOPOLOGIES / "one_to_one_wordcount.py", name=name,
                  conf={"test.output.dir": str(tmp_path), "test.sentences": PER_SPOUT, "test.rate": 400,
                        "topology.chaining": True, "topology.message.timeout.secs": 90})
    try:
        client.wait_running(name, 60)
        pairs = {"split:0": "sentences:0", "lower:0": "split:0"}
        assert client.plan(name).chains == pairs
        wait_until(lambda: _chained(client, name) == pairs, 30, what="sentences -> split -> lower in one thread")
        wait_until(lambda: any(k.startswith("count-") for k in read_outputs(tmp_path)), 30, what="counting to start")

        result = client.rebalance(name, parallelism={"lower": 2})
        done = client.wait_migrations(name, result["records"], timeout=60)
        assert [r.mode.value for r in done] == ["rescale"]
        assert client.plan(name).chains == {"split:0": "sentences:0"}  # two lowers: the grouping picks
        wait_until(lambda: _chained(client, name) == {"split:0": "sentences:0"}, 30, what="lower's chain ended")
        with pytest.raises(RebalanceError, match="cannot chain"):
            client.chain(name, pairs)

        _wait_exact(client, tmp_path, _expected(1), spouts=1)
    finally:
        client.kill(name, wait_secs=0)
