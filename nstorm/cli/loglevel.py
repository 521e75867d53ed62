"""``nstorm set-log-level NAME``: a running topology's log levels, set and reset live (Storm's
``set_log_level``; nstorm.loglevels)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from nstorm.cli.common import ZkOption, ZkRootOption, cli_errors, cluster_client, print_json
from nstorm.topology import check_topology_name


def describe(levels: dict[str, dict[str, Any]], now: float) -> list[str]:
    """One line a logger: its level, and for how long."""
    if not levels:
        return ["no log level set (every logger has its own)"]
    return [f"{name}={s['level']}" + (f" for {max(0.0, s['until'] - now):.0f}s more" if s.get("until") else " until reset")
            for name, s in sorted(levels.items())]


def register(app: typer.Typer) -> None:
    """Add ``set-log-level`` to the root app."""

    @app.command("set-log-level", rich_help_panel="Topologies")
    @cli_errors
    def set_log_level(
        name: str,
        level: Annotated[list[str] | None, typer.Option(
            "--level", "-l", help="LOGGER=LEVEL[:TIMEOUT]: set LOGGER (ROOT: the root logger) to LEVEL (DEBUG, "
                                  "INFO, WARN, ERROR, ...) for TIMEOUT seconds (none or 0: until reset)")] = None,
        reset: Annotated[list[str] | None, typer.Option(
            "--reset", "-r", help="LOGGER: give it its own level back")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Set or reset log levels in a running topology's workers, live: no restart (Storm's
        set_log_level). With no -l or -r, print the levels set."""
        from nstorm.loglevels import check_logger, parse_setting

        check_topology_name(name)
        try:  # before connecting: exit 2 whether ZooKeeper is up or not
            levels = {logger: (lvl, secs) for logger, lvl, secs in (parse_setting(item) for item in level or [])}
            for logger in reset or []:
                check_logger(logger)
        except ValueError as exc:
            from nstorm.errors import UsageError

            raise UsageError(str(exc)) from None
        with cluster_client(zk, zk_root) as client:
            current = client.set_log_levels(name, levels, reset or []) if levels or reset else client.log_levels(name)
        if as_json:
            print_json(current)
            return
        for line in describe(current, time.time()):
            typer.echo(f"{name}: {line}")
