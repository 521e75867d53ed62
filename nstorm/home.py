"""Where nstorm keeps its files: ``$NSTORM_HOME`` (default ``./.nstorm``).

Layout: ``logs/`` (one file per process), ``run/`` (pid files and the
embedded cluster's address), ``zookeeper/`` (embedded data), ``supervisor/<node>/``
(LMDB store and code archives), ``metrics/`` (load records, unless ``nstorm.metrics.dir``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["home_dir", "home_lock", "logs_dir", "metrics_dir", "run_dir", "supervisor_dir", "try_home_lock",
           "zk_address_file"]


def home_dir() -> Path:
    """The nstorm home directory, created if missing.

    :raises ConfigError: if it cannot be (a file there, no permission): one line, exit 2.
    """
    path = Path(os.environ.get("NSTORM_HOME", ".nstorm")).resolve()
    _make(path)
    return path


def _make(path: Path) -> None:
    """Create ``path`` for this user only (0700; an existing directory is left as it is): logs,
    ZooKeeper's snapshots and the supervisors' stores hold topology code and settings that the
    ZooKeeper ACLs keep from other users."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        from nstorm.errors import ConfigError

        msg = f"NSTORM_HOME: cannot use {path} as a directory ({exc.strerror or exc})"
        raise ConfigError(msg) from None


@contextlib.contextmanager
def home_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing): one process of the home at a time."""
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def try_home_lock(path: Path) -> Iterator[bool]:
    """Like :func:`home_lock`, without waiting: yields False, holding nothing, when another process
    holds it (a command that would share the home's files refuses rather than waits).

    The lock goes with this process's open file: children started with ``close_fds`` (the
    default) do not hold it, and it is let go when the process ends, however it ends.
    """
    with open(path, "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _sub(name: str) -> Path:
    path = home_dir() / name
    _make(path)
    return path


def logs_dir() -> Path:
    """``$NSTORM_HOME/logs``: one log file per daemon or worker process."""
    return _sub("logs")


def metrics_dir(conf: Mapping[str, Any] | None = None) -> Path:
    """Where workers write load records and OTD reads them: ``nstorm.metrics.dir``, default
    ``$NSTORM_HOME/metrics``."""
    configured = (conf or {}).get("nstorm.metrics.dir")
    return Path(configured) if configured else home_dir() / "metrics"


def run_dir() -> Path:
    """``$NSTORM_HOME/run``: pid files of background daemons."""
    return _sub("run")


def supervisor_dir(node: str) -> Path:
    """``$NSTORM_HOME/supervisor/<node>``: the node's LMDB store and code archives."""
    path = home_dir() / "supervisor" / node
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def zk_address_file() -> Path:
    """File holding ``host:port`` of the embedded ZooKeeper of this home."""
    return run_dir() / "zookeeper.address"
