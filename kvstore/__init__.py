"""Node-local plan store: the supervisor writes each local allocation plan, workers poll it.

This is N-Storm's K/V store (paper section 3.2, ARCHITECTURE.md section 6): an
embedded LMDB environment per node, written only by the supervisor and read
by the workers without any IPC, so a worker learns of a migration within one
poll and a poll costs microseconds. Records are versioned and append-only; a
``latest`` pointer moves in the same transaction as its record.

Typical use::

    store, rebuilt = LMDBPlanStore.open_or_rebuild(path)  # supervisor
    store.put_plan("wordcount-1", 7, plan)

    reader = LMDBPlanStore(path, readonly=True)           # worker
    if reader.latest_version("wordcount-1") != seen:
        seen, plan = reader.latest("wordcount-1")
"""

from __future__ import annotations

from kvstore.base import PlanStore
from kvstore.errors import (
    KVStoreError,
    StoreCorruptError,
    StoreLockedError,
    StoreMissingError,
)
from kvstore.lmdb_store import LMDBPlanStore

__all__ = [
    "KVStoreError",
    "LMDBPlanStore",
    "PlanStore",
    "StoreCorruptError",
    "StoreLockedError",
    "StoreMissingError",
]
