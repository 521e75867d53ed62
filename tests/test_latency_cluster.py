"""Latency constraints on a real cluster: sampled traces, the controller in Nimbus, status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import run_cli, wait_until

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"
PATH = ["sentences", "split", "count"]


def _constraint(client: Any, name: str) -> dict[str, Any]:
    return client.status(name)["constraints"][0]


def test_the_controller_shrinks_buffers_until_the_constraint_is_met(cluster, client) -> None:
    """Fixed-size buffers that a low rate never fills hold a tuple until their 200 ms deadline,
    which breaks a 120 ms bound: the controller halves the deadline of the channel that waits
    longest, window after window, until the bound holds."""
    conf = {"wordcount.rate": 200, "topology.batch.max.latency.ms": 200, "topology.batch.adaptive": False,
            "topology.latency.constraints": [{"path": PATH, "p99_ms": 120, "window_secs": 2}]}
    client.submit(WORDCOUNT, conf=conf, name="wclat")
    try:
        client.wait_running("wclat", 60)
        first = wait_until(lambda: (c := _constraint(client, "wclat"))["windows"] >= 1 and c, 60,
                           what="a first judged window")
        assert first["measured_p99_ms"] > 120, first  # 200 ms buffers: violated at first
        assert set(first["parts_ms"]) == {"buffer", "queue", "processing"}
        assert set(first["parts_ms"]["buffer"]) == {"sentences>split", "split>count"}

        def met_after_actions() -> dict[str, Any] | None:
            c = _constraint(client, "wclat")
            shrunk = [a for a in c["actions"] if a["kind"] == "buffer"]
            return c if shrunk and c["met"] else None

        c = wait_until(met_after_actions, 120, interval=0.5, what="the constraint met after buffer actions")
        assert c["measured_p99_ms"] <= 120
        tuning = client.plan("wclat").tuning
        assert tuning and all(v["latency_ms"] < 200 for v in tuning.values()), tuning
        text = run_cli("status", "wclat", cluster=cluster)
        assert "latency sentences>split>count" in text.stdout, text.stdout
    finally:
        client.kill("wclat", wait_secs=0)

