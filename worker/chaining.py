"""Live task chaining in a worker: a downstream executor run by its upstream executor's thread.

Which pairs may be chained, and when, is Nimbus's business (:mod:`nstorm.chaining`; the plan's
``chains``). Here is how a chain starts and ends without a tuple lost, reordered or acked twice:

1. The upstream executor (the *host*) finds the pair in its routing table and puts a
   :data:`CHAIN_MARK` on the downstream executor's queue, behind everything it sent before; it
   goes on sending through the queue.
2. The downstream executor (the *guest*) takes the mark after all of that, stops taking from
   its queue and, under its inbox's lock, names the host in its inbox (``Inbox.host``).
3. From then on whatever the host sends it (batches, a move's markers, barriers) is handed to
   the guest's ``take_chained`` in the host's thread, under the same lock, after anything still
   queued: no queue put, no thread wake-up. The host's loop also keeps the guest's buffers'
   deadlines (:func:`tend_guests`); the guest's own thread only does what needs no input
   (control messages, and those deadlines every 20 ms in case the host is held up), under the lock.
4. The host ends the chain (the plan dropped it, or the host stops) by clearing ``Inbox.host``
   under the lock; it sends through the queue again, and the guest's thread takes it up. A moved
   executor leaves its chain in the plan that moves it, so the move's markers are the last
   thing the host hands over directly.

Only executors the plan chains are touched: every other executor pays an attribute check per
local put and per loop pass.
"""

from __future__ import annotations

from typing import Any

from worker import wire

__all__ = ["CHAIN_MARK", "SIGNALS", "ChainMark", "tend_guests"]


class ChainMark:
    """The in-band request of step 1 (its own type, so a loop tells it from a batch by ``type``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CHAIN_MARK"


CHAIN_MARK = ChainMark()

# The in-band items on a data queue that carry no tuples, besides a move's marker (None): a
# checkpoint's barrier (its id), a rescale's marker, a chain's and a moved copy's seal. One tuple,
# so that every place that skips them (``type(item) in SIGNALS``) knows them all.
SIGNALS = (int, wire.ShiftMark, ChainMark, wire.Seal)


def tend_guests(inboxes: list[Any], host: int, now: float, wait: float) -> float:
    """The host's side of its guests' output deadlines, once per pass of the host's loop: a
    guest's buffers that are due leave now (under the guest's lock); the result is how long the
    host may sleep, never past a guest's deadline. So a guest's own thread is not woken each time
    a hand-over arms its deadline (a context switch per batch it sends); it still wakes every
    20 ms while chained, in case the host's loop is held up. A guest that hosts guests of its own
    (a chain of three) runs no loop of its own while chained: its guests' deadlines are kept here
    too, each under its own lock (locks are never nested here)."""
    for inbox in inboxes:
        guest = inbox.guest
        if guest is None or inbox.host != host:
            continue
        out = guest.outbox
        deadline, ctl_deadline = out.deadline, out.ctl_deadline
        if deadline.due(now) or ctl_deadline.due(now):
            with inbox.lock:
                if inbox.host == host:
                    if deadline.due(now):
                        out.flush()
                    elif ctl_deadline.due(now):
                        out.flush_control()
        wait = ctl_deadline.wait(now, deadline.wait(now, wait))
        nested = out.guest_inboxes
        if nested:
            wait = tend_guests(nested, guest.task, now, wait)
    return wait
