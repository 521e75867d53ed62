"""A worker's receivers: the two bound zmq ports and the threads that hand frames to inboxes.

Two ports per worker: data (PULL) and control (PULL, no high-water mark, so acker traffic
never waits behind data). Receivers never block: a frame goes to its executor's
:class:`~worker.delivery.Inbox` (a queue put), or, for a task that is not here, to the
worker's stash (the plan that brings the task may be on its way, or it has left: the main
loop delivers or forwards it). Frames that do not decode, name no known task, or are too
large are dropped and counted; nothing is ever unpickled. With ``nstorm.transport.curve``
only peers holding the cluster's client key get through (:mod:`worker.security`). Sending is
:mod:`worker.delivery`'s.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import zmq

from worker import wire
from worker.delivery import CONTROL, DATA, DATA_HWM, Sockets, bind_address
from worker.host import Host
from worker.qos import Traced, trace_from_header

__all__ = ["Transport"]

log = logging.getLogger(__name__)

WORKER_TASK = -1  # control messages addressed to a worker, not to an executor
_NOBLOCK = int(zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)
_DATA_KINDS = (wire.DATA, wire.MARKER, wire.BARRIER, wire.SHIFT_MARK, wire.SEAL)


class Transport:
    """The worker's bound receivers (see the module docstring)."""

    def __init__(self, host: Host, sockets: Sockets, address: str, port: int, ctl_port: int,
                 on_announcement: Callable[[str, bool, int | None], None]) -> None:
        """Bind ``port`` (data) and ``ctl_port`` (control) on ``address``; ``on_announcement`` takes
        a peer's backpressure announcement (worker id, congested, incarnation)."""
        self.host = host
        self.on_announcement = on_announcement
        self.dropped = 0  # frames rejected as malformed
        self.stale = 0  # data frames from before a rollback, dropped
        self._stop = threading.Event()
        bind = bind_address(address)
        self.data_pull = sockets.receiver(f"tcp://{bind}:{port}", DATA_HWM)
        self.ctl_pull = sockets.receiver(f"tcp://{bind}:{ctl_port}", 0)
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

    def replay(self, frames: list[bytes]) -> None:
        """A data message held while this worker was behind its sender's epoch (main loop)."""
        self._on_data(frames)

    def _drop(self, why: str) -> None:
        self.dropped += 1
        if self.dropped <= 10 or self.dropped % 1000 == 0:
            log.warning("dropped a malformed frame (%s); %d dropped so far", why, self.dropped)

    @staticmethod
    def _recv_frames(sock: zmq.Socket) -> list[bytes] | None:
        """One whole message without blocking, or None if none waits (cheaper than ``recv_multipart``)."""
        try:
            frames = [sock.recv(_NOBLOCK)]
        except zmq.Again:
            return None
        while sock.getsockopt(_RCVMORE):  # the parts of one message arrive together
            frames.append(sock.recv(_NOBLOCK))
        return frames

    def _serve(self, sock: zmq.Socket, handle: Callable[[list[bytes]], None]) -> None:
        """A receiver thread: everything that waits on ``sock``, then poll again, until stopped."""
        while not self._stop.is_set():
            if not sock.poll(100):
                continue
            try:
                while True:
                    frames = self._recv_frames(sock)
                    if frames is None:
                        break
                    handle(frames)
            except zmq.ZMQError:
                break

    def _data_loop(self) -> None:
        self._serve(self.data_pull, self._on_data)

    def _on_data(self, frames: list[bytes]) -> None:
        """Hand one data message to its executor's inbox, or to the stash."""
        if len(frames) != 2:
            self._drop(f"{len(frames)} frames")
            return
        try:
            header = wire.unpack(frames[0])
            if type(header) is not tuple:  # an array (a map's keys would be read as its elements)
                raise ValueError("bad header")
            kind, dst, src = header[0], header[1], header[2]
            hops = header[3] if len(header) > 3 else 0
            count = header[4] if len(header) > 4 else 0
            epoch = header[5] if len(header) > 5 else 0
            if kind not in _DATA_KINDS or type(dst) is not int or type(src) is not int:
                raise ValueError("bad header")
            if type(hops) is not int or type(count) is not int or type(epoch) is not int:
                raise ValueError("bad header")
        except Exception as exc:  # noqa: BLE001 - any garbage is dropped, never raised
            self._drop(f"header: {type(exc).__name__}")
            return
        host = self.host
        # The epoch is read before and after the inbox is looked up: a rollback in between (it
        # empties the executors, moves to the new epoch, then makes new ones) would otherwise hand
        # a frame of the old epoch to an executor it made, or one of the new epoch to an old one.
        current = host.epoch
        inbox = host.inbox(dst)
        if host.epoch != current:
            self._on_data(frames)  # decided again in the new epoch
            return
        if epoch != current:
            if epoch < host.epoch:
                self.stale += 1  # sent before a rollback this worker has taken: its effects are undone
            elif not host.hold_newer(frames, epoch):  # its sender rolled back first: kept until this worker has,
                self._on_data(frames)  # unless it did so while this frame was looked at: delivered now
            return
        if kind == wire.DATA:
            payload: Any = frames[1]
        elif kind == wire.BARRIER:
            payload, count = count, 0  # a barrier's int item carries its checkpoint id
        elif kind == wire.SHIFT_MARK:
            payload, count = wire.ShiftMark(count), 0  # a rescale's marker carries its version
        elif kind == wire.SEAL:
            try:
                payload, count = wire.Seal(frames[1].decode()), 0  # the worker the old copy waits in
            except UnicodeDecodeError:
                self._drop("seal: worker id")
                return
        else:
            payload = None
        if inbox is not None:
            if len(header) > 6 and kind == wire.DATA:  # a latency constraint's sampled batch (worker.qos)
                trace = trace_from_header(header[6])
                if trace is not None:
                    payload = Traced(payload, trace)
            inbox.put_remote(src, payload, count)
            return
        if not (0 <= dst < wire.MAX_TASKS) or not (0 <= src < wire.MAX_TASKS):
            self._drop(f"unknown task {dst}")
            return
        if hops >= wire.MAX_HOPS:
            self._drop(f"task {dst} forwarded {hops} times")
            return
        if not self.host.stash(dst, DATA, (src, payload), (hops, count), epoch):
            self.stale += 1  # its worker rolled back while it was looked at

    def _ctl_loop(self) -> None:
        self._serve(self.ctl_pull, self._on_control)

    def _on_control(self, frames: list[bytes]) -> None:
        if len(frames) != 1:
            self._drop(f"control: {len(frames)} frames")
            return
        frame = frames[0]
        try:
            kind, dst, src, entries = wire.unpack(frame)
            if type(kind) is not int or type(dst) is not int:
                raise ValueError("bad control header")
        except Exception as exc:  # noqa: BLE001 - garbage is dropped and counted
            self._drop(f"control: {type(exc).__name__}")
            return
        if dst == WORKER_TASK and kind == wire.BACKPRESSURE:
            try:
                wid, congested, *rest = entries
                incarnation = rest[0] if rest and type(rest[0]) is int else None
                self.on_announcement(str(wid), bool(congested), incarnation)
            except (TypeError, ValueError):
                self._drop("backpressure entry")
            return
        if not wire.control_entries_plausible(kind, entries):
            self._drop(f"control {kind}: entries")
            return
        inbox: Any = self.host.inbox(dst)
        if inbox is not None and inbox.put_control(kind, src, entries):
            return  # (refused: its executor handed over since the look-up; stashed for the new place)
        if 0 <= dst < wire.MAX_TASKS:  # a task a rescale adds may be named by no plan here yet
            # A state or ack for an executor whose new copy is on its way (or that left).
            self.host.stash(dst, CONTROL, (kind, src, entries), frame)
        else:
            self._drop(f"control for unknown task {dst}")
