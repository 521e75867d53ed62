"""``nstorm traffic NAME``: the PySpark communication matrix of a running topology."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from nstorm.cli.common import (
    ZkOption,
    ZkRootOption,
    cli_errors,
    err_console,
    print_json,
    quiet_kazoo,
    zk_root_of,
)


def heatmap(traffic: dict[str, Any], placement: dict[str, str], path: Path, title: str) -> Path:
    """A PNG heatmap of CC(e -> e'), executors ordered (and boxed) by node."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def node(e: str) -> str:
        return placement.get(e, "?").split(":")[0]

    executors = sorted({x for e in traffic["edges"] for x in (e["src"], e["dst"])}, key=lambda e: (node(e), e))
    index = {e: i for i, e in enumerate(executors)}
    matrix = np.zeros((len(executors), len(executors)))
    for e in traffic["edges"]:
        matrix[index[e["src"]], index[e["dst"]]] += e["tuples"]
    size = max(4.0, 0.25 * len(executors) + 2)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    image = ax.imshow(np.log10(matrix + 1), cmap="viridis")
    ax.set_xticks(range(len(executors)), executors, rotation=90, fontsize=7)
    ax.set_yticks(range(len(executors)), executors, fontsize=7)
    start = 0
    for n in sorted({node(e) for e in executors}):
        count = sum(1 for e in executors if node(e) == n)
        ax.add_patch(plt.Rectangle((start - 0.5, start - 0.5), count, count, fill=False, edgecolor="red", lw=1.5))
        start += count
    ax.set_xlabel("destination executor")
    ax.set_ylabel("source executor")
    ax.set_title(f"{title}: inter-node ratio {traffic['inter_node_ratio']:.1%} (red: same node)")
    fig.colorbar(image, ax=ax, label="log10(tuples + 1)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def register(app: typer.Typer) -> None:
    @app.command(rich_help_panel="Topologies")
    @cli_errors
    def traffic(
        name: str,
        window: Annotated[float, typer.Option(help="seconds of records to aggregate")] = 60.0,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
        png: Annotated[Path | None, typer.Option(help="write a heatmap of the executor matrix here")] = None,
        master: Annotated[str, typer.Option(help="Spark master")] = "local[2]",
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Communication matrix, inter-node ratio and worker load over a window (a PySpark job)."""
        from nstorm.client import ClusterClient
        from nstorm.errors import UsageError
        from nstorm.topology import check_topology_name
        from scheduler_otd.traffic import TrafficJob

        check_topology_name(name)
        if not math.isfinite(window) or window <= 0:  # nan passed "<= 0"
            msg = f"--window must be a finite number of seconds > 0, got {window}"
            raise UsageError(msg)
        quiet_kazoo()
        with ClusterClient(zk, zk_root_of(zk_root)) as client:
            client.status(name)  # unknown topology: exit 2 before Spark starts
            plan = client.plan(name)
        job = TrafficJob(master=master)
        try:
            with err_console.status("running the Spark job..."):
                result = job.run(name, window_secs=window)
        finally:
            job.stop()
        if png is not None:
            heatmap(result, plan.executors if plan else {}, png, name)
        if as_json:
            print_json(result)
            return
        typer.echo(f"{name}: {result['total_tuples']:,} tuples in {window:.0f}s, "
                   f"inter-node ratio {result['inter_node_ratio']:.1%}")
        for w in result["workers"]:
            typer.echo(f"  worker {w['id']} ({w['node']}): cpu {w['cpu']:.0%}, queue {w['queue']:.1f}, "
                       f"waited for a CPU {w.get('wait', 0.0):.0%}")
        for e in sorted(result["edges"], key=lambda e: -e["tuples"])[:20]:
            typer.echo(f"  {e['src']} -> {e['dst']}: {e['tuples']:,} tuples"
                       + (" (inter-node)" if e["inter_node"] else ""))
