"""Durable state on a real cluster: checkpoints in LMDB files or a real Redis, workers SIGKILLed,
a live move in between, and the keyed sums come out exact (exactly-once state).

The topology is ``tests/topologies/durable_sum.py``: a spout that keeps its position in
``self.state``, 2 ``mod`` bolts, 3 ``sum`` bolts with their totals in ``self.keyed_state``.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import TOPOLOGIES, read_outputs, run_cli, start_redis, stop_process, wait_until

DURABLE_SUM = TOPOLOGIES / "durable_sum.py"
NUMBERS = 12000


def _expected(n: int) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for i in range(1, n + 1):
        totals[str(i % 7)] += i
    return dict(totals)


def _totals(out: Path) -> dict[str, int]:
    files = read_outputs(out)
    totals: dict[str, int] = {}
    for i in range(3):
        for key, value in files.get(f"sum-{i}", {}).get("totals", {}).items():
            assert key not in totals, f"key {key} summed by two executors"
            totals[key] = value
    return totals


def _done(out: Path) -> bool:
    spout = read_outputs(out).get("numbers", {})
    return spout.get("next", 0) > NUMBERS and spout.get("pending_n", 1) == 0


def _worker_of(client: Any, name: str, executor: str) -> dict[str, Any]:
    return next(w for w in client.status(name)["workers"] if executor in w["executors"])


def _kill_worker_of(client: Any, name: str, executor: str) -> None:
    """SIGKILL the worker that runs ``executor``; wait until it is restarted and rolled back."""
    before = client.status(name)["checkpoints"]["restores"]
    worker = _worker_of(client, name, executor)
    os.kill(worker["pid"], signal.SIGKILL)
    wait_until(lambda: client.status(name)["checkpoints"]["restores"] > before, 60,
               what=f"a rollback after {worker['id']} was killed")
    wait_until(lambda: (w := _worker_of(client, name, executor))["pid"] and w["pid"] != worker["pid"], 60,
               what=f"{worker['id']} to be restarted")


def _committed(client: Any, name: str) -> int:
    last = client.status(name)["checkpoints"]["last_committed"]
    return last["id"] if last else 0


def _run(client: Any, name: str, out: Path, conf: dict[str, Any], cluster: Any = None) -> None:
    client.submit(DURABLE_SUM, name=name, conf={"test.output.dir": str(out), "test.numbers": NUMBERS,
                                                "test.rate": 1500, "topology.state.checkpoint.interval.ms": 300,
                                                **conf})
    try:
        plan = client.wait_running(name, 60)
        wait_until(lambda: _committed(client, name) >= 2, 60, what="two checkpoints committed")
        # A worker that holds a sum executor, SIGKILLed mid-run.
        victim = next(e for e in ("sum:0", "sum:1", "sum:2") if plan.executors[e] != plan.executors["numbers:0"])
        _kill_worker_of(client, name, victim)
        # Live moves (a bolt with keyed state, the spout, a stateless bolt) once it checkpoints again.
        base = _committed(client, name)
        wait_until(lambda: _committed(client, name) > base + 1, 60, what="checkpoints after the rollback")
        for executor in ("sum:1", "numbers:0", "mod:0"):  # live moves while checkpoints are taken
            plan = client.plan(name)
            source = plan.executors[executor]
            target = next(w for w in sorted(plan.workers) if w != source)
            result = client.rebalance(name, moves=[(executor, target)])
            client.wait_migrations(name, result["records"], timeout=30)
        # The spout's worker, SIGKILLed.
        base = _committed(client, name)
        wait_until(lambda: _committed(client, name) > base, 60, what="a checkpoint after the move")
        _kill_worker_of(client, name, "numbers:0")
        wait_until(lambda: _done(out), 180, interval=0.3, what="every number emitted and acked")
        expected = _expected(NUMBERS)
        wait_until(lambda: sum(_totals(out).values()) >= sum(expected.values()), 60, interval=0.3,
                   what="the sums to take every number")
        assert _totals(out) == expected
        status = client.status(name)
        assert status["checkpoints"]["restores"] >= 2
        assert status["checkpoints"]["last_committed"]["bytes"] > 0
        assert any(read_outputs(out).get(f"commits-{i}", {}).get("last", 0) > 0 for i in range(3)), "on_commit ran"
        if cluster is not None:
            shown = run_cli("status", name, cluster=cluster)
            provider = conf["topology.state.provider"]
            assert f"checkpoints: {provider} every 300 ms; last committed #" in shown.stdout, shown.stdout
    finally:
        client.kill(name)
        client.wait_removed(name, 30)


def test_keyed_sums_are_exact_through_kills_and_a_move_with_lmdb(cluster, client, tmp_path: Path) -> None:
    _run(client, "durablelmdb", tmp_path, {"topology.state.provider": "lmdb"}, cluster)
    assert not any((Path(os.environ["NSTORM_HOME"]) / "state").glob("durablelmdb-*")), "kill deletes the checkpoints"


def test_keyed_sums_are_exact_through_kills_and_a_move_with_redis(client, tmp_path: Path, redis_server: str) -> None:
    import redis

    _run(client, "durableredis", tmp_path, {"topology.state.provider": "redis",
                                           "topology.state.provider.config": {"url": redis_server}})
    assert not list(redis.Redis.from_url(redis_server).scan_iter(match="nstorm:durableredis-*")), \
        "kill deletes the checkpoints"


@pytest.mark.parametrize("provider", ["nosuch"])
def test_an_unknown_provider_is_refused_at_submit(cluster, provider: str) -> None:
    result = run_cli("submit", str(DURABLE_SUM), "--name", "badprovider", "-c", f"topology.state.provider={provider}",
                     cluster=cluster)
    assert result.returncode == 2
    assert "topology.state.provider" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _next(out: Path) -> int:
    return int(read_outputs(out).get("numbers", {}).get("next", 0))


def test_state_that_is_not_msgpack_data_fails_checkpoints_and_says_where(client, tmp_path: Path) -> None:
    client.submit(DURABLE_SUM, name="badstate", conf={
        "test.output.dir": str(tmp_path), "test.numbers": 10**6, "test.rate": 500, "test.bad.state": True,
        "topology.state.provider": "lmdb", "topology.state.checkpoint.interval.ms": 200,
        "topology.state.checkpoint.timeout.secs": 1})
    try:
        client.wait_running("badstate", 60)
        # The first abandonment may come before the worker's heartbeat carries the reason.
        error = wait_until(lambda: (e := client.status("badstate")["checkpoints"]["last_error"]) and "'bad'" in e
                           and e, 60, what="a checkpoint error naming the key in status")
        assert "sum:0" in error and "not msgpack data" in error, error
        assert client.status("badstate")["checkpoints"]["last_committed"] is None, "never committed without it"
        base = _next(tmp_path)
        wait_until(lambda: _next(tmp_path) > base + 200, 30, what="processing to go on")
    finally:
        client.kill("badstate")
        client.wait_removed("badstate", 30)


def test_an_unreachable_redis_fails_checkpoints_while_processing_goes_on(client, tmp_path: Path) -> None:
    from nstorm.net import free_port

    port = free_port("127.0.0.1")
    redis_proc = start_redis(port)
    try:
        client.submit(DURABLE_SUM, name="redisdown", conf={
            "test.output.dir": str(tmp_path), "test.numbers": 10**6, "test.rate": 500,
            "topology.state.provider": "redis", "topology.state.provider.config": {"url": f"redis://127.0.0.1:{port}/0"},
            "topology.state.checkpoint.interval.ms": 200, "topology.state.checkpoint.timeout.secs": 1})
        client.wait_running("redisdown", 60)
        wait_until(lambda: _committed(client, "redisdown") >= 1, 60, what="a checkpoint committed")
        redis_proc.kill()
        redis_proc.wait(10)
        error = wait_until(lambda: client.status("redisdown")["checkpoints"]["last_error"], 60,
                           what="the Redis failure in status")
        assert "Redis" in error or "abandoned" in error, error
        base, committed = _next(tmp_path), _committed(client, "redisdown")
        wait_until(lambda: _next(tmp_path) > base + 200, 30, what="processing to go on without Redis")
        assert _committed(client, "redisdown") == committed
        pids = {w["id"]: w["pid"] for w in client.status("redisdown")["workers"]}
        redis_proc = start_redis(port)
        wait_until(lambda: _committed(client, "redisdown") > committed, 60, what="checkpoints again once Redis is back")
        assert {w["id"]: w["pid"] for w in client.status("redisdown")["workers"]} == pids, "no worker restarted"
    finally:
        client.kill("redisdown")
        client.wait_removed("redisdown", 30)
        stop_process(redis_proc)


def test_a_poison_tuple_deactivates_the_topology_after_max_rollbacks(cluster, client, tmp_path: Path) -> None:
    """A tuple that fails on every replay rolls a durable topology back to the same checkpoint
    again and again; after ``topology.state.max.rollbacks`` in a row it is deactivated, and the
    status says why. Activated again, it gets as many tries again."""
    name = "poisoned"
    client.submit(DURABLE_SUM, name=name, conf={"test.output.dir": str(tmp_path), "test.numbers": 3000,
                                                "test.rate": 1500, "test.poison": 700,
                                                "topology.state.provider": "lmdb",
                                                # A rollback asked for while a checkpoint is being taken
                                                # does not wait: checkpoints far apart, so that the poison
                                                # tuple comes back between them.
                                                "topology.state.checkpoint.interval.ms": 3000,
                                                "topology.state.max.rollbacks": 3})
    try:
        client.wait_running(name, 60)
        # The second rollback in a row waits out the backoff (1 s by default), and says until when.
        due = wait_until(lambda: client.status(name)["checkpoints"].get("rollback_at"), 120, 0.05,
                         what="a rollback in a row waiting out its backoff")
        assert due > time.time() - 5, due
        wait_until(lambda: client.status(name)["checkpoints"]["restores"] >= 2, 60, what="the waiting rollback done")
        wait_until(lambda: client.status(name)["status"] == "INACTIVE", 120, what="the topology deactivated")
        checkpoints = client.status(name)["checkpoints"]
        assert checkpoints["restores"] >= 3, checkpoints
        assert "rolled back 3 times in a row" in checkpoints["last_error"], checkpoints
        # The bolt that raised and the spout whose tree failed both ask for the rollback; either may be last.
        reasons = ("a tuple failed", "a tuple tree failed or timed out")
        assert any(r in checkpoints["last_error"] for r in reasons), checkpoints
        assert checkpoints["rollbacks_in_a_row"] == 0, checkpoints
        shown = run_cli("status", name, cluster=cluster)
        assert "deactivated at checkpoint" in shown.stdout and "nstorm activate poisoned" in shown.stdout, shown.stdout
        first = checkpoints["restores"]
        run_cli("activate", name, cluster=cluster)
        wait_until(lambda: client.status(name)["checkpoints"]["restores"] >= first + 3
                   and client.status(name)["status"] == "INACTIVE", 120, what="three more tries, then deactivated again")
    finally:
        client.kill(name)
        client.wait_removed(name, 30)
