"""Delivery: how a message reaches an executor, a local queue put or a zmq send.

Storm's ``ExecutorTransfer`` in Python: the outbox decides *what* goes *where* (an executor),
delivery decides *how* it gets there.

- An :class:`Inbox` is an executor's receiving side: its data queue (batches from one
  upstream executor each, and markers), its control queue, and what backpressure reads of
  it. Whoever hands an executor something (a local outbox, the receivers, the worker's
  stash) goes through the inbox; nobody writes another executor's attributes.
- :class:`Sockets` makes the sockets of one worker (its zmq context, CurveZMQ when on).
- A :class:`Courier` is one thread's way out: local puts through the host's inboxes, and
  that thread's own sockets to the other workers (zmq sockets belong to one thread), with
  the messages a peer's full pipe did not take yet.

Nothing here waits for a peer. Data sockets are written with ``NOBLOCK``; a message a full
pipe refuses (the peer is dead, restarting or cut off: receivers never block, so a live
peer's pipe does not fill) waits in the courier's backlog for that worker, and so does
everything after it for that worker, in order. The owner retries with :meth:`Courier.drain`
on every loop pass and takes no new input meanwhile; a backlog is dropped (its tuples time
out and are replayed) once its worker leaves the plan or has taken nothing for
``topology.message.timeout.secs``. Control sockets have no high-water mark: they never
refuse.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from nstorm.net import is_ip_address
from worker import wire
from worker.chaining import CHAIN_MARK
from worker.host import Host
from worker.qos import Trace, Traced
from worker.routing import Endpoint, RoutingTable
from worker.security import make_security

__all__ = ["DATA", "CONTROL", "DATA_HWM", "Courier", "Inbox", "Sockets", "bind_address", "try_send_frames"]

log = logging.getLogger(__name__)

DATA = "data"  # the two channels of an inbox
CONTROL = "ctl"
DATA_HWM = 32  # messages per data pipe; receivers never block, so a full pipe means a dead or cut-off peer
CLOSE_DRAIN_SECS = 1.0  # a stopping courier tries this long to send what its peers did not take yet

_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK = int(zmq.SNDMORE) | _NOBLOCK


def try_send_frames(sock: zmq.Socket, header: bytes, payload: bytes) -> bool:
    """Send ``[header, payload]`` as one message if that does not block; False if the pipe is full.

    Two plain sends with an int flag cost a third of ``send_multipart`` (which type-checks
    every part and combines enum flags in Python). Once the first part is queued the second
    never blocks: a message is queued whole or not at all.
    """
    try:
        sock.send(header, _SNDMORE_NOBLOCK)
    except zmq.Again:
        return False
    sock.send(payload)
    return True


def bind_address(host: str) -> str:
    """Bind to ``host`` if it is an IP address; a host name (docker-compose) binds every interface."""
    return host if is_ip_address(host) else "*"


class Inbox:
    """An executor's receiving side. See the module docstring.

    :ivar data: batches ``(src, batch)`` (``batch`` None is a move's marker, an int a checkpoint's
        barrier, a :class:`~worker.wire.ShiftMark` a rescale's marker), unbounded: flow control
        is topology-wide backpressure at the spouts (worker/backpressure.py).
    :ivar control: ``(kind, src, entries)`` control messages, unbounded.
    :ivar in_size: tuples in the batch put last (written by the senders).
    :ivar batch_avg: tuples per batch taken lately (written by the owner): with ``in_size``
        what backpressure counts queued tuples by.
    :ivar closed: the executor handed over (a move): its queues take nothing more.
    """

    __slots__ = ("data", "control", "in_size", "batch_avg", "offer", "host", "guest", "lock", "closed", "put_lock")

    def __init__(self, batch_size: int, control: Any = None) -> None:
        self.data: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.control: Any = control if control is not None else queue.SimpleQueue()
        self.in_size = 0
        self.batch_avg = float(max(1, batch_size))  # starts at a full batch
        # Chaining (worker.chaining): while ``host`` is a task, this executor runs in that upstream
        # executor's thread: what the host sends it is taken at once by ``guest.take_chained``
        # (under ``lock``, which the executor's own thread holds for everything else it does).
        self.offer = -1  # the upstream task that asked to run this executor (its CHAIN_MARK is on the way)
        self.host = -1
        self.guest: Any = None
        self.lock = threading.Lock()
        # A sender looks an inbox up and puts into it later: a moved copy's hand-over may close it
        # in between. ``put_lock`` makes "not closed, so put" and "close, then take what is queued"
        # exclusive, so a message is either taken by the hand-over or refused (and stashed).
        self.closed = False
        self.put_lock = threading.Lock()

    def put_data(self, src: int, batch: Any, n: int) -> None:
        """A batch of ``n`` tuples (raw bytes from the network, or columns from a local outbox)."""
        if n:
            self.in_size = n
        if src == self.host:
            guest = self.guest  # (read after host: the guest clears host first; take_chained checks again)
            if guest is not None:
                guest.take_chained(src, batch)
                return
        self.data.put((src, batch))

    def put_remote(self, src: int, batch: Any, n: int) -> None:
        """A batch or signal from the network: always the queue (a host is local; taken in order)."""
        if n:
            self.in_size = n
        self.data.put((src, batch))

    def put_signal(self, src: int, item: Any) -> None:
        """An in-band signal behind what ``src`` sent (a marker, a barrier, a rescale's marker)."""
        if src == self.host:
            guest = self.guest
            if guest is not None:
                guest.take_chained(src, item)
                return
        self.data.put((src, item))

    def put_control(self, kind: int, src: int, entries: Any) -> bool:
        """False if the executor has handed over (:meth:`close`): the caller sends it to the new place."""
        return self.put(CONTROL, (kind, src, entries))

    def put(self, channel: str, item: Any) -> bool:
        """An item kept aside (stashed) while this executor was not here yet; False as for
        :meth:`put_control` (the item stays stashed)."""
        with self.put_lock:
            if self.closed:
                return False
            (self.data if channel == DATA else self.control).put(item)
        return True

    def close(self) -> list[Any]:
        """Refuse every control message (and stashed item) from now on, and return the control
        messages queued: a moved copy's hand-over passes them on behind its state. Data from
        the senders is not refused: a copy drains once every upstream task sent its marker (then
        sends to the new place) or at its drain deadline, when what is queued is dropped."""
        with self.put_lock:
            self.closed = True
        taken = []
        while True:
            try:
                taken.append(self.control.get_nowait())
            except queue.Empty:
                return taken

    def depth(self, cap: float) -> float:
        """Queued tuples in full batches of ``cap`` tuples.

        About ``qsize`` times the larger of the tuples per batch taken lately (the oldest
        batches) and the size of the batch put last (the newest): no counter is shared
        between threads, and a queue that fills with large batches behind small ones counts
        as full at once.
        """
        return self.data.qsize() * max(self.batch_avg, self.in_size) / cap


class Sockets:
    """The zmq context and socket factory of one worker; sockets it makes belong to the caller's thread."""

    def __init__(self, curve_keys: Path | None = None) -> None:
        """``curve_keys``: the keys directory when CurveZMQ is on (the supervisor decides), else None."""
        self.context = zmq.Context(io_threads=1)
        self.security = make_security(self.context, curve_keys)  # ConfigError for a bad key file

    def data(self, endpoint: Endpoint) -> zmq.Socket:
        sock = self.context.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, DATA_HWM)
        sock.setsockopt(zmq.LINGER, 2000)
        self.security.client(sock)
        sock.connect(endpoint.data_address)
        return sock

    def control(self, endpoint: Endpoint) -> zmq.Socket:
        sock = self.context.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.LINGER, 2000)
        self.security.client(sock)
        sock.connect(endpoint.ctl_address)
        return sock

    def receiver(self, address: str, hwm: int) -> zmq.Socket:
        sock = self.context.socket(zmq.PULL)
        sock.setsockopt(zmq.RCVHWM, hwm)
        sock.setsockopt(zmq.MAXMSGSIZE, wire.MAX_FRAME_BYTES)
        self.security.server(sock)
        sock.bind(address)
        return sock

    def stop(self) -> None:
        self.security.stop()


class _Retired:
    """A host as a retired courier sees it: no executor is local any more."""

    def __init__(self, host: Host) -> None:
        self.sockets = host.sockets
        self.conf = host.conf

    def inbox(self, task: int, wid: str | None = None) -> None:
        return None


class UnencodableError(TypeError):
    """A tuple's value cannot cross a process (it has no msgpack form)."""


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _first_unencodable(batch: Any) -> str:
    """Which tuple of a batch ``(values, runs, streams)`` has no msgpack form, and its fields' types."""
    encode = wire.batch_encoder()
    for values in batch[0]:
        try:
            encode(values)
        except (TypeError, ValueError, OverflowError):
            kinds = ", ".join(_type_name(v) for v in values)
            return f"a tuple with fields of types ({kinds}) cannot be sent to another worker"
    return "a batch cannot be sent to another worker"


class Courier:
    """One thread's deliveries: local queue puts, or its own sockets to other workers. See the
    module docstring.

    :ivar routing: the routing table remote endpoints are looked up in (its owner's).
    :ivar backlog: worker id -> messages its full pipe did not take yet, in order.
    :ivar undelivered: tuples dropped from the backlog.
    """

    def __init__(self, host: Host, src: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.src = src  # the sending task in message headers (-1: the worker itself)
        self.linger_ms = 1000  # how long closed sockets keep sending (longer after a state went in parts)
        self.epoch = int(getattr(host, "epoch", 0))  # written in data headers: frames of an older one are dropped
        self.clock = clock
        self.routing: RoutingTable | None = None
        self.give_up_secs = float(host.conf.get("topology.message.timeout.secs") or 30)
        self._data: dict[str, zmq.Socket] = {}
        self._control: dict[str, zmq.Socket] = {}
        self.backlog: dict[str, collections.deque[tuple[bytes, bytes, int]]] = {}
        self._since: dict[str, float] = {}
        self.undelivered = 0
        self.held = 0  # times a peer's full pipe made messages wait here
        self.messages = 0  # control messages sent (queue puts or zmq sends)
        self._encode = wire.batch_encoder()  # this thread's: an encoder's buffer is not to be shared
        self.unencodable = 0  # tuples dropped because a value had no msgpack form
        self.on_error: Callable[[str, BaseException], None] | None = None  # its executor's record_error

    # -- data -----------------------------------------------------------------------------
    def batch(self, dst: int, wid: str, batch: Any, n: int) -> int:
        """Deliver a batch of ``n`` tuples (columns) to ``dst`` at ``wid``; its wire bytes (0 if local)."""
        inbox = self.host.inbox(dst, wid)
        if inbox is not None:
            inbox.put_data(self.src, batch, n)
            return 0
        payload = self._encoded(batch, n, dst)
        if payload is None:
            return 0
        self._send(wid, wire.data_header(dst, self.src, 0, n, self.epoch), payload, n)
        return len(payload)

    def _encoded(self, batch: Any, n: int, dst: int) -> bytes | None:
        """The batch's wire bytes; None when a value has no msgpack form (an object, numpy's
        scalars, an int beyond 64 bits): the batch is dropped and counted, its trees time out
        and are replayed (with acking), the error goes to the sender's ``lastError`` (the same
        value goes through within a worker, where nothing is encoded)."""
        try:
            return self._encode(batch)
        except (TypeError, ValueError, OverflowError) as exc:
            self.unencodable += n
            if self.on_error is not None:
                self.on_error(f"emit to task {dst}", UnencodableError(f"{_first_unencodable(batch)}: {exc}"))
            return None

    def traced_batch(self, dst: int, wid: str, batch: Any, n: int, trace: Trace) -> int:
        """:meth:`batch` with a latency constraint's :class:`~worker.qos.Trace` (unless another batch
        took it already): the send time is added, and it travels as a :class:`~worker.qos.Traced` item on a local queue or as the
        data header's seventh element ``[buffered_us, sent_us, [[constraint, origin_us], ...], ahead, n]``
        (worker.qos)."""
        if trace.sent:  # another batch of its unit of work took it
            return self.batch(dst, wid, batch, n)
        trace.sent = True
        carried = trace.leaving(time.time_ns() // 1000, n)
        inbox = self.host.inbox(dst, wid)
        if inbox is not None:
            inbox.put_data(self.src, Traced(batch, carried), n)
            return 0
        payload = self._encoded(batch, n, dst)
        if payload is None:
            return 0
        header = wire.data_header(dst, self.src, 0, n, self.epoch, carried)
        self._send(wid, header, payload, n)
        return len(payload)

    def marker(self, dst: int, wid: str) -> None:
        """Tell ``dst`` at ``wid`` that this sender sends it no more there (after what it sent)."""
        self._in_band(dst, wid, (None,), wire.marker_header(dst, self.src, self.epoch))

    def barrier(self, dst: int, wid: str, cid: int) -> None:
        """Checkpoint ``cid``'s barrier to ``dst`` at ``wid``, behind what this sender sent it."""
        self._in_band(dst, wid, (cid,), wire.barrier_header(dst, self.src, cid, self.epoch))

    def shift_mark(self, dst: int, wid: str, version: int) -> None:
        """Rescale ``version``'s marker to ``dst`` at ``wid``, behind what this sender sent it."""
        self._in_band(dst, wid, (wire.ShiftMark(version),), wire.shift_mark_header(dst, self.src, version, self.epoch))

    def seal(self, dst: int, wid: str, worker: str) -> None:
        """This (moved-away) copy sends ``dst`` at ``wid`` nothing more: ``dst`` answers SEALED to ``worker``."""
        self._in_band(dst, wid, (wire.Seal(worker),), wire.seal_header(dst, self.src, self.epoch), worker.encode())

    def _in_band(self, dst: int, wid: str, item: tuple[Any], header: bytes, payload: bytes = b"") -> None:
        """A signal on the data path (behind this sender's data): ``item`` on a local queue (None:
        a move's marker, an int: a barrier, a ShiftMark, a Seal), else a frame with ``header``."""
        inbox = self.host.inbox(dst, wid)
        if inbox is not None:
            inbox.put_signal(self.src, item[0])
            return
        self._send(wid, header, payload, 0)

    def chain_mark(self, dst: int, wid: str) -> bool:
        """Ask ``dst`` (in this worker) to run in this sender's thread from here on, behind what it
        sent (worker.chaining); False if ``dst`` is not here."""
        inbox = self.host.inbox(dst, wid)
        if inbox is None:
            return False
        with inbox.lock:
            inbox.offer = self.src
        inbox.data.put((self.src, CHAIN_MARK))
        return True

    def release(self, dst: int) -> None:
        """End the chain of ``dst`` to this sender (or withdraw the offer): what it sends ``dst``
        goes through the queue again (worker.chaining)."""
        inbox = self.host.inbox(dst)
        if inbox is None:
            return
        with inbox.lock:
            if inbox.offer == self.src:
                inbox.offer = -1
            if inbox.host == self.src:
                guest = inbox.guest
                inbox.host = -1
                inbox.guest = None
                if guest is not None:
                    # Its own thread may sleep up to 20 ms before it takes its deadlines back
                    # (worker.bolt.GUEST_CHECK_SECS): what it holds leaves now instead.
                    guest.outbox.flush()

    def retire(self) -> None:
        """This sender belongs to a rolled-back epoch: whatever it still sends goes out over the
        wire with its old epoch, which every receiver drops, never into a local queue."""
        self.host = _Retired(self.host)  # type: ignore[assignment]

    def frame(self, wid: str, header: bytes, payload: bytes) -> bool:
        """Forward a received data frame as it is; False (dropped) if that worker takes nothing now."""
        if wid in self.backlog:
            return False
        sock = self._data_socket(wid)
        return sock is not None and try_send_frames(sock, header, payload)

    def _socket(self, cache: dict[str, zmq.Socket], wid: str, make: Callable[[Endpoint], Any]) -> zmq.Socket | None:
        """This thread's socket to ``wid`` (made once); None for a worker the routing table does not know."""
        sock = cache.get(wid)
        if sock is None:
            endpoint = self.routing.endpoints.get(wid) if self.routing is not None else None
            if endpoint is None:
                return None
            sock = cache[wid] = make(endpoint)
        return sock

    def _data_socket(self, wid: str) -> zmq.Socket | None:
        return self._socket(self._data, wid, self.host.sockets.data)

    def _send(self, wid: str, header: bytes, payload: bytes, n: int) -> None:
        waiting = self.backlog.get(wid) if self.backlog else None
        if waiting is not None:
            waiting.append((header, payload, n))  # behind what waits for that worker
            return
        sock = self._data.get(wid) or self._data_socket(wid)
        if sock is None:
            self.undelivered += n  # a worker this plan does not know: nothing to send to
            return
        if not try_send_frames(sock, header, payload):
            self.backlog[wid] = collections.deque([(header, payload, n)])
            self._since[wid] = self.clock()
            self.held += 1  # a slow link (tc) fills pipes too: not worth a log line each time
            log.debug("task %d: worker %s takes no more data (full pipe): holding its messages", self.src, wid)

    def drain(self) -> bool:
        """Send what waits in the backlog as far as the peers take it, without blocking; True
        when nothing waits any more (see the module docstring for what is dropped, and when)."""
        now = self.clock()
        routing = self.routing
        for wid, waiting in list(self.backlog.items()):
            sock = self._data.get(wid)
            gone = sock is None or routing is None or wid not in routing.endpoints
            while waiting and not gone:
                header, payload, _n = waiting[0]
                if not try_send_frames(sock, header, payload):  # type: ignore[arg-type]
                    break
                waiting.popleft()
                self._since[wid] = now
            if waiting and (gone or now - self._since[wid] > self.give_up_secs):
                dropped = sum(n for _h, _p, n in waiting)
                self.undelivered += dropped
                log.warning("task %d: %d tuples for worker %s dropped (%s); their spouts replay them", self.src,
                            dropped, wid, "it left the plan" if gone else f"it took nothing for {self.give_up_secs:.0f}s")
                waiting.clear()
                checkpoints = getattr(self.host, "checkpoints", None)
                if checkpoints is not None:
                    checkpoints.request_rollback(f"{dropped} tuples for {wid} dropped")
            if not waiting:
                del self.backlog[wid]
                self._since.pop(wid, None)
        return not self.backlog

    # -- control --------------------------------------------------------------------------
    def control(self, dst: int, wid: str, kind: int, entries: Any, src: int | None = None) -> None:
        """A control message to ``dst`` at ``wid`` (its inbox, or that worker's control port);
        ``src``: the sender named in it when not this courier's task (a message passed on)."""
        self.messages += 1
        src = self.src if src is None else src
        inbox = self.host.inbox(dst, wid)
        if inbox is not None and inbox.put_control(kind, src, entries):
            return
        # Another worker's, or a local executor that handed over since the look-up: this worker's
        # receiver then stashes it and sends it on to the new place.
        if not self.control_frame(wid, wire.control_message(kind, dst, src, entries)):
            # A plan without that worker (it went away): the sender's timeout replays what this held.
            log.info("control message %d for task %d dropped: worker %s is not in this plan", kind, dst, wid)

    def control_frame(self, wid: str, message: bytes) -> bool:
        """A ready-made control message to worker ``wid``; False if this plan does not know it."""
        sock = self._control.get(wid) or self._socket(self._control, wid, self.host.sockets.control)
        if sock is None:
            return False
        sock.send(message)  # no high-water mark: never blocks
        return True

    def close(self) -> None:
        """Close the sockets, after trying for a moment to send what waits in the backlog."""
        deadline = self.clock() + CLOSE_DRAIN_SECS
        while self.backlog and not self.drain() and self.clock() < deadline:
            time.sleep(0.01)
        if self.backlog:
            self.give_up_secs = 0.0
            self.drain()
        for sock in [*self._data.values(), *self._control.values()]:
            sock.close(linger=self.linger_ms)
        self._data.clear()
        self._control.clear()
