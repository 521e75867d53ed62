"""What durable state costs: throughput with checkpoints, checkpoint durations, recovery, incremental snapshots.

``python -m benchmarks.state [--seconds S] [--warmup W] [--rounds R] [--provider lmdb|redis] [--keys N] [--only ...]``

1. **Throughput cost.** Word count at peak (acking on, 2 workers, as ``benchmarks.throughput``)
   with ``topology.state.provider`` (LMDB by default) and checkpoints every
   ``topology.state.checkpoint.interval.ms`` = 1000, against the same with ``memory``, in
   interleaved rounds on fresh local clusters; the table gives the ratio of words/s and of the
   worker processes' CPU per word (which a machine shared with other work disturbs less). During the
   checkpointed runs the status is polled every 0.2 s: each committed checkpoint's duration
   (ordered -> committed) gives p50 and p99.
2. **Recovery.** On the checkpointed topology, a worker that holds count executors is
   SIGKILLed: the time until the rollback is done and the count bolts process again, and the
   sentences processed again (emitted before the kill, after the checkpoint restored).
3. **Incremental snapshots.** In this process, a bolt executor's ``self.keyed_state`` of
   ``--keys`` keys (1,000,000) written to a real store: a full checkpoint, then one after 1% of
   the keys changed: time, CPU time and bytes of each.

Prints tables and writes ``benchmarks/results/state.json``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, temporary_home, write_json

WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"


def _provider_conf(provider: str, redis_url: str) -> dict[str, Any]:
    conf: dict[str, Any] = {"topology.state.provider": provider}
    if provider == "redis":
        conf["topology.state.provider.config"] = {"url": redis_url}
    return conf


def _executed(client: Any) -> int:
    return int(client.status("wordcount")["components"]["count"]["executed"])


def run_wordcount(conf: dict[str, Any], warmup: float, seconds: float, recover: bool) -> dict[str, Any]:
    """One fresh cluster: words/s of the count bolts over the window and the workers' CPU per word,
    checkpoint durations seen meanwhile, and (``recover``) a worker's SIGKILL and the time until
    processing resumes."""
    import psutil

    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster

    with temporary_home():
        cluster = LocalCluster(supervisors=2, slots=1).start()
        try:
            with ClusterClient(cluster.address) as client:
                client.submit(WORDCOUNT, conf={**conf, "topology.workers": 2, "wordcount.spouts": 2,
                                               "wordcount.splits": 2, "wordcount.counts": 2,
                                               "worker.heartbeat.interval.secs": 0.2})
                client.wait_running("wordcount", 60)
                time.sleep(warmup)
                durations: dict[int, float] = {}
                procs = [psutil.Process(w["pid"]) for w in client.status("wordcount")["workers"]]
                cpu0 = _cpu(procs)
                first = _executed(client)
                t0 = time.monotonic()
                while time.monotonic() - t0 < seconds:
                    last = client.status("wordcount")["checkpoints"]["last_committed"]
                    if last:
                        durations[last["id"]] = last["duration_ms"]
                    time.sleep(0.2)
                counted = _executed(client) - first
                words = counted / (time.monotonic() - t0)
                result: dict[str, Any] = {"words_per_sec": words, "checkpoint_ms": sorted(durations.values()),
                                          "cpu_us_per_word": (_cpu(procs) - cpu0) / max(1, counted) * 1e6,
                                          "conf": conf}
                if recover:
                    result["recovery"] = _recover(client)
                return result
        finally:
            cluster.stop()


def _cpu(procs: list[Any]) -> float:
    """CPU seconds the worker processes have used (what a word costs, whatever else runs)."""
    total = 0.0
    for p in procs:
        times = p.cpu_times()
        total += times.user + times.system
    return total


def _recover(client: Any) -> dict[str, Any]:
    """SIGKILL the worker of ``count:0``; seconds until the topology has rolled back and until the
    count bolts process again (every worker up, their counters rising after the last rollback),
    and the sentences emitted before the kill that the restored checkpoint had not seen (they are
    processed again)."""
    status = client.status("wordcount")
    worker = next(w for w in status["workers"] if "count:0" in w["executors"])
    restores = status["checkpoints"]["restores"]
    emitted = _spout_sent(client)
    killed_at = time.time()
    os.kill(worker["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    restored_at, restore_id, reprocessed = None, 0, None
    last_executed = None
    while time.monotonic() < deadline:
        st = client.status("wordcount")
        cp = st["checkpoints"]
        if cp["restores"] > restores and cp["last_restore"]:
            if restored_at is None or cp["last_restore"]["at"] > restored_at:
                restored_at, restore_id = cp["last_restore"]["at"], cp["last_restore"]["id"]
                sent = _sent_in_checkpoint(client, restore_id)  # read at once: later commits prune it
                reprocessed = max(0, emitted - sent) if sent is not None else None
                last_executed = None
            executed = int(st["components"]["count"]["executed"])
            up = all(w["pid"] for w in st["workers"]) and all(b > restored_at for b in _beats(client))
            if up and last_executed is not None and executed > last_executed:
                return {"recovered": True, "rollback_after_kill_secs": round(restored_at - killed_at, 3),
                        "processing_again_after_kill_secs": round(time.time() - killed_at, 3),
                        "restored_checkpoint": restore_id, "rollbacks": cp["restores"] - restores,
                        "sentences_reprocessed": reprocessed}
            last_executed = executed if up else None
        time.sleep(0.05)
    return {"recovered": False}


def _beats(client: Any) -> list[float]:
    """The time of each worker's last heartbeat."""
    return [b.time for b in client.heartbeats("wordcount").values()]


def _spout_sent(client: Any) -> int:
    """Sentences the spouts have emitted (their counters)."""
    return int(client.status("wordcount")["components"]["sentences"]["emitted"])


def _sent_in_checkpoint(client: Any, cid: int) -> int | None:
    """Sentences the spouts had emitted at checkpoint ``cid`` (their ``sent`` in the store)."""
    from nstorm.config import merge_conf
    from nstorm.state.config import state_config
    from nstorm.state.store import open_store, unpack_snapshot

    if not cid:
        return 0
    topo = client.cluster.topology("wordcount")
    config = state_config(merge_conf(topo["definition"].get("conf"), topo.get("conf")))
    store = open_store(config, "wordcount", topo["submission"])
    try:
        total = 0
        for eid in client.plan("wordcount").executors:
            if eid.startswith("sentences:"):
                blob = store.executor(cid, eid)
                if blob is None:
                    return None
                total += int(unpack_snapshot(blob)["state"].get("sent", 0))
        return total
    finally:
        store.close()


def incremental(keys: int, provider: str, redis_url: str) -> dict[str, Any]:
    """A keyed state of ``keys`` keys: a full checkpoint, then one after 1% changed (real store)."""
    from nstorm import Bolt, Spout, TopologyBuilder
    from nstorm.plan import Plan, Slot
    from nstorm.state.config import StateConfig
    from nstorm.state.store import open_store
    from worker.bolt import BoltExecutor
    from worker.delivery import Inbox
    from worker.routing import RoutingTable

    class Source(Spout):
        outputs = ("k",)

    class Keyed(Bolt):
        outputs = ()

    builder = TopologyBuilder("incremental")
    builder.set_spout("source", Source)
    builder.set_bolt("keyed", Keyed).fields_grouping("source", ["k"])
    definition = builder.build(workers=1).definition
    places = {"source:0": "n1:1", "keyed:0": "n1:1"}
    plan = Plan.first("incremental", places, places, [Slot("n1", "127.0.0.1", 1, 2)])

    with tempfile.TemporaryDirectory() as tmp:
        config = StateConfig(provider=provider, directory=Path(tmp), options={"url": redis_url})
        store = open_store(config, "incremental", "bench")

        class Checkpoints:
            groups = 128
            tainted = False

            def write(self, cid: int, executor: str, blob: bytes, groups: Any) -> int:
                return store.write(cid, executor, blob, groups)

        class Host:
            worker_id = "n1:1"
            node, port, topology = "n1", 1, "incremental"
            acking = False
            active = True
            throttled = False
            epoch = 0
            checkpoints = Checkpoints()

            def __init__(self) -> None:
                from nstorm.config import merge_conf

                self.conf = merge_conf({})
                self.routing = RoutingTable.from_plan(plan)
                self.inboxes: dict[int, Inbox] = {}

            def inbox(self, task: int, wid: str | None = None) -> Inbox:
                return self.inboxes.setdefault(task, Inbox(1))

        ex = BoltExecutor(Host(), "keyed:0", 1, Keyed, definition)  # type: ignore[arg-type]
        ex.setup()
        state = ex.instance.keyed_state
        for k in range(keys):
            state[f"key-{k}"] = k
        out = {}
        for label, cid in (("full", 1), ("1% changed", 2)):
            if cid == 2:
                for k in range(0, keys, 100):
                    state[f"key-{k}"] = -k - 1
            t0, c0 = time.perf_counter(), time.process_time()
            ok = ex.checkpoint.take(cid)
            out[label] = {"ok": ok, "secs": time.perf_counter() - t0, "cpu_secs": time.process_time() - c0,
                          "bytes": ex.checkpoint.last_bytes}
        if provider == "redis":
            store.drop()
        store.close()
    out["time_ratio"] = out["1% changed"]["secs"] / out["full"]["secs"]
    out["cpu_ratio"] = out["1% changed"]["cpu_secs"] / out["full"]["cpu_secs"]
    out["bytes_ratio"] = out["1% changed"]["bytes"] / out["full"]["bytes"]
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.state", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measurement window per run")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each configuration, interleaved")
    parser.add_argument("--provider", choices=("lmdb", "redis"), default="lmdb")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys of the incremental-snapshot test")
    parser.add_argument("--only", choices=("throughput", "incremental"), help="run one part only")
    args = parser.parse_args()
    if args.only == "incremental":
        inc = incremental(args.keys, args.provider, args.redis_url)
        Console().print(inc)
        write_json("state-incremental", {"machine": machine(), "args": vars(args), "incremental": inc})
        return
    console = Console()
    durable = {**_provider_conf(args.provider, args.redis_url), "topology.state.checkpoint.interval.ms": 1000}
    runs = {"memory (no checkpoints)": {}, f"{args.provider}, checkpoints every 1 s": durable}
    rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in runs}
    for r in range(max(1, args.rounds)):
        for label, conf in runs.items():
            last_round = r == args.rounds - 1
            result = run_wordcount(conf, args.warmup, args.seconds, recover=bool(conf) and last_round)
            rounds[label].append(result)
            console.print(f"round {r + 1}, {label}: {result['words_per_sec']:,.0f} words/s"
                          + (f", {len(result['checkpoint_ms'])} checkpoints" if conf else ""))
    base_label, cp_label = list(runs)
    ratios = [c["words_per_sec"] / b["words_per_sec"] for b, c in zip(rounds[base_label], rounds[cp_label], strict=True)]
    cpu_ratios = [c["cpu_us_per_word"] / b["cpu_us_per_word"]
                  for b, c in zip(rounds[base_label], rounds[cp_label], strict=True)]
    durations = [d for r in rounds[cp_label] for d in r["checkpoint_ms"]]
    recovery = next((r["recovery"] for r in rounds[cp_label] if "recovery" in r), {})
    table = Table(title=f"word count at peak with durable state ({machine()['cpus']} cores, {args.rounds} rounds, "
                        f"{args.seconds:.0f} s windows)")
    for col in ("run", "words/s (median)", "per round", "worker CPU µs a word (median)"):
        table.add_column(col, justify="right")
    for label, rs in rounds.items():
        table.add_row(label, f"{statistics.median(x['words_per_sec'] for x in rs):,.0f}",
                      ", ".join(f"{x['words_per_sec']:,.0f}" for x in rs),
                      f"{statistics.median(x['cpu_us_per_word'] for x in rs):.3f}")
    console.print(table)
    console.print(f"with checkpoints / without, words/s per round: {', '.join(f'{x:.3f}' for x in ratios)} "
                  f"(median {statistics.median(ratios):.3f}); CPU a word: {', '.join(f'{x:.3f}' for x in cpu_ratios)} "
                  f"(median {statistics.median(cpu_ratios):.3f})")
    console.print(f"checkpoint duration (ordered -> committed): p50 {_pct(durations, 0.5)} ms, "
                  f"p99 {_pct(durations, 0.99)} ms over {len(durations)} checkpoints")
    console.print(f"recovery: {recovery}")
    if args.only == "throughput":
        write_json("state", {"machine": machine(), "args": vars(args), "rounds": rounds, "ratios": ratios,
                             "cpu_ratios": cpu_ratios, "recovery": recovery})
        return
    inc = incremental(args.keys, args.provider, args.redis_url)
    t2 = Table(title=f"incremental snapshots: {args.keys:,} keys in self.keyed_state ({args.provider})")
    for col in ("checkpoint", "seconds", "CPU seconds", "bytes written"):
        t2.add_column(col, justify="right")
    for label in ("full", "1% changed"):
        t2.add_row(label, f"{inc[label]['secs']:.3f}", f"{inc[label]['cpu_secs']:.3f}", f"{inc[label]['bytes']:,}")
    t2.add_row("ratio", f"{inc['time_ratio']:.3f}", f"{inc['cpu_ratio']:.3f}", f"{inc['bytes_ratio']:.3f}")
    console.print(t2)
    path = write_json("state", {"machine": machine(), "args": vars(args), "rounds": rounds, "ratios": ratios,
                                "ratio_median": statistics.median(ratios), "cpu_ratios": cpu_ratios,
                                "cpu_ratio_median": statistics.median(cpu_ratios),
                                "checkpoint_ms": {"p50": _pct(durations, 0.5), "p99": _pct(durations, 0.99),
                                                  "n": len(durations)},
                                "recovery": recovery, "incremental": inc})
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
