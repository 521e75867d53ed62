"""The checkpoint store interface: what a checkpoint holds and how a restore reads it back.

A store holds the checkpoints of one submission of one topology, two kinds of entries:

- **executor snapshots**, one blob per (checkpoint, executor): its ``self.state`` and, for a
  spout, the tracked tuples pending when it took the snapshot;
- **key groups** (a bolt's ``self.keyed_state``, split into ``topology.max.parallelism``
  groups by key): per (component, group) a chain of entries, each either a *full* copy of the
  group or a *delta* (the keys set or deleted since the entry before it). A restore of
  checkpoint C reads the last full entry at or before C and the deltas after it up to C, so a
  checkpoint of a large state with few changed keys writes only those keys. Deltas are
  overlays (a key's newest value wins), so a delta written for a checkpoint that was abandoned
  later still belongs to the chain, and one written twice does no harm.

A checkpoint is committed in ZooKeeper by the coordinator (Nimbus), not here: the store only
holds data. Values are msgpack, written and read by :mod:`worker.checkpoint`; nothing here
looks inside them.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

from nstorm.errors import NStormError
from nstorm.state.config import StateConfig
from nstorm.state.keyed import unpack_state

__all__ = ["GroupEntry", "StateError", "StateStore", "open_store", "unpack_snapshot"]

GroupEntry = tuple[int, bool, bytes]  # (checkpoint id, full, data)


class StateError(NStormError):
    """A checkpoint could not be written or read: the store is unreachable, full or damaged."""


class ChainLostError(StateError):
    """The store lost the entries a delta builds on (a Redis restarted without persistence): the
    write is refused, and the writer's next entries are whole."""


class StateStore(abc.ABC):
    """Checkpoints of one submission of one topology (see the module docstring)."""

    @abc.abstractmethod
    def write(self, cid: int, executor: str, blob: bytes, groups: Mapping[tuple[str, int], tuple[bool, bytes]]) -> int:
        """Write one executor's part of checkpoint ``cid`` at once: its snapshot ``blob`` and its
        key groups' entries (``(component, group) -> (full, data)``); the bytes written."""

    @abc.abstractmethod
    def executor(self, cid: int, executor: str) -> bytes | None:
        """The snapshot ``executor`` wrote for ``cid``, or None."""

    @abc.abstractmethod
    def written(self, cid: int) -> dict[str, int]:
        """The executors whose part of checkpoint ``cid`` is in the store, with the bytes each
        wrote (the coordinator commits ``cid`` once every executor of the topology is among them)."""

    @abc.abstractmethod
    def group_chain(self, component: str, group: int, upto: int) -> list[GroupEntry]:
        """The entries of a key group a restore of ``upto`` applies, oldest first: the last full one
        at or before ``upto`` and the deltas after it (all of them, from the first, if none is full)."""

    @abc.abstractmethod
    def prune(self, keep_from: int) -> int:
        """Delete what no checkpoint from ``keep_from`` on needs; the entries deleted."""

    @abc.abstractmethod
    def drop_snapshots(self, cid: int) -> int:
        """Delete the executor snapshots of ``cid``, a checkpoint abandoned (never committed): while
        commits fail, each would stay until the next commit's prune. Its key groups' entries
        stay (later deltas build on them). The snapshots deleted."""

    @abc.abstractmethod
    def drop(self) -> None:
        """Delete every checkpoint of this submission (the topology was killed)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Free the connection or file handles."""

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def unpack_snapshot(blob: bytes) -> dict[str, Any]:
    """An executor's snapshot (msgpack, never pickle): a map with ``state``; ValueError if damaged."""
    try:
        data = unpack_state(blob)
    except Exception as exc:  # noqa: BLE001 - any damage is reported the same way
        msg = f"damaged snapshot: {type(exc).__name__}: {exc}"
        raise ValueError(msg) from None
    if not isinstance(data, dict) or not isinstance(data.get("state"), dict):
        msg = "damaged snapshot: not a snapshot map"
        raise ValueError(msg)
    return data


def last_full(entries: list[GroupEntry]) -> list[GroupEntry]:
    """``entries`` (ascending) from the last full one on (all of them if none is full)."""
    for i in range(len(entries) - 1, -1, -1):
        if entries[i][1]:
            return entries[i:]
    return entries


def open_store(config: StateConfig, topology: str, submission: str | None) -> StateStore:
    """The store of one submission of ``topology``; :class:`StateError` if it cannot be opened."""
    namespace = f"{topology}-{(submission or 'nosubmission')[:16]}"
    if config.provider == "lmdb":
        from nstorm.state.lmdb_store import LMDBStateStore

        return LMDBStateStore(config, namespace)
    if config.provider == "redis":
        from nstorm.state.redis_store import RedisStateStore

        return RedisStateStore(config, namespace)
    msg = f"topology.state.provider={config.provider!r} keeps no checkpoints"
    raise StateError(msg)
