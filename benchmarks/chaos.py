"""Word count under a schedule of faults: is anything lost, and how long does each fault stall it?

``python -m benchmarks.chaos [--duration S] [--rate R] [--period S] [--seed N] [--state lmdb]``
``python -m benchmarks.chaos --moves N [--rate R] [--seed N] [--state lmdb]``

A local cluster of real processes (ZooKeeper, two Nimbus processes, two supervisors
with four slots each) runs ``topologies/audited.py``: word count whose spouts keep an
on-disk audit of every sentence. While it runs, at fixed fractions of ``--duration``:

- ``worker``: a worker killed with SIGKILL (the first one without a spout, the second
  one with a spout, whose in-flight sentences must then be replayed);
- ``supervisor``: a supervisor killed with SIGKILL, restarted 5 s later (it adopts its
  workers);
- ``nimbus``: the leading Nimbus killed with SIGKILL (the standby takes over), restarted
  10 s later as the standby;
- ``zookeeper``: ZooKeeper stopped and started again 3 s later;
- and all along, one random live migration (thread mode) every ``--period`` seconds.

With ``--moves N`` the run injects, instead, N rounds of the faults around live moves of
:mod:`benchmarks._move_faults` (a move's destination, its source or both killed during the
hand-over, the destination killed after it, and a worker killed, its executor moved to a
spout's worker and that worker killed), one after the other, with no random migrations.

Then the input stops (the spouts only replay) and the run drains until every emitted
sentence is acked. Reported: sentences emitted, acked, acked more than once, failed,
replayed and **lost** (emitted but never acked once the run settled: must be 0), and for each
kind of fault the longest stall: the longest time any spout saw no ack between the fault
and the next one (at most 30 s). Prints a table and writes ``benchmarks/results/chaos.json``.

With ``--state lmdb`` (or ``redis``, given ``--redis-url``) the topology runs with durable
state: every failure rolls it back to its last checkpoint. Once it settles, the run waits for
a checkpoint committed after that and reads the count executors' states from the store: their
counts must equal a ``Counter`` of the words of every sentence emitted, exactly (each sentence
counted once, whatever was killed). ``--state`` results go to ``chaos-<provider>.json``.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import FaultInjector, machine, temporary_home, write_json
from benchmarks._move_faults import KINDS, MoveFaults

AUDITED = Path(__file__).parents[1] / "topologies" / "audited.py"
NAME = "audited"
STALL_WINDOW = 30.0  # seconds after a fault in which its stall is looked for


def _schedule(duration: float) -> list[tuple[float, str]]:
    """(seconds after the start, fault) pairs."""
    return [(0.10 * duration, "worker"), (0.25 * duration, "supervisor"), (0.45 * duration, "nimbus"),
            (0.60 * duration, "zookeeper"), (0.75 * duration, "worker-spout"), (0.85 * duration, "supervisor")]


class Chaos(FaultInjector):
    """Injects the faults of :func:`_schedule` into ``cluster`` and records when each happened."""

    def __init__(self, cluster: Any, client: Any, rng: random.Random, console: Console) -> None:
        super().__init__(client, rng, console, NAME)
        self.cluster = cluster

    def inject(self, kind: str) -> None:
        at = time.time()
        detail = getattr(self, "_" + kind.replace("-", "_"))()
        self.faults.append({"kind": kind.split("-")[0], "at": at, "detail": detail})
        self.console.print(f"[yellow]{time.strftime('%H:%M:%S')} fault[/yellow] {kind}: {detail}")

    def _kill_worker(self, with_spout: bool) -> str:
        workers = self._workers()
        chosen = [w for w in workers if any(e.startswith("sentences:") for e in w["executors"]) == with_spout]
        victim = self.rng.choice(chosen or workers)
        os.kill(victim["pid"], signal.SIGKILL)
        return f"SIGKILL worker {victim['id']} (pid {victim['pid']}, {', '.join(sorted(victim['executors']))})"

    def _worker(self) -> str:
        return self._kill_worker(with_spout=False)

    def _worker_spout(self) -> str:
        return self._kill_worker(with_spout=True)

    def _supervisor(self) -> str:
        node = self.rng.choice(sorted(self.cluster.supervisors))
        pid = self.cluster.kill_daemon(f"supervisor-{node}")
        threading.Timer(5.0, self.cluster.restart_supervisor, args=(node,)).start()
        return f"SIGKILL supervisor {node} (pid {pid}), restarted after 5 s"

    def _nimbus(self) -> str:
        leader = self.client.nimbuses()["leader"]
        if leader is None:
            return "no leader to kill"
        pid = int(leader.rsplit(":", 1)[1])
        name = next(n for n, p in self.cluster.nimbuses.items() if p.pid == pid)
        self.cluster.kill_daemon(name)
        threading.Timer(10.0, self.cluster.start_nimbus, args=(name,)).start()
        return f"SIGKILL leading {name} (pid {pid}), restarted after 10 s"

    def _zookeeper(self) -> str:
        self.cluster.zookeeper.stop()
        time.sleep(3.0)
        self.cluster.zookeeper.start(timeout=60)
        return "ZooKeeper stopped, started again after 3 s"


def _migrate_forever(address: str, root: str, period: float, stop: threading.Event, log: list[dict[str, Any]]) -> None:
    from nstorm.client import ClusterClient

    with ClusterClient(address, root, timeout=30) as mover:
        while not stop.wait(period):
            try:
                result = mover.rebalance(NAME, random_count=1, by="random", timeout=10)
                log.append({"at": time.time(), "ok": True, "moves": result["moves"]})
            except Exception as exc:  # noqa: BLE001 - Nimbus or ZooKeeper may be down right now
                log.append({"at": time.time(), "ok": False, "error": f"{type(exc).__name__}: {exc}"[:200]})


def _longest_gap(buckets: set[int], start: float, end: float) -> float:
    """Longest run of 100 ms buckets without an ack in [start, end] (seconds)."""
    longest = run = 0
    for b in range(int(start * 10), int(end * 10) + 1):
        run = 0 if b in buckets else run + 1
        longest = max(longest, run)
    return longest / 10.0


def analyse(audits: dict[str, dict[str, Any]], faults: list[dict[str, Any]], end: float) -> dict[str, Any]:
    emitted = acked = duplicates = failed = replayed = restarts = lost = 0
    per_spout_buckets = []
    for audit in audits.values():
        acks = {int(k): v for k, v in audit.get("acks", {}).items()}
        n = int(audit.get("emitted", 0))
        emitted += n
        acked += sum(1 for i in range(n) if i in acks)
        lost += sum(1 for i in range(n) if i not in acks)
        duplicates += sum(v - 1 for v in acks.values() if v > 1)
        failed += int(audit.get("failed", 0))
        replayed += int(audit.get("replayed", 0))
        restarts += int(audit.get("restarts", 0))
        per_spout_buckets.append({int(b) for b, c in audit.get("buckets", {}).items() if c})
    stalls: dict[str, float] = {}
    for i, fault in enumerate(faults):
        # Up to the next fault: a stall is charged to the fault that caused it, not to an earlier one.
        window_end = min(fault["at"] + STALL_WINDOW, end, *(f["at"] for f in faults[i + 1:i + 2]))
        gap = max((_longest_gap(b, fault["at"], window_end) for b in per_spout_buckets), default=0.0)
        fault["stall_secs"] = gap
        stalls[fault["kind"]] = max(stalls.get(fault["kind"], 0.0), gap)
    return {"emitted": emitted, "acked": acked, "acked_twice_or_more": duplicates, "failed": failed,
            "replayed": replayed, "lost": lost, "spout_restarts": restarts, "longest_stall_secs": stalls}


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster
    from topologies.audited import read_audit

    rng = random.Random(args.seed)
    # More than the run emits: the stop file ends the input (a --moves round takes about 90 s).
    sentences = int(args.rate * max(args.duration, 100.0 * args.moves) * 2)
    daemon_conf = {"nstorm.zookeeper.session.timeout.secs": 4, "nimbus.supervisor.timeout.secs": 4}
    with temporary_home() as home:
        audit_dir = home / "audit"
        audit_dir.mkdir()
        cluster = LocalCluster(supervisors=2, slots=4, nimbuses=2, conf=daemon_conf).start(timeout=90)
        migrations: list[dict[str, Any]] = []
        stop = threading.Event()
        try:
            with ClusterClient(cluster.address, timeout=30) as client:
                client.submit(AUDITED, conf={
                    "audit.dir": str(audit_dir), "audit.sentences": sentences, "audit.rate": args.rate,
                    "audit.workers": 4, "topology.message.timeout.secs": 10,
                    "nstorm.zookeeper.session.timeout.secs": 4, **daemon_conf, **_state_conf(args)})
                client.wait_running(NAME, 60)
                stalled_seen: list[dict[str, Any]] = []
                if args.moves:
                    faults = _inject_move_faults(client, rng, console, args.moves, audit_dir, stalled_seen)
                else:
                    chaos = Chaos(cluster, client, rng, console)
                    mover = threading.Thread(target=_migrate_forever, daemon=True,
                                             args=(cluster.address, cluster.root, args.period, stop, migrations))
                    t0 = time.monotonic()
                    mover.start()
                    for offset, kind in _schedule(args.duration):
                        time.sleep(max(0.0, t0 + offset - time.monotonic()))
                        try:
                            chaos.inject(kind)
                        except Exception as exc:  # noqa: BLE001 - report, and go on with the schedule
                            console.print(f"[red]fault {kind} could not be injected: {exc}[/red]")
                    time.sleep(max(0.0, t0 + args.duration - time.monotonic()))
                    stop.set()
                    mover.join(30)
                    faults = chaos.faults
                (audit_dir / "stop").touch()  # the spouts emit no new sentence, only replays
                input_end = time.time()  # no ack is expected after it but for replays: no stall counted
                console.print("input ends; draining")
                deadline = time.monotonic() + args.drain

                def settled() -> bool:
                    audits = read_audit(audit_dir)
                    return len(audits) == 2 and all(
                        a.get("stopped") and all(str(i) in a.get("acks", {}) for i in range(int(a["emitted"])))
                        for a in audits.values())

                while not (done := settled()) and time.monotonic() < deadline:
                    time.sleep(1.0)
                time.sleep(1.0)  # the last audit dump
                result = analyse(read_audit(audit_dir), faults, input_end)
                result["drained_in_secs"] = round(time.monotonic() - (deadline - args.drain), 1)
                result["settled"] = done
                result["faults"] = faults
                result["stall_reports"] = stalled_seen
                result["migrations"] = {"done": sum(1 for m in migrations if m["ok"]),
                                        "refused": sum(1 for m in migrations if not m["ok"]),
                                        "log": migrations}
                result["worker_restarts"] = _worker_restarts(home)
                if args.state != "memory":
                    result["exact_counts"] = _check_counts(client, args, sentences, audit_dir, console)
        finally:
            stop.set()
            cluster.stop()
    return result


def _inject_move_faults(client: Any, rng: random.Random, console: Console, rounds: int, audit_dir: Path,
                        stalled_seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rounds`` rounds of every kind of :mod:`benchmarks._move_faults`; after each fault, wait
    until every spout acks again, and note any stall ``status`` reports meanwhile."""
    from topologies.audited import read_audit

    faults = MoveFaults(client, rng, console)
    for r in range(rounds):
        console.print(f"round {r + 1} of {rounds}")
        for kind in KINDS:
            try:
                fault = faults.inject(kind)
            except Exception as exc:  # noqa: BLE001 - report, and go on with the next
                console.print(f"[red]fault {kind} could not be injected: {exc}[/red]")
                continue
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # acks again at every spout since the fault
                stall = client.status(NAME).get("stalled")
                if stall:
                    stalled_seen.append({"after": kind, "at": time.time(), **stall})
                marks = [max((int(b) for b in a.get("buckets", {})), default=0) for a in read_audit(audit_dir).values()]
                if marks and min(marks) / 10.0 > fault["at"] + 1.0:
                    break
                time.sleep(0.5)
    return faults.faults


def _state_conf(args: argparse.Namespace) -> dict[str, Any]:
    if args.state == "memory":
        return {}
    # Faults back to back are the point here: no bound on rollbacks in a row (it would deactivate),
    # and no backoff between them (it would add its waits to the recovery this measures).
    conf: dict[str, Any] = {"topology.state.provider": args.state, "topology.state.max.rollbacks": 0,
                            "topology.state.rollback.backoff.ms": 0}
    if args.state == "redis":
        conf["topology.state.provider.config"] = {"url": args.redis_url}
    return conf


def _check_counts(client: Any, args: argparse.Namespace, total: int, audit_dir: Path, console: Console) -> dict[str, Any]:
    """The count executors' states in a checkpoint committed after the run settled, against a
    ``Counter`` of the words of every sentence the spouts emitted."""
    from collections import Counter

    from nstorm.config import merge_conf
    from nstorm.state.config import state_config
    from nstorm.state.keyed import read_keyed
    from nstorm.state.store import open_store
    from topologies.audited import read_audit
    from topologies.sentences import sentences

    settled_at = time.time()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        last = client.status(NAME)["checkpoints"]["last_committed"]
        if last and last["at"] > settled_at + 0.5:
            break
        time.sleep(0.5)
    else:
        return {"checked": False, "why": "no checkpoint committed after the run settled"}
    cid = last["id"]
    expected: Counter[str] = Counter()
    for stem, audit in read_audit(audit_dir).items():
        index = int(stem.rsplit("-", 1)[1])
        for sentence in sentences(total, seed=1000 + index)[: int(audit["emitted"])]:
            expected.update(sentence.split())
    topo = client.cluster.topology(NAME)
    config = state_config(merge_conf(_state_conf(args)))
    store = open_store(config, NAME, topo["submission"])
    try:
        got: Counter[str] = Counter(read_keyed(store, "count", cid, config.max_parallelism))  # the counts' keyed_state
    finally:
        store.close()
    wrong = {w for w in expected.keys() | got.keys() if expected[w] != got[w]}
    console.print(f"checkpoint {cid}: {sum(got.values())} words counted, {sum(expected.values())} expected, "
                  f"{len(wrong)} words off")
    return {"checked": True, "checkpoint": cid, "words": sum(got.values()), "expected": sum(expected.values()),
            "words_off": len(wrong), "exact": not wrong}


def _worker_restarts(home: Path) -> int:
    return sum(p.read_text(errors="replace").count("restarting") for p in (home / "logs").glob("supervisor-*.log"))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=150.0, help="seconds of input")
    parser.add_argument("--rate", type=float, default=200.0, help="sentences per second per spout executor")
    parser.add_argument("--period", type=float, default=10.0, help="seconds between random live migrations")
    parser.add_argument("--drain", type=float, default=300.0, help="seconds allowed to ack the rest")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--state", choices=("memory", "lmdb", "redis"), default="memory",
                        help="topology.state.provider: with lmdb or redis the final counts are checked exactly")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="the Redis of --state redis")
    parser.add_argument("--moves", type=int, default=0,
                        help="rounds of kills around live moves instead of the schedule (see benchmarks._move_faults)")
    args = parser.parse_args()
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # reconnect chatter while ZooKeeper restarts
    console = Console()
    result = run(args, console)
    table = Table("emitted", "acked", "acked twice+", "failed", "replayed", "lost", "spout restarts",
                  title=f"chaos: {args.duration:.0f} s of word count at {args.rate:.0f} sentences/s per spout")
    table.add_row(*(str(result[k]) for k in ("emitted", "acked", "acked_twice_or_more", "failed", "replayed", "lost",
                                             "spout_restarts")))
    console.print(table)
    stalls = Table("fault", "injected", "during the hand-over", "state lost", "longest stall (s): no ack at some spout",
                   title="stalls by kind of fault")
    for kind, secs in result["longest_stall_secs"].items():
        of_kind = [f for f in result["faults"] if f["kind"] == kind]
        during = sum(1 for f in of_kind if f.get("during_hand_over"))
        lost_state = sum(1 for f in of_kind if f.get("state_lost"))
        stalls.add_row(kind, str(len(of_kind)), str(during) if args.moves else "-",
                       str(lost_state) if args.moves else "-", f"{secs:.1f}")
    console.print(stalls)
    if result["stall_reports"]:
        console.print(f"[red]status reported a stall {len(result['stall_reports'])} times[/red]")
    m = result["migrations"]
    console.print(f"live migrations: {m['done']} done, {m['refused']} refused (Nimbus or ZooKeeper away); "
                  f"worker restarts by supervisors: {result['worker_restarts']}; drained in {result['drained_in_secs']} s"
                  f" ({'settled' if result['settled'] else 'NOT settled'})")
    exact = result.get("exact_counts")
    if exact is not None:
        console.print(f"durable state ({args.state}): " + (
            f"counts in checkpoint {exact['checkpoint']} {'EXACT' if exact['exact'] else 'WRONG'} "
            f"({exact['words']} words, {exact['expected']} expected, {exact['words_off']} words off)"
            if exact["checked"] else exact["why"]))
    name = "chaos" if args.state == "memory" else f"chaos-{args.state}"
    path = write_json(name, {"machine": machine(), "args": vars(args), **result})
    console.print(f"results: {path}")
    if not result["settled"]:
        raise SystemExit(f"did not settle within {args.drain:.0f} s: {result['lost']} sentences still unacked")
    if result["lost"]:
        raise SystemExit(f"{result['lost']} sentences lost")
    if result["stall_reports"]:
        raise SystemExit("the topology stalled (status reported it)")
    if exact is not None and not (exact["checked"] and exact["exact"]):
        raise SystemExit("the counts in the last checkpoint are not exact")


if __name__ == "__main__":
    main()
