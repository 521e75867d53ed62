"""The root ``nstorm`` app: mounts every command group."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer.exceptions import TyperException

from nstorm import __version__
from nstorm.cli import (
    cluster,
    daemons,
    events,
    keys,
    local,
    loglevel,
    topology,
    traffic,
    workerlogs,
    zookeeper,
)
from nstorm.cli.common import err_console

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
loglevel.register(app)
workerlogs.register(app)
events.register(app)
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
    """The ``nstorm`` console script: a usage error (an unknown option, a missing or malformed
    argument) is one line on stderr and exit code 2, as every other bad input."""
    try:
        code = app(standalone_mode=False)
    except TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError" or not isinstance(exc.exit_code, int):
            from typer import rich_utils

            rich_utils.rich_format_error(exc)  # type: ignore[arg-type]  # the help, as typer shows it
            sys.exit(exc.exit_code)
        command = getattr(getattr(exc, "ctx", None), "command_path", "nstorm")
        message = exc.format_message().strip().splitlines()[0]
        err_console.print(f"[red]error:[/red] {message} (see '{command} --help')", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
