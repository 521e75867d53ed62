"""``nstorm zookeeper start|stop|status``: the embedded ZooKeeper of ``$NSTORM_HOME``."""

from __future__ import annotations

from typing import Annotated

import typer

from nstorm.cli.common import cli_errors, print_json

app = typer.Typer(no_args_is_help=True, help="Run the embedded ZooKeeper (from pyspark's jars) in the background.")


@app.command()
@cli_errors
def start(port: Annotated[int, typer.Option(min=0, max=65535, help="client port; 0 picks a free one")] = 0) -> None:
    """Start ZooKeeper in the background (idempotent); prints its address."""
    from nstorm.background import start_background

    typer.echo(start_background(port=port))


@app.command()
@cli_errors
def stop() -> None:
    """Stop the background ZooKeeper."""
    from nstorm.background import stop_background

    typer.echo("stopped" if stop_background() else "not running")


@app.command()
@cli_errors
def status(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Is the background ZooKeeper running, and where."""
    from nstorm.background import background_status

    info = background_status()
    if as_json:
        print_json(info)
    elif info["running"]:
        typer.echo(f"running on {info['address']} (pid {info['pid']})")
    else:
        typer.echo("not running")
        raise typer.Exit(1)


@app.command()
@cli_errors
def run(
    port: Annotated[int, typer.Option(min=1, max=65535, help="client port")] = 2181,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
) -> None:
    """Run ZooKeeper in the foreground until Ctrl-C or SIGTERM (for containers).

    Exits 0 when asked to stop, 1 when the JVM died on its own: a container's restart policy
    (``on-failure``) then starts it again.
    """
    import signal
    import threading

    from nstorm.errors import ZooKeeperError
    from nstorm.home import home_dir, logs_dir
    from nstorm.signals import relay_signals
    from nstorm.zookeeper import EmbeddedZooKeeper

    zk = EmbeddedZooKeeper(home_dir() / "zookeeper", port, logs_dir() / "zookeeper.log", host=host)
    stop = threading.Event()
    relay_signals({signal.SIGTERM: stop.set})
    zk.start()
    typer.echo(f"ZooKeeper on {zk.address} (pid {zk.pid})", err=True)
    died: int | None = None
    try:
        while not stop.wait(1.0):
            died = zk.exit_code
            if died is not None:
                break
    except KeyboardInterrupt:
        pass
    finally:
        zk.stop()
    if died is not None:
        msg = f"ZooKeeper exited on its own with code {died}; see {zk.log_file}"
        raise ZooKeeperError(msg)


@app.command()
@cli_errors
def ping(zk: Annotated[str, typer.Option("--zk", help="HOST:PORT")] = "127.0.0.1:2181") -> None:
    """Exit 0 if the ZooKeeper at --zk answers (a health check)."""
    from nstorm.errors import UsageError, ZooKeeperError
    from nstorm.zookeeper import ruok, split_address

    try:
        split_address(zk)
    except ZooKeeperError as exc:  # bad input, not a ZooKeeper that does not answer
        raise UsageError(str(exc)) from None
    if not ruok(zk):
        typer.echo(f"ZooKeeper at {zk} does not answer", err=True)
        raise typer.Exit(1)
    typer.echo("imok")
