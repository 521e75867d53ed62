"""Commands on topologies: submit, list, status, activate, deactivate, kill."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from nstorm.cli.common import (
    ConfOption,
    ZkOption,
    ZkRootOption,
    cli_errors,
    cluster_client,
    print_json,
)
from nstorm.topology import check_topology_name
from nstorm.window.status import describe_windows

JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]


def register(app: typer.Typer) -> None:
    """Add the topology commands to the root app."""

    @app.command(rich_help_panel="Topologies")
    @cli_errors
    def submit(
        file: Annotated[Path, typer.Argument(help="topology file defining `topology` or `make_topology(conf)`")],
        name: Annotated[str | None, typer.Option(help="run under this name instead of the built one")] = None,
        conf: ConfOption = None,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Validate a topology file and submit it to the cluster."""
        from nstorm.config import check_topology_conf, merge_conf, parse_conf_options
        from nstorm.constraints import check_submit as check_constraints
        from nstorm.loader import load_topology
        from nstorm.state.config import state_config

        overrides = parse_conf_options(conf or [])
        topology = load_topology(file, overrides)  # bad input fails here, before touching the cluster
        settings = merge_conf(topology.conf, overrides)
        check_topology_conf(settings)  # ... and here (the client checks again: it is an API too)
        state_config(settings)
        check_constraints(topology.definition, settings)
        with cluster_client(zk, zk_root, overrides) as client:
            info = client.submit(file, name=name, conf=overrides)
        typer.echo(f"submitted {info['name']}: {info['executors']} executors on {info['workers']} workers")

    @app.command(rich_help_panel="Daemons")
    @cli_errors
    def leader(as_json: JsonOption = False, zk: ZkOption = None, zk_root: ZkRootOption = None) -> None:
        """The leading Nimbus (host:pid) and the standby ones; exit 1 if no Nimbus runs."""
        with cluster_client(zk, zk_root) as client:
            info = client.nimbuses()
        if as_json:
            print_json(info)
        else:
            typer.echo(f"leader: {info['leader'] or 'none'}")
            for standby in info["standby"]:
                typer.echo(f"standby: {standby}")
        if info["leader"] is None:
            raise typer.Exit(1)

    @app.command("list", rich_help_panel="Topologies")
    @cli_errors
    def list_(as_json: JsonOption = False, zk: ZkOption = None, zk_root: ZkRootOption = None) -> None:
        """Topologies of the cluster."""
        with cluster_client(zk, zk_root) as client:
            rows = client.list()
        if as_json:
            print_json(rows)
            return
        if sys.stdout.isatty():
            table = Table("name", "status", "plan", "workers", "executors")
            for r in rows:
                table.add_row(r["name"], r["status"], str(r["plan_version"]), str(r["workers"]), str(r["executors"]))
            Console().print(table)
        else:
            for r in rows:
                typer.echo(f"{r['name']} {r['status']} v{r['plan_version']} workers={r['workers']} executors={r['executors']}")

    @app.command(rich_help_panel="Topologies")
    @cli_errors
    def status(
        name: str, as_json: JsonOption = False, zk: ZkOption = None, zk_root: ZkRootOption = None
    ) -> None:
        """Workers, executors and counters of a topology."""
        check_topology_name(name)  # before connecting: exit 2 whether ZooKeeper is up or not
        with cluster_client(zk, zk_root) as client:
            info = client.status(name)
        if as_json:
            print_json(info)
            return
        typer.echo(f"{info['name']} {info['status']} plan v{info['plan_version']}")
        for w in info["workers"]:
            typer.echo(f"  worker {w['id']} pid={w['pid']} executors={','.join(w['executors'])}"
                       + (" (emptied: being released)" if w.get("releasing") else ""))
        for cname, c in info["components"].items():
            lat = c.get("latency_ms")
            typer.echo(
                f"  {cname} x{c['parallelism']}: emitted={c['emitted']} executed={c['executed']} "
                f"acked={c['acked']} failed={c['failed']}"
                + (f" {lat['kind']} latency p50={lat['p50']:.1f}ms p99={lat['p99']:.1f}ms" if lat else "")
                + (f" capacity={c['capacity']:.3f}" if c.get("capacity") is not None else "")
                + (f" last_error={c['last_error']}" if c["last_error"] else "")
            )
        for cname, c in info["components"].items():
            if c.get("window"):
                typer.echo(f"  {cname} windows: {describe_windows(c['window'])}")
        s = info["spouts"]
        typer.echo(f"  spouts: pending={s['pending']} acked={s['acked']} failed={s['failed']} replayed={s['replayed']}")
        stalled = info.get("stalled")
        if stalled:
            since = time.strftime("%H:%M:%S", time.localtime(stalled["since"]))
            windows = stalled.get("holding_windows") or []
            typer.echo(f"  STALLED: no ack since {since} with {stalled['pending']} tuples pending; "
                       f"holding input: {', '.join(stalled['holding_input']) or '-'}; "
                       f"waiting for a state: {', '.join(stalled['waiting_for_state']) or '-'}"
                       + (f"; holding tuples in open windows: {', '.join(windows)} (topology.max.spout.pending "
                          "must cover what the windows hold, and a window fires only when newer tuples move "
                          "its watermark)" if windows else ""))
        for c in info.get("constraints") or ():
            measured = c.get("measured_p99_ms")
            typer.echo(f"  latency {'>'.join(c['path'])}: p99 {'-' if measured is None else f'{measured:.1f}'} ms "
                       f"(bound {c['p99_ms']:g} ms, {'met' if c.get('met') else 'not met' if measured is not None else 'no sample lately' if 'samples' in c else 'no sample yet'}; "
                       f"{c['windows_met']}/{c['windows']} windows met; {len(c['actions'])} actions)"
                       + (f"; warning: {c['warning']}" if c.get("warning") else ""))
        cp = info.get("checkpoints") or {}
        if cp.get("provider", "memory") != "memory":
            last = cp.get("last_committed")
            done = (f"last committed #{last['id']} at {time.strftime('%H:%M:%S', time.localtime(last['at']))} "
                    f"({last['duration_ms']:.0f} ms, {last['bytes']} bytes)") if last else "none committed yet"
            due = cp.get("rollback_at")
            waits = f"; a rollback waits until {time.strftime('%H:%M:%S', time.localtime(due))} (backoff)" if due else ""
            typer.echo(f"  checkpoints: {cp['provider']} every {cp['interval_ms']} ms; {done}; "
                       f"restores={cp.get('restores', 0)}" + waits
                       + (f"; error: {cp['last_error']}" if cp.get("last_error") else ""))

    @app.command(rich_help_panel="Topologies")
    @cli_errors
    def activate(name: str, zk: ZkOption = None, zk_root: ZkRootOption = None) -> None:
        """Resume a deactivated topology's spouts."""
        check_topology_name(name)
        with cluster_client(zk, zk_root) as client:
            client.activate(name)
        typer.echo(f"{name}: activate requested")

    @app.command(rich_help_panel="Topologies")
    @cli_errors
    def deactivate(name: str, zk: ZkOption = None, zk_root: ZkRootOption = None) -> None:
        """Pause a topology's spouts (bolts keep draining)."""
        check_topology_name(name)
        with cluster_client(zk, zk_root) as client:
            client.deactivate(name)
        typer.echo(f"{name}: deactivate requested")

    @app.command(rich_help_panel="Topologies")
    @cli_errors
    def rebalance(
        name: str,
        mode: Annotated[str, typer.Option(help="thread (N-Storm, live), process (restart affected workers) or stop (Storm)")] = "thread",
        move: Annotated[list[str] | None, typer.Option("--move", help="EXECUTOR=WORKER, e.g. count:3=n2:6701 (repeatable)")] = None,
        random_count: Annotated[int, typer.Option("--random", help="move M random executors, keeping placement even")] = 0,
        wait: Annotated[float | None, typer.Option(help="stop mode: seconds deactivated before the stop (default: the message timeout)")] = None,
        timeout: Annotated[float, typer.Option(help="seconds to wait for the moves to complete")] = 120.0,
        parallelism: Annotated[list[str] | None, typer.Option("--parallelism", "-e", help="COMPONENT=N: change a component's executors, live in thread mode (repeatable; Storm's -e)")] = None,
        workers: Annotated[int | None, typer.Option("--workers", "-n", help="this many workers (more than now: new ones from free slots); alone: spread evenly over them (Storm's -n), with --parallelism: for the new executors")] = None,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Move executors between workers, or change a component's parallelism; by default live,
        as threads, without stopping anything. With no option (or only --workers N), spread the
        executors evenly over the workers (over N), as Storm's rebalance does."""
        from nstorm.client import check_rebalance_options
        from nstorm.errors import UsageError
        from nstorm.rescale import parse_parallelism

        check_topology_name(name)
        changes = parse_parallelism(parallelism or [])
        if not math.isfinite(timeout) or timeout < 0:
            msg = f"--timeout must be a finite number of seconds >= 0, got {timeout}"
            raise UsageError(msg)
        check_rebalance_options(move or [], random_count, changes, workers)  # before connecting
        if changes:
            with cluster_client(zk, zk_root) as client:
                result = client.rebalance(name, mode=mode, wait_secs=wait, parallelism=changes, workers=workers)
                typer.echo(f"{name}: plan v{result['version']}, {mode} mode: "
                           + ", ".join(f"{c} -> {n} executors" for c, n in changes.items()))
                done = client.wait_migrations(name, result["records"], timeout=timeout)
            for record in sorted(done, key=lambda r: r.executor):
                took = float(record.completed_at or 0) - record.requested_at
                typer.echo(f"  {record.executor}: {record.source} -> {record.target} executors in {took:.2f}s"
                           + (f" (longest stall {record.stall_secs:.3f}s)" if record.stall_secs is not None else ""))
            return
        moves = []
        for item in move or []:
            executor, sep, worker = item.partition("=")
            if not sep or ":" not in executor or ":" not in worker:
                msg = f"malformed --move {item!r}: expected EXECUTOR=WORKER, e.g. count:3=n2:6701"
                raise UsageError(msg)
            moves.append((executor.strip(), worker.strip()))
        with cluster_client(zk, zk_root) as client:
            result = client.rebalance(name, mode=mode, moves=moves, random_count=random_count, wait_secs=wait,
                                      workers=workers)
            if not result["moves"]:
                released = result.get("released")
                typer.echo(f"{name}: plan v{result['version']}: "
                           + (f"released {', '.join(released)} (only ackers there)" if released
                              else "already even over its workers, nothing moved"))
                return
            typer.echo(f"{name}: plan v{result['version']}, {mode} mode: "
                       + ", ".join(f"{e} -> {w}" for e, w in result["moves"]))
            done = client.wait_migrations(name, result["records"], timeout=timeout)
        for record in sorted(done, key=lambda r: r.executor):
            took = float(record.completed_at or 0) - record.requested_at
            typer.echo(f"  {record.executor}: {record.source} -> {record.target} in {took:.2f}s"
                       + (f" (stall {record.stall_secs:.3f}s)" if record.stall_secs is not None else ""))

    @app.command(rich_help_panel="Topologies")
    @cli_errors
    def kill(
        name: str,
        wait: Annotated[float, typer.Option(help="seconds to stay deactivated before the kill (Storm uses the message timeout)")] = 0.0,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Deactivate a topology, wait, then end its workers and remove it."""
        from nstorm.errors import ClusterError, UsageError

        check_topology_name(name)
        if not math.isfinite(wait) or wait < 0:  # before connecting: exit 2 whether ZooKeeper is up or not
            msg = f"--wait must be a finite number of seconds >= 0, got {wait}"
            raise UsageError(msg)
        with cluster_client(zk, zk_root) as client:
            client.kill(name, wait)
            if not client.wait_removed(name, wait + 30):
                msg = f"{name}: kill requested, but it is still there after {wait + 30:.0f}s (is nimbus running?)"
                raise ClusterError(msg)
        typer.echo(f"{name}: killed")
