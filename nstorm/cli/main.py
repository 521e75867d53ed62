"""The root ``nstorm`` app: mounts every command group."""

from __future__ import annotations

from typing import Annotated

import typer

from nstorm import __version__
from nstorm.cli import cluster, daemons, keys, local, topology, traffic, zookeeper

app = typer.Typer(
    name="nstorm",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="nstorm: Storm-style stream processing in Python, with nonstop executor migration.",
)
app.add_typer(cluster.app, name="cluster", rich_help_panel="Clusters")
app.add_typer(zookeeper.app, name="zookeeper", rich_help_panel="Clusters")
app.add_typer(keys.app, name="keys", rich_help_panel="Clusters")
local.register(app)
topology.register(app)
traffic.register(app)
daemons.register(app)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nstorm {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """nstorm: Storm-style stream processing in Python, with nonstop executor migration.

    Data and logs live in $NSTORM_HOME (default ./.nstorm).
    """


def main() -> None:
    app()
