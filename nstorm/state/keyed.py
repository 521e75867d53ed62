"""Keyed state: a bolt's ``self.keyed_state``, split into key groups.

A key's group is ``hash(key) % topology.max.parallelism`` (workers share one hash seed,
``topology.hash.seed``), and fields grouping sends a key to the executor that owns its
group: executor ``i`` of ``n`` owns the groups ``g`` with ``g % n == i``. (Flink gives each
executor a contiguous range of groups instead; but ``hash`` of a small int is the int itself, so
keys such as ``n % 7`` fall into neighbouring groups, and a range would give them all to one
executor. With ``g % n``, a key goes where ``hash(key) % n`` sent it before key groups, whenever
``n`` divides the number of groups.) A checkpoint stores each group on its own, so a restore
finds a group's keys wherever its owner runs now, whatever the layout was when the checkpoint
was taken.

:class:`KeyedState` notes the keys set or deleted since the last checkpoint, so a checkpoint
writes only those (a delta per group). A value changed in place (``state[k].append(x)``) is
not seen: assign it again (``state[k] = v``) or call :meth:`KeyedState.touch`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["KeyedState", "key_group", "owned_groups", "owner_of", "read_keyed"]

_MISSING = object()


def key_group(key: Any, groups: int) -> int:
    """The key group of ``key`` (the same hash fields grouping routes by)."""
    return hash(key) % groups


def owner_of(group: int, executors: int, groups: int) -> int:
    """The index of the executor (of ``executors``) that owns ``group``."""
    return group % executors


def owned_groups(index: int, executors: int, groups: int) -> list[int]:
    """The key groups executor ``index`` of ``executors`` owns."""
    return list(range(index, groups, executors))


class KeyedState(dict):  # type: ignore[type-arg]
    """A dict that remembers which keys changed since :meth:`take_changes` (see the module docstring)."""

    __slots__ = ("changed",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.changed: set[Any] = set(self)

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self.changed.add(key)

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, key)
        self.changed.add(key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        if key in self:
            self.changed.add(key)
        return dict.pop(self, key) if default is _MISSING else dict.pop(self, key, default)

    def popitem(self) -> tuple[Any, Any]:
        key, value = dict.popitem(self)
        self.changed.add(key)
        return key, value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self.changed.add(key)
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        other = dict(*args, **kwargs)
        dict.update(self, other)
        self.changed.update(other)

    def clear(self) -> None:
        self.changed.update(self)
        dict.clear(self)

    def __ior__(self, other: Any) -> KeyedState:  # type: ignore[override]
        self.update(other)
        return self

    def touch(self, key: Any) -> None:
        """``key``'s value changed in place: write it with the next checkpoint."""
        self.changed.add(key)

    def take_changes(self) -> set[Any]:
        """The keys changed since the last call (set or deleted), and forget them."""
        changed, self.changed = self.changed, set()
        return changed

    def load(self, items: Iterable[tuple[Any, Any]]) -> None:
        """Install restored entries without marking them changed."""
        for key, value in items:
            dict.__setitem__(self, key, value)


def as_key(value: Any) -> Any:
    """A key decoded from msgpack, hashable again (arrays come back as lists)."""
    if isinstance(value, list):
        return tuple(as_key(v) for v in value)
    return value


def apply_entries(target: KeyedState, entries: Iterable[tuple[bool, Mapping[Any, Any] | list[Any]]]) -> None:
    """Apply a key group's chain (oldest first): a full entry replaces the group's keys, a delta
    overlays them. Entries are ``[[key, value], ...]`` with ``[key]`` for a deleted key."""
    keys: set[Any] = set()
    for full, pairs in entries:
        if full:
            for key in keys:
                dict.pop(target, key, None)
            keys = set()
        for pair in pairs:
            key = as_key(pair[0])
            keys.add(key)
            if len(pair) > 1:
                dict.__setitem__(target, key, pair[1])
            else:
                dict.pop(target, key, None)


def read_keyed(store: Any, component: str, checkpoint: int, groups: int) -> dict[Any, Any]:
    """A component's whole ``keyed_state`` in ``checkpoint`` of ``store`` (a
    :class:`~nstorm.state.store.StateStore`), all of its key groups merged: for tools and checks."""
    import msgpack

    out = KeyedState()
    for g in range(groups):
        chain = store.group_chain(component, g, checkpoint)
        apply_entries(out, [(full, msgpack.unpackb(data, raw=False, strict_map_key=False)) for _c, full, data in chain])
    return dict(out)
