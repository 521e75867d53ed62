"""Errors of the node-local plan store.

They do not derive from nstorm's errors on purpose: the store is a leaf
package that the supervisor and the workers import, and it must not pull
in the rest of nstorm. Callers that want one root catch :class:`KVStoreError`.
"""

from __future__ import annotations

__all__ = [
    "KVStoreError",
    "StoreCorruptError",
    "StoreLockedError",
    "StoreMissingError",
]


class KVStoreError(Exception):
    """Root of every error the plan store raises on purpose."""


class StoreCorruptError(KVStoreError):
    """The store's files or one of its records cannot be trusted.

    The supervisor answers with ``LMDBPlanStore.open_or_rebuild`` and rewrites
    the plans from ZooKeeper; a worker keeps polling until the store is back.
    """


class StoreLockedError(KVStoreError):
    """Another process already holds the store's single writer lock."""


class StoreMissingError(KVStoreError):
    """The store does not exist (yet): a worker retries, the supervisor creates it."""
