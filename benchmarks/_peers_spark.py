"""Spark Structured Streaming's side of the peers benchmark: the same word count as a query.

Rows ``value = 0, 1, 2, ...`` from a rate source are joined (broadcast) with the
sentence pool on ``value mod (STREAMS * pool)``, so row ``STREAMS * j + i`` is sentence
``j`` of stream ``i``: the same sentences as nstorm's spouts, interleaved. Then
``explode(split(sentence))`` and ``groupBy(word).count()``, a stateful streaming
aggregation, with the default trigger (the next micro-batch starts as soon as the last
ended), local[2] and 2 shuffle partitions.

- peak: ``rate-micro-batch`` source, a fixed number of rows per micro-batch; throughput
  is input rows over the wall-clock time of the micro-batches in the window (from
  ``recentProgress``); latency is per micro-batch (its ``triggerExecution`` time).
- half: ``rate`` source at a fixed rows/s; latency is per record, from the row's
  ``timestamp`` (when the source made it available) to the end of its micro-batch,
  taken from each batch's event-time min/max (a watermark makes Spark report them),
  rows spread evenly between the two.
- fixed: the first N rows only (a filter), complete mode into a memory table, checked
  against a Counter.

All three run in one ``python -m benchmarks._peers_spark`` process (one SparkSession:
it takes 7 s or more to start).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks._workload import (
    POOL,
    STREAMS,
    WORDS_PER_SENTENCE,
    RunResult,
    check_counts,
    per_stream,
    percentile,
    stream,
)

__all__ = ["available", "run"]

SYSTEM = "Spark SS (local[2])"
MIN_BATCHES = 3  # a window shorter than this runs on until it has them
POINTS_PER_BATCH = 50  # per-record latency: points spread over each batch's event-time range


def available() -> str | None:
    """None if Spark can run here, else why not."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no java on PATH and no JAVA_HOME: Spark needs Java 17 or later"
    return None


# ---- in the Spark process ---------------------------------------------------------------

def _session() -> Any:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("nstorm-peers")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _pool(spark: Any, per: int) -> Any:
    """(idx, sentence): row ``STREAMS * j + i`` is sentence ``j`` of stream ``i``."""
    streams = [stream(i, per) for i in range(STREAMS)]
    rows = [(STREAMS * j + i, streams[i][j]) for j in range(per) for i in range(STREAMS)]
    return spark.createDataFrame(rows, "idx long, sentence string").cache()


def _query(spark: Any, source: Any, pool: Any, per: int, limit: int = 0, watermark: bool = False) -> Any:
    from pyspark.sql import functions as F

    rows = source
    if limit:
        rows = rows.where(F.col("value") < limit)
    if watermark:
        rows = rows.withWatermark("timestamp", "1 hour")  # only so that progress reports event times
    rows = rows.withColumn("idx", F.col("value") % (STREAMS * per)).join(F.broadcast(pool), "idx")
    words = rows.select("timestamp", F.explode(F.split("sentence", " ")).alias("word"))
    return words.groupBy("word").count()


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _window(progress: list[dict[str, Any]], t0: float) -> list[tuple[float, float, dict[str, Any]]]:
    """(start, end, progress) of the micro-batches with input that started at ``t0`` or later (wall clock)."""
    out = []
    for p in progress:
        start = _ts(p["timestamp"])
        if start >= t0 and p["numInputRows"] > 0:
            out.append((start, start + p["durationMs"]["triggerExecution"] / 1000, p))
    return out


def _run_stream(query: Any, warmup: float, duration: float, ckpt: Path) -> list[tuple[float, float, dict[str, Any]]]:
    """Run ``query`` for ``warmup + duration`` s, and on until 3 batches ran after the warm-up (at most 120 s more)."""
    t0 = time.time()
    q = (query.writeStream.outputMode("update").format("noop")
         .option("checkpointLocation", str(ckpt)).start())
    try:
        while True:
            if q.exception():
                raise RuntimeError(str(q.exception()))
            now = time.time()
            if now > t0 + warmup + duration and (len(_window(q.recentProgress, t0 + warmup)) >= MIN_BATCHES
                                                 or now > t0 + warmup + duration + 120):
                break
            time.sleep(0.5)
    finally:
        q.stop()
    return _window(q.recentProgress, t0 + warmup)


def _throughput(batches: list[tuple[float, float, dict[str, Any]]]) -> float | None:
    """Input rows/s between the end of the first batch and the end of the last (the first one's rows
    may have waited before it started, so they are left out)."""
    if len(batches) < 2:
        return None
    rows = sum(p["numInputRows"] for _, _, p in batches[1:])
    return rows / (batches[-1][1] - batches[0][1])


def _peak(spark: Any, pool: Any, rows_per_batch: int, warmup: float, duration: float, tmp: Path) -> RunResult:
    source = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
              .option("numPartitions", 2).load())
    batches = _run_stream(_query(spark, source, pool, POOL), warmup, duration, tmp / "peak")
    sentences = _throughput(batches)
    durations = [1000 * (end - start) for start, end, _ in batches]
    return RunResult(
        system=SYSTEM, run="peak", sentences_per_sec=sentences,
        words_per_sec=sentences * WORDS_PER_SENTENCE if sentences else None,
        latency_p50_ms=percentile(durations, 0.5), latency_p99_ms=percentile(durations, 0.99),
        latency_kind=f"per micro-batch (its duration), {len(batches)} batches of {rows_per_batch} sentences",
        details={"batches": len(batches), "rows_per_batch": rows_per_batch,
                 "processed_rows_per_sec": [p["processedRowsPerSecond"] for _, _, p in batches]},
    )


def _half(spark: Any, pool: Any, rate: float, warmup: float, duration: float, tmp: Path) -> RunResult:
    source = (spark.readStream.format("rate").option("rowsPerSecond", max(1, round(rate)))
              .option("numPartitions", 2).load())
    query = _query(spark, source, pool, POOL, watermark=True)
    batches = _run_stream(query, warmup, duration, tmp / "half")
    latencies: list[float] = []
    weights: list[float] = []
    for _start, end, p in batches:
        ev = p.get("eventTime") or {}
        if "min" not in ev:
            continue
        lo, hi = _ts(ev["min"]), _ts(ev["max"])
        for k in range(POINTS_PER_BATCH):
            latencies.append(1000 * (end - (lo + (hi - lo) * k / (POINTS_PER_BATCH - 1))))
            weights.append(p["numInputRows"] / POINTS_PER_BATCH)
    sentences = _throughput(batches)
    return RunResult(
        system=SYSTEM, run="half", sentences_per_sec=sentences,
        words_per_sec=sentences * WORDS_PER_SENTENCE if sentences else None,
        latency_p50_ms=_weighted(latencies, weights, 0.5), latency_p99_ms=_weighted(latencies, weights, 0.99),
        latency_kind=("per record: row timestamp -> end of its micro-batch (event-time min/max of each batch, "
                      f"rows spread evenly), {len(batches)} batches"),
        offered_sentences_per_sec=rate,
        details={"batches": len(batches),
                 "batch_ms": [p["durationMs"]["triggerExecution"] for _, _, p in batches]},
    )


def _weighted(values: list[float], weights: list[float], q: float) -> float | None:
    if not values:
        return None
    pairs = sorted(zip(values, weights, strict=True))
    target = q * sum(weights)
    acc = 0.0
    for value, weight in pairs:
        acc += weight
        if acc >= target:
            return value
    return pairs[-1][0]


def _fixed(spark: Any, total: int, rows_per_batch: int, timeout: float, tmp: Path) -> RunResult:
    per = per_stream(total)
    n = per * STREAMS
    pool = _pool(spark, per)
    source = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
              .option("numPartitions", 2).load())
    q = (_query(spark, source, pool, per, limit=n).writeStream.outputMode("complete").format("memory")
         .queryName("peers_counts").option("checkpointLocation", str(tmp / "fixed")).start())
    t0 = time.monotonic()
    try:
        while sum(p["numInputRows"] for p in q.recentProgress) < n:
            if q.exception():
                raise RuntimeError(str(q.exception()))
            if time.monotonic() - t0 > timeout:
                return RunResult(system=SYSTEM, run="fixed", error=f"did not read {n} rows within {timeout:.0f} s")
            time.sleep(0.2)
        # The batch that read the last rows has completed (its progress is reported after it commits).
    finally:
        q.stop()
    counts = {r["word"]: int(r["count"]) for r in spark.sql("select word, count from peers_counts").collect()}
    pool.unpersist()
    check = check_counts(counts, n)
    return RunResult(system=SYSTEM, run="fixed", correct=check["correct"],
                     error=None if check["correct"] else f"counts differ from a Counter: {check}",
                     details={**check, "sentences": n, "elapsed_secs": time.monotonic() - t0})


def _spark_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._peers_spark")
    parser.add_argument("--runs", default="peak,half,fixed")
    parser.add_argument("--rate", type=float, default=0.0, help="sentences/s of the half run")
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--rows-per-batch", type=int, default=100_000)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="spark-peers-"))
    results: list[RunResult] = []
    out = Path(args.out)

    def save() -> None:
        out.write_text(json.dumps([r.to_dict() for r in results]))

    try:
        t0 = time.monotonic()
        spark = _session()
        started = time.monotonic() - t0
        runs = args.runs.split(",")
        pool = _pool(spark, POOL) if {"peak", "half"} & set(runs) else None
        for name in runs:
            try:
                if name == "peak":
                    r = _peak(spark, pool, args.rows_per_batch, args.warmup, args.duration, tmp)
                elif name == "half":
                    r = _half(spark, pool, args.rate, args.warmup, args.duration, tmp)
                else:
                    r = _fixed(spark, args.sentences, args.rows_per_batch, 120 + args.sentences / 5000, tmp)
            except Exception as exc:  # a failed run still lets the others run
                r = RunResult(system=SYSTEM, run=name, error=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
            r.details["session_start_secs"] = started
            results.append(r)
            save()
        spark.stop()
    finally:
        save()
        shutil.rmtree(tmp, ignore_errors=True)


# ---- the launcher, in the benchmark process -------------------------------------------------

def run(runs: list[str], rate: float, warmup: float, duration: float, total: int,
        rows_per_batch: int = 100_000, timeout: float | None = None) -> list[RunResult]:
    """The Spark runs named in ``runs`` (peak, half, fixed), in one Spark process (killed after ``timeout`` s)."""
    if why := available():
        return [RunResult(system=SYSTEM, run=name, error=why) for name in runs]
    tmp = Path(tempfile.mkdtemp(prefix="spark-peers-launch-"))
    out, log_path = tmp / "results.json", tmp / "spark.log"
    argv = [sys.executable, "-m", "benchmarks._peers_spark", "--runs", ",".join(runs), "--rate", str(rate),
            "--sentences", str(total), "--rows-per-batch", str(rows_per_batch), "--warmup", str(warmup),
            "--duration", str(duration), "--out", str(out)]
    if timeout is None:  # a session start, then each run with its possible 120 s extension
        timeout = 180 + len(runs) * (warmup + duration + 150) + total / 5000
    with open(log_path, "wb") as log:
        # Its own process group, so that a timed-out run ends with its JVM.
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=Path(__file__).parents[1], start_new_session=True)
    timed_out = False
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    results = [RunResult.from_dict(d) for d in json.loads(out.read_text())] if out.exists() else []
    done = {r.run for r in results}
    if len(done) < len(runs):
        lines = [x for x in log_path.read_text(errors="replace").splitlines() if "Error" in x or "Exception" in x]
        if timed_out:
            why = f"the Spark process did not finish within {timeout:.0f} s and was killed (log: {log_path})"
        else:
            why = (f"the Spark process exited with {proc.returncode}: "
                   f"{lines[-1].strip() if lines else 'no error line'} (log: {log_path})")
        results += [RunResult(system=SYSTEM, run=name, error=why) for name in runs if name not in done]
    return results


if __name__ == "__main__":
    _spark_main()
