"""``nstorm local FILE``: the one-command demo on an embedded cluster of real processes."""

from __future__ import annotations

import contextlib
import math
import random
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from nstorm.cli.common import ConfOption, cli_errors, err_console
from nstorm.signals import ignoring_signals, interrupt_exit_code, interrupting_signals
from nstorm.window.status import describe_windows


class _Mover:
    """Moves a random executor to another worker every ``every`` seconds (thread mode), for the demo."""

    def __init__(self, client: Any, name: str, every: float) -> None:
        self.client = client
        self.name = name
        self.every = every
        self.next_at = time.monotonic() + every
        self.pending: dict[str, str] = {}  # record id -> description
        self.lines: list[str] = []
        self.rng = random.Random(7)

    def step(self, elapsed: float) -> None:
        if self.pending:
            done = {r.id: r for r in self.client.migrations(self.name) if r.id in self.pending and r.completed_at}
            for rid, record in done.items():
                took = float(record.completed_at) - record.requested_at
                self.lines.append(f"{elapsed:5.0f}s  moved {self.pending.pop(rid)} live in {took:.2f}s "
                                  f"(executor stalled {record.stall_secs or 0:.3f}s; no worker restarted)")
        if not self.every or time.monotonic() < self.next_at or self.pending:
            return
        self.next_at = time.monotonic() + self.every
        plan = self.client.plan(self.name)
        if plan is None:
            return
        workers = sorted(plan.workers)
        movable = sorted(e for e in plan.executors if not e.startswith("__"))
        if len(workers) < 2 or not movable:
            return
        stateful = [e for e in movable if e.startswith("count:")]
        executor = self.rng.choice(stateful or movable)
        source = plan.executors[executor]
        target = self.rng.choice([w for w in workers if w != source])
        try:
            result = self.client.rebalance(self.name, moves=[(executor, target)])
        except Exception as exc:  # noqa: BLE001 - the demo keeps running
            self.lines.append(f"{elapsed:5.0f}s  move of {executor} refused: {exc}")
            return
        for rid in result["records"].values():
            self.pending[rid] = f"{executor} {source} -> {target}"


class _Rates:
    """Per-component tuples/s from successive status snapshots."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[float, int, int]] = {}
        self.moves: list[str] = []
        self.ui_line = ""  # where the UI is: shown while the demo runs

    def table(self, status: dict[str, Any], elapsed: float) -> Table:
        now = time.monotonic()
        table = Table(title=f"{status['name']} {status['status']}  plan v{status['plan_version']}  {elapsed:5.0f}s",
                      title_justify="left")
        for col in ("component", "n", "emitted/s", "executed/s", "emitted", "executed", "failed"):
            table.add_column(col, justify="left" if col == "component" else "right", no_wrap=True)
        for name, c in status["components"].items():
            t0, e0, x0 = self.last.get(name, (now, c["emitted"], c["executed"]))
            dt = max(now - t0, 1e-9)
            rate_e = (c["emitted"] - e0) / dt if now > t0 else 0.0
            rate_x = (c["executed"] - x0) / dt if now > t0 else 0.0
            self.last[name] = (now, c["emitted"], c["executed"])
            table.add_row(name, str(c["parallelism"]), f"{rate_e:,.0f}", f"{rate_x:,.0f}", f"{c['emitted']:,}",
                          f"{c['executed']:,}", str(c["failed"]))
        s = status["spouts"]
        table.caption = (f"spout tuples: acked {s['acked']:,}  pending {s['pending']:,}  failed {s['failed']:,}  "
                         f"replayed {s['replayed']:,}")
        table.caption_justify = "left"
        return table

    def view(self, status: dict[str, Any], elapsed: float) -> Group:
        """The table, then the workers and the last moves as lines of their own: a table's caption
        wraps at the table's width, these take the terminal's."""
        workers = "workers: " + ", ".join(f"{w['id']} (pid {w['pid']})" for w in status["workers"])
        windows = [Text(f"{name} windows: {describe_windows(c['window'])}")
                   for name, c in status["components"].items() if c.get("window")]
        lines = [Text(self.ui_line)] if self.ui_line else []
        return Group(self.table(status, elapsed), Text(workers), *windows, *lines,
                     *(Text(line) for line in self.moves[-6:]))


def _teardown(cluster: Any, interrupted: bool) -> None:
    """Stop the cluster, whatever the terminal does: with it gone (SIGHUP), every line written
    fails, and the cluster must stop all the same. Says "cluster stopped" only when something
    had started (not when, say, Java is missing)."""
    with contextlib.suppress(OSError):
        if interrupted:
            err_console.print("interrupted: tearing down")
    try:
        with err_console.status("stopping the cluster..."):
            cluster.stop()
    except OSError:
        cluster.stop()  # idempotent: what the first call did not end
    if cluster.had_processes:
        with contextlib.suppress(OSError):
            err_console.print("cluster stopped")


def register(app: typer.Typer) -> None:
    @app.command(rich_help_panel="Clusters")
    @cli_errors
    def local(
        file: Annotated[Path, typer.Argument(help="topology file defining `topology` or `make_topology(conf)`")],
        duration: Annotated[float, typer.Option(help="seconds to run (0: until Ctrl-C)")] = 0.0,
        conf: ConfOption = None,
        supervisors: Annotated[int, typer.Option(min=1, max=64, help="supervisors (nodes) to start")] = 1,
        slots: Annotated[int | None, typer.Option(min=1, max=1024, help="worker slots per supervisor (default: enough)")] = None,
        migrate_every: Annotated[
            float, typer.Option(help="move a random executor live (thread mode) every S seconds; 0: never")
        ] = 10.0,
        ui_port: Annotated[
            int, typer.Option(min=0, max=65535, help="the web UI's port (a free one if taken; 0: no UI)")
        ] = 8080,
    ) -> None:
        """Run a topology on an embedded cluster (ZooKeeper, Nimbus, supervisors), print progress, tear down."""
        from nstorm.client import ClusterClient
        from nstorm.config import (
            check_topology_conf,
            check_workers,
            merge_conf,
            parse_conf_options,
            security_conf,
        )
        from nstorm.constraints import check_submit as check_constraints
        from nstorm.errors import ClusterError, UsageError
        from nstorm.home import home_dir
        from nstorm.loader import load_topology
        from nstorm.localcluster import LocalCluster, cluster_running, home_cluster
        from nstorm.zkauth import AUTH_KEY

        overrides = parse_conf_options(conf or [])
        topology = load_topology(file, overrides)  # bad input: exit 2 before anything starts
        check_constraints(topology.definition, merge_conf(topology.conf, overrides))  # latency constraints too
        check_topology_conf(merge_conf(topology.conf, overrides))  # and the kinds of the known settings
        workers = check_workers(overrides.get("topology.workers", topology.workers))
        for option, value in (("--duration", duration), ("--migrate-every", migrate_every)):
            if not math.isfinite(value) or value < 0:
                msg = f"{option} must be a finite number of seconds >= 0, got {value}"
                raise UsageError(msg)
        slots = slots or max(1, -(-workers // supervisors))
        # ZooKeeper ACLs and CurveZMQ are the daemons' settings (checked here: exit 2 on bad keys)
        cluster = LocalCluster(supervisors=supervisors, slots=slots, conf=security_conf(overrides), ui_port=ui_port)
        stopped_by: int | None = None  # the exit code after Ctrl-C, SIGTERM or SIGHUP
        # One cluster a home (they would share the supervisors' stores); the signals tear it down.
        with home_cluster("local"), interrupting_signals():
            if cluster_running():
                msg = (f"a `nstorm cluster up` cluster runs in this NSTORM_HOME ({home_dir()}): "
                       "`nstorm cluster down` first, or set NSTORM_HOME to another directory")
                raise ClusterError(msg)
            started = time.monotonic()
            name = topology.name
            try:
                with err_console.status("starting ZooKeeper, nimbus and supervisors..."):
                    cluster.start()
                err_console.print(f"cluster up in {time.monotonic() - started:.1f}s: ZooKeeper {cluster.address}, "
                                  f"{supervisors} supervisor(s) x {slots} slots")
                ui_line = ""
                if cluster.ui_url:
                    taken = f" (port {ui_port} is taken)" if cluster.ui_port_taken else ""
                    ui_line = f"UI: {cluster.ui_url}topology/{name}{taken}"
                    err_console.print(ui_line, highlight=False, soft_wrap=True)
                with ClusterClient(cluster.address, auth=overrides.get(AUTH_KEY)) as client:
                    info = client.submit(file, conf=overrides)
                    name = info["name"]
                    with err_console.status(f"starting {info['executors']} executors on {info['workers']} workers..."):
                        client.wait_running(name, timeout=60)
                    rates = _Rates()
                    rates.ui_line = ui_line
                    mover = _Mover(client, name, migrate_every)
                    rates.moves = mover.lines
                    t0 = time.monotonic()
                    status = client.status(name)
                    with Live(rates.view(status, 0), console=err_console, refresh_per_second=2) as live:
                        while not duration or time.monotonic() - t0 < duration:
                            time.sleep(1.0)
                            mover.step(time.monotonic() - t0)
                            status = client.status(name)
                            live.update(rates.view(status, time.monotonic() - t0))
                    s = status["spouts"]
                    moved = sum(1 for m in status["migrations"] if m.get("completed_at"))
                    err_console.print(f"done: {s['acked']:,} spout tuples acked, {s['failed']:,} failed, "
                                      f"{moved} live migrations")
            except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP (the terminal closed)
                stopped_by = interrupt_exit_code(exc)
            finally:
                with ignoring_signals():  # a second Ctrl-C must not cut the teardown short
                    _teardown(cluster, stopped_by is not None)
        if stopped_by is not None:
            raise typer.Exit(stopped_by)
