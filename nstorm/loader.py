"""Loading user topology files and packing them into code archives.

A topology file defines ``topology`` (a built :class:`~nstorm.topology.Topology`)
or ``make_topology(conf)`` (called with the ``-c`` options). Every way loading
can fail has its own one-line message (after bytewax's ``_locate_dataflow``).
The code archive is a zip of the file and the ``.py`` files beside it; workers
unpack it and load the same file to get the component classes.
"""

from __future__ import annotations

import hashlib
import io
import sys
import traceback
import types
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nstorm.errors import NStormError, TopologyError, TopologyLoadError
from nstorm.topology import Topology

__all__ = ["MAX_ARCHIVE_BYTES", "MAX_UNPACKED_BYTES", "is_member_name", "load_topology", "make_archive",
           "unpack_archive"]

MAX_ARCHIVE_BYTES = 900 * 1024  # below ZooKeeper's 1 MB node limit
MAX_UNPACKED_BYTES = 64 * 1024 * 1024  # a topology's code unpacked, at most (a zip bomb is refused)


def _exec_file(path: Path, module_name: str) -> types.ModuleType:
    try:
        source = path.read_text()
    except FileNotFoundError:
        msg = f"topology file {str(path)!r} does not exist"
        raise TopologyLoadError(msg) from None
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"cannot read topology file {str(path)!r}: {exc}"
        raise TopologyLoadError(msg) from exc
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        msg = f"syntax error in {path.name} line {exc.lineno}: {exc.msg}"
        raise TopologyLoadError(msg) from None
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    parent = str(path.parent.resolve())
    added = parent not in sys.path
    if added:
        sys.path.insert(0, parent)
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - the user's own topology file
    except NStormError:
        sys.modules.pop(module_name, None)
        raise
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise TopologyLoadError(_failure(path, path.name, exc)) from None
    return module


def _failure(path: Path, what_ran: str, exc: BaseException) -> str:
    """One line for code of a topology file that raised or exited: ``sys.exit()`` in it must not
    end the CLI (silently, with its code) nor any other BaseException print a traceback."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"line {f.lineno}" for f in reversed(tb) if f.filename == str(path)), "")
    what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"raised {type(exc).__name__}: {exc}"
    return f"{what_ran} {where} {what}".replace("  ", " ")


def load_topology(
    path: str | Path, conf: Mapping[str, Any] | None = None, module_name: str | None = None
) -> Topology:
    """Execute a topology file and return its validated :class:`Topology`.

    :arg conf: the ``-c`` options, passed to ``make_topology(conf)`` if the file has one.
    :raises TopologyLoadError: the file is missing, has a syntax error, raised, or defines
        no topology.
    :raises TopologyError: the topology is invalid (raised by ``build()``).
    """
    path = Path(path)
    name = module_name or f"nstorm_topology_{path.stem}"
    module = _exec_file(path, name)
    if hasattr(module, "make_topology"):
        factory = module.make_topology
        if not callable(factory):
            msg = f"{path.name}: make_topology is not callable"
            raise TopologyLoadError(msg)
        try:
            topology = factory(dict(conf or {}))
        except NStormError:
            raise
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise TopologyLoadError(_failure(path, f"{path.name}: make_topology(conf)", exc)) from None
    elif hasattr(module, "topology"):
        topology = module.topology
    else:
        msg = f"{path.name} defines neither 'topology' nor 'make_topology(conf)'"
        raise TopologyLoadError(msg)
    if not isinstance(topology, Topology):
        msg = f"{path.name}: 'topology' is a {type(topology).__name__}, not a built Topology (call builder.build())"
        raise TopologyError(msg)
    return topology


def make_archive(path: str | Path) -> tuple[bytes, str]:
    """Zip the topology file and the ``.py`` files beside it; return (bytes, sha256 hex).

    :raises TopologyLoadError: if the archive would exceed :data:`MAX_ARCHIVE_BYTES`.
    """
    path = Path(path).resolve()
    buffer = io.BytesIO()
    # Fixed timestamps so the same code gives the same sha256.
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        files = sorted(p for p in path.parent.glob("*.py") if p.is_file())
        if path not in files:
            files.append(path)
        for file in files:
            info = zipfile.ZipInfo(file.name, date_time=(2000, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, file.read_bytes())
    data = buffer.getvalue()
    if len(data) > MAX_ARCHIVE_BYTES:
        msg = f"code archive of {path.name} is {len(data)} bytes, more than {MAX_ARCHIVE_BYTES}: move large files out of its directory"
        raise TopologyLoadError(msg)
    return data, hashlib.sha256(data).hexdigest()


def is_member_name(name: str) -> bool:
    """A file of a topology's code archive: a bare name (no directory, not hidden): also what
    a topology's ``main`` must be, so no path leads out of the unpacked archive."""
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")


def unpack_archive(data: bytes, sha256: str, target: Path) -> Path:
    """Check ``sha256`` and unpack into ``target`` (idempotent); return ``target``."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        msg = f"code archive checksum mismatch: expected {sha256}, got {digest}"
        raise TopologyLoadError(msg)
    marker = target / ".complete"
    if marker.exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for member in archive.namelist():
            if not is_member_name(member):
                msg = f"code archive has an unexpected member {member!r}"
                raise TopologyLoadError(msg)
        infos = archive.infolist()
        # Entries that share compressed bytes (overlapping) or unpack to far more than any code
        # does: a decompression bomb, refused before a byte is written.
        if sum(i.compress_size for i in infos) > len(data) or sum(i.file_size for i in infos) > MAX_UNPACKED_BYTES:
            msg = f"code archive unpacks to more than {MAX_UNPACKED_BYTES} bytes, or its entries overlap"
            raise TopologyLoadError(msg)
        archive.extractall(target)
    marker.write_text(sha256)
    return target
