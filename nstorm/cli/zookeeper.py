"""``nstorm zookeeper start|stop|status``: the embedded ZooKeeper of ``$NSTORM_HOME``."""

from __future__ import annotations

from typing import Annotated

import typer

from nstorm.cli.common import cli_errors, print_json

app = typer.Typer(no_args_is_help=True, help="Run the embedded ZooKeeper (from pyspark's jars) in the background.")


@app.command()
@cli_errors
def start(port: Annotated[int, typer.Option(help="client port; 0 picks a free one")] = 0) -> None:
    """Start ZooKeeper in the background (idempotent); prints its address."""
    from nstorm.zookeeper import start_background

    typer.echo(start_background(port=port))


@app.command()
@cli_errors
def stop() -> None:
    """Stop the background ZooKeeper."""
    from nstorm.zookeeper import stop_background

    typer.echo("stopped" if stop_background() else "not running")


@app.command()
@cli_errors
def status(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Is the background ZooKeeper running, and where."""
    from nstorm.zookeeper import background_status

    info = background_status()
    if as_json:
        print_json(info)
    elif info["running"]:
        typer.echo(f"running on {info['address']} (pid {info['pid']})")
    else:
        typer.echo("not running")
        raise typer.Exit(1)
