"""Tuple-tree timeouts of a spout: roots in time buckets, not a record per tuple.

Storm's spouts keep a rotating map of pending tuples; this is the same idea. A spout
tracks tens of thousands of roots a second for ``topology.message.timeout.secs`` (30 s);
a ``(deadline, root)`` record per root would be a container allocated per tuple and
kept for the whole timeout, which is what Python's cyclic collector then walks (it was
the cause of the workers' 3-11 ms pauses once a second). Here a root id (an int) is
appended to the list of the current bucket, and a bucket expires as a whole, at most
``granularity`` seconds after its oldest root's own deadline.

Example::

    >>> t = Timeouts(timeout=30.0, granularity=0.1)
    >>> t.add(7, now=1.0); t.add(8, now=1.05); t.add(9, now=1.2)
    >>> t.expire(31.09), t.expire(31.15), t.expire(31.4)
    ([], [7, 8], [9])
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator

__all__ = ["Timeouts"]


class Timeouts:
    """Roots by expiry: :meth:`add` each tracked root, :meth:`expire` the ones that are due."""

    __slots__ = ("timeout", "granularity", "buckets", "open", "open_until")

    def __init__(self, timeout: float, granularity: float = 0.1) -> None:
        self.timeout = timeout
        self.granularity = granularity
        self.buckets: collections.deque[tuple[float, list[int]]] = collections.deque()  # (expires at, roots)
        self.open: list[int] = []  # the newest bucket's roots, while roots may still join it
        self.open_until = float("-inf")

    def add(self, root: int, now: float) -> None:
        """Track ``root``, emitted at ``now``: it expires ``timeout`` (+ up to ``granularity``) later."""
        if now >= self.open_until:
            self._open_bucket(now)
        self.open.append(root)

    def _open_bucket(self, now: float) -> None:
        self.open = []
        self.open_until = now + self.granularity
        self.buckets.append((now + self.granularity + self.timeout, self.open))

    def due(self, now: float) -> bool:
        buckets = self.buckets
        return bool(buckets) and buckets[0][0] <= now

    def expire(self, now: float) -> list[int]:
        """Every root whose bucket is due at ``now`` (the caller skips roots acked meanwhile)."""
        out: list[int] = []
        buckets = self.buckets
        while buckets and buckets[0][0] <= now:
            out.extend(buckets.popleft()[1])
        if not buckets:
            self.open_until = float("-inf")
        return out

    def items(self) -> Iterator[tuple[float, int]]:
        """``(expires at, root)`` of every tracked root, oldest first."""
        for at, roots in self.buckets:
            for root in roots:
                yield at, root

    def rebuild(self, entries: Iterable[tuple[float, int]]) -> None:
        """Replace the contents with ``(expires at, root)`` entries (after a hand-over)."""
        self.buckets.clear()
        self.open_until = float("-inf")
        for at, root in sorted(entries):
            if not self.buckets or at > self.buckets[-1][0] + self.granularity:
                self.buckets.append((at, []))
            self.buckets[-1][1].append(root)

    def __len__(self) -> int:
        return sum(len(roots) for _, roots in self.buckets)
