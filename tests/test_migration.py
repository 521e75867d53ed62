"""Executor migration on a real 2-supervisor cluster: thread (N-Storm), process (Storm*), stop (Storm)."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import psutil
import pytest

from nstorm.zkschema import encode
from topologies.sentences import sentences

from conftest import TOPOLOGIES, read_outputs, run_cli, wait_until

LINEAR = str(Path(__file__).parents[1] / "topologies" / "linear.py")


def _pids(client, name: str) -> dict[str, int]:
    return {w["id"]: w["pid"] for w in client.status(name)["workers"]}


def _other_worker(plan: dict, executor: str) -> str:
    here = plan.executors[executor]
    here_node = here.split(":")[0]
    return next(w for w in sorted(plan.workers) if w.split(":")[0] != here_node)


def test_thread_move_of_stateful_count_between_nodes_is_exact(client, tmp_path: Path) -> None:
    per_spout = 6000
    client.submit(TOPOLOGIES / "exact_wordcount.py",
                  conf={"test.output.dir": str(tmp_path), "test.sentences": per_spout, "topology.max.spout.pending": 200},
                  name="wcmove")
    try:
        plan = client.wait_running("wcmove", 60)
        pids = _pids(client, "wcmove")
        wait_until(lambda: any(k.startswith("count-") for k in read_outputs(tmp_path)), 30, what="counting to start")
        stalls = []
        for executor in ("count:0", "count:0", "split:1"):  # there, back again, and a stateless one
            plan = client.plan("wcmove")
            target = _other_worker(plan, executor)
            result = client.rebalance("wcmove", moves=[(executor, target)])
            done = client.wait_migrations("wcmove", result["records"], timeout=30)
            assert done[0].target == target and done[0].mode == "thread"
            stalls.append(done[0].stall_secs)
            assert client.plan("wcmove").executors[executor] == target
        assert max(stalls) < 1.0, stalls

        expected = collections.Counter()
        for i in range(2):
            for s in sentences(per_spout, seed=100 + i):
                expected.update(s.split())

        def finished():
            out = read_outputs(tmp_path)
            acked = sum(len(v["acks"]) for k, v in out.items() if k.startswith("spout-"))
            counted = sum(sum(v.values()) for k, v in out.items() if k.startswith("count-"))
            return out if acked >= 2 * per_spout and counted >= sum(expected.values()) else None

        out = wait_until(finished, 120, what="every sentence acked and counted")
        counts = collections.Counter()
        for key, value in out.items():
            if key.startswith("count-"):
                counts.update(value)
        assert counts == expected
        for i in range(2):
            assert out[f"spout-{i}"]["fails"] == 0
            assert set(out[f"spout-{i}"]["acks"].values()) == {1}
        assert _pids(client, "wcmove") == pids, "a worker was restarted"
        status = client.status("wcmove")
        assert [m["executor"] for m in status["migrations"]] == ["count:0", "count:0", "split:1"]
        assert all(m["by"] == "user" and m["completed_at"] >= m["requested_at"] for m in status["migrations"])
    finally:
        client.kill("wcmove")
        client.wait_removed("wcmove", 30)


def test_a_state_larger_than_a_frame_moves_live_in_parts(client, tmp_path: Path) -> None:
    # 80 MB of state against a receiving socket that refuses frames over wire.MAX_FRAME_BYTES (64 MB)
    count = 1500
    client.submit(TOPOLOGIES / "big_state.py", name="bigstate",
                  conf={"test.output.dir": str(tmp_path), "test.count": count, "test.rate": 150,
                        "test.ballast.mb": 80})
    try:
        plan = client.wait_running("bigstate", 60)
        before = wait_until(lambda: (read_outputs(tmp_path).get("hold-0") or {}).get("n", 0) > 50 and
                            read_outputs(tmp_path)["hold-0"], 60, what="the bolt to hold its ballast and count")
        assert before["bytes"] == 80 * 2**20
        target = _other_worker(plan, "hold:0")
        result = client.rebalance("bigstate", moves=[("hold:0", target)])
        done = client.wait_migrations("bigstate", result["records"], timeout=60)
        assert done[0].state_lost is False

        def finished():
            out = read_outputs(tmp_path)
            hold, spout = out.get("hold-0") or {}, out.get("spout") or {}
            return out if spout.get("acked") == count and hold.get("n") == count else None

        out = wait_until(finished, 120, what="every number acked and summed once")
        hold = out["hold-0"]
        assert hold["total"] == count * (count - 1) // 2 and out["spout"]["fails"] == 0
        assert hold["digest"] == before["digest"] and hold["bytes"] == 80 * 2**20  # the same ballast, whole
        assert hold["first_digest"] != hold["digest"]  # ... in a copy that made its own in prepare, then took it
        assert client.plan("bigstate").executors["hold:0"] == target
    finally:
        client.kill("bigstate")
        client.wait_removed("bigstate", 30)


def test_process_mode_restarts_exactly_the_affected_workers(client, cluster) -> None:
    assert run_cli("submit", LINEAR, "--name", "procmode", "-c", "linear.rate=300", "-c", "linear.workers=3",
                   cluster=cluster).returncode == 0
    try:
        plan = client.wait_running("procmode", 60)
        pids = _pids(client, "procmode")
        executor = "stage1:0"
        source = plan.executors[executor]
        target = next(w for w in sorted(plan.workers) if w != source)
        untouched = [w for w in plan.workers if w not in (source, target)]
        assert untouched
        result = run_cli("rebalance", "procmode", "--mode", "process", "--move", f"{executor}={target}",
                         cluster=cluster)
        assert result.returncode == 0, result.stderr
        assert f"{executor}: {source} -> {target}" in result.stdout

        def restarted():
            now = _pids(client, "procmode")
            return now if all(now.get(w) and now[w] != pids[w] for w in (source, target)) else None

        now = wait_until(restarted, 60, what="the two affected workers to restart")
        for w in untouched:
            assert now[w] == pids[w], "an unaffected worker was restarted"
        assert client.plan("procmode").executors[executor] == target
        migration = client.status("procmode")["migrations"][-1]
        assert migration["mode"] == "process" and migration["completed_at"]

        # Two requests at once, so that Nimbus writes two versions in one pass: a supervisor that
        # read only the second restarted none of the first's workers (session 33's item).
        plan = client.plan("procmode")
        workers = sorted(plan.workers)
        first = next(e for e in sorted(plan.executors) if plan.executors[e] == workers[0] and "stage" in e)
        second = next(e for e in sorted(plan.executors) if plan.executors[e] == workers[2] and "stage" in e)
        moves = {first: workers[1], second: workers[0]}
        tx = client.zk.transaction()
        for e, w in moves.items():
            request = {"mode": "process", "moves": [[e, w]], "random": 0, "by": "user", "requested_at": time.time()}
            tx.create(f"{client.paths.requests('procmode')}/req-", encode(request), sequence=True)
        paths = tx.commit()
        results = [wait_until(lambda p=p: (client.cluster.read(p)[0] or {}).get("result"), 30, what="nimbus to take both")
                   for p in paths]
        for p in paths:
            client.zk.delete(p)
        assert all(r["ok"] for r in results) and results[1]["version"] == results[0]["version"] + 1, results

        def all_restarted():
            later = _pids(client, "procmode")
            return later if all(later.get(w) and later[w] != now[w] for w in workers) else None

        wait_until(all_restarted, 60, what="every worker of both moves to restart")
        assert {e: client.plan("procmode").executors[e] for e in moves} == moves
        client.wait_migrations("procmode", {**results[0]["records"], **results[1]["records"]}, timeout=30)
    finally:
        client.kill("procmode")
        client.wait_removed("procmode", 30)


def test_stop_mode_stops_and_restores_the_topology(client, cluster) -> None:
    assert run_cli("submit", LINEAR, "--name", "stopmode", "-c", "linear.rate=300", cluster=cluster).returncode == 0
    try:
        plan = client.wait_running("stopmode", 60)
        pids = _pids(client, "stopmode")
        executor = "stage2:1"
        target = next(w for w in sorted(plan.workers) if w != plan.executors[executor])
        result = run_cli("rebalance", "stopmode", "--mode", "stop", "--wait", "1", "--move", f"{executor}={target}",
                         cluster=cluster, timeout=120)
        assert result.returncode == 0, result.stderr
        now = _pids(client, "stopmode")
        assert all(now[w] != pids[w] for w in pids), "stop mode must restart every worker"
        assert client.plan("stopmode").executors[executor] == target
        assert client.status("stopmode")["status"] == "ACTIVE"
        before = client.status("stopmode")["spouts"]["acked"]
        wait_until(lambda: client.status("stopmode")["spouts"]["acked"] > before + 100, 60, what="processing to resume")
    finally:
        client.kill("stopmode")
        client.wait_removed("stopmode", 30)


def test_random_moves_keep_placement_even(client, cluster) -> None:
    assert run_cli("submit", LINEAR, "--name", "randmode", "-c", "linear.rate=300", "-c", "linear.workers=2",
                   cluster=cluster).returncode == 0
    try:
        plan = client.wait_running("randmode", 60)
        pids = _pids(client, "randmode")
        result = run_cli("rebalance", "randmode", "--random", "4", cluster=cluster)
        assert result.returncode == 0, result.stderr
        new = client.plan("randmode")
        moved = [e for e in plan.executors if plan.executors[e] != new.executors[e]]
        assert len(moved) == 4 and not any(e.startswith("__acker") for e in moved)
        loads = collections.Counter(w for e, w in new.executors.items() if not e.startswith("__acker"))
        assert max(loads.values()) - min(loads.values()) <= 1
        assert {m["by"] for m in client.status("randmode")["migrations"]} == {"random"}
        assert _pids(client, "randmode") == pids
    finally:
        client.kill("randmode")
        client.wait_removed("randmode", 30)


@pytest.fixture(scope="module")
def steady(cluster):
    """A running topology for the bad-input checks."""
    from nstorm.client import ClusterClient

    assert run_cli("submit", LINEAR, "--name", "steady", "-c", "linear.rate=200", cluster=cluster).returncode == 0
    with ClusterClient(cluster.address, cluster.root) as cl:
        plan = cl.wait_running("steady", 60)
        try:
            yield plan
        finally:
            cl.kill("steady")
            cl.wait_removed("steady", 30)


@pytest.mark.parametrize(
    ("make_args", "needle"),
    [
        (lambda p, o: ["--move", f"nosuch:0={o}"], "unknown executor 'nosuch:0'"),
        (lambda p, o: ["--move", "stage1:0=n9:1234"], "unknown or dead worker 'n9:1234'"),
        (lambda p, o: ["--move", "stage1:0=n1:1"], "not a slot of supervisor 'n1'"),
        (lambda p, o: ["--move", f"__acker:0={o}"], "is an acker"),
        (lambda p, o: ["--move", "stage1:0"], "malformed --move"),
        (lambda p, o: ["--mode", "teleport", "--move", f"stage1:0={o}"], "unknown mode 'teleport'"),
        (lambda p, o: ["--move", f"stage1:0={p.executors['stage1:0']}"], "already runs on"),
    ],
)
def test_bad_moves_exit_2_and_move_nothing(client, cluster, steady, make_args, needle) -> None:
    plan = client.plan("steady")
    other = next(w for w in plan.workers if w != plan.executors["stage1:0"])
    pids = _pids(client, "steady")
    result = run_cli("rebalance", "steady", *make_args(plan, other), cluster=cluster)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert client.plan("steady").executors == plan.executors
    assert _pids(client, "steady") == pids


def test_move_during_a_migration_of_the_same_executor_is_rejected(client, cluster, steady) -> None:
    from nstorm.zkschema import encode

    plan = client.plan("steady")
    executor = "stage3:0"
    other = next(w for w in plan.workers if w != plan.executors[executor])
    # A migration record still in flight (as if its new copy had not resumed yet).
    client.zk.create(f"{client.paths.migrations('steady')}/m-", encode(
        {"executor": executor, "from": plan.executors[executor], "to": other, "mode": "thread",
         "by": "user", "requested_at": 0.0, "completed_at": None}), sequence=True, makepath=True)
    result = run_cli("rebalance", "steady", "--move", f"{executor}={other}", cluster=cluster)
    assert result.returncode == 2 and "already being migrated" in result.stderr
    assert client.plan("steady").executors == plan.executors


def test_moved_worker_processes_are_live(client, steady) -> None:
    for pid in _pids(client, "steady").values():
        assert psutil.pid_exists(pid)
