"""``python -m nstorm``: the same as the ``nstorm`` command."""

from nstorm.cli.main import main

main()
