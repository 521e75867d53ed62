"""Adaptive batching on a real cluster: it keeps the order between every pair of executors,
delivers a lone tuple, and keeps acking exact at high and low rates and with per-tuple sending.
Nothing here asserts wall-clock time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import TOPOLOGIES, read_outputs, wait_until

# -- a real cluster -----------------------------------------------------------------------------

SEQUENCED = TOPOLOGIES / "sequenced.py"


def _run_sequenced(client: Any, tmp_path: Path, name: str, conf: dict[str, Any]) -> dict[str, Any]:
    """Run the sequenced topology until every tuple is acked and checked; return the outputs."""
    n = int(conf["test.tuples"])
    client.submit(SEQUENCED, name=name, conf={"test.output.dir": str(tmp_path), **conf})
    try:
        plan = client.wait_running(name, 60)
        workers = {plan.executors[e] for e in plan.executors if not e.startswith("__acker")}
        assert len(workers) == 2, "the executors are spread over two workers"

        def done() -> dict[str, Any] | None:
            out = read_outputs(tmp_path)
            acked = sum(len(v["acks"]) for k, v in out.items() if k.startswith("spout-"))
            checked = sum(sum(v["counts"].values()) for k, v in out.items() if k.startswith("check-"))
            return out if acked >= 2 * n and checked >= 4 * n else None

        out = wait_until(done, 120, what="every tuple acked and checked")
        status = wait_until(lambda: (st := client.status(name))["spouts"]["acked"] >= 2 * n and st, 15,
                            what="heartbeats to report the acks")
    finally:
        client.kill(name)
        client.wait_removed(name, 30)
    for lane in range(2):
        spout = out[f"spout-{lane}"]
        assert spout["fails"] == 0
        assert sorted(int(k) for k in spout["acks"]) == list(range(n)), "every tuple acked"
        assert set(spout["acks"].values()) == {1}, "no tuple acked twice"
    checks = [v for k, v in out.items() if k.startswith("check-")]
    assert [v for c in checks for v in c["violations"]] == [], "a tuple overtook an earlier one"
    counts: dict[str, int] = {}
    for c in checks:
        for key, value in c["counts"].items():
            counts[key] = counts.get(key, 0) + value
    assert counts == {"seq/0": n, "seq/1": n, "relay/0": n, "relay/1": n}
    assert sum(c["streams"].get("side", 0) for c in checks) == 4 * (n // 7)
    assert status["spouts"]["acked"] == 2 * n and status["spouts"]["failed"] == 0
    assert status["spouts"]["pending"] == 0
    return status


@pytest.mark.parametrize(
    ("conf", "label"),
    [
        ({"test.tuples": 4000}, "adaptive, as fast as it goes"),
        ({"test.tuples": 150, "test.rate": 50}, "adaptive, 50 tuples/s per spout"),
        ({"test.tuples": 600, "topology.batch.adaptive": False}, "fixed batches"),
        ({"test.tuples": 600, "topology.batch.size": 1}, "per-tuple sending"),
    ],
    ids=["high-rate", "low-rate", "fixed", "per-tuple"],
)
def test_order_per_executor_pair_and_exact_acks(client, tmp_path: Path, conf: dict[str, Any], label: str) -> None:
    status = _run_sequenced(client, tmp_path, f"seq-{abs(hash(label)) % 10000}", conf)
    batches = status["components"]["relay"]["batches"]
    emitted = status["components"]["relay"]["emitted"]
    if conf.get("topology.batch.size") == 1:
        assert batches == emitted, "per-tuple sending: one message per tuple"
    elif not conf.get("test.rate"):
        assert emitted / batches > 1.5, "batching at a high rate puts several tuples in a message"


def test_a_lone_tuple_is_delivered_and_acked(client, tmp_path: Path) -> None:
    """The spout emits one tuple and then nothing: no later emit fills its batch, the deadline sends it."""
    _run_sequenced(client, tmp_path, "seq-lone", {"test.tuples": 1})


