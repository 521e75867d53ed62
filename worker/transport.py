"""pyzmq transport of a worker: bound receivers and the sockets executors send on.

Two ports per worker: data (PULL, small high-water mark, so a slow bolt
back-pressures its upstream executors through blocking sends) and control
(PULL, unbounded, never blocks, so acker traffic cannot deadlock behind data).
Frames that do not decode, name no known task, or are too large are dropped
and counted; nothing is ever unpickled. With ``nstorm.transport.curve`` every socket
uses CurveZMQ and only peers holding the cluster's client key get through
(:mod:`worker.security`).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zmq

from worker import wire
from worker.routing import Endpoint
from worker.security import make_security

if TYPE_CHECKING:
    from worker.process import Worker

__all__ = ["Transport", "try_send_frames"]

log = logging.getLogger(__name__)

def _bind_address(host: str) -> str:
    """Bind to ``host`` if it is an IP address; a host name (docker-compose) binds every interface."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return "*"
    return host


_NOBLOCK = int(zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)
_SNDMORE = int(zmq.SNDMORE)


_SNDMORE_NOBLOCK = _SNDMORE | _NOBLOCK


def try_send_frames(sock: zmq.Socket, header: bytes, payload: bytes) -> bool:
    """Send ``[header, payload]`` as one message if that does not block; False if the pipe is full.

    Two plain sends with an int flag cost a third of ``send_multipart`` (which type-checks
    every part and combines enum flags in Python). Once the first part is queued the second
    never blocks: a message is queued whole or not at all. Nothing here ever waits for a
    peer, so a dead or unreachable worker cannot hold a sender's thread (its spout timeouts,
    its control messages, a new routing table) hostage.
    """
    try:
        sock.send(header, _SNDMORE_NOBLOCK)
    except zmq.Again:
        return False
    sock.send(payload)
    return True


DATA_HWM = 32  # messages per pipe; receivers never block, so a full pipe only means a slow or absent peer


class Transport:
    """The worker's zmq context, receivers and socket factory."""

    def __init__(self, worker: Worker, host: str, port: int, ctl_port: int, curve_keys: Path | None = None) -> None:
        """Bind the receivers; ``curve_keys`` (a keys directory) turns CurveZMQ on for every socket."""
        self.worker = worker
        self.context = zmq.Context(io_threads=1)
        self.security = make_security(self.context, curve_keys)  # ConfigError for a bad key file
        self.dropped = 0  # frames rejected as malformed
        self.forwarded = 0  # batches re-sent to an executor's new location
        self.forward_dropped = 0  # ... that could not be: the new location's pipe was full
        self._stop = threading.Event()
        self._forward_data: dict[str, zmq.Socket] = {}
        self._forward_ctl: dict[str, zmq.Socket] = {}
        self.data_pull = self.context.socket(zmq.PULL)
        self.data_pull.setsockopt(zmq.RCVHWM, DATA_HWM)
        self.data_pull.setsockopt(zmq.MAXMSGSIZE, wire.MAX_FRAME_BYTES)
        bind = _bind_address(host)
        self.security.server(self.data_pull)
        self.data_pull.bind(f"tcp://{bind}:{port}")
        self.ctl_pull = self.context.socket(zmq.PULL)
        self.ctl_pull.setsockopt(zmq.RCVHWM, 0)
        self.ctl_pull.setsockopt(zmq.MAXMSGSIZE, wire.MAX_FRAME_BYTES)
        self.security.server(self.ctl_pull)
        self.ctl_pull.bind(f"tcp://{bind}:{ctl_port}")
        self._threads = [
            threading.Thread(target=self._data_loop, name="recv-data", daemon=True),
            threading.Thread(target=self._ctl_loop, name="recv-ctl", daemon=True),
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        for sock in [*self._forward_data.values(), *self._forward_ctl.values()]:
            sock.close(linger=1000)
        self.security.stop()

    # -- sockets for executors ---------------------------------------------------------
    def data_socket(self, endpoint: Endpoint) -> zmq.Socket:
        sock = self.context.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, DATA_HWM)
        sock.setsockopt(zmq.LINGER, 2000)
        self.security.client(sock)
        sock.connect(endpoint.data_address)
        return sock

    def control_socket(self, endpoint: Endpoint) -> zmq.Socket:
        sock = self.context.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.LINGER, 2000)
        self.security.client(sock)
        sock.connect(endpoint.ctl_address)
        return sock

    # -- receivers ------------------------------------------------------------------------
    def _drop(self, why: str) -> None:
        self.dropped += 1
        if self.dropped <= 10 or self.dropped % 1000 == 0:
            log.warning("dropped a malformed frame (%s); %d dropped so far", why, self.dropped)

    def _recv_frames(self, sock: zmq.Socket) -> list[bytes] | None:
        """One whole message without blocking, or None if none waits (cheaper than ``recv_multipart``)."""
        try:
            frames = [sock.recv(_NOBLOCK)]
        except zmq.Again:
            return None
        while sock.getsockopt(_RCVMORE):  # the parts of one message arrive together
            frames.append(sock.recv(_NOBLOCK))
        return frames

    def _data_loop(self) -> None:
        sock = self.data_pull
        while not self._stop.is_set():
            if not sock.poll(100):
                continue
            try:
                while True:  # everything that waits, then poll again
                    frames = self._recv_frames(sock)
                    if frames is None:
                        break
                    self._on_data(frames)
            except zmq.ZMQError:
                break

    def _on_data(self, frames: list[bytes]) -> None:
        """Route one data message to its executor's queue, or stash it (see ``Worker.stash_frame``)."""
        worker = self.worker
        if len(frames) != 2:
            self._drop(f"{len(frames)} frames")
            return
        try:
            header = wire.unpack(frames[0])
            kind, dst, src = header[0], header[1], header[2]
            hops = header[3] if len(header) > 3 else 0
            count = header[4] if len(header) > 4 else 0
            if kind not in (wire.DATA, wire.MARKER) or type(dst) is not int or type(src) is not int:
                raise ValueError("bad header")
            if type(hops) is not int or type(count) is not int:
                raise ValueError("bad header")
        except Exception as exc:  # noqa: BLE001 - any garbage is dropped, never raised
            self._drop(f"header: {type(exc).__name__}")
            return
        payload = frames[1] if kind == wire.DATA else None
        target = worker.target(dst)
        if target is not None:
            if count:
                target.in_size = count
            target.data_q.put((src, payload))
            return
        routing = worker.routing
        if routing is None or not (0 <= dst < len(routing.location)) or not (0 <= src < len(routing.location)):
            self._drop(f"unknown task {dst}")
            return
        if hops >= wire.MAX_HOPS:
            self._drop(f"task {dst} forwarded {hops} times")
            return
        # Not here: the plan that brings it may be on its way, or it has left. The main
        # loop delivers or forwards it (worker.stash_frame), so receivers never block.
        worker.stash_frame(dst, ("data", (src, payload), (hops, count)))

    def forward(self, dst: int, item: Any) -> None:
        """Send a stashed frame on to where the routing table now puts ``dst`` (main thread only)."""
        routing = self.worker.routing
        wid = routing.location[dst]
        endpoint = routing.endpoints.get(wid)
        if endpoint is None or wid == self.worker.worker_id:
            self._drop(f"task {dst} has no location")
            return
        channel, queued, extra = item
        if channel == "data":
            src, payload = queued
            out = self._forward_data.get(wid)
            if out is None:
                out = self._forward_data[wid] = self.data_socket(endpoint)
            hops, count = extra
            header = wire.marker_header(dst, src) if payload is None else wire.data_header(dst, src, hops + 1, count)
            if not try_send_frames(out, header, payload or b""):
                self.forward_dropped += 1  # its new place takes nothing now (dead?): the acker replays it
                if self.forward_dropped <= 10 or self.forward_dropped % 1000 == 0:
                    log.warning("a batch for task %d not forwarded: %s takes nothing now; %d so far",
                                dst, wid, self.forward_dropped)
                return
        else:
            out = self._forward_ctl.get(wid)
            if out is None:
                out = self._forward_ctl[wid] = self.control_socket(endpoint)
            out.send(extra)
        self.forwarded += 1

    def send_control(self, wid: str, kind: int, dst: int, entries: Any) -> None:
        """A control message from this worker (not from an executor) to ``dst`` at ``wid`` (main thread only)."""
        routing = self.worker.routing
        endpoint = routing.endpoints.get(wid) if routing is not None else None
        if endpoint is None:
            return  # a worker this plan does not know: it asks again, or gives up at its deadline
        out = self._forward_ctl.get(wid)
        if out is None:
            out = self._forward_ctl[wid] = self.control_socket(endpoint)
        out.send(wire.control_message(kind, dst, -1, entries))

    def _ctl_loop(self) -> None:
        sock = self.ctl_pull
        worker = self.worker
        while not self._stop.is_set():
            if not sock.poll(100):
                continue
            try:
                frame = sock.recv()
            except zmq.ZMQError:
                break
            try:
                kind, dst, src, entries = wire.unpack(frame)
                if type(kind) is not int or type(dst) is not int:
                    raise ValueError("bad control header")
            except Exception as exc:  # noqa: BLE001 - garbage is dropped and counted
                self._drop(f"control: {type(exc).__name__}")
                continue
            if dst == -1 and kind == wire.BACKPRESSURE:
                try:
                    wid, congested, *rest = entries
                    incarnation = rest[0] if rest and type(rest[0]) is int else None
                    worker.backpressure.on_announcement(str(wid), bool(congested), incarnation)
                except (TypeError, ValueError):
                    self._drop("backpressure entry")
                continue
            target: Any = worker.target(dst)
            if target is not None:
                target.ctl_q.put((kind, src, entries))
            elif worker.routing is not None and 0 <= dst < len(worker.routing.location):
                # A state or ack for an executor whose new copy is on its way (or that left):
                # the main loop delivers it or forwards it (worker.stash_frame).
                worker.stash_frame(dst, ("ctl", (kind, src, entries), frame))
            else:
                self._drop(f"control for unknown task {dst}")
