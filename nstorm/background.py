"""The background ZooKeeper of ``$NSTORM_HOME``: the server behind ``nstorm zookeeper start|stop|status``.

It outlives the command that started it (an :class:`~nstorm.zookeeper.EmbeddedZooKeeper`
whose handle is let go); its pid is in ``run/zookeeper.pid`` and its ``host:port`` in
``run/zookeeper.address``, where :func:`embedded_address` (the CLI's default ``--zk``) finds
it. Starts and stops are serialised across processes by a lock file in ``run/``, and no
signal is ever sent to a pid before it is checked to be this home's server.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from nstorm.errors import ZooKeeperError
from nstorm.home import home_dir, home_lock, logs_dir, run_dir, zk_address_file
from nstorm.zookeeper import MAIN_CLASS, EmbeddedZooKeeper, ruok, split_address

__all__ = ["background_status", "embedded_address", "start_background", "stop_background"]

log = logging.getLogger(__name__)

# Handles of servers this process started in the background. Holding them
# keeps Popen from warning "subprocess is still running" when it is garbage
# collected, and lets stop_background reap its own child.
_background_handles: dict[int, subprocess.Popen[bytes]] = {}


@atexit.register
def _forget_background_handles() -> None:
    # The background server is meant to outlive this process; without this,
    # Popen.__del__ warns "subprocess N is still running" at shutdown (shown
    # under ``python -X dev``).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        _background_handles.clear()


def _pid_file() -> Path:
    return run_dir() / "zookeeper.pid"


def _background_data_dir() -> Path:
    return home_dir() / "zookeeper"


def _background_config() -> str:
    return str(_background_data_dir() / "zoo.cfg")


@contextlib.contextmanager
def _home_lock() -> Iterator[None]:
    """Serialise start/stop of this home's server across processes.

    Two ``nstorm zookeeper start`` at once would otherwise both find nothing
    running and start two servers on one data directory.
    """
    with home_lock(run_dir() / "zookeeper.lock"):
        yield


def _is_home_zookeeper(proc: psutil.Process, config: str) -> bool:
    """True when ``proc`` is a live ZooKeeperServerMain JVM using ``config``.

    Checked before signalling a pid from a file: the pid may have been reused
    by an unrelated process, or belong to the server of another home.
    """
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return MAIN_CLASS in cmdline and config in cmdline


def _read_pid() -> int | None:
    try:
        text = _pid_file().read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def _read_address() -> str | None:
    try:
        return zk_address_file().read_text().strip() or None
    except FileNotFoundError:
        return None


def _write_atomic(path: Path, text: str) -> None:
    # Readers (other nstorm commands) must never see a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _background_process() -> psutil.Process | None:
    """This home's running server: the pid file's process, else found by its config path."""
    config = _background_config()
    pid = _read_pid()
    if pid is not None:
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            proc = None
        if proc is not None and _is_home_zookeeper(proc, config):
            return proc
        if proc is not None:
            log.warning("pid file names pid %d, which is not this home's ZooKeeper", pid)
    # The pid file may be gone while the server still runs (deleted by hand,
    # or a start interrupted after launching java): find it by its zoo.cfg.
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if MAIN_CLASS in cmdline and config in cmdline and _is_home_zookeeper(proc, config):
            return proc
    return None


def start_background(port: int = 0, timeout: float = 30.0, host: str = "127.0.0.1") -> str:
    """Start this home's ZooKeeper in the background and return its address.

    Data lives in ``$NSTORM_HOME/zookeeper``, the log in
    ``$NSTORM_HOME/logs/zookeeper.log``; the pid and address go to
    ``$NSTORM_HOME/run``. The server outlives the calling process.

    If this home's server is already running and answering, its address is
    returned and nothing new starts (``nstorm zookeeper start`` is idempotent).

    :arg port: client port; 0 picks a free one.
    :arg timeout: seconds to wait for the new server to answer.
    :raises ZooKeeperError: the server could not start, or one is running
        but does not answer (stop it first).
    """
    with _home_lock():
        proc = _background_process()
        if proc is not None:
            address = _read_address()
            if address and ruok(address):
                if port and split_address(address)[1] != port:
                    log.warning("ZooKeeper already runs on %s, not on port %d", address, port)
                log.info("ZooKeeper already running on %s (pid %d)", address, proc.pid)
                return address
            raise ZooKeeperError(
                f"ZooKeeper pid {proc.pid} is running but does not answer on {address}: "
                "run `nstorm zookeeper stop` first"
            )
        _pid_file().unlink(missing_ok=True)
        zk_address_file().unlink(missing_ok=True)
        zk = EmbeddedZooKeeper(_background_data_dir(), port, logs_dir() / "zookeeper.log", host=host)
        zk.start(timeout)
        assert zk._process is not None  # set by a successful start
        _background_handles[zk._process.pid] = zk._process
        _write_atomic(_pid_file(), f"{zk._process.pid}\n")
        _write_atomic(zk_address_file(), f"{zk.address}\n")
        return zk.address


def _wait_gone(proc: psutil.Process, timeout: float) -> bool:
    """Wait until ``proc`` has exited; True if it did within ``timeout`` seconds.

    A zombie counts as gone: once the launching process has exited, the JVM
    is an orphan, and a container's PID 1 may never reap it (seen here: PID 1
    is not an init). ``psutil.Process.wait`` would then wait for the whole
    timeout, because a zombie still "exists".
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    handle = _background_handles.pop(proc.pid, None)
    if handle is not None:
        handle.poll()  # our own child: reap it
    return True


def _terminate(proc: psutil.Process, timeout: float) -> None:
    log.info("stopping ZooKeeper pid %d", proc.pid)
    try:
        proc.send_signal(signal.SIGTERM)
        if not _wait_gone(proc, timeout):
            log.warning("ZooKeeper pid %d ignored SIGTERM for %gs; killing it", proc.pid, timeout)
            proc.kill()
            _wait_gone(proc, timeout)
    except psutil.NoSuchProcess:
        pass


def stop_background(timeout: float = 10.0) -> bool:
    """Stop this home's background ZooKeeper; True if one was running.

    The pid is verified with psutil (a ZooKeeperServerMain JVM started with
    this home's ``zoo.cfg``) before any signal is sent. The pid and address
    files are removed in every case, so stale ones do not outlive this call.

    :arg timeout: seconds between SIGTERM and SIGKILL.
    """
    with _home_lock():
        proc = _background_process()
        if proc is not None:
            _terminate(proc, timeout)
        elif _pid_file().exists():
            log.info("ZooKeeper was not running; removing its stale pid file")
        _pid_file().unlink(missing_ok=True)
        zk_address_file().unlink(missing_ok=True)
        return proc is not None


def background_status() -> dict[str, Any]:
    """The state of this home's background ZooKeeper.

    :returns: ``{"running": bool, "pid": int | None, "address": str | None}``;
        ``running`` means the process is alive *and* answers ``ruok``; ``pid``
        and ``address`` are None when no server process of this home exists.
    """
    proc = _background_process()
    if proc is None:
        return {"running": False, "pid": None, "address": None}
    address = _read_address()
    try:
        answering = address is not None and ruok(address)
    except ZooKeeperError:  # a malformed address file
        answering = False
    return {"running": answering, "pid": proc.pid, "address": address}


def embedded_address() -> str | None:
    """The address of this home's embedded ZooKeeper if it answers, else None.

    Used as the default ``--zk`` of CLI commands: a stale address file (server
    gone) yields None rather than a connection that hangs.
    """
    address = _read_address()
    if address is None:
        return None
    try:
        return address if ruok(address) else None
    except ZooKeeperError:  # a malformed address file
        return None
