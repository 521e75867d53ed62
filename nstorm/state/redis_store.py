"""Checkpoints in Redis: ``topology.state.provider=redis``, Storm's usual state store.

``topology.state.provider.config`` gives the server, ``{"url": "redis://host:6379/0"}``
(default ``redis://127.0.0.1:6379/0``). Every key of a submission starts with
``nstorm:<topology>-<submission>:``::

    ...:e:<checkpoint>:<executor>     an executor's snapshot
    ...:e                             sorted set of "<checkpoint>:<executor>" (for pruning)
    ...:s:<checkpoint>                hash: executor -> the bytes it wrote
    ...:g:<component>:<group>         sorted set of the group's checkpoints (scored by id)
    ...:g:<component>:<group>:<id>    b"F" + a full copy, or b"D" + a delta
    ...:groups                        set of "<component>:<group>"

An executor's part of a checkpoint is written in one MULTI/EXEC transaction. Redis being away
is a :class:`~nstorm.state.store.StateError`: the checkpoint fails, processing goes on.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from nstorm.config import without_credentials
from nstorm.state.config import StateConfig
from nstorm.state.store import ChainLostError, GroupEntry, StateError, StateStore, last_full

__all__ = ["RedisStateStore"]

_TIMEOUT_SECS = 5.0


class RedisStateStore(StateStore):
    """See the module docstring."""

    def __init__(self, config: StateConfig, namespace: str) -> None:
        self.url = str(config.options.get("url", "redis://127.0.0.1:6379/0"))
        self.shown = without_credentials(self.url)  # what messages show (they reach status, the UI, logs)
        self.ns = f"nstorm:{namespace}:"
        try:
            self.redis = redis.Redis.from_url(self.url, socket_timeout=_TIMEOUT_SECS,
                                              socket_connect_timeout=_TIMEOUT_SECS)
        except (ValueError, redis.RedisError) as exc:
            msg = f"bad Redis url {self.shown!r}: {without_credentials(str(exc))}"
            raise StateError(msg) from exc

    def _fail(self, what: str, exc: Exception) -> StateError:
        return StateError(f"{what}: Redis at {self.shown}: {type(exc).__name__}: {without_credentials(str(exc))}")

    def write(self, cid: int, executor: str, blob: bytes, groups: Mapping[tuple[str, int], tuple[bool, bytes]]) -> int:
        ns = self.ns
        size = len(blob)
        deltas = [group for group, (full, _data) in groups.items() if not full]
        try:
            if deltas:
                # A delta on a chain Redis no longer has (it restarted without persistence, or
                # evicted it) would commit a checkpoint whose restore silently lacks every earlier key.
                check = self.redis.pipeline(transaction=False)
                for component, group in deltas:
                    check.zcard(f"{ns}g:{component}:{group}")
                lost = [f"{c}:{g}" for (c, g), n in zip(deltas, check.execute(), strict=True) if not n]
                if lost:
                    msg = (f"checkpoint {cid} of {executor}: Redis at {self.shown} has lost the earlier entries of "
                           f"key group(s) {', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''}: the next "
                           "checkpoint writes them whole")
                    raise ChainLostError(msg)
            pipe = self.redis.pipeline(transaction=True)
            pipe.set(f"{ns}e:{cid}:{executor}", blob)
            pipe.zadd(f"{ns}e", {f"{cid}:{executor}": cid})
            for (component, group), (full, data) in groups.items():
                chain = f"{ns}g:{component}:{group}"
                pipe.set(f"{chain}:{cid}", (b"F" if full else b"D") + data)
                pipe.zadd(chain, {str(cid): cid})
                pipe.sadd(f"{ns}groups", f"{component}:{group}")
                size += len(data) + 1
            pipe.hset(f"{ns}s:{cid}", executor, size)
            pipe.execute()
        except redis.RedisError as exc:
            raise self._fail(f"checkpoint {cid} of {executor}", exc) from exc
        return size

    def executor(self, cid: int, executor: str) -> bytes | None:
        try:
            value = self.redis.get(f"{self.ns}e:{cid}:{executor}")
        except redis.RedisError as exc:
            raise self._fail(f"the snapshot of {executor} in checkpoint {cid}", exc) from exc
        return bytes(value) if value is not None else None

    def written(self, cid: int) -> dict[str, int]:
        try:
            sizes = self.redis.hgetall(f"{self.ns}s:{cid}")
        except redis.RedisError as exc:
            raise self._fail(f"the executors of checkpoint {cid}", exc) from exc
        return {k.decode(): int(v) for k, v in sizes.items()}

    def _entries(self, chain: str, upto: int) -> list[GroupEntry]:
        cids = [int(c) for c in self.redis.zrangebyscore(chain, "-inf", upto)]
        if not cids:
            return []
        values = self.redis.mget([f"{chain}:{c}" for c in cids])
        return [(c, v[:1] == b"F", bytes(v[1:])) for c, v in zip(cids, values, strict=True) if v is not None]

    def group_chain(self, component: str, group: int, upto: int) -> list[GroupEntry]:
        try:
            return last_full(self._entries(f"{self.ns}g:{component}:{group}", upto))
        except redis.RedisError as exc:
            raise self._fail(f"key group {component}:{group}", exc) from exc

    def prune(self, keep_from: int) -> int:
        ns = self.ns
        try:
            stale_execs = [m.decode() for m in self.redis.zrangebyscore(f"{ns}e", "-inf", f"({keep_from}")]
            keys = [f"{ns}e:{m}" for m in stale_execs]
            sizes = {f"{ns}s:{m.split(':', 1)[0]}" for m in stale_execs}
            members: dict[str, list[str]] = {}
            for name in self.redis.smembers(f"{ns}groups"):
                chain = f"{ns}g:{name.decode()}"
                entries = self._entries(chain, keep_from)
                kept = last_full(entries)
                first_kept = kept[0][0] if kept else keep_from + 1
                old = [str(c) for c, _f, _d in entries if c < first_kept]
                keys.extend(f"{chain}:{c}" for c in old)
                if old:
                    members[chain] = old
            pipe = self.redis.pipeline(transaction=True)
            if keys or sizes:
                pipe.delete(*keys, *sizes)
            if stale_execs:
                pipe.zrem(f"{ns}e", *stale_execs)
            for chain, old in members.items():
                pipe.zrem(chain, *old)
            pipe.execute()
        except redis.RedisError as exc:
            raise self._fail("pruning checkpoints", exc) from exc
        return len(keys)

    def drop_snapshots(self, cid: int) -> int:
        ns = self.ns
        try:
            members = [m.decode() for m in self.redis.zrangebyscore(f"{ns}e", cid, cid)]
            pipe = self.redis.pipeline(transaction=True)
            if members:
                pipe.delete(*(f"{ns}e:{m}" for m in members))
                pipe.zrem(f"{ns}e", *members)
            pipe.delete(f"{ns}s:{cid}")
            pipe.execute()
        except redis.RedisError as exc:
            raise self._fail(f"deleting checkpoint {cid}'s snapshots", exc) from exc
        return len(members)

    def drop(self) -> None:
        try:
            batch = []
            for key in self.redis.scan_iter(match=f"{self.ns}*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    self.redis.delete(*batch)
                    batch = []
            if batch:
                self.redis.delete(*batch)
        except redis.RedisError as exc:
            raise self._fail("dropping checkpoints", exc) from exc

    def close(self) -> None:
        self.redis.close()
