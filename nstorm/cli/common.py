"""What every command shares: options, error handling, output helpers."""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from kazoo.exceptions import ConnectionLoss, NoAuthError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from rich.console import Console
from rich.markup import escape

from nstorm.errors import NStormError

__all__ = [
    "ConfOption",
    "ZkOption",
    "ZkRootOption",
    "cli_errors",
    "err_console",
    "exit_with_error",
    "print_json",
]

err_console = Console(stderr=True)

ZkOption = Annotated[
    str | None,
    typer.Option("--zk", envvar="NSTORM_ZK", help="ZooKeeper HOST:PORT [default: the embedded one of $NSTORM_HOME]"),
]
ZkRootOption = Annotated[
    str, typer.Option("--zk-root", envvar="NSTORM_ZK_ROOT", help="ZooKeeper root node of the cluster")
]
ConfOption = Annotated[
    list[str] | None,
    typer.Option("-c", "--conf", help="configuration override key=value (value parsed as JSON where it parses)"),
]

F = TypeVar("F", bound=Callable[..., Any])


def exit_with_error(message: str, code: int = 1) -> None:
    """One red line on stderr, then exit with ``code`` (2 for bad input). The message is not
    markup (a value in brackets stays as it is) and its line breaks become spaces."""
    line = " ".join(str(message).split("\n")).strip()
    err_console.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def check_daemon_id(option: str, value: str, empty_ok: bool = False) -> None:
    """A daemon's id names its log file and its ZooKeeper node: letters, digits, '.', '_', '-'.

    :raises UsageError: one line naming the option.
    """
    from nstorm.errors import UsageError

    if not value and empty_ok:
        return
    if not re.fullmatch(r"[A-Za-z0-9._-]+", value) or value in (".", ".."):
        msg = f"{option} {value!r}: use letters, digits, '.', '_' and '-'"
        raise UsageError(msg)


def quiet_kazoo() -> None:
    """kazoo logs every failed connection attempt as a warning; a CLI command that configured no
    log would print a dozen such lines before its own one-line error (daemons keep them: they
    configure their logs)."""
    if not logging.getLogger().handlers:
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)


def cli_errors(fn: F) -> F:
    """Turn known errors into one-line messages; let typer/click exceptions pass."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except NStormError as exc:
            exit_with_error(str(exc), exc.exit_code)
        except NoAuthError:  # backstop: ZkPaths.ensure normally turns it into an AuthError first
            exit_with_error("ZooKeeper denied access: check NSTORM_ZK_AUTH / nstorm.zookeeper.auth", 2)
        except (ConnectionLoss, SessionExpiredError, KazooTimeoutError) as exc:
            exit_with_error(f"lost ZooKeeper during the command ({type(exc).__name__}): try again", 1)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP where a command turns them into one
            from nstorm.signals import interrupt_exit_code

            err_console.print("interrupted")
            raise typer.Exit(interrupt_exit_code(exc)) from None

    return wrapper  # type: ignore[return-value]


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
