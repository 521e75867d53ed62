"""The UI's ASGI application (Starlette): the REST API, ``/metrics`` and the two pages.

Routes (Storm's REST shape, ``:id`` is the topology's name; see :mod:`ui.documents`)::

    GET  /api/v1/cluster/summary | /supervisor/summary | /nimbus/summary | /topology/summary
    GET  /api/v1/supervisor/:node/log?lines=N        the supervisor's own log, from its node (Storm's daemonlog)
    GET  /api/v1/topology/:id                        spouts, bolts, workers, configuration, placement, dag
    GET  /api/v1/topology/:id/component/:component   per executor: host, port, worker, counters
    GET  /api/v1/topology/:id/migrations | /otd | /traffic?window=S | /worker/:worker/log?lines=N (from its node)
    GET  /api/v1/topology/:id/worker/:worker/log/download   the whole log file, from its node
    GET  /api/v1/topology/:id/search?q=TEXT&max=N     every worker's log searched, each on its node
    GET  /api/v1/topology/:id/events?component=C&lines=N   the tuples event sampling logged, from every node
    GET  /api/v1/topology/:id/latency                latency constraints and chains, as status --json
    GET  /api/v1/topology/:id/logconfig              dynamic log levels (Storm's namedLoggerLevels)
    POST /api/v1/topology/:id/logconfig              {"namedLoggerLevels": {"ROOT": {"target_level": "DEBUG",
                                                     "timeout": 30}}}; a null target_level resets the logger
    POST /api/v1/topology/:id/activate | /deactivate | /rebalance/:wait-time | /kill/:wait-time
    POST /api/v1/topology/:id/move                   {"executor": "count:3", "to": "n2:6701"}: live, by "ui"
    POST /api/v1/topology/:id/worker/:worker/dump    a dump of the worker's threads, from its node
    POST /api/v1/topology/:id[/component/:component]/debug/:action/:spct   Storm's event sampling
                                                     (action enable or disable, spct its percentage)
    GET  /metrics                                    Prometheus' text format
    GET  /  and  /topology/:id                       the pages (assets under /static, all served here)

Errors are JSON ``{"error", "errorMessage"}``: 400 bad input, 404 no such topology, component or
log, 409 a conflict (the executor is being moved, the topology is being killed), 503 while
ZooKeeper is unreachable; never a traceback.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kazoo.exceptions import NoAuthError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from nstorm.client import ClusterClient
from nstorm.errors import ClusterError, NotFoundError, NStormError, UsageError
from nstorm.home import logs_dir, metrics_dir
from nstorm.logfetch import (
    LogUnavailable,
    fetch_daemon_log,
    fetch_log,
    gather_events,
    open_log,
    search_workers,
    thread_dump,
)
from nstorm.logtail import MAX_LINES, MAX_MATCHES, MAX_NEEDLE
from nstorm.records import TopologyStatus
from nstorm.topology import is_acker
from ui import documents, prometheus
from ui.guard import Guard
from ui.source import ZOOKEEPER_TROUBLE, ClusterSource, Unreachable

__all__ = ["ApiError", "create_app"]

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MOVE_TIMEOUT_SECS = 15.0  # a POST waits this long for Nimbus to take the request


class ApiError(Exception):
    """An answer other than 200, with its JSON body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            409: "Conflict", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
            504: "Gateway Timeout"}


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": _REASONS.get(status, "Error"), "errorMessage": message}, status_code=status)


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, ApiError):
        return exc.status
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, UsageError):
        return 400
    if isinstance(exc, (Unreachable, ClusterError, *ZOOKEEPER_TROUBLE)):
        return 503
    return 500


async def _handle(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        return error_response(exc.status_code, str(exc.detail))
    status = _status_of(exc)
    if status == 500:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error_response(500, f"internal error ({type(exc).__name__}); see the UI's log")
    message = str(exc) or type(exc).__name__
    if isinstance(exc, NoAuthError):
        message = "ZooKeeper denied access: give the UI the cluster's credentials (NSTORM_ZK_AUTH)"
    elif status == 503 and not isinstance(exc, (Unreachable, ClusterError)):
        message = f"cluster unreachable: ZooKeeper did not answer ({type(exc).__name__})"
    return error_response(status, message)


# -- request helpers ------------------------------------------------------------------------------
def _number(text: str, what: str, low: float = 0.0, high: float = math.inf) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or not low <= value <= high:
        msg = f"{what} must be a number from {low:g} to {high:g}, got {text!r}"
        raise ApiError(400, msg)
    return value


def _storm_count(value: Any) -> Any:
    """A count as Storm's REST clients send it: ``"5"`` is 5 (Storm's own example writes them as
    strings); anything else is passed on as it is, for the rescale's checks to refuse."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


async def _body(request: Request, required: bool = False) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        if required:
            raise ApiError(400, "a JSON object body is required")
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than json can read
        msg = f"malformed JSON body: {exc or 'nested too deep'}"
        raise ApiError(400, msg) from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the body must be a JSON object, got {type(data).__name__}")
    return data


class Api:
    """The endpoints, over one :class:`~ui.source.ClusterSource`."""

    def __init__(self, source: ClusterSource) -> None:
        self.source = source

    # -- reads -------------------------------------------------------------------------------------
    def cluster(self) -> dict[str, Any]:
        """Supervisors (and when each registered), plans, Nimbus contenders: read once, shared."""

        def build() -> dict[str, Any]:
            client = self.source.client()
            supervisors = client.cluster.supervisors()
            registered = {}
            for node in supervisors:
                stat = client.zk.exists(client.paths.supervisor(node))
                if stat is not None:
                    registered[node] = stat.ctime / 1000.0
            names = client.names()
            plans = {n: client.plan(n) for n in names}
            rows = []
            for name in names:
                topo = client.cluster.topology(name) or {}
                status, _ = client.cluster.status(name)
                conf = {**(topo.get("definition", {}).get("conf") or {}), **(topo.get("conf") or {})}
                rows.append({"name": name, "status": status.value if status else "?", "plan": plans[name],
                             "submitted_at": topo.get("submitted_at"),
                             "scheduler": conf.get("topology.scheduler", "static")})
            return {"supervisors": supervisors, "registered": registered, "plans": plans, "rows": rows,
                    "nimbuses": client.cluster.nimbuses()}

        return self.source.cached(("cluster",), build)

    def view(self, name: str) -> documents.TopologyView:
        return self.source.cached(("topology", name), lambda: documents.read_topology(self.source.client(), name))

    def cluster_summary(self, request: Request) -> JSONResponse:
        c = self.cluster()
        return JSONResponse(documents.cluster_summary(c["supervisors"], c["plans"], c["nimbuses"]))

    def supervisor_summary(self, request: Request) -> JSONResponse:
        c = self.cluster()
        return JSONResponse(documents.supervisor_summary(c["supervisors"], c["registered"], c["plans"], time.time()))

    def nimbus_summary(self, request: Request) -> JSONResponse:
        return JSONResponse(documents.nimbus_summary(self.cluster()["nimbuses"]))

    def topology_summary(self, request: Request) -> JSONResponse:
        return JSONResponse(documents.topology_summary(self.cluster()["rows"], time.time()))

    def topology(self, request: Request) -> JSONResponse:
        name = request.path_params["id"]
        doc = self.source.cached(("doc", name), lambda: documents.topology_document(self.view(name)))
        return JSONResponse(doc)

    def component(self, request: Request) -> JSONResponse:
        name, component = request.path_params["id"], request.path_params["component"]
        doc = documents.component_document(self.view(name), component)
        if doc is None:
            raise ApiError(404, f"topology {name!r} has no component {component!r}")
        return JSONResponse(doc)

    def migrations(self, request: Request) -> JSONResponse:
        return JSONResponse(documents.migrations_document(self.view(request.path_params["id"])))

    def otd(self, request: Request) -> JSONResponse:
        return JSONResponse(documents.otd_document(self.view(request.path_params["id"])))

    def latency(self, request: Request) -> JSONResponse:
        """The latency constraints and chains alone: what a dashboard polls without the whole
        topology document (the same snapshot, so both always agree)."""
        name = request.path_params["id"]
        return JSONResponse({"topologyId": name, **documents.latency_document(self.view(name))})

    def logconfig(self, request: Request) -> JSONResponse:
        """Storm's ``GET /logconfig``: the log levels set on the topology's workers (nstorm.loglevels)."""
        name = request.path_params["id"]
        return JSONResponse(_named_levels(name, self._live().log_levels(name)))

    def traffic(self, request: Request) -> JSONResponse:
        """The ``nstorm traffic --json`` document over the last ``window`` seconds, aggregated in
        Python (Spark stays the CLI's and OTD's engine: a page asks every few seconds)."""
        from scheduler_otd.traffic import aggregate_records, read_window, window_files

        name = request.path_params["id"]
        window = _number(request.query_params.get("window", "60"), "window", 0.001, 3600.0)
        view = self.view(name)

        def build() -> dict[str, Any]:
            now = time.time()
            files = window_files(metrics_dir(view.conf) / name, window, now)
            return aggregate_records(read_window(files, window, now), window, now)

        return JSONResponse(self.source.cached(("traffic", name, window), build, ttl=1.0))

    def worker_log(self, request: Request) -> JSONResponse:
        name, worker = request.path_params["id"], request.path_params["worker"]
        lines = int(_number(request.query_params.get("lines", "200"), "lines", 1, MAX_LINES))
        registration = self._node_of(name, worker)
        try:
            found = fetch_log(worker, lines, registration, logs_dir())
        except (LogUnavailable, ValueError) as exc:
            raise ApiError(getattr(exc, "status", 404), str(exc)) from None
        return JSONResponse({"topologyId": name, "worker": worker, **found})

    def supervisor_log(self, request: Request) -> JSONResponse:
        """The tail of a supervisor's own log, from its logviewer (Storm's daemonlog)."""
        node = request.path_params["node"]
        lines = int(_number(request.query_params.get("lines", "200"), "lines", 1, MAX_LINES))
        supervisors = self.cluster()["supervisors"]
        if node not in supervisors:
            raise ApiError(404, f"no supervisor {node!r} is registered")
        try:
            found = fetch_daemon_log(node, lines, supervisors[node])
        except LogUnavailable as exc:
            raise ApiError(exc.status, str(exc)) from None
        return JSONResponse({"supervisorId": node, **found})

    def download_log(self, request: Request) -> Response:
        """The worker's whole log file, from its node (Storm's "Download Full File")."""
        name, worker = request.path_params["id"], request.path_params["worker"]
        registration = self._node_of(name, worker)
        try:
            filename, size, chunks = open_log(worker, registration, logs_dir())
        except LogUnavailable as exc:
            raise ApiError(exc.status, str(exc)) from None
        return StreamingResponse(chunks, media_type="text/plain; charset=utf-8", headers={
            "Content-Length": str(size), "Content-Disposition": f'attachment; filename="{filename}"'})

    def search_logs(self, request: Request) -> JSONResponse:
        """Every worker's log of the topology searched at once, each on its node (Storm's log search)."""
        name = request.path_params["id"]
        needle = request.query_params.get("q", "")
        if not 1 <= len(needle) <= MAX_NEEDLE:
            raise ApiError(400, f"q: expected 1 to {MAX_NEEDLE} characters to look for")
        limit = int(_number(request.query_params.get("max", "100"), "max", 1, MAX_MATCHES))
        view = self.view(name)
        workers = sorted(view.plan.workers) if view.plan else []
        found = search_workers(workers, needle, limit, self.cluster()["supervisors"], logs_dir())
        return JSONResponse({"topologyId": name, "searchString": needle, **found})

    def events(self, request: Request) -> JSONResponse:
        """The last tuples the topology's event sampling wrote, every worker's together, each read
        on its node (Storm's "events" link; of one component with ``component``)."""
        name = request.path_params["id"]
        component = request.query_params.get("component") or None
        lines = int(_number(request.query_params.get("lines", "100"), "lines", 1, MAX_LINES))
        view = self.view(name)
        if component is not None and component not in view.definition["components"]:
            raise ApiError(404, f"topology {name!r} has no component {component!r}")
        workers = sorted(view.plan.workers) if view.plan else []
        found = gather_events(workers, lines, self.cluster()["supervisors"], logs_dir(), component)
        return JSONResponse({"topologyId": name, "component": component,
                             "sampling": self._live().event_sampling(name), **found})

    def debug(self, name: str, component: str | None, action: str, percent: float) -> JSONResponse:
        """Storm's ``POST .../debug/:action/:spct``: sample ``percent`` % of the tuples the
        component (None: every component) emits into its workers' events files, or stop, live."""
        if action not in ("enable", "disable"):
            raise ApiError(400, f"debug action must be enable or disable, got {action!r}")
        self._open(name)
        sampling = self._live().set_event_sampling(name, percent if action == "enable" else None, component)
        return self._done(name, "debug", component=component, sampling=sampling)

    def thread_dump(self, name: str, worker: str) -> JSONResponse:
        """A new dump of a worker's threads, from its node's supervisor (Storm's "JStack")."""
        registration = self._node_of(name, worker)
        try:
            found = thread_dump(worker, registration)
        except LogUnavailable as exc:
            raise ApiError(exc.status, str(exc)) from None
        return JSONResponse({"topologyId": name, "worker": worker, **found})

    def _node_of(self, name: str, worker: str) -> dict[str, Any] | None:
        """The registration of ``worker``'s supervisor (None: not registered now); 404 unless the
        worker is (or was, for a move) one of ``name``'s."""
        view = self.view(name)
        known = set(view.plan.workers if view.plan else ()) | {w for m in view.migrations for w in (m.source, m.target)}
        if worker not in known:
            raise ApiError(404, f"topology {name!r} has no worker {worker!r}")
        return self.cluster()["supervisors"].get(worker.rpartition(":")[0])

    def metrics(self, request: Request) -> Response:
        def build() -> bytes:
            c = self.cluster()
            views = []
            for name in c["plans"]:
                try:
                    views.append(self.view(name))
                except NotFoundError:
                    continue  # killed meanwhile
            now = time.time()
            return prometheus.render([*prometheus.cluster_families(c["supervisors"], c["plans"], bool(c["nimbuses"])),
                                      *prometheus.topology_families(views, now)])

        body = self.source.cached(("metrics",), build)
        return Response(body, media_type=prometheus.CONTENT_TYPE_LATEST)

    # -- actions -----------------------------------------------------------------------------------
    def _live(self) -> ClusterClient:
        """A client without the snapshot's memo (actions poll for Nimbus's answer)."""
        self.source.check()
        return ClusterClient.over(self.source.zk, self.source.paths.root)

    def _open(self, name: str, allow_killed: bool = False) -> documents.TopologyView:
        view = documents.read_topology(self.source.client(), name)  # fresh: 404 if unknown
        if not allow_killed and view.status["status"] == TopologyStatus.KILLED:
            raise ApiError(409, f"topology {name!r} is being killed")
        return view

    def _done(self, name: str, operation: str, **extra: Any) -> JSONResponse:
        self.source.forget("topology", name)
        self.source.forget("doc", name)
        self.source.forget("cluster")
        return JSONResponse({"topologyOperation": operation, "topologyId": name, "status": "success", **extra})

    def set_status(self, name: str, active: bool) -> JSONResponse:
        self._open(name)
        client = self._live()
        (client.activate if active else client.deactivate)(name)
        return self._done(name, "activate" if active else "deactivate")

    def kill(self, name: str, wait: float) -> JSONResponse:
        self._open(name, allow_killed=True)
        self._live().kill(name, wait)
        return self._done(name, "kill", waitSecs=wait)

    def rebalance(self, name: str, wait: float, body: Mapping[str, Any]) -> JSONResponse:
        view = self._open(name)
        options = body.get("rebalanceOptions") or {}
        if not isinstance(options, dict):
            raise ApiError(400, "rebalanceOptions must be an object")
        mode = body.get("mode", "thread")
        if mode not in ("thread", "process", "stop"):
            raise ApiError(400, f"unknown mode {mode!r}: use thread, process or stop")
        executors, workers = options.get("executors"), options.get("numWorkers")
        workers = None if workers is None else _storm_count(workers)
        if executors is not None and executors != {}:  # Storm's parallelism change: live here (thread mode)
            if not isinstance(executors, dict):
                raise ApiError(400, 'rebalanceOptions.executors must map components to executor counts, '
                                    'e.g. {"count": 8} (numWorkers may go with it)')
            if body.get("moves") or body.get("random"):
                raise ApiError(400, "give either moves or a parallelism change (rebalanceOptions.executors), not both")
            result = self._live().rebalance(name, mode=mode, wait_secs=wait if mode == "stop" else None, by="ui",
                                            timeout=MOVE_TIMEOUT_SECS, workers=workers,
                                            parallelism={str(c): _storm_count(n) for c, n in executors.items()})
            return self._done(name, "rebalance", mode=mode, waitSecs=wait if mode == "stop" else 0,
                              planVersion=result["version"], parallelism=result.get("parallelism"),
                              migrations=result["records"])
        moves = _moves(body.get("moves"))
        random_count = body.get("random", 0)
        if isinstance(random_count, bool) or not isinstance(random_count, int) or random_count < 0:
            raise ApiError(400, f"random must be a whole number >= 0, got {random_count!r}")
        if workers is not None and (moves or random_count):
            raise ApiError(400, "numWorkers goes alone (an even spread) or with executors, not with moves")
        self._check_moves(view, moves)
        # Neither moves nor executors: Storm's rebalance, an even spread (over numWorkers if given).
        result = self._live().rebalance(name, mode=mode, moves=moves, random_count=random_count,
                                        wait_secs=wait if mode == "stop" else None, by="ui",
                                        timeout=MOVE_TIMEOUT_SECS, workers=workers)
        return self._done(name, "rebalance", mode=mode, waitSecs=wait if mode == "stop" else 0,
                          planVersion=result["version"], moves=result["moves"], migrations=result["records"])

    def move(self, name: str, body: Mapping[str, Any]) -> JSONResponse:
        executor, target = body.get("executor"), body.get("to")
        if not isinstance(executor, str) or not isinstance(target, str):
            raise ApiError(400, 'expected {"executor": "count:3", "to": "n2:6701"}')
        view = self._open(name)
        self._check_moves(view, [(executor, target)])
        source = view.plan.executors[executor] if view.plan else ""
        result = self._live().rebalance(name, mode="thread", moves=[(executor, target)], by="ui",
                                        timeout=MOVE_TIMEOUT_SECS)
        return self._done(name, "move", executor=executor, **{"from": source, "to": target},
                          planVersion=result["version"], migration=result["records"].get(executor))

    def set_logconfig(self, name: str, body: Mapping[str, Any]) -> JSONResponse:
        """Storm's ``POST /logconfig``: set loggers (``target_level``, ``timeout`` seconds, 0 for
        none) and reset those whose ``target_level`` is null, live."""
        named = body.get("namedLoggerLevels")
        if not isinstance(named, dict) or not all(isinstance(e, dict) for e in named.values()):
            raise ApiError(400, 'expected {"namedLoggerLevels": {"ROOT": {"target_level": "DEBUG", "timeout": 30}}}')
        levels = {str(n): (e["target_level"], e.get("timeout") or 0) for n, e in named.items() if e.get("target_level")}
        reset = [str(n) for n, e in named.items() if not e.get("target_level")]
        self._open(name)
        return JSONResponse(_named_levels(name, self._live().set_log_levels(name, levels, reset)))

    @staticmethod
    def _check_moves(view: documents.TopologyView, moves: list[tuple[str, str]]) -> None:
        """What Nimbus would refuse as a conflict (409) rather than as bad input (400)."""
        plan = view.plan
        if plan is None:
            raise ApiError(409, f"topology {view.name!r} has no plan yet (is Nimbus running?)")
        if plan.rebalance:
            raise ApiError(409, f"topology {view.name!r} is in a stop-mode rebalance; wait for it to finish")
        moving = {m.executor for m in view.migrations if not m.completed_at}
        for executor, _ in moves:
            if executor not in plan.executors:
                raise ApiError(400, f"topology {view.name!r} has no executor {executor!r} (they look like 'count:3')")
            if is_acker(executor):
                raise ApiError(400, f"{executor!r} is an acker; ackers are not moved")
            if executor in moving:
                raise ApiError(409, f"executor {executor!r} is being moved; wait for that move to complete")


def _moves(data: Any) -> list[tuple[str, str]]:
    """``{"count:3": "n2:6701"}`` or ``[["count:3", "n2:6701"], ...]`` as pairs (ApiError if neither)."""
    if data is None:
        return []
    pairs = list(data.items()) if isinstance(data, dict) else data
    if not isinstance(pairs, list) or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs):
        raise ApiError(400, 'moves must be {"count:3": "n2:6701", ...} or [["count:3", "n2:6701"], ...]')
    return [(str(e), str(w)) for e, w in pairs]


def _named_levels(name: str, levels: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Log levels in Storm's REST shape: ``timeout`` (seconds left, 0 for none) and ``timeout_epoch`` (ms)."""
    now = time.time()
    return {"topologyId": name, "namedLoggerLevels": {
        logger: {"target_level": s["level"], "timeout": round(max(0.0, s["until"] - now)) if s.get("until") else 0,
                 "timeout_epoch": int(s["until"] * 1000) if s.get("until") else 0}
        for logger, s in levels.items()}}


def _page(filename: str) -> Callable[[Request], Response]:
    def endpoint(request: Request) -> Response:
        return FileResponse(STATIC / filename, headers={"Cache-Control": "no-cache"})

    return endpoint


def create_app(source: ClusterSource, credentials: tuple[str, str] | None = None,
               allowed_hosts: frozenset[str] = frozenset()) -> Starlette:
    """The application over ``source``; ``credentials``: ``(user, password)`` for basic auth, or None;
    ``allowed_hosts``: ``Host`` names a loopback-bound UI answers to besides loopback ones."""
    api = Api(source)

    def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "zookeeper": "connected" if source.connected else "unreachable"})

    async def post_status(request: Request) -> JSONResponse:
        await _body(request)
        active = request.url.path.endswith("/activate")
        return await run_in_threadpool(api.set_status, request.path_params["id"], active)

    async def post_kill(request: Request) -> JSONResponse:
        await _body(request)
        wait = _number(request.path_params["wait"], "wait-time", 0.0, 86400.0)
        return await run_in_threadpool(api.kill, request.path_params["id"], wait)

    async def post_rebalance(request: Request) -> JSONResponse:
        body = await _body(request)
        wait = _number(request.path_params["wait"], "wait-time", 0.0, 86400.0)
        return await run_in_threadpool(api.rebalance, request.path_params["id"], wait, body)

    async def post_move(request: Request) -> JSONResponse:
        body = await _body(request, required=True)
        return await run_in_threadpool(api.move, request.path_params["id"], body)

    async def post_dump(request: Request) -> JSONResponse:
        await _body(request)
        return await run_in_threadpool(api.thread_dump, request.path_params["id"], request.path_params["worker"])

    async def post_debug(request: Request) -> JSONResponse:
        await _body(request)
        action = request.path_params["action"]
        percent = _number(request.path_params["spct"], "spct", 0.0, 100.0) if action == "enable" else 0.0
        return await run_in_threadpool(api.debug, request.path_params["id"], request.path_params.get("component"),
                                       action, percent)

    async def post_logconfig(request: Request) -> JSONResponse:
        body = await _body(request, required=True)
        return await run_in_threadpool(api.set_logconfig, request.path_params["id"], body)

    topology = "/api/v1/topology/{id}"
    routes = [
        Route("/", _page("index.html")),
        Route("/topology/{id}", _page("topology.html")),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        Route("/healthz", healthz),
        Route("/metrics", api.metrics),
        Route("/api/v1/cluster/summary", api.cluster_summary),
        Route("/api/v1/supervisor/summary", api.supervisor_summary),
        Route("/api/v1/supervisor/{node}/log", api.supervisor_log),
        Route("/api/v1/nimbus/summary", api.nimbus_summary),
        Route("/api/v1/topology/summary", api.topology_summary),
        Route(topology, api.topology),
        Route(topology + "/component/{component}", api.component),
        Route(topology + "/migrations", api.migrations),
        Route(topology + "/otd", api.otd),
        Route(topology + "/latency", api.latency),
        Route(topology + "/traffic", api.traffic),
        Route(topology + "/worker/{worker}/log", api.worker_log),
        Route(topology + "/worker/{worker}/log/download", api.download_log),
        Route(topology + "/search", api.search_logs),
        Route(topology + "/events", api.events),
        Route(topology + "/debug/{action}/{spct}", post_debug, methods=["POST"]),
        Route(topology + "/component/{component}/debug/{action}/{spct}", post_debug, methods=["POST"]),
        Route(topology + "/worker/{worker}/dump", post_dump, methods=["POST"]),
        Route(topology + "/logconfig", api.logconfig),
        Route(topology + "/logconfig", post_logconfig, methods=["POST"]),
        Route(topology + "/activate", post_status, methods=["POST"]),
        Route(topology + "/deactivate", post_status, methods=["POST"]),
        Route(topology + "/rebalance/{wait}", post_rebalance, methods=["POST"]),
        Route(topology + "/kill/{wait}", post_kill, methods=["POST"]),
        Route(topology + "/move", post_move, methods=["POST"]),
    ]
    # Known errors by class (answered as they are); anything else is a 500 without a traceback.
    handlers: dict[Any, Any] = {cls: _handle for cls in (HTTPException, ApiError, NStormError, Unreachable,
                                                           *ZOOKEEPER_TROUBLE)}
    handlers[Exception] = _handle
    return Starlette(routes=routes, middleware=[Middleware(Guard, credentials=credentials, allowed_hosts=allowed_hosts)],
                     exception_handlers=handlers)
