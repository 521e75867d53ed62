"""nstorm's side of the peers benchmark: word count on a local cluster of real processes.

Throughput is the count bolts' ``executed`` counter over the measurement window (as in
``benchmarks.throughput``). Latency is end to end, from a spout's emit of a sentence to
a count bolt's processing of its words: the spouts stamp a tracked sentence about every
millisecond (the stamp rides in the root id, :mod:`nstorm.latency`) and every count
executor counts the age of the stamps it meets into a histogram; the benchmark subtracts
the histograms read at the start and the end of the window, so the percentiles are over
exactly that window. The complete latency (emit -> tree fully acked, what bounds
``max.spout.pending``) is measured the same way at the spouts and kept in the details.
With acking off there are no stamps and no latency.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._common import beat_rate, temporary_home
from benchmarks._workload import STREAMS, WORDS_PER_SENTENCE, RunResult, check_counts, per_stream

__all__ = ["PIPELINE", "base_conf", "fixed_on", "run_fixed", "run_rate"]

ROOT = Path(__file__).parents[1]
WORDCOUNT = ROOT / "topologies" / "wordcount.py"
WORDCOUNT_CHECKED = ROOT / "topologies" / "wordcount_checked.py"
LATENCY = "spout emit -> count processes the words (end to end), a stamped sentence about every ms"


# Word count one stage a worker: one executor a component, the split on ``local_or_shuffle`` so
# that the even scheduler puts it in its spout's worker and ``topology.chaining`` runs both in one
# thread; the count in the other worker. Two processes with one busy thread each.
PIPELINE = {"wordcount.spouts": 1, "wordcount.splits": 1, "wordcount.counts": 1, "wordcount.local": True,
            "topology.chaining": True}


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
    """Words/s of the count bolts and latency histograms of the window ``duration`` after ``warmup``."""
    from nstorm import latency

    time.sleep(warmup)
    first = client.status(name)
    e2e0, complete0 = client.arrival_histogram(name, "count"), client.latency_histogram(name)
    beats0, cpu0 = client.heartbeats(name), _worker_cpu(first)
    t0 = time.monotonic()
    time.sleep(duration)
    elapsed = time.monotonic() - t0
    last = client.status(name)
    e2e = latency.subtract(client.arrival_histogram(name, "count"), e2e0)
    complete = latency.subtract(client.latency_histogram(name), complete0)
    beats, cpu = client.heartbeats(name), _worker_cpu(last)

    def rate(component: str, key: str) -> float:
        return beat_rate(beats0, beats, component, key)

    def ms(hist: dict[int, int], q: float) -> float | None:
        secs = latency.percentile(hist, q)
        return None if secs is None else 1000 * secs

    return {"words_per_sec": rate("count", "executed"), "emitted_per_sec": rate("sentences", "emitted"),
            "acked_per_sec": (last["spouts"]["acked"] - first["spouts"]["acked"]) / elapsed,
            "failed": last["spouts"]["failed"],
            "e2e_ms": {"p50": ms(e2e, 0.5), "p99": ms(e2e, 0.99), "p999": ms(e2e, 0.999), "samples": sum(e2e.values())},
            "complete_ms": {"p50": ms(complete, 0.5), "p99": ms(complete, 0.99), "samples": sum(complete.values())},
            "worker_cpu_cores": sum(cpu.get(pid, 0.0) - cpu0.get(pid, 0.0) for pid in cpu) / elapsed}


def _worker_cpu(status: dict[str, Any]) -> dict[int, float]:
    """CPU seconds so far of each worker process (this machine's), by pid."""
    import psutil

    out = {}
    for w in status["workers"]:
        try:
            t = psutil.Process(int(w["pid"])).cpu_times()
        except (psutil.Error, TypeError, ValueError):
            continue
        out[int(w["pid"])] = t.user + t.system
    return out


def run_rate(rate: float, warmup: float, duration: float, workers: int = 2, extra: dict[str, Any] | None = None,
             system: str = "nstorm") -> RunResult:
    """Word count at ``rate`` sentences/s in all (0: as fast as it goes) on a fresh cluster."""
    conf = {**base_conf(workers), **(extra or {})}
    conf.setdefault("wordcount.rate", rate / int(conf["wordcount.spouts"]) if rate else 0)  # shared by the spouts
    with _client(workers) as client:
        client.submit(WORDCOUNT, conf=conf)
        client.wait_running("wordcount", 90)
        m = _measure(client, "wordcount", warmup, duration)
    e2e = m["e2e_ms"]
    return RunResult(
        system=system, run="half" if rate else "peak",
        sentences_per_sec=m["words_per_sec"] / WORDS_PER_SENTENCE, words_per_sec=m["words_per_sec"],
        latency_p50_ms=e2e["p50"], latency_p99_ms=e2e["p99"],
        latency_kind=LATENCY + f"; {e2e['samples']} samples over the window" if e2e["samples"] else "",
        offered_sentences_per_sec=rate or None,
        details={**m, "conf": conf},
    )


def fixed_on(client: Any, total: int, workers: int = 2, timeout: float | None = None,
             name: str = "wordcount", extra: dict[str, Any] | None = None, system: str = "nstorm") -> RunResult:
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
        shutil.rmtree(out, ignore_errors=True)
    check = check_counts(counts, per_stream(total) * STREAMS)
    return RunResult(
        system=system, run="fixed", correct=check["correct"],
        error=None if check["correct"] else f"counts differ from a Counter: {check}",
        details={**check, "sentences": per_stream(total) * STREAMS, "elapsed_secs": elapsed,
                 "acked": status.get("spouts", {}).get("acked"), "failed": status.get("spouts", {}).get("failed")},
    )


def run_fixed(total: int, workers: int = 2, extra: dict[str, Any] | None = None, system: str = "nstorm") -> RunResult:
    """:func:`fixed_on` on a fresh local cluster."""
    with _client(workers) as client:
        return fixed_on(client, total, workers, extra=extra, system=system)


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
