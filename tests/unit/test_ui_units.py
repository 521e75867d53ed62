"""The UI's parts without a cluster: documents, metrics, the guard, windowed executor statistics,
user metrics, the OTD history and the log tail."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nstorm import Bolt, Spout, TopologyBuilder, logtail
from nstorm.plan import Plan, Slot
from nstorm.records import Heartbeat, MigrationRecord, MoveMode
from nstorm.usermetrics import UserMetrics
from nstorm.zkschema import ZkPaths
from scheduler_otd.history import record_round
from ui import documents, prometheus
from ui.guard import Guard, origin_allowed
from worker.stats import StatsWindow


class _S(Spout):
    outputs = ("n",)


class _B(Bolt):
    outputs = ("n",)


def _view(extra_status: dict[str, Any] | None = None) -> documents.TopologyView:
    builder = TopologyBuilder("t")
    builder.set_spout("src", _S, parallelism=1)
    builder.set_bolt("work", _B, parallelism=2).shuffle_grouping("src")
    definition = dict(builder.build(workers=2).definition)
    slots = [Slot("n1", "10.0.0.1", 6700, 7700), Slot("n2", "10.0.0.2", 6700, 7700)]
    places = {"src:0": "n1:6700", "work:0": "n1:6700", "work:1": "n2:6700", "__acker:0": "n1:6700",
              "__acker:1": "n2:6700"}
    plan = Plan.first("t", list(places), places, slots)
    now = time.time()
    beats = {
        "n1:6700": Heartbeat("n1:6700", 11, now, 1, executors={
            "src:0": {"kind": "spout", "emitted": 100, "acked": 90, "failed": 1, "executed": 0, "emitted_rate": 10.0,
                      "executed_rate": 0.0, "latency_ms": {"p50": 2.0, "p99": 9.0, "samples": 10, "mean": 3.0},
                      "latency_hist": {"40": 5, "60": 5}},
            "work:0": {"kind": "bolt", "emitted": 50, "executed": 60, "acked": 60, "capacity": 0.25, "execute_ms": 0.5,
                       "executed_rate": 6.0, "emitted_rate": 5.0, "last_error": "process: ValueError: bad",
                       "last_error_at": now - 5, "last_error_trace": "Traceback...\nValueError: bad",
                       "metrics": {"counters": {"seen": 60}, "gauges": {"size.now": 3}}}}),
        "n2:6700": Heartbeat("n2:6700", 12, now, 1, executors={
            "work:1": {"kind": "bolt", "emitted": 40, "executed": 40, "acked": 40, "capacity": 0.75, "execute_ms": 1.5,
                       "executed_rate": 4.0, "emitted_rate": 4.0, "arrival_hist": {"50": 3}}}),
    }
    status = {"name": "t", "status": "ACTIVE", "plan_version": 1,
              "workers": [{"id": w, "node": s.node, "host": s.host, "port": s.port, "pid": beats[w].pid,
                           "executors": [], "cpu": 0.5, "cpu_limit": None, "plan_version": 1}
                          for w, s in plan.workers.items()],
              "components": {"src": {"parallelism": 1, "emitted": 100, "executed": 0, "acked": 90, "failed": 1,
                                     "queue": 0, "errors": 0, "last_error": None},
                             "work": {"parallelism": 2, "emitted": 90, "executed": 100, "acked": 100, "failed": 0,
                                      "queue": 0, "errors": 1, "last_error": "process: ValueError: bad",
                                      "capacity": 0.75, "watermark": 12.5,
                                      "metrics": {"counters": {"seen": 60}, "gauges": {"size.now": {"work:0": 3}}}}},
              "spouts": {"pending": 3, "acked": 90, "failed": 1, "replayed": 0}, "otd": None, "migrations": [],
              "checkpoints": {"provider": "memory"}, "stalled": None, **(extra_status or {})}
    migrations = [MigrationRecord("work:1", "n1:6700", "n2:6700", MoveMode.THREAD, "ui", now - 30, 2, now - 29, 0.01,
                                  False, "m-0000000001")]
    record = {"definition": definition, "conf": {"db.password": "x", "api_token": "y", "plain": 1},
              "submitted_at": now - 100}
    return documents.TopologyView("t", record, {**definition["conf"], **record["conf"],
                                                "topology.message.timeout.secs": 30}, status, plan, beats, migrations,
                                  {}, {"rounds": [{"at": now, "case": 4}], "cases": {"4": 7, "1": 2}})


def test_topology_document_has_storms_fields_and_nstorms() -> None:
    doc = documents.topology_document(_view({"windows": {"open": 2}}))
    (spout,) = doc["spouts"]
    assert spout["spoutId"] == "src" and spout["completeLatency"] == "3.000" and spout["transferred"] == 100
    work = doc["bolts"][0]
    assert work["boltId"] == "work" and work["capacity"] == "0.750" and work["executors"] == work["tasks"] == 2
    assert work["executeLatency"] == "0.900"  # weighted by what each executor executed: (6*0.5 + 4*1.5) / 10
    assert work["lastError"] == "process: ValueError: bad" and work["errorHost"] == "10.0.0.1"
    assert work["errorTrace"].startswith("Traceback") and work["extra"] == {"watermark": 12.5}
    assert doc["configuration"]["db.password"] == documents.MASK and doc["configuration"]["api_token"] == documents.MASK
    assert doc["configuration"]["plain"] == 1
    assert doc["windows"] == {"open": 2} and "windows" in doc["sections"] and "checkpoints" in doc["sections"]
    assert len(doc["placement"]["executors"]) == 5 and doc["dag"]["edges"][0]["grouping"] == "shuffle"
    assert {w["id"]: w["executorsTotal"] for w in doc["workers"]} == {"n1:6700": 3, "n2:6700": 2}


def test_component_document_and_errors() -> None:
    view = _view()
    doc = documents.component_document(view, "work")
    assert doc is not None and doc["componentType"] == "bolt" and len(doc["executorStats"]) == 2
    row = {r["id"]: r for r in doc["executorStats"]}["work:1"]
    assert row["host"] == "10.0.0.2" and row["port"] == 6700 and row["worker"] == "n2:6700" and row["capacity"] == "0.750"
    assert doc["componentErrors"][0]["executor"] == "work:0" and "Traceback" in doc["componentErrors"][0]["trace"]
    assert documents.component_document(view, "nope") is None
    migrations = documents.migrations_document(view)
    assert migrations["migrations"][0]["by"] == "ui" and migrations["migrations"][0]["id"] == "m-0000000001"
    otd = documents.otd_document(view)
    assert otd["cases"] == {"4": 7, "1": 2} and len(otd["rounds"]) == 1


def test_uptime_and_masking() -> None:
    assert documents.pretty_secs(358) == "5m 58s"
    assert documents.pretty_secs(90061) == "1d 1h 1m 1s"
    assert documents.pretty_secs(5) == "5s"
    assert documents.masked({"x.auth": None, "nstorm.zookeeper.auth": "u:p", "secret_key": "k"}) == {
        "nstorm.zookeeper.auth": documents.MASK, "secret_key": documents.MASK, "x.auth": None}


def test_prometheus_families_parse_with_labels() -> None:
    view = _view()
    text = prometheus.render([*prometheus.cluster_families({"n1": {"slots": [[1, 2]]}}, {"t": view.plan}, True),
                              *prometheus.topology_families([view], time.time())]).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    executed = {s.labels["executor"]: s.value for s in families["nstorm_executor_executed"].samples}
    assert executed == {"src:0": 0, "work:0": 60, "work:1": 40}
    sample = families["nstorm_executor_capacity"].samples[0]
    assert set(sample.labels) == {"topology", "component", "executor", "worker", "node"}
    assert families["nstorm_user_seen"].type == "counter"
    assert families["nstorm_user_size_now"].samples[0].value == 3
    assert {(s.labels["mode"], s.labels["by"]): s.value for s in families["nstorm_topology_migrations"].samples
            if s.name.endswith("_total")} == {("thread", "ui"): 1}
    assert {s.labels["case"]: s.value for s in families["nstorm_topology_otd_rounds"].samples
            if s.name.endswith("_total")} == {"1": 2, "4": 7}
    buckets = [s for s in families["nstorm_component_latency_seconds"].samples if s.name.endswith("_bucket")
               and s.labels["kind"] == "complete"]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == 10
    assert families["nstorm_worker_cpu"].samples[0].value == 0.0


_JUDGED = {"path": ["src", "work"], "p99_ms": 20.0, "window_secs": 1.0, "measured_p99_ms": 35.5, "met": False,
           "windows_met": 3, "windows": 7, "samples": 120, "warning": "p99 35.5 ms over 20 ms: src>work dominates",
           "parts_ms": {"buffer": {"src>work": 30.0}, "queue": {"src>work": 2.0}, "processing": {"work": 0.5}},
           "actions": [{"at": 1.0, "kind": "buffer", "detail": "src>work: buffer bound 5 -> 2.5 ms"}]}
# Not judged yet (no window has passed): status --json's entry from qospolicy.status_entry.
_FRESH = {"path": ["src", "work", "out"], "p99_ms": 50.0, "window_secs": 5.0, "measured_p99_ms": None, "met": None,
          "windows_met": 0, "windows": 0, "actions": []}


def test_latency_constraints_and_chains_in_the_documents_and_metrics() -> None:
    view = _view({"constraints": [_JUDGED, _FRESH], "chains": {"work:0": "src:0"}})
    doc = documents.topology_document(view)
    assert doc["constraints"] == [_JUDGED, _FRESH] and doc["chains"] == {"work:0": "src:0"}
    assert "constraints" not in doc["sections"] and "chains" not in doc["sections"]  # a table and marks of their own
    assert documents.latency_document(view) == {"constraints": [_JUDGED, _FRESH], "chains": {"work:0": "src:0"}}
    bare = documents.topology_document(_view())  # a status without them: empty, not missing
    assert bare["constraints"] == [] and bare["chains"] == {}
    text = prometheus.render(prometheus.topology_families([view], time.time())).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def values(family: str, suffix: str = "") -> dict[str, float]:
        return {s.labels["path"]: s.value for s in families[family].samples if s.name == family + suffix}

    assert values("nstorm_latency_constraint_bound_seconds") == {"src>work": 0.02, "src>work>out": 0.05}
    assert values("nstorm_latency_constraint_p99_seconds") == {"src>work": 0.0355}  # none before a judged window
    assert values("nstorm_latency_constraint_met") == {"src>work": 0}
    assert values("nstorm_latency_constraint_windows", "_total") == {"src>work": 7, "src>work>out": 0}
    assert values("nstorm_latency_constraint_windows_met", "_total") == {"src>work": 3, "src>work>out": 0}
    assert families["nstorm_topology_chained_executors"].samples[0].value == 1


def test_histogram_buckets_are_cumulative() -> None:
    from nstorm import latency

    counts: dict[int, int] = {}
    for secs in (0.0004, 0.002, 0.002, 0.2, 50.0):
        latency.add(counts, secs)
    buckets, total = prometheus.histogram_buckets(counts)
    values = [v for _, v in buckets]
    assert values == sorted(values) and values[-1] == 5 and buckets[-1][0] == "+Inf"
    assert dict(buckets)["0.0005"] == 1 and dict(buckets)["0.0025"] == 3 and dict(buckets)["30.0"] == 4
    assert 50.0 < total < 60.0


def _call(app: Any, method: str, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "scheme": "http",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_guard_basic_auth_and_origin() -> None:
    guard = Guard(_ok, ("admin", "pw"))
    good = "Basic " + base64.b64encode(b"admin:pw").decode()
    assert _call(guard, "GET", "/", {"host": "h:1"})[0] == 401
    assert _call(guard, "GET", "/", {"host": "h:1"})[1]["www-authenticate"].startswith("Basic")
    assert _call(guard, "GET", "/", {"host": "h:1", "authorization": "Basic " + base64.b64encode(b"admin:no").decode()})[0] == 401
    assert _call(guard, "GET", "/", {"host": "h:1", "authorization": "Basic !!!"})[0] == 401
    assert _call(guard, "GET", "/", {"host": "h:1", "authorization": good})[0] == 200
    assert _call(guard, "GET", "/healthz", {"host": "h:1"})[0] == 200
    assert _call(guard, "POST", "/x", {"host": "h:1", "authorization": good, "origin": "http://h:1"})[0] == 200
    assert _call(guard, "POST", "/x", {"host": "h:1", "authorization": good, "origin": "http://evil"})[0] == 403
    open_guard = Guard(_ok, None)
    assert _call(open_guard, "POST", "/x", {"host": "h:1"})[0] == 200  # curl: no Origin
    assert _call(open_guard, "POST", "/x", {"host": "h:1", "sec-fetch-site": "cross-site"})[0] == 403
    assert _call(open_guard, "GET", "/x", {"host": "h:1", "origin": "http://evil"})[0] == 200  # reads are not changes
    assert origin_allowed(None, "http", None) and not origin_allowed("http://a", "http", None)


def test_stats_window_rates_capacity_and_execute_latency() -> None:
    window = StatsWindow(10.0)
    first = window.update(100.0, "b:0", {"executed": 0, "emitted": 0, "busy_secs": 0.0})
    assert first["capacity"] is None and first["executed_rate"] is None
    out = window.update(102.0, "b:0", {"executed": 1000, "emitted": 500, "busy_secs": 0.5})
    assert out == {"executed_rate": 500.0, "emitted_rate": 250.0, "capacity": 0.25, "execute_ms": 0.5}
    for t in range(103, 120):
        out = window.update(float(t), "b:0", {"executed": 1000 * (t - 100), "emitted": 0, "busy_secs": 0.5 * (t - 100) / 2})
    assert out["executed_rate"] == pytest.approx(1000.0) and out["capacity"] == pytest.approx(0.25)
    reset = window.update(121.0, "b:0", {"executed": 5, "emitted": 0, "busy_secs": 0.0})  # a rollback's new executor
    assert reset["executed_rate"] is None
    spout = window.update(1.0, "s:0", {"executed": 0, "emitted": 10})
    assert "capacity" not in spout
    counters = {"s:0": {"executed": 0, "emitted": 30}}
    window.apply(3.0, counters)
    assert counters["s:0"]["emitted_rate"] == 10.0 and "b:0" not in window._samples


def test_user_metrics() -> None:
    metrics = UserMetrics()
    counter = metrics.register_counter("words")
    counter.inc()
    counter.inc(4)
    assert metrics.register_counter("words") is counter and counter.value == 5
    metrics.register_gauge("size", lambda: 7)
    metrics.register_gauge("broken", lambda: 1 / 0)
    metrics.register_gauge("text", lambda: "seven")
    assert metrics.snapshot() == {"counters": {"words": 5}, "gauges": {"size": 7}}
    with pytest.raises(ValueError, match="gauge"):
        metrics.register_counter("size")
    with pytest.raises(ValueError, match="metric name"):
        metrics.register_counter("bad name")
    with pytest.raises(ValueError, match="go down"):
        counter.inc(-1)
    moved = UserMetrics()
    moved.carry({"words": 5, "later": 2, "junk": "x"})
    assert moved.register_counter("words").value == 5 and moved.register_counter("later").value == 2


class _FakeZk:
    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}

    def get(self, path: str) -> tuple[bytes, None]:
        from kazoo.exceptions import NoNodeError

        if path not in self.nodes:
            raise NoNodeError
        return self.nodes[path], None

    def create(self, path: str, data: bytes, makepath: bool = False) -> None:
        self.nodes[path] = data

    def set(self, path: str, data: bytes) -> None:
        self.nodes[path] = data


def test_otd_history_is_bounded_and_counts_cases() -> None:
    zk, paths = _FakeZk(), ZkPaths("/r")
    for i in range(7):
        record_round(zk, paths, "t", {"at": float(i), "case": 4 if i % 2 else 1, "executor": None, "loads": {"w": 1}},
                     size=5)
    data = json.loads(zk.nodes["/r/otd/t/rounds"])
    assert [r["at"] for r in data["rounds"]] == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert data["cases"] == {"1": 4, "4": 3} and "loads" not in data["rounds"][0]


def test_log_tail(tmp_path: Path) -> None:
    path = tmp_path / "worker-n1-6700.log"
    path.write_text("".join(f"line {i}\n" for i in range(100_000)))
    lines, size = logtail.tail(path, 3)
    assert lines == ["line 99997", "line 99998", "line 99999"] and size == path.stat().st_size
    assert logtail.worker_log(tmp_path, "n1:6700") == path
    with pytest.raises(FileNotFoundError):
        logtail.tail(tmp_path / "none.log", 5)


def test_documents_follow_a_live_rescale_not_the_submitted_parallelism() -> None:
    """work scaled 2 -> 3 -> 1 -> 2: the plan holds work:0 and work:3 (ids keep growing), the
    definition still says 2 executors work:0, work:1."""
    import dataclasses

    view = _view()
    slots = list(view.plan.workers.values())
    places = {"src:0": "n1:6700", "work:0": "n1:6700", "work:3": "n2:6700", "__acker:0": "n1:6700",
              "__acker:1": "n2:6700"}
    plan = Plan.first("t", list(places), places, slots)
    beats = dict(view.beats)
    beats["n2:6700"] = Heartbeat("n2:6700", 12, time.time(), 1, executors={
        "work:3": {"kind": "bolt", "emitted": 7, "executed": 7, "acked": 7, "capacity": 0.99, "execute_ms": 1.0,
                   "executed_rate": 50.0, "emitted_rate": 50.0}})
    status = {**view.status, "components": {**view.status["components"],
                                            "work": {**view.status["components"]["work"], "parallelism": 2}}}
    view = dataclasses.replace(view, plan=plan, beats=beats, status=status)
    doc = documents.component_document(view, "work")
    assert doc is not None and [r["id"] for r in doc["executorStats"]] == ["work:0", "work:3"]
    assert doc["executors"] == 2 and doc["capacity"] == "0.990"
    bolt = documents.topology_document(view)["bolts"][0]
    assert bolt["capacity"] == "0.990" and bolt["executedRate"] == 56.0 and bolt["encodedBoltId"] == "work"
    assert {n["id"]: n["parallelism"] for n in documents.topology_document(view)["dag"]["nodes"]}["work"] == 2


def test_masking_reaches_nested_settings_and_url_credentials() -> None:
    shown = documents.masked({"topology.state.provider.config": {"url": "redis://:s3cret@redis:6379/0",
                                                                 "password": "pw", "db": 0},
                              "hosts": ["http://u:p@h/x", "http://h/y"]})
    assert shown["topology.state.provider.config"] == {"url": f"redis://{documents.MASK}@redis:6379/0",
                                                       "password": documents.MASK, "db": 0}
    assert shown["hosts"] == [f"http://{documents.MASK}@h/x", "http://h/y"]


def test_non_finite_counters_are_refused_and_never_reported() -> None:
    metrics = UserMetrics()
    counter = metrics.register_counter("c")
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            counter.inc(bad)
    counter.value = float("inf")  # set by hand: still no unreadable JSON in a heartbeat
    assert metrics.snapshot()["counters"] == {}
    moved = UserMetrics()
    moved.carry({"c": float("nan")})
    assert moved.register_counter("c").value == 0


def test_user_metric_names_are_one_family_across_the_scrape() -> None:
    first, second = _view(), _view()
    second = type(second)(**{**second.__dict__, "name": "t2"})
    first.beats["n1:6700"].executors["work:0"]["metrics"] = {"counters": {"hits": 3, "a.b": 1}, "gauges": {}}
    second.beats["n1:6700"].executors["work:0"]["metrics"] = {"counters": {"a-b": 2}, "gauges": {"hits": 2.5}}
    text = prometheus.render(prometheus.topology_families([first, second], time.time())).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["nstorm_user_hits"].type == "counter"
    assert [s.value for s in families["nstorm_user_hits"].samples if s.name.endswith("_total")] == [3]
    assert [(s.labels["topology"], s.value) for s in families["nstorm_user_a_b"].samples
            if s.name.endswith("_total")] == [("t", 1)], "a-b is left out: it would be a duplicate of a.b"


def test_guard_refuses_a_rebound_host_on_a_loopback_address() -> None:
    def call(guard: Any, host: str, server: tuple[str, int] | None) -> int:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/api/v1/topology/t/kill/0", "scheme": "http",
                 "server": server, "headers": [(b"host", host.encode()), (b"origin", f"http://{host}".encode())]}
        asyncio.run(guard(scope, receive, send))
        return sent[0]["status"]

    guard = Guard(_ok, None, frozenset({"ui.corp"}))
    assert call(guard, "evil.example:8080", ("127.0.0.1", 8080)) == 403
    for host in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080", "ui.corp:8080"):
        assert call(guard, host, ("127.0.0.1", 8080)) == 200, host
    assert call(guard, "ui.example:8080", ("0.0.0.0", 8080)) == 200, "a UI for the network answers any name"


def test_a_body_nested_too_deep_is_a_400_and_storms_string_counts_are_numbers() -> None:
    from ui.app import ApiError, _body, _storm_count

    class _Request:
        async def body(self) -> bytes:
            return b"[" * 100_000

    with pytest.raises(ApiError) as caught:
        asyncio.run(_body(_Request()))  # type: ignore[arg-type]
    assert caught.value.status == 400 and "malformed JSON" in str(caught.value.message)
    assert _storm_count("5") == 5 and _storm_count(" 12 ") == 12 and _storm_count(3) == 3
    assert _storm_count("x") == "x" and _storm_count("-1") == "-1", "left for the rescale's checks to refuse"
