"""Topology-wide backpressure, after Storm 2: a congested worker pauses every spout.

Receivers never block (a blocked receiver would stall every executor of its
worker and can deadlock two workers that send to each other), so input queues
are unbounded and flow control happens at the source instead: a monitor thread
checks its executors' queues every few milliseconds; when one holds more than
``topology.backpressure.high.batches`` full batches' worth of tuples
(``topology.batch.size`` tuples each) the worker announces
"congested" to every worker of the topology, and spouts everywhere stop calling
``next_tuple`` until every congested worker has drained below the low mark.
The announcement is repeated while it lasts and expires if not repeated, so a
worker that dies cannot pause its topology for ever.

A starting worker's spouts also wait until every other worker of the topology has
said hello (an announcement, which carries the sender's incarnation), at most
``_GATE_SECS``: tuples sent to a worker that is still starting queue where its
backpressure cannot see them. A worker answers a hello from an incarnation it has
not heard from yet, so a restarted worker is let through at once.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from worker import wire
from worker.delivery import Courier
from worker.host import Host
from worker.transport import WORKER_TASK

__all__ = ["BackpressureMonitor"]

log = logging.getLogger(__name__)

_REPEAT_SECS = 0.5
_EXPIRE_SECS = 2.0
_GATE_SECS = 10.0  # spouts wait at most this long for every other worker's hello


class BackpressureMonitor:
    """Watches local queues, tells peers, and keeps :attr:`throttled` for spouts."""

    def __init__(self, host: Host, period: float = 0.005) -> None:
        self.host = host
        self.period = period
        conf = host.conf
        self.high = int(conf["topology.backpressure.high.batches"])
        self.low = int(conf["topology.backpressure.low.batches"])
        self.cap = float(max(1, int(conf["topology.batch.size"])))
        self.congested = False
        self.remote: dict[str, float] = {}  # worker id -> expiry of its "congested" announcement
        self.incarnation = random.getrandbits(48)  # tells a restarted worker from its earlier self
        self.heard: dict[str, int] = {}  # worker id -> the incarnation it announced last
        self.replies: set[str] = set()  # peers to say hello to (sent by the monitor thread)
        self.gate: set[str] | None = None  # peers not heard from yet, from the first plan on
        self.gate_until = 0.0
        self.throttled = True  # until the gate is set up and open
        self.events = 0
        self._stop = threading.Event()
        self._courier = Courier(host, WORKER_TASK)  # used by the monitor thread only
        self._thread = threading.Thread(target=self._run, name="backpressure", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)

    def on_announcement(self, worker_id: str, congested: bool, incarnation: int | None = None) -> None:
        """Called by the control receiver for a peer's announcement."""
        if congested:
            self.remote[worker_id] = time.monotonic() + _EXPIRE_SECS
        else:
            self.remote.pop(worker_id, None)
        if incarnation is not None and self.heard.get(worker_id) != incarnation:
            self.heard[worker_id] = incarnation
            self.replies.add(worker_id)  # a new incarnation: it waits for our hello too
        gate = self.gate
        if gate:
            gate.discard(worker_id)
        self._update()

    def _update(self) -> None:
        now = time.monotonic()
        for wid, expiry in list(self.remote.items()):
            if expiry < now:
                self.remote.pop(wid, None)
        gate = self.gate
        waiting = gate is None or (bool(gate) and now < self.gate_until)
        self.throttled = self.congested or bool(self.remote) or waiting

    def _open_gate(self) -> None:
        """At the first plan: wait for the peers not heard from yet, and say hello to all."""
        routing = self.host.routing
        if routing is None:
            return
        me = self.host.worker_id
        self.gate = {wid for wid in routing.endpoints if wid != me and wid not in self.heard}
        self.gate_until = time.monotonic() + _GATE_SECS
        if self.gate:
            log.info("spouts wait for %d worker(s) to start: %s", len(self.gate), sorted(self.gate))
        self._announce(self.congested)

    def _local_depth(self) -> float:
        """The deepest input queue, in full batches' worth of tuples (``topology.batch.size`` each).

        Adaptive batching sends small batches at low rates; counting messages would call
        a queue of a few hundred tuples congested (see :meth:`Inbox.depth <worker.delivery.Inbox.depth>`).
        """
        cap = self.cap
        return max((inbox.depth(cap) for inbox in self.host.inboxes()), default=0.0)

    def _announce(self, congested: bool, only: set[str] | None = None) -> None:
        routing = self.host.routing
        if routing is None:
            return
        me = self.host.worker_id
        message = wire.control_message(wire.BACKPRESSURE, WORKER_TASK, WORKER_TASK, [me, congested, self.incarnation])
        self._courier.routing = routing
        for wid in routing.endpoints:
            if wid != me and (only is None or wid in only):
                self._courier.control_frame(wid, message)

    def _run(self) -> None:
        last_announce = 0.0
        period = self.period
        while not self._stop.wait(period):
            if self.gate is None:
                self._open_gate()
            if self.replies:
                peers = set(self.replies)
                self.replies -= peers  # one C call: an add by the receiver thread meanwhile stays
                self._announce(self.congested, only=peers)
            depth = self._local_depth()
            # Look every ``period`` while a queue is a quarter of the way to the high mark (or
            # congested), four times less often otherwise: an idle worker need not wake 200 times a second.
            period = self.period if (self.congested or depth > self.high / 4) else 4 * self.period
            was = self.congested
            if not was and depth > self.high:
                self.congested = True
            elif was and depth <= self.low:
                self.congested = False
            now = time.monotonic()
            if self.congested != was:
                self.events += 1
                log.debug("backpressure %s (deepest queue %.1f full batches)", "on" if self.congested else "off", depth)
                self._announce(self.congested)
                last_announce = now
            elif self.congested and now - last_announce > _REPEAT_SECS:
                self._announce(True)
                last_announce = now
            self._update()
        self._courier.close()
