"""bytewax's side of the peers benchmark: the same word count as a bytewax dataflow.

``input`` (one partition per sentence stream) -> ``flat_map`` (split into ``(word, stamp)``)
-> ``stateful_batch`` keyed on the word (a running count per word, the final count
emitted at end of input) -> ``output``. Each process is one bytewax worker started with
``bytewax.testing.cluster_main``; with several processes, process ``i`` reads the
partitions ``i``, ``i + procs``, ...  and words are exchanged between processes by key.

One sentence in 16 carries its emit time (``time.monotonic``: one clock for all the
processes of a machine); the count step records, for each word of such a sentence, the
time from emit to its count. Throughput is the words counted per second over the
measurement window, summed over processes.

Run by :func:`run` as ``python -m benchmarks._peers_bytewax`` processes, one per worker.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._workload import (
    POOL,
    SAMPLE_EVERY,
    STREAMS,
    WORDS_PER_SENTENCE,
    RunResult,
    check_counts,
    downsample,
    per_stream,
    percentile,
    stream,
)

__all__ = ["available", "run"]

LATENCY = "source emit -> count of each word, 1 sentence in 16"
BATCH = 100  # sentences a source partition returns per call at full speed
MAX_LATENCY_SAMPLES = 20_000  # per process, kept in the result file


def available() -> str | None:
    """None if bytewax can run here, else why not."""
    if importlib.util.find_spec("bytewax") is None:
        return "bytewax is not installed (pip install -e '.[bench]')"
    return None


# ---- the dataflow, in each worker process -------------------------------------------------

class _Stats:
    """What the count step observes in this process (module-level: bytewax builds the logic)."""

    start = 0.0  # monotonic time the first partition was built
    window = (0.0, 0.0)  # measurement window, monotonic
    processed = 0
    first: tuple[float, int] | None = None  # (time, processed) at the first sample in the window
    last: tuple[float, int] | None = None
    latencies: list[float] = []  # seconds, samples counted in the window
    counts: dict[str, int] = {}
    parts: list[str] = []


def _build_flow(proc: int, procs: int, rate: float, total: int, warmup: float, duration: float) -> Any:
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.operators import StatefulBatchLogic
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    limit = per_stream(total) if total else 0
    part_rate = rate / STREAMS

    class Partition(StatefulSourcePartition):
        """Stream ``index``'s sentences: ``limit`` of them, or cycled until the window ends."""

        def __init__(self, index: int) -> None:
            self.pool = stream(index, limit or POOL)
            self.sent = 0
            if not _Stats.start:
                _Stats.start = time.monotonic()
                _Stats.window = (_Stats.start + warmup, _Stats.start + warmup + duration)
            self.started = time.monotonic()

        def next_batch(self) -> list[tuple[float | None, str]]:
            sent = self.sent
            now = time.monotonic()
            if (limit and sent >= limit) or (not limit and now >= _Stats.window[1]):
                raise StopIteration
            n = BATCH
            if part_rate:
                n = min(n, int(part_rate * (now - self.started)) - sent)
            if limit:
                n = min(n, limit - sent)
            if n <= 0:
                return []
            pool = self.pool
            size = len(pool)
            batch = [(now if not i % SAMPLE_EVERY else None, pool[i % size]) for i in range(sent, sent + n)]
            self.sent = sent + n
            return batch

        def snapshot(self) -> int:
            return self.sent

    class Source(FixedPartitionedSource):
        def list_parts(self) -> list[str]:
            return [str(i) for i in range(STREAMS) if i % procs == proc]

        def build_part(self, step_id: str, for_part: str, resume_state: Any) -> Partition:
            _Stats.parts.append(for_part)
            return Partition(int(for_part))

    class WordCount(StatefulBatchLogic):
        """A running count of one word; records the latency of stamped words."""

        def __init__(self, resume: int | None) -> None:
            self.count = resume or 0

        def on_batch(self, values: list[float | None]) -> tuple[list[int], bool]:
            n = len(values)
            self.count += n
            _Stats.processed += n
            if values.count(None) != n:
                now = time.monotonic()
                if _Stats.window[0] <= now <= _Stats.window[1]:
                    _Stats.latencies.extend(now - v for v in values if v is not None)
                    point = (now, _Stats.processed)
                    _Stats.first = _Stats.first or point
                    _Stats.last = point
            return [], False

        def on_eof(self) -> tuple[list[int], bool]:
            return [self.count], True

        def snapshot(self) -> int:
            return self.count

    class CountsPartition(StatelessSinkPartition):
        def write_batch(self, items: list[tuple[str, int]]) -> None:
            _Stats.counts.update(items)

    class Counts(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> CountsPartition:
            return CountsPartition()

    flow = Dataflow("wordcount")
    sentences = op.input("sentences", flow, Source())
    words = op.flat_map("split", sentences, lambda item: [(w, item[0]) for w in item[1].split()])
    counts = op.stateful_batch("count", words, WordCount)
    op.output("counts", counts, Counts())
    return flow


def _worker_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._peers_bytewax")
    parser.add_argument("--proc", type=int, required=True)
    parser.add_argument("--addresses", required=True, help="host:port of every process, ';'-separated")
    parser.add_argument("--rate", type=float, default=0.0, help="sentences/s in all (0: as fast as it goes)")
    parser.add_argument("--sentences", type=int, default=0, help="a fixed run of this many sentences")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from bytewax.testing import cluster_main

    addresses = args.addresses.split(";")
    flow = _build_flow(args.proc, len(addresses), args.rate, args.sentences, args.warmup, args.duration)
    cluster_main(flow, addresses if len(addresses) > 1 else [], args.proc if len(addresses) > 1 else 0)
    ended = time.monotonic()
    rate = None
    if _Stats.first and _Stats.last and _Stats.last[0] > _Stats.first[0]:
        rate = (_Stats.last[1] - _Stats.first[1]) / (_Stats.last[0] - _Stats.first[0])
    Path(args.out).write_text(json.dumps({
        "proc": args.proc, "parts": _Stats.parts, "processed": _Stats.processed, "words_per_sec": rate,
        "elapsed_secs": ended - _Stats.start if _Stats.start else None,
        "latencies": downsample(_Stats.latencies, MAX_LATENCY_SAMPLES), "counts": _Stats.counts,
    }))


# ---- the launcher, in the benchmark process -------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(processes: int, rate: float, warmup: float, duration: float, total: int = 0,
        timeout: float | None = None) -> RunResult:
    """One bytewax run: ``processes`` workers, at ``rate`` sentences/s (0: full speed) or ``total`` sentences."""
    system = f"bytewax ({processes} proc)"
    run_name = "fixed" if total else ("half" if rate else "peak")
    if why := available():
        return RunResult(system=system, run=run_name, error=why)
    tmp = Path(tempfile.mkdtemp(prefix="bytewax-peers-"))
    addresses = ";".join(f"127.0.0.1:{_free_port()}" for _ in range(processes))
    procs = []
    for i in range(processes):
        argv = [sys.executable, "-m", "benchmarks._peers_bytewax", "--proc", str(i), "--addresses", addresses,
                "--rate", str(rate), "--sentences", str(total), "--warmup", str(warmup),
                "--duration", str(duration), "--out", str(tmp / f"proc-{i}.json")]
        with open(tmp / f"proc-{i}.log", "wb") as log:
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=Path(__file__).parents[1], env={**os.environ, "PYTHONHASHSEED": "0"}))
    deadline = time.monotonic() + (timeout or (120 + (total / 2000 if total else warmup + duration)))
    try:
        for p in procs:
            p.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return RunResult(system=system, run=run_name, error=f"did not finish in time (logs in {tmp})")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    failed = [i for i, p in enumerate(procs) if p.returncode != 0]
    if failed:
        lines = (tmp / f"proc-{failed[0]}.log").read_text(errors="replace").strip().splitlines()
        return RunResult(system=system, run=run_name,
                         error=f"worker {failed[0]} exited with {procs[failed[0]].returncode}: "
                               f"{lines[-1] if lines else ''} (logs in {tmp})")
    outs = [json.loads((tmp / f"proc-{i}.json").read_text()) for i in range(processes)]
    shutil.rmtree(tmp, ignore_errors=True)  # kept only when a run failed: its logs say why
    return _result(system, run_name, rate, total, outs)


def _result(system: str, run_name: str, rate: float, total: int, outs: list[dict[str, Any]]) -> RunResult:
    details: dict[str, Any] = {"processes": len(outs), "parts": {o["proc"]: o["parts"] for o in outs},
                               "elapsed_secs": max((o["elapsed_secs"] or 0) for o in outs)}
    if total:
        counts: dict[str, int] = {}
        for o in outs:
            for word, n in o["counts"].items():
                counts[word] = counts.get(word, 0) + n
        check = check_counts(counts, per_stream(total) * STREAMS)
        return RunResult(system=system, run=run_name, correct=check["correct"],
                         error=None if check["correct"] else f"counts differ from a Counter: {check}",
                         details={**details, **check, "sentences": per_stream(total) * STREAMS})
    rates = [o["words_per_sec"] for o in outs]
    words = sum(rates) if all(r is not None for r in rates) else None
    latencies = [x for o in outs for x in o["latencies"]]
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    return RunResult(
        system=system, run=run_name,
        sentences_per_sec=words / WORDS_PER_SENTENCE if words else None, words_per_sec=words,
        latency_p50_ms=1000 * p50 if p50 is not None else None, latency_p99_ms=1000 * p99 if p99 is not None else None,
        latency_kind=LATENCY + f"; {len(latencies)} samples", offered_sentences_per_sec=rate or None,
        details={**details, "words_per_sec_by_proc": rates},
    )


if __name__ == "__main__":
    _worker_main()
