"""Network namespaces for a cluster on one machine whose nodes really talk over links.

Each supervisor (and its workers) runs in its own namespace ``nstorm-n<i>`` with address
``10.77.0.<10+i>`` on a veth pair plugged into the bridge ``nstorm-br0`` (10.77.0.1, where
ZooKeeper and Nimbus listen), so inter-node tuples cross an interface and the kernel counts
their bytes. ``link_rate`` (e.g. ``20mbit``) limits each node's link in both directions with
``tc ... tbf``. Needs root and iproute2; :func:`available` says whether they are there.
Everything created is recorded in ``$NSTORM_HOME/run/netns.json`` and removed by
:func:`destroy`.

``NSTORM_NETNS_INDEX=k`` (1..99) gives a second, independent set on the same machine
(``nstorm-br<k>``, ``nstorm<k>-n<i>``, ``10.77.<k>.0/24``), so that two clusters of
namespaces (a test and a benchmark, say) do not tear each other down.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from nstorm.errors import ClusterError, UsageError
from nstorm.home import run_dir

__all__ = ["BRIDGE", "HOST_ADDRESS", "NodeNet", "available", "create", "destroy", "host_address", "link_bytes", "set_link"]

log = logging.getLogger(__name__)

BRIDGE = "nstorm-br0"
SUBNET = "10.77.0"
HOST_ADDRESS = f"{SUBNET}.1"


def _index() -> int:
    try:
        k = int(os.environ.get("NSTORM_NETNS_INDEX", "0"))
    except ValueError:
        k = 0
    return k if 0 <= k < 100 else 0


def _bridge() -> str:
    return f"nstorm-br{_index()}"


def _subnet() -> str:
    return f"10.77.{_index()}"


def _prefix() -> str:
    """Namespaces are ``<prefix>n<i>``, host-side veths ``<prefix>v<i>``."""
    k = _index()
    return f"nstorm{k}-" if k else "nstorm-"


def host_address() -> str:
    """The bridge's address, where ZooKeeper and Nimbus listen for the namespaces."""
    return f"{_subnet()}.1"


@dataclass(frozen=True)
class NodeNet:
    """One node's namespace: its name, address and the host side of its veth."""

    node: str
    namespace: str
    address: str
    veth: str

    def exec_prefix(self) -> list[str]:
        """Run a command in this node's network namespace only. ``nsenter --net`` keeps the host's
        mounts; ``ip netns exec`` (the fallback) remounts ``/sys``, which hides the cgroup
        controllers a supervisor needs to cap its workers (``supervisor.worker.cpu.limit``)."""
        if shutil.which("nsenter"):
            return ["nsenter", f"--net=/var/run/netns/{self.namespace}"]
        return ["ip", "netns", "exec", self.namespace]


def available() -> bool:
    """True when namespaces can be made here (root and the ``ip`` command)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        msg = f"ip {' '.join(args)} failed: {result.stderr.strip()}"
        raise ClusterError(msg)
    return result


def _tc(*args: str) -> None:
    result = subprocess.run(["tc", *args], capture_output=True, text=True)
    if result.returncode != 0:
        msg = f"tc {' '.join(args)} failed: {result.stderr.strip()}"
        raise ClusterError(msg)


def _state_file() -> Path:
    return run_dir() / "netns.json"


_RATE = re.compile(r"[0-9]+(\.[0-9]+)?([kmgt]i?)?(bit|bps)?", re.IGNORECASE)


def check_rate(link_rate: str) -> None:
    """A link rate as ``tc`` reads it ("20mbit", "1gbit", "500kbps"), checked before any
    namespace is made.

    :raises UsageError: one line naming the option.
    """
    if not _RATE.fullmatch(link_rate.strip()) or not float(re.match(r"[0-9.]+", link_rate.strip())[0]):
        msg = f"--link-rate {link_rate!r}: expected a rate such as 20mbit, 1gbit or 500kbps"
        raise UsageError(msg)


def create(count: int, link_rate: str | None = None) -> list[NodeNet]:
    """Make the bridge and ``count`` namespaces n1..n<count> (after removing leftovers)."""
    if not available():
        msg = "network namespaces need root and iproute2"
        raise ClusterError(msg)
    destroy()
    nodes: list[NodeNet] = []
    try:
        bridge, subnet, prefix = _bridge(), _subnet(), _prefix()
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{host_address()}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i in range(1, count + 1):
            net = NodeNet(f"n{i}", f"{prefix}n{i}", f"{subnet}.{10 + i}", f"{prefix}v{i}")
            nodes.append(net)
            _ip("netns", "add", net.namespace)
            _ip("link", "add", net.veth, "type", "veth", "peer", "name", "eth0", "netns", net.namespace)
            _ip("link", "set", net.veth, "master", bridge, "up")
            _ip("-n", net.namespace, "addr", "add", f"{net.address}/24", "dev", "eth0")
            _ip("-n", net.namespace, "link", "set", "eth0", "up")
            _ip("-n", net.namespace, "link", "set", "lo", "up")
            _ip("-n", net.namespace, "route", "add", "default", "via", host_address())
            if link_rate:  # both directions: host side shapes what enters the node, eth0 what leaves
                tbf = ["root", "tbf", "rate", link_rate, "burst", "64kb", "latency", "100ms"]
                _tc("qdisc", "add", "dev", net.veth, *tbf)
                _tc("-n", net.namespace, "qdisc", "add", "dev", "eth0", *tbf)
    except Exception:
        _state_file().write_text(json.dumps({"nodes": [asdict(n) for n in nodes]}))
        destroy()
        raise
    _state_file().write_text(json.dumps({"nodes": [asdict(n) for n in nodes], "link_rate": link_rate}))
    log.info("created %d network namespaces on %s (link rate %s)", count, _bridge(), link_rate or "unlimited")
    return nodes


def destroy() -> bool:
    """Remove every namespace, veth and the bridge this home made; True if there was any."""
    path = _state_file()
    found = False
    names = set()
    if path.exists():
        for n in json.loads(path.read_text()).get("nodes", []):
            names.add((n["namespace"], n["veth"]))
        path.unlink()
    existing = _ip("netns", "list", check=False).stdout if shutil.which("ip") else ""
    prefix = _prefix()
    for line in existing.splitlines():
        ns = line.split()[0] if line.strip() else ""
        if ns.startswith(prefix + "n"):
            names.add((ns, prefix + "v" + ns[len(prefix) + 1:]))
    for namespace, veth in sorted(names):
        found = True
        _ip("netns", "pids", namespace, check=False)
        pids = _ip("netns", "pids", namespace, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, ValueError):
                pass
        _ip("link", "del", veth, check=False)
        _ip("netns", "del", namespace, check=False)
    if shutil.which("ip") and _ip("link", "show", _bridge(), check=False).returncode == 0:
        found = True
        _ip("link", "del", _bridge(), check=False)
    return found


def set_link(net: NodeNet, up: bool) -> None:
    """Cut a node off the bridge (``up=False``) or plug it back: a network partition."""
    _ip("link", "set", net.veth, "up" if up else "down")


def link_bytes(veth: str) -> tuple[int, int]:
    """(rx, tx) bytes the kernel counted on a node's veth (host side)."""
    base = Path("/sys/class/net") / veth / "statistics"
    return int((base / "rx_bytes").read_text()), int((base / "tx_bytes").read_text())
