"""Signal handlers that take no lock: the signal is relayed to a thread that runs the action.

Python runs a signal handler in the main thread, between two bytecodes of whatever the main
thread is doing. A handler that takes a lock the main thread may hold at that moment waits for
itself for ever: ``threading.Event.set`` takes the event's lock, which the main thread holds
for a few bytecodes of every ``Event.wait`` and ``Event.clear``. A worker nudged (SIGUSR1) just
then stopped applying plans for good, and did not stop on SIGTERM either (its handler waited for
the same lock). So a daemon's handlers only write the signal's number to a pipe (a system
call, no lock), and a thread of their own reads it and runs the action, where taking a lock
only waits for the main thread to let it go.

Example::

    relay_signals({signal.SIGTERM: stop.set, signal.SIGUSR1: wake.set})
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping

__all__ = ["STOP_SIGNALS", "StopSignal", "ignoring_signals", "interrupt_exit_code", "interrupting_signals",
           "relay_signals"]

#: What ends a command that owns processes: Ctrl-C, ``kill``, and the terminal closing.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

log = logging.getLogger(__name__)


def relay_signals(actions: Mapping[int, Callable[[], object]]) -> None:
    """From now on, each of ``actions``' signals runs its action in the ``signals`` thread.

    Call from the main thread (where Python handles signals), once per process.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    table = dict(actions)

    def handler(signum: int, _frame: object) -> None:
        try:
            os.write(write_end, bytes([signum]))
        except BlockingIOError:
            pass  # 64 KiB of signals not taken yet: the thread acts on those

    def relay() -> None:
        while True:
            try:
                data = os.read(read_end, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                try:
                    table[signum]()
                except Exception:  # noqa: BLE001 - one failed action must not end the relay
                    log.exception("action for signal %d failed", signum)

    threading.Thread(target=relay, name="signals", daemon=True).start()
    for signum in table:
        signal.signal(signum, handler)


@contextlib.contextmanager
def ignoring_signals(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Ignore ``signums`` while the block runs, then put the handlers back.

    For a teardown that must finish (it is bounded): a second Ctrl-C, or a SIGTERM, in the middle
    of it would leave behind the processes not stopped yet, such as a ZooKeeper in a session of its
    own. Outside the main thread (where handlers cannot be set) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: not set from Python


class StopSignal(KeyboardInterrupt):
    """SIGTERM or SIGHUP raised as Ctrl-C's KeyboardInterrupt is, so one teardown serves all three."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stop_signal(signum: int, _frame: object) -> None:
    raise StopSignal(signum)


@contextlib.contextmanager
def interrupting_signals() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP (the terminal closed) raise :class:`StopSignal` in
    the main thread, as Ctrl-C raises KeyboardInterrupt: a command that started processes ends
    them in its ``finally`` instead of dying at once and leaving them. Handlers are put back after."""
    previous = {signum: signal.signal(signum, _raise_stop_signal) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def interrupt_exit_code(exc: KeyboardInterrupt) -> int:
    """The shell's convention: 128 + the signal (130 after Ctrl-C, 143 after SIGTERM)."""
    return 128 + (exc.signum if isinstance(exc, StopSignal) else signal.SIGINT)
