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

A checkpoint writes only the keys set or deleted since the last one (a delta per group),
found one of two ways, whichever costs the bolt less: by comparing the mapping with the shallow
copy kept from the last checkpoint (:func:`changed_keys`, a pass over the state per checkpoint
and nothing per assignment), or by noting each assignment (:class:`TrackedKeyedState`, a Python
call per assignment and nothing per checkpoint). A value changed in place
(``state[k].append(x)``) is seen by neither: assign it again (``state[k] = v``) or call
:meth:`KeyedState.touch`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["KeyedState", "TrackedKeyedState", "changed_keys", "key_group", "owned_groups", "owner_of", "read_keyed"]

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
    """A bolt's ``self.keyed_state`` with a durable state provider: a plain dict to the code that
    uses it (its own C methods: nothing is added to an assignment), whose changes a checkpoint
    finds with :func:`changed_keys`, against the copy of the mapping it kept from the last one.

    A key counts as changed when its value is another object than then (or it came or went): a
    value assigned again is seen, a value changed in place (``state[k].append(x)``) is not:
    assign it again (``state[k] = v``) or call :meth:`touch`.
    """

    __slots__ = ("touched",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.touched: set[Any] | None = set()

    def touch(self, key: Any) -> None:
        """``key``'s value changed in place: write it with the next checkpoint (nothing to do
        without checkpoints: ``touched`` is None then)."""
        touched = self.touched
        if touched is not None:
            touched.add(key)


class TrackedKeyedState(KeyedState):
    """The same mapping while it notes every key set or deleted in ``touched`` (a Python call per
    assignment instead of a pass over the state per checkpoint). A checkpoint switches a
    ``keyed_state`` between the two classes (the same object: its class is assigned, so code that
    holds it keeps working) by which costs less: this one when the bolt sets fewer keys between
    two checkpoints than its state has (a large state that changes little), the plain one when it
    sets more (word count's counts: a few thousand words set a million times a second)."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self.touched.add(key)

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, key)
        self.touched.add(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self.touched.add(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        key, value = dict.popitem(self)
        self.touched.add(key)
        return key, value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self.touched.add(key)
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        other = dict(*args, **kwargs)
        dict.update(self, other)
        self.touched.update(other)

    def clear(self) -> None:
        self.touched.update(self)
        dict.clear(self)

    def __ior__(self, other: Any) -> TrackedKeyedState:  # type: ignore[override]
        self.update(other)
        return self


def changed_keys(current: Mapping[Any, Any], previous: Mapping[Any, Any], touched: Iterable[Any] = ()) -> set[Any]:
    """The keys set to another object, added or deleted in ``current`` since ``previous`` (a
    shallow copy of it, taken then), and ``touched``. One pass over ``current``; a second over
    ``previous`` only if keys were deleted. Identity, not equality: cheap, and a recomputed value
    that happens to be equal is only written once more."""
    changed = set(touched)
    get = previous.get
    found = 0
    for key, value in current.items():
        before = get(key, _MISSING)
        if before is _MISSING:
            changed.add(key)
        else:
            found += 1
            if before is not value:
                changed.add(key)
    if found < len(previous):
        changed.update(k for k in previous if k not in current)
    return changed


def as_key(value: Any) -> Any:
    """A key decoded from msgpack, hashable again (arrays come back as lists)."""
    if isinstance(value, list):
        return tuple(as_key(v) for v in value)
    return value


def _state_map(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    return {as_key(k) if type(k) is list else k: v for k, v in pairs}


def unpack_state(data: bytes) -> Any:
    """Decode state (a snapshot, a key group's entries, a handed-over state): lists stay lists,
    so user code can keep mutating them, but a map's key that was a tuple (msgpack has only
    arrays) is a tuple again: ``self.state[(day, page)]`` comes back as it went."""
    import msgpack

    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False, object_pairs_hook=_state_map)


def apply_entries(target: dict[Any, Any], entries: Iterable[tuple[bool, Mapping[Any, Any] | list[Any]]]) -> None:
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
    out = KeyedState()
    for g in range(groups):
        chain = store.group_chain(component, g, checkpoint)
        apply_entries(out, [(full, unpack_state(data)) for _c, full, data in chain])
    return dict(out)
