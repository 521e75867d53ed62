"""The embedded ZooKeeper: one standalone server run from pyspark's jars.

nstorm needs ZooKeeper (Nimbus stores topologies and allocation plans there,
supervisors register in it), but a Python user should not have to install a
ZooKeeper distribution. pyspark, already a dependency for the OTD traffic job,
ships ``zookeeper-3.x.jar`` with its slf4j and log4j2 jars, so we run
``java -cp "<pyspark>/jars/*" org.apache.zookeeper.server.ZooKeeperServerMain
zoo.cfg`` with the machine's Java.

Two ways to use it:

* :class:`EmbeddedZooKeeper`: a server owned by the calling process (tests,
  ``nstorm local``); a context manager.
* :mod:`nstorm.background`: the server of ``$NSTORM_HOME`` behind
  ``nstorm zookeeper start|stop|status``, which outlives the command that started it.

Readiness is checked with ZooKeeper's four-letter words (``ruok`` and ``srvr``)
over a plain socket, like kazoo's test harness, never with a fixed sleep.

Error Handling: every failure (no Java, no pyspark jars, the server exits or
does not answer in time) raises :class:`~nstorm.errors.ZooKeeperError`; a
startup failure carries the last lines of the server's log.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import psutil

from nstorm.errors import ZooKeeperError
from nstorm.net import free_port

__all__ = [
    "MAIN_CLASS",
    "EmbeddedZooKeeper",
    "find_java",
    "ruok",
    "split_address",
    "zookeeper_classpath",
]

log = logging.getLogger(__name__)

#: The Java class that runs a standalone ZooKeeper server.
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

# The embedded server holds a few hundred small nodes: keep the JVM small and
# quick to start rather than fast at peak load.
_JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",  # no per-core GC threads for a 256 MB heap
    "-XX:TieredStopAtLevel=1",  # C1 only: ~15% faster startup, plenty for metadata traffic
    "-XX:-UsePerfData",  # no /tmp/hsperfdata_<user> files left behind
    "-Djava.awt.headless=true",
    "-Dzookeeper.admin.enableServer=false",  # no Jetty admin server grabbing port 8080
    "-Dzookeeper.jmx.log4j.disable=true",  # no log4j MBeans (and their status noise)
)

# Normal exit codes after SIGTERM: the JVM runs its shutdown hooks and exits 143.
_CLEAN_EXIT = {0, 128 + signal.SIGTERM, -signal.SIGTERM}

# ZooKeeper answers ``ruok`` with ``imok`` as soon as its socket is open, even
# before its database is loaded; ``srvr`` tells the two states apart.
_NOT_SERVING = b"not currently serving"

_LOG4J2_PROPERTIES = """\
# Written by nstorm on every start: ZooKeeper's log4j2 configuration.
# Everything goes to stdout, which nstorm redirects to the log file, so the
# JVM's own messages (crashes, bad options) land in the same file.
status = warn
name = nstorm-zookeeper
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{ISO8601} %-5p [%t] %c{1} - %m%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
"""


def find_java() -> str:
    """Return the ``java`` executable to run ZooKeeper with.

    ``$JAVA_HOME/bin/java`` wins when it exists, because users set JAVA_HOME
    precisely to pick one JDK among several; otherwise ``java`` on ``PATH``.

    :raises ZooKeeperError: when neither exists.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        log.warning("JAVA_HOME=%s has no bin/java; looking for java on PATH", java_home)
    found = shutil.which("java")
    if found:
        return found
    raise ZooKeeperError("Java not found: install Java 17 or set JAVA_HOME")


def zookeeper_classpath() -> str:
    """Return the Java classpath ``<pyspark dir>/jars/*`` holding ZooKeeper.

    pyspark's directory is found with :func:`importlib.util.find_spec`, not by
    importing pyspark, which takes seconds.

    :raises ZooKeeperError: when pyspark is not installed or ships no
        ``zookeeper-<version>.jar``.
    """
    try:
        spec = importlib.util.find_spec("pyspark")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ZooKeeperError(
            "ZooKeeper jars not found: pyspark is not installed (pip install pyspark)"
        )
    searched = []
    for location in spec.submodule_search_locations:
        jars = Path(location) / "jars"
        searched.append(str(jars))
        if any(jars.glob("zookeeper-[0-9]*.jar")):
            return str(jars / "*")
    raise ZooKeeperError(f"ZooKeeper jars not found: no zookeeper-*.jar in {', '.join(searched)}")


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ZooKeeperError(f"bad ZooKeeper address {address!r}: expected host:port")
    return host.strip("[]"), int(port)


def _join_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _four_letter(address: str, word: str, timeout: float) -> bytes | None:
    """Send a four-letter word and return the whole reply, or None if unreachable."""
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            # The server closes the connection after answering.
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks)
    except OSError:
        return None


def ruok(address: str, timeout: float = 1.0) -> bool:
    """Return True when the ZooKeeper at ``host:port`` answers ``ruok`` with ``imok``.

    Cheap (one TCP round trip, no session), so it suits health checks and
    readiness polls. ``imok`` only means the server process is up and not in
    an error state; it may still be loading its database.

    :arg address: ``"host:port"``.
    :arg timeout: seconds for connecting and for the reply.
    :raises ZooKeeperError: when ``address`` is not ``host:port``.
    """
    return _four_letter(address, "ruok", timeout) == b"imok"


def _serving(address: str, timeout: float = 1.0) -> bool:
    """True when the server answers ``ruok`` and ``srvr`` says it serves requests."""
    if not ruok(address, timeout):
        return False
    reply = _four_letter(address, "srvr", timeout)
    return reply is not None and _NOT_SERVING not in reply


def _listens_on(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` owns a socket listening on ``port`` (None: cannot tell)."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.AccessDenied, psutil.NoSuchProcess, NotImplementedError):
        return None
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns)


def _log_tail(path: Path, offset: int = 0, lines: int = 25) -> str:
    """The last ``lines`` lines written to ``path`` after byte ``offset``."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(offset, size - 64 * 1024))
            data = fh.read()
    except OSError:
        return "(no log)"
    text = data.decode("utf-8", errors="replace").rstrip()
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


def _escape_property(value: str) -> str:
    # zoo.cfg is a java.util.Properties file: backslash is the escape character.
    return value.replace("\\", "\\\\")


class _PortInUse(ZooKeeperError):
    """The server could not bind its client port (internal: triggers a retry)."""


class EmbeddedZooKeeper:
    """A standalone ZooKeeper server in a child process, owned by its creator.

    Usage::

        with EmbeddedZooKeeper(tmp_path / "zk") as zk:
            client = KazooClient(hosts=zk.address)
            ...

    The server is a separate session (``start_new_session=True``): Ctrl-C in
    the launching terminal does not reach it, and it keeps running when the
    launching process exits without calling :meth:`stop` (this is what
    :func:`start_background` relies on). Code that owns a server must
    therefore stop it, in a ``finally`` or with ``with``.

    Nothing is printed to the launching terminal: the JVM's stdout and stderr,
    including ZooKeeper's log4j2 output at INFO, go to ``log_file``.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        log_file: Path | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        """Describe a server; nothing starts before :meth:`start`.

        :arg data_dir: directory for ZooKeeper's snapshots and transaction
            logs, and for the generated ``zoo.cfg`` and ``log4j2.properties``.
            Created if missing. Reusing it keeps the data of a previous run.
        :arg port: client port; 0 picks a free one now (see :attr:`address`),
            and picks another if the port is taken by the time java binds it.
        :arg log_file: file the server's output is appended to; default
            ``data_dir/zookeeper.log``.
        :arg host: address the client port binds to (``clientPortAddress``).
        """
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self._auto_port = port == 0
        self.port = port or free_port(host)
        self.log_file = Path(log_file).resolve() if log_file else self.data_dir / "zookeeper.log"
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"<EmbeddedZooKeeper {self.address} {state}>"

    @property
    def address(self) -> str:
        """``"host:port"`` for clients (kazoo's ``hosts=``); known before :meth:`start`."""
        return _join_address(self.host, self.port)

    @property
    def pid(self) -> int | None:
        """Process id of the JVM while started (None before start and after stop)."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """True while the JVM process is alive (it may not be serving yet)."""
        return self._process is not None and self._process.poll() is None

    @property
    def exit_code(self) -> int | None:
        """The JVM's exit code once it has exited on its own (None while it runs, or when not started)."""
        return self._process.poll() if self._process is not None else None

    @property
    def config_file(self) -> Path:
        """The generated ``zoo.cfg`` (its path is on the JVM's command line)."""
        return self.data_dir / "zoo.cfg"

    def _write_config(self) -> Path:
        # tickTime 500 ms makes the smallest session timeout 2 ticks = 1 s, so
        # clients may ask for the short (4 s) sessions nstorm uses to notice a
        # dead supervisor quickly; the default 2000 ms tick would force >= 4 s.
        lines = [
            "# Written by nstorm on every start; edits are lost.",
            "tickTime=500",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            f"dataDir={_escape_property(str(self.data_dir))}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat",
            # Long-lived background servers would otherwise keep every snapshot.
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
        ]
        self.config_file.write_text("\n".join(lines) + "\n")
        return self.config_file

    def _write_log4j_config(self) -> Path:
        path = self.data_dir / "log4j2.properties"
        path.write_text(_LOG4J2_PROPERTIES)
        return path

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and return once it serves clients.

        Does nothing if this instance is already running.

        :arg timeout: seconds to wait for the server to answer; a cold JVM
            takes one to two seconds.
        :raises ZooKeeperError: no Java, no jars, or the server exited or did
            not answer in time (it is killed; the message ends with its log).
        """
        if self.running:
            return
        java = find_java()
        classpath = zookeeper_classpath()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        attempts = 3 if self._auto_port else 1
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(java, classpath, deadline, timeout)
                return
            except _PortInUse:
                if attempt == attempts:
                    raise
                old, self.port = self.port, free_port(self.host)
                log.info("ZooKeeper port %d was taken; retrying on %d", old, self.port)

    def _start_once(self, java: str, classpath: str, deadline: float, timeout: float) -> None:
        config = self._write_config()
        log4j = self._write_log4j_config()
        offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        command = [
            java,
            *_JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(config),
        ]
        started = time.monotonic()
        with open(self.log_file, "ab") as out:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
        log.info(
            "starting ZooKeeper on %s (pid %d, data %s, log %s)",
            self.address,
            self._process.pid,
            self.data_dir,
            self.log_file,
        )
        while True:
            code = self._process.poll()
            if code is not None:
                self._process = None
                tail = _log_tail(self.log_file, offset)
                error = _PortInUse if "Address already in use" in tail else ZooKeeperError
                raise error(
                    f"ZooKeeper exited with code {code} while starting on {self.address}; "
                    f"last lines of {self.log_file}:\n{tail}"
                )
            # Another server already on our port answers ruok too: only trust
            # the answer once our own JVM holds the listening socket.
            if _serving(self.address) and _listens_on(self._process.pid, self.port) is not False:
                log.info(
                    "ZooKeeper ready on %s after %.2fs", self.address, time.monotonic() - started
                )
                return
            if time.monotonic() >= deadline:
                self._kill()
                tail = _log_tail(self.log_file, offset)
                raise ZooKeeperError(
                    f"ZooKeeper did not answer on {self.address} within {timeout:g}s "
                    f"(killed it); last lines of {self.log_file}:\n{tail}"
                )
            time.sleep(0.05)

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``timeout`` seconds.

        Idempotent: stopping a stopped (or never started) server does nothing.
        An unexpected exit code is logged, not raised: the server is gone
        either way, which is what the caller asked for.
        """
        proc = self._process
        if proc is None:
            return
        if proc.poll() is None:
            log.info("stopping ZooKeeper on %s (pid %d)", self.address, proc.pid)
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning(
                    "ZooKeeper pid %d ignored SIGTERM for %gs; killing it", proc.pid, timeout
                )
                proc.kill()
                proc.wait()
        if proc.returncode not in _CLEAN_EXIT and proc.returncode != -signal.SIGKILL:
            log.warning(
                "ZooKeeper pid %d exited with code %s; see %s",
                proc.pid,
                proc.returncode,
                self.log_file,
            )
        self._process = None

    def __enter__(self) -> EmbeddedZooKeeper:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
