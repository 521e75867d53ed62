"""Checkpoints in an LMDB environment: ``topology.state.provider=lmdb``.

One environment per submission, ``<topology.state.dir>/<topology>-<submission>`` (default
``$NSTORM_HOME/state``), opened by every worker that writes to it and by Nimbus, which prunes
and drops it: LMDB lets several processes of one machine share an environment (one writer at
a time, serialised by its lock file), so every node of a one-machine cluster, network
namespaces included, uses the same one. It needs a local filesystem: a cluster over several
hosts uses Redis.

Keys (sorted, so a key group's chain is one cursor walk)::

    e/<checkpoint:012d>/<executor>            an executor's snapshot
    s/<checkpoint:012d>/<executor>            the bytes it wrote for the checkpoint
    g/<component>/<group:05d>/<checkpoint:012d>  b"F" + a full copy, or b"D" + a delta
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import lmdb

from nstorm.home import home_dir
from nstorm.state.config import StateConfig
from nstorm.state.store import ChainLostError, GroupEntry, StateError, StateStore, last_full

__all__ = ["LMDBStateStore"]

DEFAULT_MAP_SIZE = 4 * 2**30  # a sparse file: room to grow, not space taken


def _ckey(cid: int) -> bytes:
    return b"%012d" % cid


class LMDBStateStore(StateStore):
    """See the module docstring."""

    def __init__(self, config: StateConfig, namespace: str) -> None:
        root = config.directory or home_dir() / "state"
        self.path = Path(root) / namespace
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.env = lmdb.open(str(self.path), map_size=int(config.options.get("map_size", DEFAULT_MAP_SIZE)),
                                 subdir=True, max_dbs=0, lock=True, sync=True)
        except (OSError, lmdb.Error) as exc:
            msg = f"cannot open the checkpoint store {self.path}: {exc}"
            raise StateError(msg) from exc

    def write(self, cid: int, executor: str, blob: bytes, groups: Mapping[tuple[str, int], tuple[bool, bytes]]) -> int:
        size = len(blob)
        try:
            with self.env.begin(write=True) as txn:
                lost = [f"{c}:{g}" for (c, g), (full, _d) in groups.items() if not full and not self._has_chain(txn, c, g)]
                if lost:  # (as the Redis store: a delta needs the entries it builds on)
                    msg = (f"checkpoint {cid} of {executor}: {self.path} has no earlier entries of key group(s) "
                           f"{', '.join(lost[:5])}: the next checkpoint writes them whole")
                    raise ChainLostError(msg)
                txn.put(b"e/" + _ckey(cid) + b"/" + executor.encode(), blob)
                for (component, group), (full, data) in groups.items():
                    txn.put(b"g/%s/%05d/%s" % (component.encode(), group, _ckey(cid)), (b"F" if full else b"D") + data)
                    size += len(data) + 1
                txn.put(b"s/" + _ckey(cid) + b"/" + executor.encode(), b"%d" % size)
        except lmdb.Error as exc:
            msg = f"checkpoint {cid} of {executor}: cannot write to {self.path}: {exc}"
            raise StateError(msg) from exc
        return size

    @staticmethod
    def _has_chain(txn: lmdb.Transaction, component: str, group: int) -> bool:
        prefix = b"g/%s/%05d/" % (component.encode(), group)
        cursor = txn.cursor()
        return cursor.set_range(prefix) and bytes(cursor.key()).startswith(prefix)

    def executor(self, cid: int, executor: str) -> bytes | None:
        with self.env.begin() as txn:
            value = txn.get(b"e/" + _ckey(cid) + b"/" + executor.encode())
        return bytes(value) if value is not None else None

    def written(self, cid: int) -> dict[str, int]:
        prefix = b"s/" + _ckey(cid) + b"/"
        out = {}
        with self.env.begin() as txn:
            cursor = txn.cursor()
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not key.startswith(prefix):
                        break
                    out[bytes(key[len(prefix):]).decode()] = int(bytes(value))
        return out

    def _group_entries(self, txn: lmdb.Transaction, prefix: bytes, upto: int) -> list[tuple[int, bool, bytes, bytes]]:
        out = []
        cursor = txn.cursor()
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not key.startswith(prefix):
                    break
                cid = int(key[len(prefix):])
                if cid > upto:
                    break
                out.append((cid, value[:1] == b"F", bytes(value[1:]), bytes(key)))
        return out

    def group_chain(self, component: str, group: int, upto: int) -> list[GroupEntry]:
        prefix = b"g/%s/%05d/" % (component.encode(), group)
        with self.env.begin() as txn:
            entries = [(cid, full, data) for cid, full, data, _ in self._group_entries(txn, prefix, upto)]
        return last_full(entries)

    def prune(self, keep_from: int) -> int:
        deleted = 0
        try:
            with self.env.begin(write=True) as txn:
                cursor = txn.cursor()
                stale: list[bytes] = []
                sizes: list[bytes] = []
                if cursor.set_range(b"e/"):
                    for key, _ in cursor:
                        if not key.startswith(b"e/") or int(key[2:14]) >= keep_from:
                            break
                        stale.append(bytes(key))
                if cursor.set_range(b"s/"):
                    for key, _ in cursor:
                        if not key.startswith(b"s/") or int(key[2:14]) >= keep_from:
                            break
                        sizes.append(bytes(key))
                prefixes: set[bytes] = set()
                if cursor.set_range(b"g/"):
                    for key, _ in cursor:
                        if not key.startswith(b"g/"):
                            break
                        prefixes.add(bytes(key[: key.rindex(b"/") + 1]))
                for prefix in prefixes:
                    entries = self._group_entries(txn, prefix, keep_from)
                    kept = last_full([(c, f, d) for c, f, d, _ in entries])
                    first_kept = kept[0][0] if kept else keep_from + 1
                    stale.extend(key for cid, _f, _d, key in entries if cid < first_kept)
                for key in stale + sizes:
                    txn.delete(key)
                deleted = len(stale)
        except lmdb.Error as exc:
            msg = f"cannot prune the checkpoints in {self.path}: {exc}"
            raise StateError(msg) from exc
        return deleted

    def drop_snapshots(self, cid: int) -> int:
        deleted = 0
        try:
            with self.env.begin(write=True) as txn:
                for prefix in (b"e/" + _ckey(cid) + b"/", b"s/" + _ckey(cid) + b"/"):
                    cursor = txn.cursor()
                    keys = []
                    if cursor.set_range(prefix):
                        for key, _ in cursor:
                            if not key.startswith(prefix):
                                break
                            keys.append(bytes(key))
                    for key in keys:
                        txn.delete(key)
                    deleted += len(keys) if prefix.startswith(b"e/") else 0
        except lmdb.Error as exc:
            msg = f"cannot delete checkpoint {cid}'s snapshots in {self.path}: {exc}"
            raise StateError(msg) from exc
        return deleted

    def drop(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def close(self) -> None:
        env, self.env = self.env, None  # type: ignore[assignment]
        if env is not None:
            env.close()
