"""CurveZMQ key files: written by ``nstorm keys generate``, read by workers when curve is on.

With ``nstorm.transport.curve = true`` every worker binds its data and control ports as a
CURVE server with the cluster's server keypair, connects to its peers with the cluster's
client keypair, and lets a handshake through only if the client's public key is in
``authorized_clients/`` (checked by a ZAP handler, :mod:`worker.security`). Traffic is then
encrypted, and a peer without the client secret key cannot inject a frame.

Layout of the keys directory (``nstorm.transport.curve.keys.dir``, else
``$NSTORM_KEYS_DIR``, else ``$NSTORM_HOME/keys``; mode 0700, every file 0600)::

    server.key                    the server public key
    server.key_secret             the server keypair: workers bind with it
    client.key_secret             the client keypair: workers connect with it
    authorized_clients/client.key client public keys allowed to connect (add more to rotate)

Files are in ZeroMQ's certificate format (``zmq.auth.load_certificate`` reads them). Every
node needs a copy of the same directory.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
from zmq.auth import load_certificate
from zmq.utils import z85

from nstorm.errors import ConfigError, UsageError

__all__ = [
    "CURVE_KEY",
    "KEYS_DIR_KEY",
    "CurveKeys",
    "checked_keys_dir",
    "curve_enabled",
    "curve_keys_dir",
    "generate_keys",
    "load_keys",
]

CURVE_KEY = "nstorm.transport.curve"
KEYS_DIR_KEY = "nstorm.transport.curve.keys.dir"
KEYS_DIR_ENV = "NSTORM_KEYS_DIR"

SERVER_PUBLIC = "server.key"
SERVER_SECRET = "server.key_secret"
CLIENT_SECRET = "client.key_secret"
AUTHORIZED = "authorized_clients"
CLIENT_PUBLIC = f"{AUTHORIZED}/client.key"


@dataclass(frozen=True)
class CurveKeys:
    """The keys a worker needs (Z85 bytes); secret keys stay out of the repr."""

    directory: Path
    server_public: bytes
    server_secret: bytes = field(repr=False)
    client_public: bytes
    client_secret: bytes = field(repr=False)
    authorized: frozenset[bytes]


def curve_enabled(conf: Mapping[str, Any]) -> bool:
    """Whether ``nstorm.transport.curve`` is on; ConfigError for a value that is not a boolean."""
    value = conf.get(CURVE_KEY, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        msg = f"{CURVE_KEY}={value!r}: expected true or false"
        raise ConfigError(msg)
    return value


def curve_keys_dir(conf: Mapping[str, Any] | None = None) -> Path:
    """The keys directory: conf, else ``$NSTORM_KEYS_DIR``, else ``$NSTORM_HOME/keys`` (absolute)."""
    explicit = (conf or {}).get(KEYS_DIR_KEY) or os.environ.get(KEYS_DIR_ENV)
    if explicit:
        return Path(str(explicit)).expanduser().resolve()  # (a -c value may have parsed as a number)
    from nstorm.home import home_dir

    return home_dir() / "keys"


_BANNER = """#   ****  Generated on {now} by nstorm keys generate  ****
#   ZeroMQ CURVE {kind} Certificate
#   {advice}

"""


def _write_private(path: Path, kind: str, public: bytes, secret: bytes | None) -> None:
    """Write a certificate created 0600 from the start (no window where it is world-readable)."""
    advice = ("DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions." if secret
              else "A public key: copy it to every node with the rest of this directory.")
    text = _BANNER.format(now=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), kind=kind,
                          advice=advice)
    text += f'metadata\ncurve\n    public-key = "{public.decode()}"\n'
    if secret:
        text += f'    secret-key = "{secret.decode()}"\n'
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an old tmp file keeps its mode through O_CREAT
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def generate_keys(directory: Path, force: bool = False) -> list[Path]:
    """Create the cluster's server keypair and a client keypair in ``directory``; returns the files.

    :raises UsageError: if any of the files exists and ``force`` is False, or the
        directory cannot be written.
    """
    directory = Path(directory)
    files = [directory / name for name in (SERVER_PUBLIC, SERVER_SECRET, CLIENT_SECRET, CLIENT_PUBLIC)]
    existing = [p.relative_to(directory).as_posix() for p in files if p.exists()]
    if existing and not force:
        msg = (f"keys already exist in {directory} ({', '.join(existing)}): pass --force to replace them "
               f"(every node then needs the new keys)")
        raise UsageError(msg)
    try:
        (directory / AUTHORIZED).mkdir(parents=True, exist_ok=True, mode=0o700)
        directory.chmod(0o700)
        (directory / AUTHORIZED).chmod(0o700)
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        _write_private(files[0], "Public", server_public, None)
        _write_private(files[1], "**Secret**", server_public, server_secret)
        _write_private(files[2], "**Secret**", client_public, client_secret)
        _write_private(files[3], "Public", client_public, None)
    except OSError as exc:
        msg = f"cannot write keys to {directory}: {exc.strerror or exc}"
        raise UsageError(msg) from exc
    return files


def _valid(key: bytes | None) -> bool:
    if key is None or len(key) != 40:
        return False
    try:
        return len(z85.decode(key)) == 32
    except (ValueError, KeyError, IndexError):
        return False


def _load(path: Path, need_secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, secret = load_certificate(path)
    except (OSError, ValueError) as exc:
        detail = "missing" if not path.exists() else (getattr(exc, "strerror", None) or "not a key file")
        msg = f"curve key file {path}: {detail} (create the keys with 'nstorm keys generate')"
        raise ConfigError(msg) from exc
    if not _valid(public) or (need_secret and not _valid(secret)):
        msg = f"curve key file {path}: {'no valid secret key' if need_secret else 'no valid public key'} in it"
        raise ConfigError(msg)
    return public, secret


def checked_keys_dir(conf: Mapping[str, Any]) -> Path | None:
    """The keys directory if curve is on in ``conf`` (its keys checked now, so a daemon fails at
    start rather than its workers later), else None.

    :raises ConfigError: for a bad ``nstorm.transport.curve`` or a bad key file.
    """
    if not curve_enabled(conf):
        return None
    directory = curve_keys_dir(conf)
    load_keys(directory)
    return directory


def load_keys(directory: Path) -> CurveKeys:
    """Read and check every key a worker needs.

    :raises ConfigError: naming the file that is missing, unreadable or malformed, or when
        the client key is not authorized (workers could not reach each other).
    """
    directory = Path(directory)
    server_public, _ = _load(directory / SERVER_PUBLIC, need_secret=False)
    server_pub2, server_secret = _load(directory / SERVER_SECRET, need_secret=True)
    client_public, client_secret = _load(directory / CLIENT_SECRET, need_secret=True)
    if server_pub2 != server_public:
        msg = f"curve keys in {directory}: {SERVER_PUBLIC} and {SERVER_SECRET} are not one keypair"
        raise ConfigError(msg)
    authorized_dir = directory / AUTHORIZED
    try:
        names = sorted(p for p in authorized_dir.iterdir() if p.suffix == ".key")
    except OSError as exc:
        msg = f"curve keys: cannot list {authorized_dir}: {exc.strerror or exc}"
        raise ConfigError(msg) from exc
    authorized = frozenset(_load(p, need_secret=False)[0] for p in names)
    if client_public not in authorized:
        msg = f"curve keys: the client key of {directory / CLIENT_SECRET} is not in {authorized_dir}"
        raise ConfigError(msg)
    assert server_secret is not None and client_secret is not None
    return CurveKeys(directory, server_public, server_secret, client_public, client_secret, authorized)
