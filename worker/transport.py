"""pyzmq transport of a worker: bound receivers and the sockets executors send on.

Two ports per worker: data (PULL, small high-water mark, so a slow bolt
back-pressures its upstream executors through blocking sends) and control
(PULL, unbounded, never blocks, so acker traffic cannot deadlock behind data).
Frames that do not decode, name no known task, or are too large are dropped
and counted; nothing is ever unpickled.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import zmq

from worker import wire
from worker.routing import Endpoint

if TYPE_CHECKING:
    from worker.process import Worker

__all__ = ["Transport"]

log = logging.getLogger(__name__)

DATA_HWM = 1000  # messages; receivers never block, so this only bounds a burst to a slow peer


class Transport:
    """The worker's zmq context, receivers and socket factory."""

    def __init__(self, worker: Worker, host: str, port: int, ctl_port: int) -> None:
        self.worker = worker
        self.context = zmq.Context(io_threads=1)
        self.dropped = 0  # frames rejected as malformed
        self.forwarded = 0  # batches re-sent to an executor's new location
        self._stop = threading.Event()
        self.data_pull = self.context.socket(zmq.PULL)
        self.data_pull.setsockopt(zmq.RCVHWM, DATA_HWM)
        self.data_pull.setsockopt(zmq.MAXMSGSIZE, wire.MAX_FRAME_BYTES)
        self.data_pull.bind(f"tcp://{host}:{port}")
        self.ctl_pull = self.context.socket(zmq.PULL)
        self.ctl_pull.setsockopt(zmq.RCVHWM, 0)
        self.ctl_pull.setsockopt(zmq.MAXMSGSIZE, wire.MAX_FRAME_BYTES)
        self.ctl_pull.bind(f"tcp://{host}:{ctl_port}")
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

    # -- sockets for executors ---------------------------------------------------------
    def data_socket(self, endpoint: Endpoint) -> zmq.Socket:
        sock = self.context.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, DATA_HWM)
        sock.setsockopt(zmq.LINGER, 2000)
        sock.connect(endpoint.data_address)
        return sock

    def control_socket(self, endpoint: Endpoint) -> zmq.Socket:
        sock = self.context.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.LINGER, 2000)
        sock.connect(endpoint.ctl_address)
        return sock

    # -- receivers ------------------------------------------------------------------------
    def _drop(self, why: str) -> None:
        self.dropped += 1
        if self.dropped <= 10 or self.dropped % 1000 == 0:
            log.warning("dropped a malformed frame (%s); %d dropped so far", why, self.dropped)

    def _data_loop(self) -> None:
        sock = self.data_pull
        forward: dict[str, zmq.Socket] = {}
        worker = self.worker
        while not self._stop.is_set():
            if not sock.poll(100):
                continue
            try:
                frames = sock.recv_multipart()
            except zmq.ZMQError:
                break
            if len(frames) != 2:
                self._drop(f"{len(frames)} frames")
                continue
            try:
                kind, dst, src = wire.unpack(frames[0])
                if kind != wire.DATA or type(dst) is not int or type(src) is not int:
                    raise ValueError("bad header")
            except Exception as exc:  # noqa: BLE001 - any garbage is dropped, never raised
                self._drop(f"header: {type(exc).__name__}")
                continue
            target = worker.executors.get(dst)
            if target is not None and hasattr(target, "data_q"):
                target.data_q.put((src, frames[1]))
                continue
            routing = worker.routing
            if not (0 <= dst < len(routing.location)) or not (0 <= src < len(routing.location)):
                self._drop(f"unknown task {dst}")
                continue
            wid = routing.location[dst]
            if wid == worker.worker_id or wid not in routing.endpoints:
                self._drop(f"task {dst} has no executor here")
                continue
            out = forward.get(wid)
            if out is None:
                out = forward[wid] = self.data_socket(routing.endpoints[wid])
            out.send_multipart(frames)
            self.forwarded += 1
        for s in forward.values():
            s.close(linger=1000)

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
                    wid, congested = entries
                    worker.backpressure.on_announcement(str(wid), bool(congested))
                except (TypeError, ValueError):
                    self._drop("backpressure entry")
                continue
            target: Any = worker.executors.get(dst)
            if target is None:
                self._drop(f"control for task {dst} not here")
                continue
            target.ctl_q.put((kind, src, entries))
