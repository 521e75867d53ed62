"""The core engine end to end on a real cluster: real ZooKeeper, 2 supervisors, worker processes, sockets."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import psutil
import pytest

from nstorm.config import merge_conf
from nstorm.net import free_port
from topologies.sentences import sentences

from conftest import TOPOLOGIES, read_outputs, run_cli, wait_until


def test_wordcount_counts_exactly_and_acks_every_tuple_once(client, tmp_path: Path) -> None:
    per_spout = 1500
    client.submit(TOPOLOGIES / "exact_wordcount.py", conf={"test.output.dir": str(tmp_path), "test.sentences": per_spout})
    try:
        expected = collections.Counter()
        for i in range(2):
            for s in sentences(per_spout, seed=100 + i):
                expected.update(s.split())
        total = sum(expected.values())

        def done():
            out = read_outputs(tmp_path)
            counted = sum(sum(v.values()) for k, v in out.items() if k.startswith("count-"))
            acked = sum(len(v["acks"]) for k, v in out.items() if k.startswith("spout-"))
            return out if counted >= total and acked >= 2 * per_spout else None

        out = wait_until(done, timeout=90, what="all words counted and all sentences acked")
        counts = collections.Counter()
        for key, value in out.items():
            if key.startswith("count-"):
                assert not set(value) & set(counts), "a word was counted by two count executors"
                counts.update(value)
        assert counts == expected
        for i in range(2):
            spout = out[f"spout-{i}"]
            assert spout["fails"] == 0
            assert sorted(int(k) for k in spout["acks"]) == list(range(per_spout))
            assert set(spout["acks"].values()) == {1}, "a spout tuple was acked more than once"
        status = wait_until(
            lambda: (st := client.status("exactwc"))["spouts"]["acked"] >= 2 * per_spout and st,
            10, what="heartbeats to report the acks",
        )
        assert status["spouts"]["acked"] == 2 * per_spout
        assert status["spouts"]["failed"] == 0 and status["spouts"]["pending"] == 0
    finally:
        client.kill("exactwc")
        assert client.wait_removed("exactwc", 30)


def test_groupings_route_as_storm_documents(client, tmp_path: Path) -> None:
    keys = 200
    client.submit(TOPOLOGIES / "groupings.py", conf={"test.output.dir": str(tmp_path), "test.keys": keys})
    try:
        every = sorted((k, s) for s in range(2) for k in range(keys))

        def complete():
            out = read_outputs(tmp_path)
            if not all(f"spout-{i}" in out for i in range(2)):
                return None
            need = {"shuf": 2 * keys, "fld": 2 * keys, "al": 6 * keys, "glob": 2 * keys, "loc": 2 * keys,
                    "non": 2 * keys, "dir": 2 * keys}
            got = collections.Counter()
            for name, data in out.items():
                if "-" in name and not name.startswith("spout"):
                    got[name.split("-")[0]] += len(data["seen"])
            return out if all(got[c] >= n for c, n in need.items()) else None

        out = wait_until(complete, timeout=90, what="every grouping saw its tuples")

        def seen(comp: str) -> dict[int, list]:
            return {i: out.get(f"{comp}-{i}", {"seen": []})["seen"] for i in range(3)}

        # shuffle and none: every tuple exactly once, spread over the executors
        for comp in ("shuf", "non"):
            per_task = seen(comp)
            assert sorted((k, s) for rows in per_task.values() for k, s, _, _ in rows) == every
            assert all(len(rows) > 0 for rows in per_task.values()), f"{comp}: an executor got nothing"
        # fields: each key to exactly one executor, from both spouts
        owner: dict[int, int] = {}
        for task, rows in seen("fld").items():
            for k, _, _, _ in rows:
                assert owner.setdefault(k, task) == task, f"key {k} went to two executors"
        assert sorted((k, s) for rows in seen("fld").values() for k, s, _, _ in rows) == every
        # all: every executor gets every tuple
        for rows in seen("al").values():
            assert sorted((k, s) for k, s, _, _ in rows) == every
        # global: the lowest executor gets everything
        glob = seen("glob")
        assert sorted((k, s) for k, s, _, _ in glob[0]) == every
        assert glob[1] == [] and glob[2] == []
        # local_or_shuffle: every tuple once, and always in the emitter's worker
        loc_rows = []
        for i in range(3):
            data = out.get(f"loc-{i}", {"seen": [], "worker": None})
            for k, s, emitter_worker, _ in data["seen"]:
                assert emitter_worker == data["worker"], "local_or_shuffle left the worker"
                loc_rows.append((k, s))
        assert sorted(loc_rows) == every
        # direct: key k to executor k % 3, on the direct stream only
        for task, rows in seen("dir").items():
            assert all(k % 3 == task and stream == "direct" for k, _, _, stream in rows)
        assert sorted((k, s) for rows in seen("dir").values() for k, s, _, _ in rows) == every
    finally:
        client.kill("groupings")
        assert client.wait_removed("groupings", 30)


def _executed(client, name: str) -> int:
    return sum(c["executed"] for c in client.status(name)["components"].values())


def test_status_json_and_kill_leaves_other_topologies_running(client, cluster) -> None:
    linear = str(Path(__file__).parents[1] / "topologies" / "linear.py")
    for name in ("lin-a", "lin-b"):
        result = run_cli("submit", linear, "--name", name, "-c", "linear.rate=500", cluster=cluster)
        assert result.returncode == 0, result.stderr
    try:
        client.wait_running("lin-a", 60)
        client.wait_running("lin-b", 60)
        result = run_cli("status", "lin-a", "--json", cluster=cluster)
        assert result.returncode == 0, result.stderr
        status = json.loads(result.stdout)
        assert status["name"] == "lin-a" and status["status"] == "ACTIVE"
        assert isinstance(status["plan_version"], int)
        assert {"workers", "components", "spouts", "migrations"} <= set(status)
        assert len(status["workers"]) == 2
        for w in status["workers"]:
            assert {"id", "node", "host", "port", "pid", "executors"} <= set(w)
            assert w["id"] == f"{w['node']}:{w['port']}"
            assert psutil.pid_exists(w["pid"])
        assert sorted(e for w in status["workers"] for e in w["executors"]) == sorted(
            [f"{c}:{i}" for c in ("source", "stage1", "stage2", "stage3") for i in range(2)]
            + ["__acker:0", "__acker:1"]
        )
        for comp in status["components"].values():
            assert {"parallelism", "emitted", "executed", "acked", "failed"} <= set(comp)
        assert {"pending", "acked", "failed", "replayed"} <= set(status["spouts"])
        wait_until(lambda: client.status("lin-a")["spouts"]["acked"] > 0, 30, what="lin-a acks")
        # Latency from the stamped roots: emit-to-process at every bolt, complete at the spout.
        wait_until(lambda: all("latency_ms" in c for c in client.status("lin-a")["components"].values()), 30,
                   what="latencies in status")
        comps = client.status("lin-a")["components"]
        assert comps["source"]["latency_ms"]["kind"] == "complete"
        for bolt in ("stage1", "stage2", "stage3"):
            lat = comps[bolt]["latency_ms"]
            assert lat["kind"] == "emit-to-process" and 0 < lat["p50"] <= lat["p99"] < 30_000

        pids_a = [w["pid"] for w in status["workers"]]
        pids_b = [w["pid"] for w in client.status("lin-b")["workers"]]
        result = run_cli("kill", "lin-a", cluster=cluster)
        assert result.returncode == 0, result.stderr
        wait_until(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                                   for p in pids_a), 30, what="lin-a workers to exit")
        assert "lin-a" not in client.names()
        before = _executed(client, "lin-b")
        wait_until(lambda: _executed(client, "lin-b") > before + 100, 30, what="lin-b to keep processing")
        assert [w["pid"] for w in client.status("lin-b")["workers"]] == pids_b
        assert all(psutil.pid_exists(p) for p in pids_b)
    finally:
        for name in ("lin-a", "lin-b"):
            if name in client.names():
                client.kill(name)
                client.wait_removed(name, 30)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("submit", str(TOPOLOGIES / "bad_syntax.py")), "syntax error"),
        (("submit", str(TOPOLOGIES / "bad_cycle.py")), "cycle"),
        (("submit", str(TOPOLOGIES / "bad_unknown_source.py")), "unknown component 'nope'"),
        (("submit", str(TOPOLOGIES / "bad_undeclared_field.py")), "undeclared field"),
        (("submit", str(TOPOLOGIES / "bad_parallelism_zero.py")), "parallelism"),
        (("submit", str(TOPOLOGIES / "bad_duplicate_name.py")), "duplicate component name 's'"),
        (("submit", str(TOPOLOGIES / "missing.py")), "does not exist"),
        (("submit", str(TOPOLOGIES / "exact_wordcount.py"), "-c", "novalue"), "malformed -c option"),
        (("status", "no-such-topology"), "no topology named 'no-such-topology'"),
        (("kill", "no-such-topology"), "no topology named 'no-such-topology'"),
        (("activate", "no-such-topology"), "no topology named"),
    ],
)
def test_bad_input_exits_2_with_one_line(cluster, client, args, needle) -> None:
    result = run_cli(*args, cluster=cluster)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.stderr


def test_duplicate_topology_name_is_rejected_and_disturbs_nothing(cluster, client) -> None:
    linear = str(Path(__file__).parents[1] / "topologies" / "linear.py")
    assert run_cli("submit", linear, "--name", "dup", "-c", "linear.rate=200", cluster=cluster).returncode == 0
    try:
        client.wait_running("dup", 60)
        pids = [w["pid"] for w in client.status("dup")["workers"]]
        result = run_cli("submit", linear, "--name", "dup", cluster=cluster)
        assert result.returncode == 2
        assert "already running" in result.stderr and "Traceback" not in result.stderr
        before = _executed(client, "dup")
        wait_until(lambda: _executed(client, "dup") > before + 50, 30, what="dup to keep processing")
        assert [w["pid"] for w in client.status("dup")["workers"]] == pids
    finally:
        client.kill("dup")
        client.wait_removed("dup", 30)


def test_daemon_health_checks_ask_zookeeper_for_the_daemon(cluster, client) -> None:
    """compose's health checks of Nimbus and the supervisors tested only that ZooKeeper answered:
    ``--ping`` asks for the daemon's own (ephemeral) registration; nothing is started."""
    assert run_cli("supervisor", "--ping", "--node-id", "n1", cluster=cluster).returncode == 0
    assert run_cli("nimbus", "--ping", cluster=cluster).returncode == 0
    missing = run_cli("supervisor", "--ping", "--node-id", "n9", cluster=cluster)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == ["supervisor 'n9' is not registered in ZooKeeper"]
    away = run_cli("nimbus", "--ping", "--zk", f"127.0.0.1:{free_port()}", cluster=cluster)
    assert away.returncode == 1 and len(away.stderr.strip().splitlines()) == 1, away.stderr
    for daemon in (["nimbus"], ["supervisor", "--node-id", "n1"]):  # a wrong root: not there, and left alone
        wrong = run_cli(*daemon, "--ping", "--zk-root", "/not-nstorm", cluster=cluster)
        assert wrong.returncode == 1, wrong.stderr
    assert client.zk.exists("/not-nstorm") is None, "a health check wrote to ZooKeeper"


def test_slow_bolt_slows_its_spout(client) -> None:
    client.submit(TOPOLOGIES / "slow_sink.py")
    try:
        client.wait_running("slowsink", 60)
        defaults = merge_conf({})
        conf_high = defaults["topology.backpressure.high.batches"] * defaults["topology.batch.size"]

        def lag() -> tuple[int, int]:
            comps = client.status("slowsink")["components"]
            return comps["fast"]["emitted"], comps["slow"]["executed"]

        wait_until(lambda: lag()[1] > 500, 30, what="the slow bolt to make progress")
        samples = []
        for _ in range(4):
            emitted, executed = lag()
            samples.append(emitted - executed)
            wait_until(lambda e=executed: lag()[1] > e + 200, 30, what="progress")
        # Without backpressure the spout would run a million tuples a second further ahead;
        # paced, the lag only changes by what the slow bolt works off between samples. (The
        # lag's level is what was sent while the slow bolt's worker was still starting: its
        # backpressure cannot count tuples queued before it runs.)
        assert max(samples) - samples[0] < 4 * conf_high, samples
    finally:
        client.kill("slowsink")
        client.wait_removed("slowsink", 30)
