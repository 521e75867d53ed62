"""``nstorm nimbus`` and ``nstorm supervisor``: the daemons in the foreground."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Annotated, Any

import typer

from nstorm.cli.common import (
    ConfOption,
    ZkOption,
    ZkRootOption,
    check_daemon_id,
    cli_errors,
    cluster_client,
    port_base_of,
    zk_root_of,
    zk_servers_of,
)


def _ping(zk: str | None, zk_root: str | None, overrides: dict[str, Any], registered: Callable[[Any], bool],
          what: str) -> None:
    """A health check of this host's daemon: exit 0 if ZooKeeper holds its registration (an
    ephemeral node, gone with its session), else 1 with one line; nothing is started, and nothing
    is written (a wrong ``--zk-root`` creates no tree)."""
    with cluster_client(zk, zk_root, overrides, read_only=True) as client:
        if registered(client):
            raise typer.Exit(0)
    typer.echo(f"{what} is not registered in ZooKeeper", err=True)
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    @app.command(rich_help_panel="Daemons")
    @cli_errors
    def nimbus(
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
        conf: ConfOption = None,
        nimbus_id: Annotated[str, typer.Option("--id", help="names the log (nimbus-ID.log) when several run (HA)")] = "",
        ping: Annotated[bool, typer.Option("--ping", help="only check that a Nimbus of this host is registered, leading "
                                                          "or standing by (a health check: exit 0 or 1)")] = False,
    ) -> None:
        """Run Nimbus in the foreground (log: $NSTORM_HOME/logs/nimbus.log). Several may run: one leads."""
        from nimbus.daemon import Nimbus, check_nimbus_conf
        from nstorm.config import check_security_conf, merge_conf, parse_conf_options
        from nstorm.home import logs_dir
        from nstorm.logs import setup_daemon_logging
        from nstorm.zkschema import resolve_zk_address

        check_daemon_id("--id", nimbus_id, empty_ok=True)
        overrides = parse_conf_options(conf or [])
        if ping:
            host = socket.gethostname()  # a Nimbus registers as host:pid (nimbus.leader)
            _ping(zk, zk_root, overrides, lambda c: any(n.rpartition(":")[0] == host for n in c.cluster.nimbuses()),
                  f"no Nimbus of host {host!r}")
        zk_root = zk_root_of(zk_root, overrides)
        check_security_conf(overrides)
        check_nimbus_conf(merge_conf(overrides))  # exit 2 before anything starts
        address = resolve_zk_address(zk_servers_of(zk, overrides))
        name = f"nimbus-{nimbus_id}" if nimbus_id else "nimbus"
        typer.echo(f"nimbus on {address}{zk_root}; log {logs_dir() / (name + '.log')}", err=True)
        setup_daemon_logging(name, name)
        daemon = Nimbus(address, zk_root, overrides)
        daemon.install_signal_handlers()
        raise typer.Exit(daemon.run())

    @app.command(rich_help_panel="Daemons")
    @cli_errors
    def supervisor(
        node_id: Annotated[str, typer.Option(help="node id (default: host name)")] = socket.gethostname(),
        host: Annotated[str, typer.Option(help="address workers bind and peers reach")] = "127.0.0.1",
        slots: Annotated[int, typer.Option(min=1, help="worker slots")] = 4,
        port_base: Annotated[int | None, typer.Option(
            min=0, max=65535, help="first worker port (0: free ports; default: supervisor.slots.port.base, 6700)")] = None,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
        conf: ConfOption = None,
        ping: Annotated[bool, typer.Option("--ping", help="only check that supervisor --node-id is registered "
                                                          "(a health check: exit 0 or 1)")] = False,
    ) -> None:
        """Run a supervisor in the foreground (log: $NSTORM_HOME/logs/supervisor-ID.log)."""
        from nstorm.config import check_security_conf, merge_conf, parse_conf_options
        from nstorm.errors import UsageError
        from nstorm.home import logs_dir
        from nstorm.logs import setup_daemon_logging
        from nstorm.zkschema import resolve_zk_address
        from supervisor.daemon import Supervisor, check_supervisor_conf, pick_slots

        check_daemon_id("--node-id", node_id)
        overrides = parse_conf_options(conf or [])
        if ping:
            _ping(zk, zk_root, overrides, lambda c: node_id in c.cluster.supervisors(), f"supervisor {node_id!r}")
        zk_root = zk_root_of(zk_root, overrides)
        check_security_conf(overrides)  # exit 2 before anything starts
        check_supervisor_conf(merge_conf(overrides))
        port_base = port_base_of(port_base, overrides)
        if port_base and port_base + 1000 + slots - 1 > 65535:  # each slot's control port is data port + 1000
            msg = f"first worker port {port_base} leaves no room for {slots} slots' control ports (+1000): use at most {64535 - slots + 1}"
            raise UsageError(msg)
        address = resolve_zk_address(zk_servers_of(zk, overrides))
        typer.echo(f"supervisor {node_id} on {address}{zk_root}; log {logs_dir() / f'supervisor-{node_id}.log'}", err=True)
        setup_daemon_logging(f"supervisor-{node_id}", f"supervisor {node_id}")
        daemon = Supervisor(node_id, host, pick_slots(slots, port_base, host, node_id), address, zk_root, overrides)
        daemon.install_signal_handlers()
        raise typer.Exit(daemon.run())

    @app.command(rich_help_panel="Daemons")
    @cli_errors
    def ui(
        host: Annotated[str | None, typer.Option(
            help="address to listen on (0.0.0.0: every interface; default: nstorm.ui.host, 127.0.0.1)")] = None,
        port: Annotated[int | None, typer.Option(
            min=0, max=65535, help="port (0: a free one; default: nstorm.ui.port, 8080)")] = None,
        ping: Annotated[bool, typer.Option("--ping", help="only check that a UI answers on --host/--port (exit 0 or 1)")] = False,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
        conf: ConfOption = None,
    ) -> None:
        """Run the web UI in the foreground: Storm's REST API (/api/v1), the pages and /metrics
        (log: $NSTORM_HOME/logs/ui.log). Stateless: several may run. -c nstorm.ui.auth=user:password
        (or NSTORM_UI_AUTH) turns on HTTP basic auth."""
        from nstorm.config import check_security_conf, merge_conf, parse_conf_options
        from nstorm.errors import ConfigError

        overrides = parse_conf_options(conf or [])
        settings = merge_conf(overrides)
        host = host or str(settings["nstorm.ui.host"])
        if port is None:
            port = settings["nstorm.ui.port"]
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                msg = f"-c nstorm.ui.port={port!r}: expected a port number from 0 to 65535"
                raise ConfigError(msg)
        if ping:
            from ui.server import ping as probe

            raise typer.Exit(0 if probe(host, port) else 1)
        from nstorm.home import logs_dir
        from nstorm.logs import setup_daemon_logging
        from nstorm.zkschema import resolve_zk_address
        from ui.server import serve

        check_security_conf(overrides)  # malformed credentials: exit 2 before anything starts
        zk_root = zk_root_of(zk_root, overrides)
        address = resolve_zk_address(zk_servers_of(zk, overrides))
        setup_daemon_logging("ui", "ui")

        def announce(url: str) -> None:
            typer.echo(f"nstorm UI on {url} (ZooKeeper {address}{zk_root}); log {logs_dir() / 'ui.log'}", err=True)

        raise typer.Exit(serve(address, zk_root, host, port, settings, announce))

