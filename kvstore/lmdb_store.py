"""The plan store on LMDB: one environment (a directory) per node.

Keys of the environment's single database::

    plan/<topology>/<version>   msgpack of the plan dict
    latest/<topology>           <version>, the suffix of the newest record's key
    meta/<key>                  msgpack of a dict (supervisor bookkeeping)

``<version>`` is 20 zero-padded ASCII digits: that sorts numerically under
LMDB's byte order (so ``versions()`` and pruning are one cursor range scan),
covers every unsigned 64-bit version and stays readable in ``mdb_dump``. The
pointer holds the same 20 bytes, so ``latest()`` builds the record key by
concatenation. Values are msgpack, never pickle: a worker must not execute
whatever a damaged or foreign file contains.

Concurrency: only one writer, enforced by an ``flock`` on ``writer.lock`` in
the directory (LMDB's own writer mutex would just queue a second supervisor).
Readers use LMDB's MVCC: a read transaction sees the last commit and never
blocks the writer. LMDB forbids opening one environment twice in a process
(py-lmdb raises), so the supervisor reads through its writer instance, and a
process must not fork while it has the store open.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import lmdb
import msgpack
from msgpack.exceptions import UnpackException

from kvstore.base import PlanStore
from kvstore.errors import (
    KVStoreError,
    StoreCorruptError,
    StoreLockedError,
    StoreMissingError,
)

try:  # py-lmdb >= 3.0: a pure-Python structural check that cannot crash the process
    from lmdb import verify as _lmdb_verify
except ImportError:  # pragma: no cover - older py-lmdb
    _lmdb_verify = None  # type: ignore[assignment]

__all__ = ["LMDBPlanStore"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_monotonic = time.monotonic  # bound once: the polling fast path calls it every time

DEFAULT_MAP_SIZE = 64 * 2**20
DATA_FILE = "data.mdb"
WRITER_LOCK_FILE = "writer.lock"
# A reader compares the inode of data.mdb with the one it opened at most this
# often (seconds): a rebuilt store is picked up within it, for one stat().
INODE_CHECK_INTERVAL = 1.0
MAX_VERSION = 2**64 - 1

_PLAN = b"plan/"
_LATEST = b"latest/"
_META = b"meta/"
_VERSION_DIGITS = 20
_MAX_KEY = 511  # LMDB's compiled-in maximum key size (mdb_env_get_maxkeysize)
_MAX_TOPOLOGY = _MAX_KEY - len(_PLAN) - 1 - _VERSION_DIGITS
_MAX_META_KEY = _MAX_KEY - len(_META)
_POINTER_KEY_CACHE = 1024  # topology -> pointer key, for the polling fast path

# lmdb errors that mean "the files cannot be trusted" (looked up by name:
# the set differs between py-lmdb versions).
_CORRUPT_ERRORS: tuple[type[lmdb.Error], ...] = tuple(
    getattr(lmdb, name)
    for name in (
        "BadChecksumError",
        "CorruptedError",
        "IncompatibleError",
        "InvalidError",
        "PageNotFoundError",
        "PanicError",
        "VersionMismatchError",
    )
    if hasattr(lmdb, name)
)


# -- encoding ----------------------------------------------------------------


def _topology_bytes(topology: str) -> bytes:
    """Validate a topology name: a '/' would let one topology's range scan see another's."""
    if not isinstance(topology, str):
        raise TypeError(f"topology must be a str, not {type(topology).__name__}")
    if not topology or "/" in topology:
        raise ValueError(f"invalid topology name {topology!r}: empty or contains '/'")
    raw = topology.encode()
    if len(raw) > _MAX_TOPOLOGY:
        raise ValueError(f"topology name longer than {_MAX_TOPOLOGY} bytes: {topology[:40]!r}...")
    return raw


def _plan_prefix(topology: str) -> bytes:
    return _PLAN + _topology_bytes(topology) + b"/"


def _meta_key(key: str) -> bytes:
    if not isinstance(key, str):
        raise TypeError(f"meta key must be a str, not {type(key).__name__}")
    raw = key.encode()
    if not raw or len(raw) > _MAX_META_KEY:
        raise ValueError(f"meta key must be 1..{_MAX_META_KEY} bytes: {key[:40]!r}")
    return _META + raw


def _encode_version(version: int) -> bytes:
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"version must be an int, not {type(version).__name__}")
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"version must be in 0..2**64-1, not {version}")
    return b"%020d" % version


def _decode_version(raw: bytes, key: bytes) -> int:
    if len(raw) != _VERSION_DIGITS or not raw.isdigit():
        raise StoreCorruptError(f"bad version {raw[:40]!r} in {key[:80]!r}")
    return int(raw)


def _pack(value: dict[str, Any], what: str) -> bytes:
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be a dict, not {type(value).__name__}")
    try:
        return msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{what} cannot be stored as msgpack: {exc}") from exc


def _unpack(raw: bytes, key: bytes) -> dict[str, Any]:
    try:
        value = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, TypeError, UnpackException) as exc:
        raise StoreCorruptError(f"record {key[:80]!r} does not decode: {exc}") from exc
    if not isinstance(value, dict):
        raise StoreCorruptError(f"record {key[:80]!r} is a {type(value).__name__}, not a dict")
    return value


def _scan_keys(txn: lmdb.Transaction, prefix: bytes) -> list[bytes]:
    """The keys starting with ``prefix``, in order: one cursor range scan."""
    cursor = txn.cursor()
    keys: list[bytes] = []
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if not key.startswith(prefix):
                break
            keys.append(key)
    return keys


# -- files ---------------------------------------------------------------------


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of a data file, or None while there is no usable one.

    An empty data.mdb counts as missing: it is an environment whose creator has
    not written the meta pages yet (or died doing so), and LMDB refuses to open
    it read-only.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if st.st_size == 0:
        return None
    return st.st_dev, st.st_ino


def _acquire_writer_lock(directory: Path) -> IO[bytes]:
    """Create ``directory`` if needed and take its exclusive, non-blocking writer lock.

    The open file is the lock: closing it (or the process dying) releases it.
    It holds the owner's pid, for the error message of the next contender.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / WRITER_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise KVStoreError(f"cannot create plan store {directory}: {exc}") from exc
    lock = os.fdopen(fd, "r+b")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock.read(32).decode(errors="replace").strip() or "?"
        lock.close()
        raise StoreLockedError(
            f"plan store {directory} already has a writer (pid {holder})"
        ) from None
    except BaseException:
        lock.close()
        raise
    lock.seek(0)
    lock.truncate()
    lock.write(b"%d\n" % os.getpid())
    lock.flush()
    return lock


def _release_writer_lock(lock: IO[bytes]) -> None:
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    finally:
        lock.close()


def _move_aside(path: Path) -> Path:
    """Rename a broken store to ``<path>.corrupt-<UTC timestamp>`` and return the new name."""
    path = path.absolute()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    os.rename(path, aside)
    return aside


def _translate(exc: lmdb.Error, what: str) -> KVStoreError:
    if isinstance(exc, _CORRUPT_ERRORS):
        return StoreCorruptError(f"{what}: {exc}")
    if isinstance(exc, lmdb.MapFullError):
        return KVStoreError(f"{what}: the store is full (raise map_size): {exc}")
    return KVStoreError(f"{what}: {exc}")


# -- the store -------------------------------------------------------------------


class LMDBPlanStore(PlanStore):
    """:class:`~kvstore.base.PlanStore` on an LMDB environment directory.

    ``LMDBPlanStore(path)`` is the supervisor's writer: it creates the
    directory, takes the writer lock (:class:`StoreLockedError` if held),
    checks the files and every record (:class:`StoreCorruptError`), and keeps
    ``history`` versions per topology. ``LMDBPlanStore(path, readonly=True)``
    is a worker's reader: :class:`StoreMissingError` until the supervisor has
    created the store; it sees every commit without reopening, and reopens by
    itself when the supervisor rebuilt the store under it. Readers adopt the
    writer's ``map_size``; theirs is ignored.

    One instance may serve several threads; the writer's transactions are
    serialised by LMDB.
    """

    path: Path
    readonly: bool
    history: int

    def __init__(
        self,
        path: Path | str,
        readonly: bool = False,
        history: int = 5,
        map_size: int = DEFAULT_MAP_SIZE,
    ) -> None:
        self._setup(Path(path), readonly, history, map_size, None)

    @classmethod
    def open_or_rebuild(
        cls,
        path: Path | str,
        history: int = 5,
        map_size: int = DEFAULT_MAP_SIZE,
    ) -> tuple[LMDBPlanStore, bool]:
        """Open the writer; if the store is corrupt, move it aside and start empty.

        Returns ``(store, rebuilt)``. On ``rebuilt`` the caller (the supervisor)
        rewrites every local plan from ZooKeeper. The broken directory is kept
        as ``<path>.corrupt-<timestamp>`` for a post-mortem. The writer lock is
        held from the first open to the end, so no other writer can slip in
        while the directory is swapped; readers see the store missing for that
        moment and then reopen the new one.
        """
        path = Path(path)
        lock = _acquire_writer_lock(path)
        try:
            try:
                return cls._with_lock(path, history, map_size, lock), False
            except StoreCorruptError as exc:
                aside = _move_aside(path)
                log.warning(
                    "plan store %s is corrupt (%s): moved it to %s, starting an empty one",
                    path,
                    exc,
                    aside,
                )
            new_lock = _acquire_writer_lock(path)
            _release_writer_lock(lock)
            lock = new_lock
            return cls._with_lock(path, history, map_size, lock), True
        except BaseException:
            _release_writer_lock(lock)
            raise

    @classmethod
    def _with_lock(cls, path: Path, history: int, map_size: int, lock: IO[bytes]) -> LMDBPlanStore:
        """A writer on a lock the caller already holds (and keeps if this fails)."""
        store = cls.__new__(cls)
        store._setup(path, False, history, map_size, lock)
        return store

    def _setup(
        self,
        path: Path,
        readonly: bool,
        history: int,
        map_size: int,
        lock: IO[bytes] | None,
    ) -> None:
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ValueError(f"history must be an int >= 1, not {history!r}")
        self.path = path
        self.readonly = readonly
        self.history = history
        self._map_size = map_size
        self._data_path = path / DATA_FILE
        self._env: lmdb.Environment | None = None
        self._identity: tuple[int, int] | None = None
        self._lock: IO[bytes] | None = None
        self._closed = False
        self._pointer_keys: dict[str, bytes] = {}
        self._reopen_lock = threading.Lock()
        if readonly:
            self._env, self._identity = self._open_reader_env()
            self._next_check = time.monotonic() + INODE_CHECK_INTERVAL
            log.debug("opened plan store %s read-only", path)
            return
        # The writer owns its files: it never needs the inode check.
        self._next_check = math.inf
        owns_lock = lock is None
        self._lock = _acquire_writer_lock(path) if lock is None else lock
        try:
            self._env = self._open_writer_env()
            self._identity = _file_identity(self._data_path)
            records = self.verify()
        except BaseException:
            env, self._env = self._env, None
            if env is not None:
                env.close()
            if owns_lock:
                _release_writer_lock(self._lock)
            self._lock = None
            raise
        log.info(
            "opened plan store %s for writing (%d records, history=%d)", path, records, history
        )

    def _open_writer_env(self) -> lmdb.Environment:
        # Check the file structure offline first: liblmdb trusts its pages and
        # can crash the process on a damaged one. The file is small and nobody
        # else writes it while we hold the writer lock, so this is cheap and exact.
        if _lmdb_verify is not None and _file_identity(self._data_path) is not None:
            try:
                problems = _lmdb_verify.verify(str(self.path), subdir=True)
            except _lmdb_verify.VerifyError as exc:
                raise StoreCorruptError(f"{self._data_path}: {exc}") from exc
            except OSError as exc:
                raise KVStoreError(f"cannot read {self._data_path}: {exc}") from exc
            if problems:
                raise StoreCorruptError(
                    f"{self._data_path}: {len(problems)} structural problem(s), "
                    f"first: {problems[0]}"
                )
        try:
            env = lmdb.open(
                str(self.path),
                subdir=True,
                map_size=self._map_size,
                readonly=False,
                lock=True,
                create=True,
                readahead=False,
            )
        except lmdb.Error as exc:
            raise _translate(exc, f"cannot open plan store {self.path}") from exc
        try:
            stale = env.reader_check()
        except lmdb.Error as exc:
            env.close()
            raise _translate(exc, f"cannot open plan store {self.path}") from exc
        if stale:
            log.info("plan store %s: cleared %d stale reader slot(s)", self.path, stale)
        return env

    def _open_reader_env(self) -> tuple[lmdb.Environment, tuple[int, int]]:
        # Stat before opening: if the file is swapped in between we hold the
        # older identity and merely reopen once more at the next check.
        identity = _file_identity(self._data_path)
        if identity is None:
            raise StoreMissingError(f"no plan store at {self.path} (yet)")
        try:
            env = lmdb.open(
                str(self.path),
                subdir=True,
                readonly=True,
                lock=True,  # register in the reader table: MVCC, the writer skips our pages
                create=False,
                map_size=0,  # adopt the writer's map size
                max_spare_txns=1,  # begin() reuses one cached read txn: the polling fast path
                readahead=False,
            )
        except lmdb.Error as exc:
            if _file_identity(self._data_path) is None:
                raise StoreMissingError(f"no plan store at {self.path} (yet)") from exc
            raise _translate(exc, f"cannot open plan store {self.path}") from exc
        return env, identity

    # -- plumbing ------------------------------------------------------------------

    def _revalidate(self) -> None:
        """The once-a-second reader check: reopen if data.mdb was replaced or is back."""
        if self._closed:
            raise KVStoreError(f"plan store {self.path} is closed")
        if not self.readonly:
            self._next_check = math.inf
            return
        identity = _file_identity(self._data_path)
        if self._env is not None and identity == self._identity:
            self._next_check = time.monotonic() + INODE_CHECK_INTERVAL
            return
        with self._reopen_lock:  # two threads must not open the same new files twice
            if self._closed:
                raise KVStoreError(f"plan store {self.path} is closed")
            if self._env is not None and _file_identity(self._data_path) == self._identity:
                return  # another thread has just reopened
            if self._env is not None:
                log.warning("plan store %s was replaced or removed: reopening", self.path)
            # Until a reopen succeeds, retry on every call. The old environment
            # is dropped, not closed: a read in flight in another thread keeps
            # it alive until its transaction ends, then it closes itself.
            self._next_check = 0.0
            self._env = None
            self._env, self._identity = self._open_reader_env()
            self._next_check = time.monotonic() + INODE_CHECK_INTERVAL
        log.info("reopened plan store %s", self.path)

    def _read_env(self) -> lmdb.Environment:
        if time.monotonic() >= self._next_check:
            self._revalidate()
        env = self._env
        if env is None:  # closed by another thread meanwhile
            raise KVStoreError(f"plan store {self.path} is closed")
        return env

    def _failed(self, exc: lmdb.Error, what: str) -> KVStoreError:
        error = _translate(exc, f"{what} in {self.path}")
        if isinstance(error, StoreCorruptError) and self.readonly and not self._closed:
            self._next_check = 0.0  # maybe rebuilt already: look at the inode on the next call
        return error

    def _read(self, fn: Callable[[lmdb.Transaction], _T], what: str) -> _T:
        """Run ``fn`` in one short read transaction, mapping lmdb errors to ours."""
        env = self._read_env()
        for attempt in (1, 2):
            try:
                txn = env.begin(buffers=False)
                try:
                    return fn(txn)
                finally:
                    txn.abort()
            except lmdb.MapResizedError as exc:
                if attempt == 2:
                    raise self._failed(exc, what) from exc
                # The writer was reopened with a larger map: adopt it and retry.
                try:
                    env.set_mapsize(0)
                except lmdb.Error as exc2:
                    # Seen when data.mdb is overwritten in place with garbage: the
                    # "new size" is nonsense and the environment is left unusable.
                    if self.readonly and self._env is env:
                        self._env = None  # reopen (or report corruption) on the next call
                        self._next_check = 0.0
                        env.close()
                    raise StoreCorruptError(
                        f"{what} in {self.path}: cannot adopt the writer's map size "
                        f"({exc2}); the store looks damaged"
                    ) from exc2
            except lmdb.Error as exc:
                raise self._failed(exc, what) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(self, fn: Callable[[lmdb.Transaction], _T], what: str) -> _T:
        """Run ``fn`` in one write transaction: all of it is committed, or none."""
        if self.readonly:
            raise KVStoreError(f"{what}: plan store {self.path} is open read-only")
        env = self._env
        if self._closed or env is None:
            raise KVStoreError(f"{what}: plan store {self.path} is closed")
        try:
            txn = env.begin(write=True, buffers=False)
        except lmdb.Error as exc:
            raise self._failed(exc, what) from exc
        try:
            result = fn(txn)
        except BaseException as exc:
            txn.abort()
            if isinstance(exc, lmdb.Error):
                raise self._failed(exc, what) from exc
            raise
        try:
            txn.commit()
        except lmdb.Error as exc:
            raise self._failed(exc, what) from exc
        return result

    def _pointer_key(self, topology: str) -> bytes:
        key = self._pointer_keys.get(topology)
        if key is None:
            key = _LATEST + _topology_bytes(topology)
            if len(self._pointer_keys) < _POINTER_KEY_CACHE:
                self._pointer_keys[topology] = key
        return key

    # -- supervisor ------------------------------------------------------------------

    def put_plan(self, topology: str, version: int, plan: dict[str, Any]) -> None:
        pointer = self._pointer_key(topology)
        prefix = _plan_prefix(topology)
        new = _encode_version(version)
        data = _pack(plan, f"plan {topology!r} v{version}")

        def write(txn: lmdb.Transaction) -> int | None:
            current = txn.get(pointer)
            if current is not None:
                latest = _decode_version(current, pointer)
                if version < latest:
                    raise ValueError(
                        f"plan {topology!r}: version {version} is older than the latest {latest}"
                    )
                if version == latest:
                    stored = txn.get(prefix + current)
                    if stored is None:
                        raise StoreCorruptError(f"{pointer!r} points at a missing record")
                    if stored == data or _unpack(stored, prefix + current) == _unpack(data, b""):
                        return None  # the same plan again: a re-sync, nothing to do
                    raise ValueError(
                        f"plan {topology!r}: version {version} is already stored "
                        f"with a different plan"
                    )
            txn.put(prefix + new, data)
            txn.put(pointer, new)
            stale = _scan_keys(txn, prefix)[: -self.history]
            for key in stale:
                txn.delete(key)
            return len(stale)

        self.clear_stale_readers()
        pruned = self._write(write, f"put_plan({topology!r}, {version})")
        if pruned is None:
            log.debug("plan %s v%d unchanged", topology, version)
        else:
            log.debug(
                "stored plan %s v%d (%d bytes, pruned %d)", topology, version, len(data), pruned
            )

    def replaced(self) -> bool:
        """True when the writer's files are no longer the ones at its path (the directory was
        removed or swapped under it): what it writes nobody reads; the supervisor rebuilds."""
        return not self.readonly and _file_identity(self._data_path) != self._identity

    def clear_stale_readers(self) -> None:
        """Free the slots of readers that died (a worker killed, or one that exits without closing):
        they pin old pages, and once LMDB's reader table is full no one can read at all."""
        env = self._env
        if env is None or self.readonly:
            return
        try:
            stale = env.reader_check()
        except lmdb.Error as exc:  # only housekeeping: the write reports real trouble
            log.debug("plan store %s: reader_check failed: %s", self.path, exc)
            return
        if stale:
            log.info("plan store %s: cleared %d stale reader slot(s)", self.path, stale)

    def remove(self, topology: str) -> None:
        pointer = self._pointer_key(topology)
        prefix = _plan_prefix(topology)

        def write(txn: lmdb.Transaction) -> int:
            keys = _scan_keys(txn, prefix)
            for key in keys:
                txn.delete(key)
            txn.delete(pointer)
            return len(keys)

        removed = self._write(write, f"remove({topology!r})")
        log.debug("removed plan %s (%d records)", topology, removed)

    def put_meta(self, key: str, value: dict[str, Any]) -> None:
        mkey = _meta_key(key)
        data = _pack(value, f"meta {key!r}")
        self._write(lambda txn: txn.put(mkey, data), f"put_meta({key!r})")

    def remove_meta(self, key: str) -> None:
        mkey = _meta_key(key)
        self._write(lambda txn: txn.delete(mkey), f"remove_meta({key!r})")

    # -- readers ---------------------------------------------------------------------

    def latest_version(self, topology: str) -> int | None:
        # The workers' 100 ms poll: keep it to one cached key, one cached read
        # txn and one get; everything unusual goes through _read().
        key = self._pointer_keys.get(topology) or self._pointer_key(topology)
        env = self._env
        if env is None or _monotonic() >= self._next_check:
            env = self._read_env()
        try:
            txn = env.begin(buffers=False)
            try:
                raw = txn.get(key)
            finally:
                txn.abort()
        except lmdb.Error:
            raw = self._read(lambda txn: txn.get(key), f"latest_version({topology!r})")
        if raw is None:
            return None
        return _decode_version(raw, key)

    def latest(self, topology: str) -> tuple[int, dict[str, Any]] | None:
        pointer = self._pointer_key(topology)
        prefix = _plan_prefix(topology)

        def read(txn: lmdb.Transaction) -> tuple[int, bytes | None] | None:
            current = txn.get(pointer)
            if current is None:
                return None
            return _decode_version(current, pointer), txn.get(prefix + current)

        found = self._read(read, f"latest({topology!r})")
        if found is None:
            return None
        version, raw = found
        if raw is None:
            raise StoreCorruptError(f"{pointer!r} points at version {version}, which has no record")
        return version, _unpack(raw, prefix + _encode_version(version))

    def get(self, topology: str, version: int) -> dict[str, Any] | None:
        key = _plan_prefix(topology) + _encode_version(version)
        raw = self._read(lambda txn: txn.get(key), f"get({topology!r}, {version})")
        return None if raw is None else _unpack(raw, key)

    def versions(self, topology: str) -> list[int]:
        prefix = _plan_prefix(topology)
        keys = self._read(lambda txn: _scan_keys(txn, prefix), f"versions({topology!r})")
        return [_decode_version(key[len(prefix) :], key) for key in keys]

    def topologies(self) -> list[str]:
        keys = self._read(lambda txn: _scan_keys(txn, _LATEST), "topologies()")
        try:
            return [key[len(_LATEST) :].decode() for key in keys]
        except UnicodeDecodeError as exc:
            raise StoreCorruptError(f"a topology name in {self.path} is not UTF-8") from exc

    def get_meta(self, key: str) -> dict[str, Any] | None:
        mkey = _meta_key(key)
        raw = self._read(lambda txn: txn.get(mkey), f"get_meta({key!r})")
        return None if raw is None else _unpack(raw, mkey)

    def verify(self) -> int:
        """Decode every record and follow every pointer; return the number of records.

        Raises :class:`StoreCorruptError` at the first bad one. A writer runs it
        on open, so :meth:`open_or_rebuild` rebuilds a store with a bad record
        instead of letting the supervisor trip over it later; a node's store
        holds a few KB, so it costs well under a millisecond.
        """

        def check(txn: lmdb.Transaction) -> int:
            count = unknown = 0
            for key, value in txn.cursor().iternext():
                count += 1
                if key.startswith(_PLAN):
                    name, sep, version = key[len(_PLAN) :].rpartition(b"/")
                    if not sep or not name or b"/" in name:
                        raise StoreCorruptError(f"malformed record key {key[:80]!r}")
                    _decode_version(version, key)
                    _unpack(value, key)
                elif key.startswith(_LATEST):
                    _decode_version(value, key)
                    if txn.get(_PLAN + key[len(_LATEST) :] + b"/" + value) is None:
                        raise StoreCorruptError(f"{key[:80]!r} points at a missing record")
                elif key.startswith(_META):
                    _unpack(value, key)
                else:
                    unknown += 1
            if unknown:
                log.warning("plan store %s: ignoring %d unknown key(s)", self.path, unknown)
            return count

        return self._read(check, "verify()")

    # -- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._next_check = -math.inf  # every later read goes to _revalidate(), which refuses
        env, self._env = self._env, None
        if env is not None:
            env.close()
        lock, self._lock = self._lock, None
        if lock is not None:
            _release_writer_lock(lock)
        log.debug("closed plan store %s", self.path)

    def __repr__(self) -> str:
        mode = "closed" if self._closed else "read-only" if self.readonly else "writer"
        return f"<{type(self).__name__} {str(self.path)!r} {mode}>"
