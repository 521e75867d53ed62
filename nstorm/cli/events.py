"""``nstorm debug NAME [COMPONENT]`` and ``nstorm events NAME [COMPONENT]``: Storm's topology event
inspector. The first turns event sampling on (``--sample PCT``) or off (``--off``) live: the
executors write that share of the tuples they emit to their worker's events file; the second
prints the last of them, every worker's together, each read on its node (its supervisor's
logviewer), so that no one logs in to a node to see what flows."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from nstorm.cli.common import ZkOption, ZkRootOption, cli_errors, cluster_client, print_json
from nstorm.topology import check_topology_name


def describe(sampling: dict[str, float]) -> list[str]:
    """One line a sampled component (``*``: every component without a setting of its own)."""
    if not sampling:
        return ["event sampling off"]
    return [f"{'every component' if c == '*' else c}: {p:g}% of the tuples emitted" if p else f"{c}: off"
            for c, p in sorted(sampling.items())]


def _event_line(event: dict[str, Any]) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(event["time"])) + f".{int(event['time'] % 1 * 1000):03d}"
    values = json.dumps(event.get("values"), ensure_ascii=False)
    return f"{stamp} {event.get('executor', '?')} {event.get('stream', '?')} {values} ({event['worker']})"


def _check_component(client: Any, name: str, component: str) -> None:
    """NotFoundError (exit 2) unless ``name`` is a topology with ``component``."""
    from nstorm.errors import NotFoundError

    topology = client.cluster.topology(name)
    if topology is None or component not in topology["definition"]["components"]:
        msg = f"no topology named {name!r}" if topology is None else f"topology {name!r} has no component {component!r}"
        raise NotFoundError(msg)


def register(app: typer.Typer) -> None:
    """Add ``debug`` and ``events`` to the root app."""

    @app.command("debug", rich_help_panel="Topologies")
    @cli_errors
    def debug(
        name: str,
        component: Annotated[str | None, typer.Argument(help="one component (default: every component)")] = None,
        sample: Annotated[float | None, typer.Option(
            "--sample", help="percentage of the emitted tuples to log, more than 0 and at most 100")] = None,
        off: Annotated[bool, typer.Option("--off", help="stop logging them (without COMPONENT: every component's)")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Log a sample of the tuples a running topology's components emit, live (Storm's "Debug"
        button): read them with 'nstorm events'. With neither --sample nor --off, print what is
        sampled."""
        from nstorm.errors import UsageError
        from nstorm.loglevels import check_percent, sampling_of

        check_topology_name(name)
        if sample is not None and off:
            msg = "--sample and --off: give one of them"
            raise UsageError(msg)
        if sample is not None:
            try:
                check_percent(sample)
            except ValueError as exc:
                raise UsageError(f"--sample: {exc}") from None
        with cluster_client(zk, zk_root) as client:
            if sample is None and not off:
                sampling = client.event_sampling(name)
                if component is not None:  # that component's, as its executors follow it
                    _check_component(client, name, component)
                    sampling = {component: sampling_of(sampling, component)}
            else:
                sampling = client.set_event_sampling(name, None if off else sample, component)
        if as_json:
            print_json({"topologyId": name, "sampling": sampling})
            return
        for line in describe(sampling):
            typer.echo(f"{name}: {line}")

    @app.command("events", rich_help_panel="Topologies")
    @cli_errors
    def events(
        name: str,
        component: Annotated[str | None, typer.Argument(help="one component's (default: every component's)")] = None,
        lines: Annotated[int, typer.Option("-n", "--lines", min=1, max=5000, help="the last N events")] = 50,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
        zk: ZkOption = None,
        zk_root: ZkRootOption = None,
    ) -> None:
        """Print the last tuples 'nstorm debug' logged, every worker's together, oldest first: time,
        executor, stream, values and worker."""
        from nstorm.errors import ClusterError, NotFoundError
        from nstorm.home import logs_dir
        from nstorm.logfetch import gather_events

        check_topology_name(name)
        with cluster_client(zk, zk_root) as client:
            topology = client.cluster.topology(name)
            plan = client.plan(name)
            if topology is None or plan is None:
                msg = f"no topology named {name!r} runs"
                raise NotFoundError(msg)
            if component is not None:
                _check_component(client, name, component)
            sampling = client.event_sampling(name)
            supervisors = client.cluster.supervisors()
        found = gather_events(sorted(plan.workers), lines, supervisors, logs_dir(), component)
        if as_json:
            print_json({"topologyId": name, "component": component, "sampling": sampling, **found})
            return
        for event in found["events"]:
            typer.echo(_event_line(event))
        for worker, why in sorted(found["errors"].items()):
            typer.echo(f"worker {worker}: {why}", err=True)
        if not found["events"]:
            typer.echo(f"{name}: no events logged" + ("" if sampling else " (sampling is off: nstorm debug NAME --sample PCT)"),
                       err=True)
        if found["errors"] and not found["events"]:
            raise ClusterError(f"no worker's events could be read ({len(found['errors'])} failed)")
