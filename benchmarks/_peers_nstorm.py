"""nstorm's side of the peers benchmark: word count on a local cluster of real processes.

Throughput is the count bolts' ``executed`` counter over the measurement window (as in
``benchmarks.throughput``); latency is the spouts' complete latency (emit -> fully acked,
one tuple in 16), which each spout keeps over its last 2,000 samples and reports in its
heartbeat: the benchmark polls it every 2 s during the window.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._common import temporary_home
from benchmarks._workload import STREAMS, WORDS_PER_SENTENCE, RunResult, check_counts, per_stream

__all__ = ["base_conf", "fixed_on", "run_fixed", "run_rate"]

ROOT = Path(__file__).parents[1]
WORDCOUNT = ROOT / "topologies" / "wordcount.py"
WORDCOUNT_CHECKED = ROOT / "topologies" / "wordcount_checked.py"
LATENCY = "complete latency (spout emit -> fully acked), 1 sentence in 16"
POLL_SECS = 2.0


def base_conf(workers: int = 2) -> dict[str, Any]:
    """Word count with acking on: one spout per stream, one split and one count executor per worker."""
    return {"wordcount.spouts": STREAMS, "wordcount.splits": workers, "wordcount.counts": workers,
            "wordcount.workers": workers, "topology.workers": workers}


@contextmanager
def _client(workers: int) -> Iterator[Any]:
    """A fresh local cluster (ZooKeeper, Nimbus, one supervisor per worker) in a temporary home."""
    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster

    with temporary_home():
        cluster = LocalCluster(supervisors=workers, slots=1).start()
        try:
            with ClusterClient(cluster.address) as client:
                yield client
        finally:
            cluster.stop()


def _measure(client: Any, name: str, warmup: float, duration: float) -> dict[str, Any]:
    """Words/s of the count bolts and the spouts' latency windows, over ``duration`` after ``warmup``."""
    time.sleep(warmup)
    first = client.status(name)
    t0 = time.monotonic()
    windows: list[dict[str, float]] = []
    while (left := duration - (time.monotonic() - t0)) > 0:
        time.sleep(min(POLL_SECS, left))
        windows.extend(client.latencies(name).values())
    last = client.status(name)
    elapsed = time.monotonic() - t0

    def rate(component: str, key: str) -> float:
        return (last["components"][component][key] - first["components"][component][key]) / elapsed

    return {"words_per_sec": rate("count", "executed"), "emitted_per_sec": rate("sentences", "emitted"),
            "acked_per_sec": (last["spouts"]["acked"] - first["spouts"]["acked"]) / elapsed,
            "failed": last["spouts"]["failed"], "windows": windows,
            "worker_cpu": [w.get("cpu") for w in last["workers"]]}


def run_rate(rate: float, warmup: float, duration: float, workers: int = 2, extra: dict[str, Any] | None = None) -> RunResult:
    """Word count at ``rate`` sentences/s in all (0: as fast as it goes) on a fresh cluster."""
    conf = {**base_conf(workers), "wordcount.rate": rate / STREAMS if rate else 0, **(extra or {})}
    with _client(workers) as client:
        client.submit(WORDCOUNT, conf=conf)
        client.wait_running("wordcount", 90)
        m = _measure(client, "wordcount", warmup, duration)
    windows = m.pop("windows")
    p50s = [w["p50"] for w in windows]
    p99s = [w["p99"] for w in windows]
    return RunResult(
        system="nstorm", run="half" if rate else "peak",
        sentences_per_sec=m["words_per_sec"] / WORDS_PER_SENTENCE, words_per_sec=m["words_per_sec"],
        latency_p50_ms=statistics.median(p50s) if p50s else None,
        latency_p99_ms=statistics.median(p99s) if p99s else None,
        latency_kind=LATENCY + f"; median over {len(windows)} rolling windows (2 spouts, polled every {POLL_SECS:.0f} s)",
        offered_sentences_per_sec=rate or None,
        details={**m, "latency_p99_worst_window_ms": max(p99s) if p99s else None, "conf": conf},
    )


def fixed_on(client: Any, total: int, workers: int = 2, timeout: float | None = None,
             name: str = "wordcount", extra: dict[str, Any] | None = None) -> RunResult:
    """Count exactly ``total`` sentences on ``client``'s cluster and check the counts against a Counter."""
    out = Path(tempfile.mkdtemp(prefix="nstorm-peers-counts-"))
    conf = {**base_conf(workers), "wordcount.sentences": per_stream(total), "wordcount.output.dir": str(out),
            **(extra or {})}
    expected_words = per_stream(total) * STREAMS * WORDS_PER_SENTENCE
    deadline = time.monotonic() + (timeout if timeout is not None else 60 + total / 1000)
    client.submit(WORDCOUNT_CHECKED, name=name, conf=conf)
    try:
        client.wait_running(name, 90)
        t0 = time.monotonic()
        counts: dict[str, int] = {}
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            counts = _read_counts(out)
            status = client.status(name)
            spouts = status["spouts"]
            if (sum(counts.values()) >= expected_words and spouts["acked"] >= per_stream(total) * STREAMS
                    and spouts["pending"] == 0):
                break
            time.sleep(0.2)
        elapsed = time.monotonic() - t0
    finally:
        client.kill(name)
        client.wait_removed(name, 30)
    check = check_counts(counts, per_stream(total) * STREAMS)
    return RunResult(
        system="nstorm", run="fixed", correct=check["correct"],
        error=None if check["correct"] else f"counts differ from a Counter: {check}",
        details={**check, "sentences": per_stream(total) * STREAMS, "elapsed_secs": elapsed,
                 "acked": status.get("spouts", {}).get("acked"), "failed": status.get("spouts", {}).get("failed")},
    )


def run_fixed(total: int, workers: int = 2, extra: dict[str, Any] | None = None) -> RunResult:
    """:func:`fixed_on` on a fresh local cluster."""
    with _client(workers) as client:
        return fixed_on(client, total, workers, extra=extra)


def _read_counts(directory: Path) -> dict[str, int]:
    """The counts written by the count executors (a file being replaced is read on the next poll)."""
    counts: dict[str, int] = {}
    for path in directory.glob("count-*.json"):
        try:
            part = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for word, n in part.items():
            counts[word] = counts.get(word, 0) + n
    return counts
