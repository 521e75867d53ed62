"""The tuple path in one process: CPU a sentence and a message, for A/B of the per-tuple code.

``python -m benchmarks.tuplepath [--trees A,B] [--variants plain,batched,noack] [--batch-sizes 100,10]
[--sentences N] [--repeats R] [--rounds K]``

Word count's split and two count executors (``topologies/wordcount.py``'s classes) as real
:class:`~worker.bolt.BoltExecutor` s on the unit tests' fake host (``tests/unit/fakes.py``: no
process, no socket, no thread), fed by a spout's real :class:`~worker.outbox.Outbox`; every batch
goes through msgpack as it would between workers. Fixed batch sizes (``topology.batch.size``, not
adaptive), so that two trees send the very same messages. Variants: ``plain`` (a tuple at a time,
one ``emit`` per word, acking on), ``batched`` (``emit_many``, ``process_batch``, acking on),
``noack`` (batched, acking off). Each (tree, variant, batch size) runs in a fresh interpreter
(``PYTHONPATH=<tree>``), interleaved over ``--rounds``; each run takes the best of ``--repeats``
timings of ``--sentences`` sentences (the garbage collector off while timing).

What it cannot see: threads, queues' wake-ups, the GIL, zmq. Those are ``benchmarks.hotpath``'s
and ``benchmarks.throughput``'s. What it can: a few per cent in the per-tuple code, which the
cluster benchmarks' noise (30% and more on this machine) hides. With two batch sizes it also
gives the cost of a message (the difference over the messages' difference).
Prints a table and writes ``benchmarks/results/<--name>.json`` (default ``tuplepath``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, write_json

ROOT = Path(__file__).parents[1]
VARIANTS = ("plain", "batched", "noack")
WORDS = 10  # a sentence's words (benchmarks._workload)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tuplepath", description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default=str(ROOT), help="checkouts to compare, comma-separated (default: this one)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated: {','.join(VARIANTS)}")
    parser.add_argument("--batch-sizes", default="100,10", help="fixed batch sizes, comma-separated")
    parser.add_argument("--sentences", type=int, default=20_000, help="sentences a timing")
    parser.add_argument("--repeats", type=int, default=7, help="timings a run (its best counts)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--name", default="tuplepath", help="results file name")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: "variant:batch" in this interpreter
    args = parser.parse_args(argv)
    bad = [v for v in args.variants.split(",") if v not in VARIANTS]
    if bad:
        parser.error(f"unknown variant {bad[0]!r}; choose from {', '.join(VARIANTS)}")
    return args


def _one(variant: str, batch: int, sentences: int, repeats: int) -> dict[str, float]:
    """One run in this interpreter (whatever tree ``PYTHONPATH`` puts first): µs a sentence."""
    import gc
    import importlib.util
    import time

    tree = Path(os.environ.get("NSTORM_TUPLEPATH_TREE", ROOT))
    sys.path[:0] = [str(tree), str(tree / "tests" / "unit")]
    from nstorm.topology import TopologyBuilder
    from worker.bolt import BoltExecutor
    from worker.outbox import Outbox
    from worker.runs import SpoutGroup

    from fakes import FakeHost, plan_of  # type: ignore[import-not-found]

    spec = importlib.util.spec_from_file_location("wordcount_tp", tree / "topologies" / "wordcount.py")
    wc = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(wc)  # type: ignore[union-attr]
    acking = variant != "noack"
    split_cls, count_cls = (wc.PlainSplit, wc.TupleCount) if variant == "plain" else (wc.Split, wc.Count)
    builder = TopologyBuilder("t")
    builder.set_spout("sentences", wc.Sentences)
    builder.set_bolt("split", split_cls).shuffle_grouping("sentences")
    builder.set_bolt("count", count_cls, parallelism=2).fields_grouping("split", ["word"])
    definition = builder.build(workers=1).definition
    ids = ["sentences:0", "split:0", "count:0", "count:1"] + (["__acker:0"] if acking else [])
    plan = plan_of({e: "n1:1" for e in ids})
    host = FakeHost(plan, wire_format=True, acking=acking,
                    **{"topology.batch.adaptive": False, "topology.batch.size": batch})
    bolts = {}
    for task, eid in enumerate(plan.tasks):
        cls = {"split": split_cls, "count": count_cls}.get(eid.rpartition(":")[0])
        if cls is not None:
            ex = BoltExecutor(host, eid, task, cls, definition)
            ex.setup()
            bolts[task] = ex
    spout = Outbox(host, 0, "sentences", definition)
    spout.rebuild(host.routing)
    pool = wc.sentences(5000, seed=42)
    roots = [1]

    def drain() -> None:
        for task in (1, 2, 3):  # split, then the counts: what the split sent is there
            ex, q = bolts[task], host.data(task)
            while not q.empty():
                ex._process_batch(*q.get())
            ex.outbox.flush()
        for inbox in host.inboxes():  # the acker's entries: not this benchmark's part
            while not inbox.control.empty():
                inbox.control.get()

    def run(n: int) -> None:
        for i in range(0, n, 10):
            if acking:
                group = SpoutGroup(roots[0])
                roots[0] += 1
                for k in range(10):
                    spout.emit_tracked((pool[(i + k) % 5000],), "default", group)
                spout.close_group(group)
            else:
                for k in range(10):
                    spout.emit((pool[(i + k) % 5000],))
            if i % 100 == 90:
                spout.flush()
                drain()
        spout.flush()
        drain()

    run(2000)  # warm up: buffers, tuple classes, the dicts of counts
    times = []
    gc.disable()
    for _ in range(repeats):
        t0 = time.process_time()
        run(sentences)
        times.append((time.process_time() - t0) / sentences * 1e6)
        gc.collect()
    gc.enable()
    spout_msgs = sentences / batch
    return {"us_per_sentence": min(times), "median_us": statistics.median(times),
            "messages_per_sentence": (spout_msgs + sentences * WORDS / batch) / sentences}


def _spawn(tree: str, variant: str, batch: int, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree, "NSTORM_TUPLEPATH_TREE": tree, "PYTHONHASHSEED": "0"}
    out = subprocess.run([sys.executable, "-m", "benchmarks.tuplepath", "--one", f"{variant}:{batch}",
                          "--sentences", str(args.sentences), "--repeats", str(args.repeats)],
                         capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.one:
        variant, _, batch = args.one.partition(":")
        print(json.dumps(_one(variant, int(batch), args.sentences, args.repeats)))
        return 0
    console = Console()
    trees = args.trees.split(",")
    variants = args.variants.split(",")
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        order = trees if r % 2 == 0 else list(reversed(trees))
        for variant in variants:
            for batch in sizes:
                for tree in order:
                    res = _spawn(tree, variant, batch, args)
                    runs.append({"round": r, "tree": tree, "variant": variant, "batch": batch, **res})
                    console.print(f"round {r + 1} {variant} batch {batch} {tree}: {res['us_per_sentence']:.2f} µs")
    table = Table(title=f"tuple path in one process, µs of CPU a sentence (best of {args.repeats}; "
                        f"median of {args.rounds} rounds; {machine()['cpus']} cores)")
    table.add_column("variant")
    table.add_column("batch", justify="right")
    for tree in trees:
        table.add_column(Path(tree).name, justify="right")
    if len(trees) == 2:
        table.add_column("B / A", justify="right")
    summary: dict[str, Any] = {}
    for variant in variants:
        for batch in sizes:
            cells = []
            for tree in trees:
                xs = [x["us_per_sentence"] for x in runs if (x["tree"], x["variant"], x["batch"]) == (tree, variant, batch)]
                summary[f"{variant}/{batch}/{tree}"] = med = statistics.median(xs)
                cells.append(med)
            row = [variant, str(batch), *(f"{c:.2f}" for c in cells)]
            if len(trees) == 2:
                row.append(f"{cells[1] / cells[0]:.3f}")
            table.add_row(*row)
    console.print(table)
    if len(sizes) >= 2:
        big, small = max(sizes), min(sizes)
        for variant in variants:
            for tree in trees:
                a, b = summary[f"{variant}/{big}/{tree}"], summary[f"{variant}/{small}/{tree}"]
                msgs = (1 + WORDS) * (1 / small - 1 / big)
                console.print(f"{variant} ({Path(tree).name}): {(b - a) / msgs:.2f} µs a message "
                              f"(batches of {small} against {big})")
    path = write_json(args.name, {"machine": machine(), "args": {k: v for k, v in vars(args).items() if k != "one"},
                                  "runs": runs, "medians": summary})
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
