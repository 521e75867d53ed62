"""The checkpoint record of one topology in ZooKeeper (``/checkpoints/<name>``).

Written by the coordinator (the leading Nimbus) only; workers watch it for their orders
(take checkpoint ``pending``, ``committed`` is committed, roll back to ``restore`` when
``epoch`` grows) and ``nstorm status`` reads it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["CheckpointRecord"]


@dataclass
class CheckpointRecord:
    """See the module docstring.

    :ivar epoch: rollbacks so far; data of an older epoch is dropped.
    :ivar restore: the checkpoint the current epoch started from (0: the empty start).
    :ivar pending: the checkpoint being taken (0: none); ``pending_at`` when it was ordered.
    :ivar next_id: the id of the next checkpoint (ids are never reused, rollbacks included).
    :ivar committed: the last committed checkpoint (0: none); ``previous`` the one before.
    :ivar rollbacks_in_a_row: rollbacks of the active topology with fewer than two commits between
        them (reset when the coordinator deactivates it for too many: ``topology.state.max.rollbacks``);
        ``commits_since_rollback`` counts those commits.
    :ivar rollback_at: when a rollback that waits out its backoff is due (0: none waits;
        ``topology.state.rollback.backoff.ms``), ``rollback_reason`` why it was asked for. In the
        record, so that a new leader keeps to it.
    """

    submission: str | None = None
    provider: str = "memory"
    interval_ms: int = 1000
    epoch: int = 0
    restore: int = 0
    pending: int = 0
    pending_at: float = 0.0
    next_id: int = 1
    committed: int = 0
    previous: int = 0
    committed_executors: int = 0  # how many executors wrote ``committed`` (a restore checks they are all there)
    previous_executors: int = 0
    committed_at: float = 0.0
    duration_ms: float = 0.0
    bytes: int = 0
    restores: int = 0
    rollbacks_in_a_row: int = 0
    commits_since_rollback: int = 0
    last_restore: dict[str, Any] | None = None
    last_error: str | None = None
    abandoned: int = 0
    rollback_at: float = 0.0
    rollback_reason: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes | None) -> CheckpointRecord | None:
        """The record in ``raw``; None if there is none or it is not one (never raises)."""
        if not raw:
            return None
        try:
            data = json.loads(raw.decode())
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, dict):
            return None
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None

    def status(self) -> dict[str, Any]:
        """The ``checkpoints`` field of ``nstorm status --json``."""
        last = None
        if self.committed:
            last = {"id": self.committed, "at": self.committed_at, "duration_ms": round(self.duration_ms, 1),
                    "bytes": self.bytes}
        return {"provider": self.provider, "interval_ms": self.interval_ms, "last_committed": last,
                "restores": self.restores, "rollbacks_in_a_row": self.rollbacks_in_a_row, "epoch": self.epoch,
                "pending": self.pending or None, "rollback_at": self.rollback_at or None,
                "last_restore": self.last_restore, "abandoned": self.abandoned, "last_error": self.last_error}
