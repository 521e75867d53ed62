"""The supervisor's logviewer (supervisor/logserver.py) and the UI's side of it (ui/logfetch.py):
a real HTTP server on a free local port, a logs directory in tmp_path."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nstorm.logfetch import LogUnavailable, fetch_log
from nstorm.logtail import worker_log
from supervisor.logserver import LogServer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LogServer]:
    (tmp_path / "worker-n1-6700.log").write_text("".join(f"line {i}\n" for i in range(1000)))
    (tmp_path / "secret.txt").write_text("not a log\n")
    viewer = LogServer(tmp_path, "127.0.0.1", 0)
    viewer.start()
    try:
        yield viewer
    finally:
        viewer.stop()


def _get(server: LogServer, query: str, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{query}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - a local test server
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_tail_of_a_workers_log_with_the_token(server: LogServer) -> None:
    status, body = _get(server, "/log?worker=n1:6700&lines=3", server.token)
    assert status == 200 and body["lines"] == ["line 997", "line 998", "line 999"]
    assert body["file"] == "worker-n1-6700.log" and body["size"] > 0
    assert server.registration() == {"port": server.port, "token": server.token}


@pytest.mark.parametrize(("query", "token", "status"), [
    ("/log?worker=n1:6700", None, 401),                 # no token
    ("/log?worker=n1:6700", "guess", 401),              # a wrong one
    ("/log?worker=../secret.txt:1", "ok", 400),         # a path, not a worker id
    ("/log?worker=n1/../../x:1", "ok", 400),
    ("/log?worker=n1:6700&lines=0", "ok", 400),
    ("/log?worker=n1:6700&lines=lots", "ok", 400),
    ("/log?worker=n2:6700", "ok", 404),                 # no such log on this node
    ("/secret.txt", "ok", 404),
])
def test_what_the_logviewer_refuses(server: LogServer, query: str, token: str | None, status: int) -> None:
    answer, body = _get(server, query, server.token if token == "ok" else token)
    assert answer == status and "error" in body and "not a log" not in json.dumps(body)


def test_the_ui_reads_a_log_from_its_nodes_logviewer(server: LogServer, tmp_path: Path) -> None:
    registration = {"host": "127.0.0.1", "logviewer": server.registration()}
    found = fetch_log("n1:6700", 2, registration, tmp_path / "ui-home-logs")
    assert found == {"file": "worker-n1-6700.log", "size": found["size"], "lines": ["line 998", "line 999"]}
    with pytest.raises(LogUnavailable) as missing:
        fetch_log("n2:6700", 2, registration, tmp_path)
    assert missing.value.status == 404
    wrong = {"host": "127.0.0.1", "logviewer": {"port": server.port, "token": "stale"}}
    with pytest.raises(LogUnavailable) as refused:
        fetch_log("n1:6700", 2, wrong, tmp_path)
    assert refused.value.status == 502 and "401" in str(refused.value)


def test_a_logviewer_that_does_not_answer_is_a_502_naming_it(tmp_path: Path) -> None:
    from nstorm.net import free_port

    port = free_port()
    with pytest.raises(LogUnavailable) as exc:
        fetch_log("n1:6700", 5, {"host": "127.0.0.1", "logviewer": {"port": port, "token": "t"}}, tmp_path)
    assert exc.value.status == 502 and f"127.0.0.1:{port}" in str(exc.value)


def test_a_node_that_serves_no_logs_is_read_on_the_uis_machine(tmp_path: Path) -> None:
    worker_log(tmp_path, "n1:6700").write_text("a\nb\n")
    assert fetch_log("n1:6700", 5, {"host": "10.0.0.1"}, tmp_path)["lines"] == ["a", "b"]
    with pytest.raises(LogUnavailable, match="not registered") as exc:
        fetch_log("n9:6700", 5, None, tmp_path)
    assert exc.value.status == 404


def test_a_worker_id_names_a_file_in_the_logs_directory_only(tmp_path: Path) -> None:
    assert worker_log(tmp_path, "s-1.example:6700") == tmp_path / "worker-s-1.example-6700.log"
    for bad in ("../x:1", "a/b:1", "a\\b:1", "n1", "n1:port", "n1:123456"):
        with pytest.raises(ValueError, match="not a worker id"):
            worker_log(tmp_path, bad)


def _post(server: LogServer, query: str) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{query}", method="POST",
                                     headers={"Authorization": f"Bearer {server.token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - a local test server
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_thread_dump_asked_of_a_worker_of_the_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The logviewer asks (the supervisor's callback) and answers with the dump once it is newer
    than the request; a worker not on this node is a 404, one that writes nothing a 504."""
    from nstorm.logtail import dump_file
    from supervisor import logserver

    asked: list[str] = []

    def dump(worker: str) -> tuple[int, str] | None:
        asked.append(worker)
        if worker == "n1:6700":
            dump_file(tmp_path, worker).write_text("thread dump of worker n1:6700\n\"MainThread\"\n")
        return {"n9:1": (404, "no worker n9:1 runs here"), "n1:1": (409, "starting")}.get(worker)

    monkeypatch.setattr(logserver, "DUMP_WAIT_SECS", 0.3)
    viewer = LogServer(tmp_path, "127.0.0.1", 0, dump)
    viewer.start()
    try:
        status, body = _post(viewer, "/dump?worker=n1:6700")
        assert status == 200 and body["lines"] == ["thread dump of worker n1:6700", '"MainThread"']
        assert body["file"] == "worker-n1-6700.dump" and body["at"] > 0
        assert _post(viewer, "/dump?worker=n9:1") == (404, {"error": "no worker n9:1 runs here"})
        assert _post(viewer, "/dump?worker=n1:1")[0] == 409
        assert _post(viewer, "/dump?worker=n1:6701")[0] == 504  # asked, never written
        assert _post(viewer, "/dump?worker=../x:1")[0] == 400
        assert _post(viewer, "/log?worker=n1:6700")[0] == 405
        assert _get(viewer, "/dump?worker=n1:6700", viewer.token)[0] == 405
        assert asked == ["n1:6700", "n9:1", "n1:1", "n1:6701"]
    finally:
        viewer.stop()


def test_the_ui_asks_for_a_dump_only_of_a_node_that_serves_them(tmp_path: Path) -> None:
    from nstorm.logfetch import thread_dump

    for registration in (None, {"host": "127.0.0.1"}):
        with pytest.raises(LogUnavailable) as exc:
            thread_dump("n1:6700", registration)
        assert exc.value.status == 404


def test_a_worker_answers_a_dump_request_with_every_thread(tmp_path: Path) -> None:
    import threading

    from nstorm.logtail import dump_file, dump_request
    from worker.threaddump import ThreadDumps

    started, stop = threading.Event(), threading.Event()

    def stuck_executor() -> None:
        started.set()
        stop.wait()

    thread = threading.Thread(target=stuck_executor, name="count:3", daemon=True)
    thread.start()
    started.wait(10)
    try:
        dumps = ThreadDumps(tmp_path, "n1:6700", lambda: "topology t, plan v2")
        assert not dumps.answer() and not dump_file(tmp_path, "n1:6700").exists()  # nobody asked
        dump_request(tmp_path, "n1:6700").touch()
        assert dumps.answer()
        assert not dump_request(tmp_path, "n1:6700").exists()
        text = dump_file(tmp_path, "n1:6700").read_text()
    finally:
        stop.set()
        thread.join(10)
    assert text.startswith("thread dump of worker n1:6700 (pid ") and "topology t, plan v2" in text
    assert '"count:3" daemon tid' in text and "in stuck_executor" in text and "stop.wait()" in text
    assert '"MainThread" tid' in text


def test_a_search_reads_the_rotated_files_first_and_keeps_the_last_matches(tmp_path: Path) -> None:
    from nstorm.logtail import search

    log = worker_log(tmp_path, "n1:6700")
    log.with_name(log.name + ".2").write_text("old ERROR a\nfine\n")
    log.with_name(log.name + ".1").write_text("ERROR b\n")
    log.write_text("fine\nERROR c " + "x" * 600 + "\nERROR d\n")
    matches, found = search(log, "ERROR", 10)
    assert found == 4 and [(m["file"], m["line"]) for m in matches] == [
        ("worker-n1-6700.log.2", 1), ("worker-n1-6700.log.1", 1), ("worker-n1-6700.log", 2), ("worker-n1-6700.log", 3)]
    assert len(str(matches[2]["text"])) == 500  # a long line is cut
    last, found = search(log, "ERROR", 2)
    assert found == 4 and [m["text"] for m in last][1] == "ERROR d"
    assert search(log, "nothing", 5) == ([], 0)
    with pytest.raises(FileNotFoundError):
        search(worker_log(tmp_path, "n2:1"), "ERROR", 5)


def test_a_topology_wide_search_asks_each_workers_node(server: LogServer, tmp_path: Path) -> None:
    """One worker on a node whose logviewer answers, one on a node that is gone: its error says so."""
    from nstorm.logfetch import search_workers

    supervisors = {"n1": {"host": "127.0.0.1", "logviewer": server.registration()}}
    found = search_workers(["n1:6700", "n2:6700"], "line 99", 3, supervisors, tmp_path / "elsewhere")
    assert [(m["worker"], m["text"]) for m in found["matches"]] == [("n1:6700", "line 997"), ("n1:6700", "line 998"),
                                                                    ("n1:6700", "line 999")]
    assert found["found"] == {"n1:6700": 11} and "n2:6700" in found["errors"]
    for query, status in (("/search?worker=n1:6700&q=", 400), ("/search?worker=n1:6700&q=a&max=0", 400),
                          ("/search?worker=n9:1&q=a", 404), ("/search?worker=../x:1&q=a", 400)):
        assert _get(server, query, server.token)[0] == status, query
    assert _get(server, "/search?worker=n1:6700&q=line", None)[0] == 401


def test_a_supervisor_asks_no_dump_of_a_worker_that_has_not_beaten_yet(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGUSR1's default ends a process: a worker whose handler may not be set yet is starting (409);
    one that beat gets the request file and the nudge; one not here is a 404."""
    import signal
    import types

    from nstorm.logtail import dump_request
    from supervisor.daemon import Supervisor

    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    sent: list[int] = []
    handle = types.SimpleNamespace(port=6700, beat_at=None, poll=lambda: None,
                                   process=types.SimpleNamespace(send_signal=sent.append))
    supervisor = types.SimpleNamespace(node="n1", workers={("t", 6700): handle})
    assert Supervisor._ask_dump(supervisor, "n1:6700")[0] == 409  # type: ignore[arg-type,index]
    assert sent == [] and not dump_request(tmp_path / "logs", "n1:6700").exists()
    handle.beat_at = 1.0
    assert Supervisor._ask_dump(supervisor, "n1:6700") is None  # type: ignore[arg-type]
    assert sent == [signal.SIGUSR1] and dump_request(tmp_path / "logs", "n1:6700").exists()
    assert Supervisor._ask_dump(supervisor, "n1:6701")[0] == 404  # type: ignore[arg-type,index]
    assert Supervisor._ask_dump(supervisor, "n2:6700")[0] == 404  # type: ignore[arg-type,index]


def test_a_logviewer_on_an_ipv6_host(tmp_path: Path) -> None:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    worker_log(tmp_path, "n1:6700").write_text("a\nb\n")
    viewer = LogServer(tmp_path, "::1", 0)
    viewer.start()
    try:
        found = fetch_log("n1:6700", 1, {"host": "::1", "logviewer": viewer.registration()}, tmp_path / "none")
        assert found["lines"] == ["b"]
    finally:
        viewer.stop()


def test_the_whole_log_downloaded_from_its_node_or_this_machine(server: LogServer, tmp_path: Path) -> None:
    from nstorm.logfetch import open_log

    content = worker_log(tmp_path, "n1:6700").read_bytes()
    name, size, chunks = open_log("n1:6700", {"host": "127.0.0.1", "logviewer": server.registration()}, tmp_path / "x")
    assert (name, size, b"".join(chunks)) == ("worker-n1-6700.log", len(content), content)
    name, size, chunks = open_log("n1:6700", {"host": "127.0.0.1"}, tmp_path)  # a node that serves none
    assert b"".join(chunks) == content and size == len(content)
    with pytest.raises(LogUnavailable) as missing:
        open_log("n2:6700", {"host": "127.0.0.1", "logviewer": server.registration()}, tmp_path)
    assert missing.value.status == 404
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/download?worker=n1:6700",
                                     headers={"Authorization": f"Bearer {server.token}"})
    with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - a local test server
        assert reply.headers["Content-Disposition"] == 'attachment; filename="worker-n1-6700.log"'
        assert reply.read() == content
    assert _get(server, "/download?worker=n1:6700", None)[0] == 401
    assert _get(server, "/download?worker=../x:1", server.token)[0] == 400
