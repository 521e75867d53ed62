"""The ``nstorm`` command line (typer), one module per group of commands."""
