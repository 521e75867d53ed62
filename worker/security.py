"""Transport security of a worker: plain zmq, or CurveZMQ with a ZAP check of every peer.

:class:`Transport` asks :func:`make_security` once and then calls ``server(sock)`` before
binding a receiver and ``client(sock)`` before connecting a sender, one line each, so the
rest of the data path does not know whether curve is on.

With curve, a ZAP handler (pyzmq's :class:`~zmq.auth.thread.ThreadAuthenticator`, one
thread per worker) sees every handshake on the worker's ports and admits only client keys
found in the keys directory's ``authorized_clients/`` (:mod:`nstorm.curvekeys`). A peer
without curve, or with another key, never gets a frame to the receivers: the handshake
fails inside libzmq. The ZAP check costs nothing per tuple; encryption costs CPU in zmq's
I/O thread.
"""

from __future__ import annotations

import logging
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator

from nstorm.curvekeys import CurveKeys, load_keys

__all__ = ["CurveSecurity", "PlainSecurity", "make_security"]

log = logging.getLogger(__name__)


class PlainSecurity:
    """No security: sockets stay as they are (the default)."""

    refused = 0  # handshakes refused (always 0 here)

    def server(self, sock: zmq.Socket) -> None:
        """Prepare a receiving socket, before ``bind``."""

    def client(self, sock: zmq.Socket) -> None:
        """Prepare a sending socket, before ``connect``."""

    def stop(self) -> None:
        """Nothing to stop."""


class CurveSecurity(PlainSecurity):
    """CurveZMQ on every socket of ``context``, with a ZAP handler admitting authorized client keys.

    Example::

        security = CurveSecurity(context, load_keys(Path("keys")))
        security.server(pull)      # then pull.bind(...)
        security.client(push)      # then push.connect(...)
        security.stop()            # after the sockets are closed
    """

    def __init__(self, context: zmq.Context, keys: CurveKeys) -> None:
        self.keys = keys
        self.refused = 0
        self._auth = ThreadAuthenticator(context, log=logging.getLogger(f"{__name__}.zap"))
        self._auth.start()
        # A callback rather than configure_curve(location=...): the same check, plus a count
        # of refused peers, and keys that were already validated by load_keys.
        self._auth.configure_curve_callback(domain="*", credentials_provider=self)
        log.info("CurveZMQ on: %d authorized client key(s) from %s", len(keys.authorized), keys.directory)

    def callback(self, domain: str, client_key: bytes) -> bool:
        """ZAP: admit ``client_key`` (Z85) if it is authorized; runs in the ZAP thread."""
        if client_key in self.keys.authorized:
            return True
        self.refused += 1
        if self.refused <= 10 or self.refused % 1000 == 0:
            log.warning("refused a CurveZMQ peer with an unknown client key; %d refused so far", self.refused)
        return False

    def server(self, sock: zmq.Socket) -> None:
        sock.curve_secretkey = self.keys.server_secret
        sock.curve_publickey = self.keys.server_public
        sock.curve_server = True

    def client(self, sock: zmq.Socket) -> None:
        sock.curve_secretkey = self.keys.client_secret
        sock.curve_publickey = self.keys.client_public
        sock.curve_serverkey = self.keys.server_public

    def stop(self) -> None:
        self._auth.stop()


def make_security(context: zmq.Context, curve_keys: Path | None) -> PlainSecurity:
    """Curve with the keys in ``curve_keys`` if given, else plain.

    :raises ConfigError: if a key file is missing, unreadable or malformed.
    """
    if curve_keys is None:
        return PlainSecurity()
    return CurveSecurity(context, load_keys(curve_keys))
