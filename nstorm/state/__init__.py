"""Durable state: where checkpoints live (:mod:`nstorm.state.store`) and what they hold.

``topology.state.provider`` picks the store: ``memory`` (none: state is lost with its worker),
``lmdb`` (:mod:`nstorm.state.lmdb_store`, an embedded store on a local filesystem every node of
a one-machine cluster shares) or ``redis`` (:mod:`nstorm.state.redis_store`, for clusters over
several hosts). Both write msgpack, never pickle.
"""

from __future__ import annotations

from nstorm.state.config import PROVIDERS, StateConfig, state_config
from nstorm.state.store import StateError, StateStore, open_store

__all__ = ["PROVIDERS", "StateConfig", "StateError", "StateStore", "open_store", "state_config"]
