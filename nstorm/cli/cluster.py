"""``nstorm cluster up|down|status``: a background cluster on this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from nstorm.cli.common import (
    ConfOption,
    ZkRootOption,
    cli_errors,
    exit_with_error,
    port_base_of,
    print_json,
    zk_root_of,
)

if TYPE_CHECKING:
    from nstorm.localcluster import LocalCluster

app = typer.Typer(no_args_is_help=True, help="A background cluster on this machine: ZooKeeper, Nimbus, supervisors.")


@app.command()
@cli_errors
def up(
    supervisors: Annotated[int, typer.Option(min=1, help="supervisors (nodes) to start")] = 2,
    slots: Annotated[int, typer.Option(min=1, help="worker slots per supervisor")] = 4,
    port_base: Annotated[int | None, typer.Option(
        min=0, max=65535, help="first worker port (0: free ports; default: supervisor.slots.port.base, 6700)")] = None,
    netns: Annotated[bool, typer.Option(help="each supervisor in its own network namespace (10.77.0.x)")] = False,
    link_rate: Annotated[str | None, typer.Option(help="with --netns: limit each node's link, e.g. 20mbit")] = None,
    ui_port: Annotated[int, typer.Option(min=0, max=65535, help="the web UI's port (a free one if taken; 0: no UI)")] = 8080,
    zk_root: ZkRootOption = None,
    conf: ConfOption = None,
) -> None:
    """Start ZooKeeper, Nimbus and supervisors in the background (pids under $NSTORM_HOME/run)."""
    from nstorm.background import background_status, start_background
    from nstorm.config import check_security_conf, parse_conf_options
    from nstorm.localcluster import LocalCluster, check_port_layout, cluster_running, home_cluster
    from nstorm.signals import ignoring_signals, interrupting_signals

    overrides = parse_conf_options(conf or [])
    check_security_conf(overrides)  # bad credentials or missing keys: exit 2 before anything starts
    zk_root = zk_root_of(zk_root, overrides)
    port_base = port_base_of(port_base, overrides)
    from nstorm import netns as nets
    from nstorm.errors import UsageError

    if link_rate and not netns:
        msg = "--link-rate needs --netns"
        raise UsageError(msg)
    if link_rate:
        nets.check_rate(link_rate)  # before any namespace is made
    check_port_layout(supervisors, slots, port_base)
    with home_cluster("cluster up"):  # not while `nstorm local` runs here: they would share the supervisors' stores
        if cluster_running():
            exit_with_error("a cluster is already running here: 'nstorm cluster down' first", 1)
        zookeeper_before = background_status()["pid"] is not None  # `nstorm zookeeper start`'s: left running
        nodes: list = []
        hosts = None
        cluster: LocalCluster | None = None
        try:
            with interrupting_signals():  # SIGTERM, SIGHUP: the same clean-up as Ctrl-C
                if netns:
                    if nets.available():
                        nodes = nets.create(supervisors, link_rate)
                    else:
                        typer.echo("--netns needs root and iproute2: falling back to 127.0.0.x addresses", err=True)
                        hosts = [f"127.0.0.{10 + i}" for i in range(1, supervisors + 1)]
                address = start_background(host=nets.host_address() if nodes else "127.0.0.1")
                cluster = LocalCluster(supervisors, slots, zk_address=address, root=zk_root, conf=overrides,
                                       detach=True, port_base=port_base, hosts=hosts, netns=nodes, ui_port=ui_port)
                cluster.start()  # records the daemons (cluster.json) as soon as they are spawned
                cluster.save_state()
        except BaseException:
            with ignoring_signals():  # what started is stopped, whatever comes next
                _undo_up(cluster, stop_zookeeper=not zookeeper_before, netns=netns)
            raise
    assert cluster is not None  # started
    where = f" in namespaces {', '.join(n.namespace + ' ' + n.address for n in nodes)}" if nodes else ""
    typer.echo(f"cluster up: ZooKeeper {address}, nimbus, {supervisors} supervisor(s) x {slots} slots{where}")
    if cluster.ui_url:
        taken = f" (port {ui_port} is taken)" if cluster.ui_port_taken else ""
        typer.echo(f"UI: {cluster.ui_url}{taken}")


def _undo_up(cluster: LocalCluster | None, stop_zookeeper: bool, netns: bool) -> None:
    """After a failed or interrupted ``cluster up``: stop its daemons, the ZooKeeper it started and
    its namespaces, and forget the record, so nothing runs that ``cluster down`` would not find."""
    from nstorm import netns as nets
    from nstorm.background import stop_background
    from nstorm.localcluster import forget_cluster

    if cluster is not None:
        cluster.stop()  # start() stopped what it started; this is idempotent
    forget_cluster()
    if stop_zookeeper:
        stop_background()
    if netns and nets.available():
        nets.destroy()  # also the namespaces of a create() cut short


@app.command()
@cli_errors
def down() -> None:
    """Stop the background cluster: supervisors (and their workers), Nimbus, ZooKeeper."""
    from nstorm.localcluster import cluster_down

    stopped = cluster_down()
    typer.echo({"cluster": "cluster down", "zookeeper": "no cluster recorded here; stopped its ZooKeeper"}.get(
        stopped or "", "no cluster recorded here"))


@app.command()
@cli_errors
def status(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Daemons of the background cluster and the supervisors registered."""
    from nstorm.localcluster import cluster_status

    info = cluster_status()
    if as_json:
        print_json(info)
        return
    if not info["daemons"]:
        typer.echo("no cluster recorded here")
        raise typer.Exit(1)
    for name, d in info["daemons"].items():
        typer.echo(f"{name}: pid {d['pid']} {'alive' if d['alive'] else 'dead'}")
    for sup in info.get("supervisors", []):
        typer.echo(f"supervisor registered: {sup}")
    if info.get("ui"):
        typer.echo(f"UI: {info['ui']}")
