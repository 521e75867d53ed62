"""Small networking helpers shared by the ZooKeeper launcher and the zmq transport."""

from __future__ import annotations

import ipaddress
import socket

__all__ = ["free_port", "is_ip_address"]


def is_ip_address(host: str) -> bool:
    """Whether ``host`` is an IP address (a server binds to it) rather than a name (a
    docker-compose service's: a server there binds every interface)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free right now.

    The OS picks it (bind to port 0), so tests and embedded daemons never
    collide on fixed ports the way hard-coded offsets do (kazoo's test harness
    admits it never checks that its ports are free).

    The port is only *probably* still free when the caller binds it: another
    process may take it in between. Callers that start a server on it should
    treat "address already in use" as a reason to pick another port.

    :arg host: the address to bind, e.g. ``"127.0.0.1"`` or ``"0.0.0.0"``.
    :returns: the port number.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
