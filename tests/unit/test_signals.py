"""Daemons' signal handlers take no lock: a signal that lands while the main thread holds one
(an ``Event``'s, inside its ``wait`` or ``clear``) must not wait for it in that same thread.

The bug: a worker's SIGUSR1 handler called ``Event.set``; a nudge that arrived while the main
loop was inside ``Event.wait`` deadlocked the main thread, which then never applied a plan
again and ignored SIGTERM (two CI failures in session 21, reproduced in 13 passes by the
program below with a plain handler).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from nstorm.signals import relay_signals

# A daemon's main loop (nstorm.ticker.passes) hammered by SIGUSR1 while a thread keeps the GIL
# busy (the main thread then holds the event's lock longer, waiting for the GIL inside ``wait``):
# it must reach its 300th pass. With ``Event.set`` as the handler it deadlocks within a few.
_LOOP = textwrap.dedent("""
    import os, signal, sys, threading
    from nstorm.signals import relay_signals
    from nstorm.ticker import passes
    stop, wake = threading.Event(), threading.Event()
    relay_signals({signal.SIGUSR1: wake.set})
    def busy():
        while True:
            sum(range(100))
    threading.Thread(target=busy, daemon=True).start()
    print("ready", flush=True)
    for n, _ in enumerate(passes(stop, wake, 0.001)):
        if n >= 300:
            break
    print("done", flush=True)
    os._exit(0)
""")


def test_a_signal_while_the_main_thread_holds_the_event_s_lock_still_sets_the_event() -> None:
    wake = threading.Event()
    old = signal.getsignal(signal.SIGUSR1)
    relay_signals({signal.SIGUSR1: wake.set})
    try:
        with wake._cond:  # type: ignore[attr-defined] - what Event.wait and Event.clear hold
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(10_000):  # bytecodes: the handler runs between two of them, lock held
                pass
            assert not wake.is_set()  # the relay thread waits for the lock, not this thread
        assert wake.wait(10.0)
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_a_daemon_loop_hammered_by_nudges_keeps_passing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _LOOP], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60.0
        sent = 0
        while proc.poll() is None and time.monotonic() < deadline:
            os.kill(proc.pid, signal.SIGUSR1)
            sent += 1
            time.sleep(0.0002)
        assert proc.poll() == 0, f"the loop stopped passing after {sent} nudges"
        assert proc.stdout.read().strip() == "done"
        assert sent > 10  # the nudges did land among the passes
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
