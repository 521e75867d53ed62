"""The workers' run-queue delay (worker/metrics.py): what OTD's load balancing reads to tell a
worker with CPU to give from one its machine starves."""

from __future__ import annotations

import threading
from pathlib import Path

from worker.metrics import runqueue_waits


def test_runqueue_waits_reads_each_threads_schedstat(tmp_path: Path) -> None:
    for tid, text in (("101", "5000 2500 7\n"), ("102", "10 0 1\n"), ("103", "garbage\n")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "schedstat").write_text(text)
    (tmp_path / "104").mkdir()  # a thread that ended between the listing and the read
    assert runqueue_waits(str(tmp_path)) == {"101": 2500, "102": 0}
    assert runqueue_waits(str(tmp_path / "gone")) == {}


def test_runqueue_waits_of_this_process_name_every_thread() -> None:
    started, stop = threading.Event(), threading.Event()

    def idle() -> None:
        started.set()
        stop.wait()

    t = threading.Thread(target=idle)
    t.start()
    try:
        started.wait()
        waits = runqueue_waits()
        assert str(t.native_id) in waits and str(threading.get_native_id()) in waits
        assert all(isinstance(ns, int) and ns >= 0 for ns in waits.values())
    finally:
        stop.set()
        t.join()
