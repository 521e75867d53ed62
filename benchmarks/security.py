"""What security costs: the transport and the word count with ZooKeeper ACLs and CurveZMQ off and on.

``python -m benchmarks.security [--seconds S] [--warmup W] [--workers N] [--rounds R] [--transport-only]``

1. Transport: one PUSH -> PULL pair over TCP on localhost, sockets set up exactly as a
   worker's (``worker.security``), sending word-count-sized batches (256 records, msgpack)
   for a few seconds, plain and CurveZMQ in turn, ``--rounds`` times.
2. Word count (acking on) on a fresh local cluster of real processes (2 supervisors) per
   configuration: plain, ZooKeeper ACLs, CurveZMQ, both, in turn, ``--rounds`` times, so that
   a noisy machine hits every configuration alike.

Reports medians and ratios to plain, as tables and ``benchmarks/results/security.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, sample_rate, temporary_home, write_json

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"


def _batch() -> bytes:
    """A word-count batch as a split executor sends it: 256 anchored one-word records."""
    from worker import wire

    return wire.pack([("default", (f"word{i % 50}",), [2**62 + i, 2**61 + 7 * i]) for i in range(256)])


BATCH_BYTES = len(_batch())


def transport_rate(curve: bool, seconds: float) -> float:
    """Batches/s through one worker-style PUSH -> PULL pair (plain or CurveZMQ)."""
    import zmq

    from nstorm.curvekeys import generate_keys
    from worker import wire
    from worker.security import CurveSecurity, PlainSecurity

    context = zmq.Context(io_threads=1)
    security: PlainSecurity = PlainSecurity()
    if curve:
        from nstorm.curvekeys import load_keys

        with tempfile.TemporaryDirectory(prefix="nstorm-bench-keys-") as tmp:
            generate_keys(Path(tmp) / "keys")
            security = CurveSecurity(context, load_keys(Path(tmp) / "keys"))
    pull = context.socket(zmq.PULL)
    security.server(pull)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 32)
    security.client(push)
    push.connect(f"tcp://127.0.0.1:{port}")
    header = wire.data_header(1, 2)
    payload = _batch()
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            try:
                push.send_multipart((header, payload), flags=zmq.NOBLOCK)
            except zmq.Again:
                time.sleep(0.0001)

    received = 0
    push.send_multipart((header, payload))
    pull.recv_multipart()  # connected (and, with curve, through the handshake)
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if pull.poll(100):
            pull.recv_multipart()
            received += 1
    elapsed = time.monotonic() - t0
    stop.set()
    sender.join()
    push.close(linger=0)
    pull.close(linger=0)
    security.stop()
    context.term()
    return received / elapsed


def run_once(cluster_conf: dict[str, Any], workers: int, warmup: float, seconds: float) -> float:
    """Words/s counted in a steady-state window, on a cluster started with ``cluster_conf``."""
    from nstorm.client import ClusterClient
    from nstorm.curvekeys import generate_keys
    from nstorm.localcluster import LocalCluster

    with temporary_home() as home:
        conf = dict(cluster_conf)
        if conf.get("nstorm.transport.curve"):
            generate_keys(home / "keys")
            conf["nstorm.transport.curve.keys.dir"] = str(home / "keys")
        cluster = LocalCluster(supervisors=2, slots=max(1, workers // 2 + workers % 2), conf=conf).start()
        try:
            with ClusterClient(cluster.address, auth=conf.get("nstorm.zookeeper.auth")) as client:
                client.submit(WORDCOUNT, conf={"topology.workers": workers, "wordcount.spouts": workers,
                                               "wordcount.splits": workers, "wordcount.counts": workers})
                client.wait_running("wordcount", 60)
                return sample_rate(client, "wordcount", "count", "executed", warmup, seconds)
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.security", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="measurement window per run")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each configuration, interleaved")
    parser.add_argument("--transport-only", action="store_true", help="skip the word count clusters")
    args = parser.parse_args()
    console = Console()
    batches: dict[str, list[float]] = {"plain": [], "CurveZMQ": []}
    for _ in range(args.rounds):
        for label in batches:
            batches[label].append(transport_rate(label == "CurveZMQ", min(args.seconds, 5.0)))
    tmed = {label: statistics.median(v) for label, v in batches.items()}
    table = Table(title=f"transport: one PUSH -> PULL pair, 256-record batches of {BATCH_BYTES:,} bytes "
                        f"(median of {args.rounds})")
    for col in ("configuration", "batches/s", "records/s", "runs", "vs plain"):
        table.add_column(col, justify="right")
    for label, median in tmed.items():
        table.add_row(label, f"{median:,.0f}", f"{256 * median:,.0f}", ", ".join(f"{v:,.0f}" for v in batches[label]),
                      f"{median / tmed['plain']:.2f}")
    console.print(table)
    if args.transport_only:
        path = write_json("security", {"machine": machine(), "args": vars(args), "transport_batches_per_sec": batches})
        console.print(f"wrote {path}")
        return
    auth = f"bench:{uuid.uuid4().hex}"
    configs: dict[str, dict[str, Any]] = {
        "plain": {},
        "ZooKeeper ACLs": {"nstorm.zookeeper.auth": auth},
        "CurveZMQ": {"nstorm.transport.curve": True},
        "ACLs + CurveZMQ": {"nstorm.zookeeper.auth": auth, "nstorm.transport.curve": True},
    }
    rates: dict[str, list[float]] = {label: [] for label in configs}
    for r in range(args.rounds):
        for label, conf in configs.items():
            rate = run_once(conf, args.workers, args.warmup, args.seconds)
            rates[label].append(rate)
            console.print(f"round {r + 1} {label}: {rate:,.0f} words/s")
    medians = {label: statistics.median(v) for label, v in rates.items()}
    table = Table(title=f"word count with security ({args.workers} workers, 2 nodes, {machine()['cpus']} cores, "
                        f"median of {args.rounds})")
    for col in ("configuration", "words/s", "runs", "vs plain"):
        table.add_column(col, justify="right")
    for label, median in medians.items():
        table.add_row(label, f"{median:,.0f}", ", ".join(f"{v:,.0f}" for v in rates[label]),
                      f"{median / medians['plain']:.2f}")
    console.print(table)
    path = write_json("security", {"machine": machine(), "args": vars(args), "transport_batches_per_sec": batches,
                                   "words_per_sec": rates, "median_words_per_sec": medians})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
