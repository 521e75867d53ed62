"""``nstorm keys generate``: the CurveZMQ keys of a cluster (see :mod:`nstorm.curvekeys`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nstorm.cli.common import cli_errors

app = typer.Typer(no_args_is_help=True, help="CurveZMQ keys that encrypt and authenticate traffic between workers.")


@app.command()
@cli_errors
def generate(
    directory: Annotated[
        str | None,
        typer.Option("--dir", envvar="NSTORM_KEYS_DIR", help="keys directory (default: $NSTORM_HOME/keys)"),
    ] = None,
    force: Annotated[bool, typer.Option(help="replace existing keys (every node then needs the new ones)")] = False,
) -> None:
    """Write the cluster's server keypair and a client keypair (files 0600, directory 0700)."""
    from nstorm.curvekeys import curve_keys_dir, generate_keys
    from nstorm.errors import UsageError

    if directory is not None and not directory.strip():
        msg = "--dir is empty: name the keys directory (or leave --dir out for $NSTORM_HOME/keys)"
        raise UsageError(msg)
    target = Path(directory).expanduser().resolve() if directory else curve_keys_dir()
    for path in generate_keys(target, force=force):
        typer.echo(str(path))
    typer.echo(f"copy {target} to every node (keep it private), then run every supervisor with "
               f"-c nstorm.transport.curve=true", err=True)
