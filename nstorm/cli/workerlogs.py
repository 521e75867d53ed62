"""``nstorm logs NAME WORKER``, ``nstorm search-logs NAME TEXT``, ``nstorm thread-dump NAME
WORKER`` and ``nstorm supervisor-log NODE``: a worker's log, every worker's log searched, a
worker's threads, a supervisor's own log, from wherever they run (each node's supervisor serves
them: Storm's logviewer, its log search, the UI's "JStack" and Storm's daemonlog), so that no one
logs in to a node, or into a container, to read them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from nstorm.cli.common import (
    ZkOption,
    ZkRootOption,
    check_daemon_id,
    cli_errors,
    cluster_client,
    print_json,
)
from nstorm.topology import check_topology_name


def _check(name: str, worker: str) -> None:
    """Exit 2 for a name or a worker id that cannot be one, before connecting."""
    from nstorm.errors import UsageError
    from nstorm.logtail import WORKER_ID

    check_topology_name(name)
    if not WORKER_ID.fullmatch(worker):
        msg = f"not a worker id (node:port): {worker[:80]!r}"
        raise UsageError(msg)


def _registration(client: Any, name: str, worker: str) -> dict[str, Any] | None:
    """The registration of ``worker``'s supervisor (None: not registered); NotFoundError (exit 2)
    for a topology that is not running or a worker that is not one of its."""
    from nstorm.errors import NotFoundError

    plan = client.plan(name)
    if plan is None:
        msg = f"no topology named {name!r} runs"
        raise NotFoundError(msg)
    if worker not in plan.workers:
        msg = f"topology {name!r} has no worker {worker!r} (its workers: {', '.join(sorted(plan.workers))})"
        raise NotFoundError(msg)
    return client.cluster.supervisors().get(worker.rpartition(":")[0])


def _copy_whole(name: str, worker: str, zk: str | None, zk_root: str | None) -> None:
    """Copy ``worker``'s whole log file from its node to stdout."""
    import sys

    from nstorm.errors import ClusterError
    from nstorm.home import logs_dir
    from nstorm.logfetch import LogUnavailable, open_log

    _check(name, worker)
    with cluster_client(zk, zk_root) as client:
        registration = _registration(client, name, worker)
    try:
        _, _, chunks = open_log(worker, registration, logs_dir())
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
    except LogUnavailable as exc:
        raise ClusterError(str(exc)) from None
    except OSError as exc:  # cut off midway
        msg = f"the log of worker {worker} was cut off: {exc}"
        raise ClusterError(msg) from None
    sys.stdout.buffer.flush()


def _show(name: str, worker: str, zk: str | None, zk_root: str | None,
          fetch: Callable[[dict[str, Any] | None], dict[str, Any]], as_json: bool) -> None:
    """Check, read ``worker``'s registration, ``fetch`` from its node and print its ``lines``."""
    from nstorm.errors import ClusterError
    from nstorm.logfetch import LogUnavailable

    _check(name, worker)
    with cluster_client(zk, zk_root) as client:
        registration = _registration(client, name, worker)
    try:
        found = fetch(registration)
    except LogUnavailable as exc:
        raise ClusterError(str(exc)) from None  # the cluster's state (not running there, starting), not input
    if as_json:
        print_json({"topologyId": name, "worker": worker, **found})
        return
    for line in found["lines"]:
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Add ``logs``, ``search-logs``, ``thread-dump`` and ``supervisor-log`` to the root app."""

    @app.command("logs", rich_help_panel="Topologies")
    @cli_errors
    def logs(
        name: str,
        worker: Annotated[str, typer.Argument(help="the worker, node:port (status NAME lists them)")],
        lines: Annotated[int, typer.Option("--lines", "-n", min=1, max=5000, help="lines from the end")] = 200,
        whole: Annotated[bool, typer.Option("--all", help="the whole log file, as it is now")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON: file, size, lines")] = False,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Print the end of a worker's log (or all of it), from its node (Storm's logviewer)."""
        from nstorm.home import logs_dir
        from nstorm.logfetch import fetch_log

        if whole:
            if as_json:
                from nstorm.errors import UsageError

                msg = "--all prints the file as it is: not with --json"
                raise UsageError(msg)
            _copy_whole(name, worker, zk, zk_root)
            return
        _show(name, worker, zk, zk_root, lambda registration: fetch_log(worker, lines, registration, logs_dir()),
              as_json)

    @app.command("search-logs", rich_help_panel="Topologies")
    @cli_errors
    def search_logs(
        name: str,
        text: Annotated[str, typer.Argument(help="what to look for (plain text, case matters)")],
        most: Annotated[int, typer.Option("--max", "-m", min=1, max=1000,
                                          help="lines at most per worker (its last ones)")] = 100,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON: matches, found, errors")] = False,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Search every worker's log of a topology (and the rotated files), each on its node
        (Storm's log search): one line a match, WORKER FILE:LINE: TEXT."""
        from nstorm.errors import ClusterError, NotFoundError, UsageError
        from nstorm.home import logs_dir
        from nstorm.logfetch import search_workers
        from nstorm.logtail import MAX_NEEDLE

        check_topology_name(name)
        if not 1 <= len(text) <= MAX_NEEDLE:
            msg = f"TEXT: expected 1 to {MAX_NEEDLE} characters to look for"
            raise UsageError(msg)
        with cluster_client(zk, zk_root) as client:
            plan = client.plan(name)
            if plan is None:
                msg = f"no topology named {name!r} runs"
                raise NotFoundError(msg)
            supervisors = client.cluster.supervisors()
        found = search_workers(sorted(plan.workers), text, most, supervisors, logs_dir())
        if as_json:
            print_json({"topologyId": name, "searchString": text, **found})
        else:
            for m in found["matches"]:
                typer.echo(f"{m['worker']} {m['file']}:{m['line']}: {m['text']}")
            for worker, why in sorted(found["errors"].items()):
                typer.echo(f"{worker}: not searched: {why}", err=True)
        if found["errors"] and not found["found"]:
            msg = f"no log of {name!r} could be searched"
            raise ClusterError(msg)

    @app.command("thread-dump", rich_help_panel="Topologies")
    @cli_errors
    def thread_dump(
        name: str,
        worker: Annotated[str, typer.Argument(help="the worker, node:port (status NAME lists them)")],
        as_json: Annotated[bool, typer.Option("--json", help="print JSON: file, at, lines")] = False,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Print every thread of a running worker with its stack and CPU time (Storm UI's JStack):
        where an executor is stuck, which one spins. The worker goes on."""
        from nstorm.logfetch import thread_dump as ask

        _show(name, worker, zk, zk_root, lambda registration: ask(worker, registration), as_json)

    @app.command("supervisor-log", rich_help_panel="Daemons")
    @cli_errors
    def supervisor_log(
        node: Annotated[str, typer.Argument(help="the supervisor's node id (cluster summary lists them)")],
        lines: Annotated[int, typer.Option("--lines", "-n", min=1, max=5000, help="lines from the end")] = 200,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON: file, size, lines")] = False,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Print the end of a supervisor's own log, from its node (Storm's daemonlog)."""
        from nstorm.errors import ClusterError, NotFoundError
        from nstorm.logfetch import LogUnavailable, fetch_daemon_log

        check_daemon_id("NODE", node)
        with cluster_client(zk, zk_root) as client:
            registration = client.cluster.supervisors().get(node)
        if registration is None:
            msg = f"no supervisor {node!r} is registered"
            raise NotFoundError(msg)
        try:
            found = fetch_daemon_log(node, lines, registration)
        except LogUnavailable as exc:
            raise ClusterError(str(exc)) from None
        if as_json:
            print_json({"supervisorId": node, **found})
            return
        for line in found["lines"]:
            typer.echo(line)
