"""Load collection, the PySpark traffic job and OTD on a real cluster (real Spark, real workers)."""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path

import pytest

from nstorm.records import TopologyStatus
from scheduler_otd.traffic import aggregate_records

from conftest import TOPOLOGIES, run_cli, wait_until


def _records(topology: str) -> list[dict]:
    from nstorm.home import metrics_dir

    records = []
    for path in (metrics_dir() / topology).rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def _python_matrix(records: list[dict], start: float, end: float) -> dict[tuple[str, str], tuple[int, int]]:
    matrix: dict[tuple[str, str], list[int]] = collections.defaultdict(lambda: [0, 0])
    for r in records:
        if r["kind"] == "edge" and start < r["ts"] <= end:
            matrix[(r["src"], r["dst"])][0] += r["tuples"]
            matrix[(r["src"], r["dst"])][1] += r["bytes"]
    return {k: (v[0], v[1]) for k, v in matrix.items()}


def _edge_tuples(topology: str) -> int:
    return sum(r["tuples"] for r in _records(topology) if r["kind"] == "edge")


def test_traffic_cli_equals_python_sums_of_what_the_topology_sent(client, cluster, tmp_path: Path) -> None:
    """``nstorm traffic --json --png`` runs the PySpark job (one Spark start for the module's
    checks of it): its matrix is the plain Python sums of the same records, and the tuples the
    topology sent, each once to its pair."""
    count = 1500
    assert run_cli("submit", str(TOPOLOGIES / "pairs.py"), "--name", "spark-pairs", "-c", "test.rate=1000",
                   "-c", f"test.count={count}", cluster=cluster).returncode == 0
    try:
        client.wait_running("spark-pairs", 60)
        wait_until(lambda: client.status("spark-pairs")["spouts"]["acked"] >= 3 * count, 60, what="all tuples acked")
        wait_until(lambda: _edge_tuples("spark-pairs") >= 3 * count, 30, interval=0.2,
                   what="every counter in the store")
        png = tmp_path / "matrix.png"
        shown = run_cli("traffic", "spark-pairs", "--window", "3600", "--json", "--png", str(png), cluster=cluster,
                        timeout=180)
        assert shown.returncode == 0, shown.stderr
        result = json.loads(shown.stdout)
        records = _records("spark-pairs")  # every edge record is older than the job's window's end
        now = time.time()
        expected = _python_matrix(records, now - 3600, now)
        got = {(e["src"], e["dst"]): (e["tuples"], e["bytes"]) for e in result["edges"]}
        assert got == expected
        # the scheduler's fallback while Spark starts folds the same groups to the same edges
        python = aggregate_records(records, 3600, now)
        assert sorted(python["edges"], key=lambda e: (e["src"], e["dst"])) == sorted(
            result["edges"], key=lambda e: (e["src"], e["dst"]))
        assert (python["total_tuples"], python["inter_node_ratio"]) == (result["total_tuples"], result["inter_node_ratio"])
        # totals equal what the topology sent: every spout tuple once to its pair
        assert {k: v[0] for k, v in got.items()} == {(f"src:{i}", f"dst:{i}"): count for i in range(3)}
        assert result["total_tuples"] == 3 * count
        status = client.status("spark-pairs")
        assert status["components"]["src"]["emitted"] == 3 * count
        assert status["components"]["dst"]["executed"] == 3 * count
        inter = sum(v[0] for (s, d), v in got.items() if any(
            e["src"] == s and e["dst"] == d and e["inter_node"] for e in result["edges"]))
        assert result["inter_node_ratio"] == pytest.approx(inter / (3 * count))
        assert {"window_secs", "edges", "inter_node_ratio", "workers"} <= set(result)
        assert all({"src", "dst", "tuples", "bytes", "inter_node"} <= set(e) for e in result["edges"])
        assert all({"id", "cpu", "queue"} <= set(w) for w in result["workers"])
        assert {w["id"] for w in result["workers"]} == set(client.plan("spark-pairs").workers)
        assert png.stat().st_size > 1000
        bad = run_cli("traffic", "nope", cluster=cluster)
        assert bad.returncode == 2 and "no topology named 'nope'" in bad.stderr
    finally:
        client.kill("spark-pairs")
        client.wait_removed("spark-pairs", 30)


def test_otd_brings_fixed_pairs_together_without_losing_tuples(client, cluster, tmp_path: Path) -> None:
    # Communication optimisation only: on a loaded test machine a burst of backlog must not make a
    # worker high-load and start load balancing (Case 1), which may split a pair again.
    conf = ["-c", "topology.scheduler=otd", "-c", "otd.period.secs=2", "-c", "otd.window.secs=4",
            "-c", "test.rate=300", "-c", "otd.cpu.high=100", "-c", "otd.queue.high=100000",
            "-c", "otd.queue.growth.high=100000", "-c", "otd.history.size=1000"]
    assert run_cli("submit", str(TOPOLOGIES / "pairs.py"), "--name", "otd-pairs", *conf, cluster=cluster).returncode == 0
    try:
        plan = client.wait_running("otd-pairs", 60)
        nodes = {w: slot.node for w, slot in plan.workers.items()}
        split = [i for i in range(3) if nodes[plan.executors[f"src:{i}"]] != nodes[plan.executors[f"dst:{i}"]]]
        assert split, "the test needs a bad initial placement"

        def together():
            p = client.plan("otd-pairs")
            node = {e: p.workers[w].node for e, w in p.executors.items()}
            return all(node[f"src:{i}"] == node[f"dst:{i}"] for i in range(3))

        wait_until(together, 150, interval=0.5, what="OTD to bring every pair onto one node")
        # Nimbus's SparkSession started with the topology; once warm, rounds run the Spark job
        wait_until(lambda: (client.status("otd-pairs")["otd"] or {}).get("engine") == "spark", 240, interval=1,
                   what="OTD rounds on the Spark job")
        time.sleep(4)
        end = time.time()
        recent = [r for r in _records("otd-pairs") if r["kind"] == "edge" and end - 3 < r["ts"] <= end]
        total = sum(r["tuples"] for r in recent)
        inter = sum(r["tuples"] for r in recent if r["inter_node"])
        assert total > 0 and inter / total < 0.10
        status = client.status("otd-pairs")
        assert status["migrations"] and {m["by"] for m in status["migrations"]} == {"otd"}
        assert status["otd"]["case"] in (3, 4)
        history, _ = client.cluster.read(client.paths.otd_rounds("otd-pairs"))  # the UI's timeline and /otd
        assert len(history["rounds"]) >= 2 and sum(history["cases"].values()) >= len(history["rounds"])
        assert "spark" in {r["engine"] for r in history["rounds"]}
        assert {m["executor"] for m in status["migrations"]} <= {r["executor"] for r in history["rounds"]}
        run_cli("deactivate", "otd-pairs", cluster=cluster)
        # The heartbeats right after the CLI returns may still be of the active plan (Nimbus, the
        # supervisors and the workers take the deactivation on one after another, a worker beats
        # once a second): their "pending" can be 0 between two tuples while the spouts still emit.
        # Wait for a heartbeat of every worker taken after its first one of the inactive plan, and
        # read acked and emitted from that one status.
        inactive = wait_until(lambda: (p := client.plan("otd-pairs")) is not None
                              and p.status is TopologyStatus.INACTIVE and p, 60, what="the inactive plan")
        first_inactive: dict[str, float] = {}

        def settled():
            beats = client.heartbeats("otd-pairs")
            for wid in client.plan("otd-pairs").workers:  # the plan now: a later one may have dropped a worker
                beat = beats.get(wid)
                if beat is None or beat.version < inactive.version:
                    return None
                if beat.time <= first_inactive.setdefault(wid, beat.time):
                    return None  # the spouts may have been in their last loop pass when it was taken
            status = client.status("otd-pairs")
            return status if status["spouts"]["pending"] == 0 else None

        status = wait_until(settled, 60, what="in-flight tuples to settle")
        assert status["spouts"]["failed"] == 0
        assert status["spouts"]["acked"] == status["components"]["src"]["emitted"]
    finally:
        client.kill("otd-pairs")
        client.wait_removed("otd-pairs", 30)
