"""The interface of the node-local plan store (ARCHITECTURE.md section 6).

One store per node. The supervisor is its only writer: it copies the local
part of each allocation plan out of ZooKeeper into the store. The workers of
the node only read: every TW (100 ms) they ask for the latest version of their
topology's plan and fetch the plan when the version moved. That split is what
lets a worker pick up a migration without any IPC with the supervisor.

Records are append-only and versioned, ``plan/<topology>/<version>``, with a
``latest/<topology>`` pointer written in the same transaction as its record,
so a reader sees either the old or the new plan, never a pointer without its
record. Only the newest ``history`` versions of a topology are kept.
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Any, Self

__all__ = ["PlanStore"]


class PlanStore(abc.ABC):
    """Versioned local allocation plans: the supervisor writes, workers read.

    Methods marked *supervisor* need a store opened for writing; a read-only
    store raises :class:`~kvstore.errors.KVStoreError` for them. Every method
    may raise :class:`~kvstore.errors.StoreCorruptError` when the files or a
    record cannot be decoded.
    """

    # -- supervisor (the single writer) -------------------------------------

    @abc.abstractmethod
    def put_plan(self, topology: str, version: int, plan: dict[str, Any]) -> None:
        """Append ``plan/<topology>/<version>`` and move ``latest/<topology>`` to it.

        *Supervisor.* Record and pointer go in one write transaction, then the
        topology's records older than the newest ``history`` versions are
        pruned in that same transaction. Versions only move forward: a version
        lower than the latest raises ``ValueError``; the latest version again
        is a no-op when the plan is identical (a re-sync from ZooKeeper) and a
        ``ValueError`` otherwise (two different plans must not share a version).
        """

    @abc.abstractmethod
    def remove(self, topology: str) -> None:
        """Drop every record of ``topology`` and its pointer, in one transaction.

        *Supervisor*, when a topology is killed or leaves the node. Removing
        an unknown topology is a no-op. A later ``put_plan`` may start again
        from any version.
        """

    @abc.abstractmethod
    def put_meta(self, key: str, value: dict[str, Any]) -> None:
        """Store ``value`` under ``meta/<key>``: the supervisor's own bookkeeping."""

    @abc.abstractmethod
    def remove_meta(self, key: str) -> None:
        """Drop ``meta/<key>`` (a no-op if there is none)."""

    # -- workers (readers) and the supervisor ---------------------------------

    @abc.abstractmethod
    def latest_version(self, topology: str) -> int | None:
        """The version ``latest/<topology>`` points at, or None if there is none.

        *Worker* fast path, polled every TW: it reads the pointer only, so a
        poll that finds nothing new costs one read transaction and one get.
        """

    @abc.abstractmethod
    def latest(self, topology: str) -> tuple[int, dict[str, Any]] | None:
        """``(version, plan)`` of the latest plan, read in one transaction, or None."""

    @abc.abstractmethod
    def get(self, topology: str, version: int) -> dict[str, Any] | None:
        """The plan of one version, or None if it was never written or was pruned."""

    @abc.abstractmethod
    def versions(self, topology: str) -> list[int]:
        """The versions still stored for ``topology``, oldest first."""

    @abc.abstractmethod
    def topologies(self) -> list[str]:
        """The topologies that have a latest plan, sorted."""

    @abc.abstractmethod
    def get_meta(self, key: str) -> dict[str, Any] | None:
        """The value stored by :meth:`put_meta` under ``key``, or None."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store (and the writer lock). Idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
