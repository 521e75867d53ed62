"""What every command shares: options, error handling, output helpers."""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
from collections.abc import Callable, Mapping
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
    "zk_root_of",
    "zk_servers_of",
]

err_console = Console(stderr=True)

ZkOption = Annotated[
    str | None,
    typer.Option("--zk", envvar="NSTORM_ZK", help="ZooKeeper HOST:PORT (default: -c nstorm.zookeeper.servers where "
                 "the command takes -c, else the embedded one of $NSTORM_HOME)"),
]
ZkRootOption = Annotated[
    str | None, typer.Option("--zk-root", envvar="NSTORM_ZK_ROOT", help="ZooKeeper root node of the cluster "
                             "(default: -c nstorm.zookeeper.root where the command takes -c, else /nstorm)")
]
ConfOption = Annotated[
    list[str] | None,
    typer.Option("-c", "--conf", help="configuration override key=value (value parsed as JSON where it parses)"),
]

F = TypeVar("F", bound=Callable[..., Any])


def zk_root_of(option: str | None, conf: Mapping[str, Any] | None = None) -> str:
    """The cluster's root node: ``--zk-root`` (or ``$NSTORM_ZK_ROOT``), else ``-c
    nstorm.zookeeper.root``, else its default; checked before anything connects.

    :raises UsageError: one line naming the root.
    """
    from nstorm.config import merge_conf
    from nstorm.zkschema import check_zk_root

    return check_zk_root(option if option is not None else merge_conf(conf)["nstorm.zookeeper.root"])


def zk_servers_of(option: str | None, conf: Mapping[str, Any] | None = None) -> str | None:
    """``--zk`` (or ``$NSTORM_ZK``), else ``-c nstorm.zookeeper.servers``; None: the embedded one.

    :raises ConfigError: a setting that is not a ``host:port[,host:port]`` string.
    """
    from nstorm.errors import ConfigError

    if option:
        return option
    servers = (conf or {}).get("nstorm.zookeeper.servers")
    if servers is not None and not isinstance(servers, str):
        msg = f"-c nstorm.zookeeper.servers={servers!r}: expected HOST:PORT[,HOST:PORT...]"
        raise ConfigError(msg)
    return servers or None


def port_base_of(option: int | None, conf: Mapping[str, Any] | None = None) -> int:
    """The first worker port: ``--port-base``, else ``-c supervisor.slots.port.base`` (6700; 0:
    free ports).

    :raises ConfigError: one line naming the setting.
    """
    from nstorm.config import merge_conf
    from nstorm.errors import ConfigError

    if option is not None:
        return option
    value = merge_conf(conf)["supervisor.slots.port.base"]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        msg = f"-c supervisor.slots.port.base={value!r}: expected a port number from 0 to 65535"
        raise ConfigError(msg)
    return value


def cluster_client(zk: str | None, zk_root: str | None, conf: Mapping[str, Any] | None = None,
                   read_only: bool = False) -> Any:
    """A client of the cluster the options (and ``-c`` settings, where a command takes them) name
    (``read_only``: one that writes nothing to ZooKeeper, for a health check)."""
    from nstorm.client import ClusterClient

    conf = conf or {}
    root = zk_root_of(zk_root, conf)
    quiet_kazoo()
    return ClusterClient(zk_servers_of(zk, conf), root, auth=conf.get("nstorm.zookeeper.auth"),  # None: $NSTORM_ZK_AUTH
                         read_only=read_only)


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
