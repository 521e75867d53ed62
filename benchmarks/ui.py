"""The UI with a 1,000-executor topology: REST latency and page load in headless Chromium.

``python -m benchmarks.ui [--executors N] [--requests R] [--loads L] [--screenshot PATH]``

1. **REST.** A topology of ``--executors`` executors (1,000; and an acker per worker, 40 workers
   on 4 nodes) that exists only in ZooKeeper (``benchmarks/_uisim.py``: supervisors, plan,
   100 migration records, 200 OTD rounds and every worker's heartbeat rewritten each second),
   a real ZooKeeper and a real UI process. ``GET /api/v1/topology/:id`` ``--requests`` times,
   0.6 s apart so that every answer is built afresh (the UI shares a built document for 0.5 s),
   and the same back to back (shared); ``/component/:id`` of its largest bolt and ``/metrics``
   likewise, built afresh.
2. **Page load.** Debian's chromium (headless, driven by playwright) opens ``/topology/:id``
   ``--loads`` times in a fresh page: the time from navigation to the first complete render
   (every executor placed, DAG, timeline, tables), as the page measures it
   (``window.nstorm.firstRenderAt``, from ``performance.now()``), and the time each later
   two-second refresh takes (``lastRenderMs``).

``--screenshot PATH`` instead runs word count on a local cluster (2 supervisors, 4 workers),
moves an executor live through the REST API and saves a screenshot of its topology page (the
README's picture).

Prints a table and writes ``benchmarks/results/ui.json``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, temporary_home, write_json

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
WORDCOUNT = Path(__file__).parents[1] / "topologies" / "wordcount.py"


def _get(url: str) -> tuple[float, int]:
    """Seconds to a complete answer, and its size."""
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - our own local UI
        body = resp.read()
    return time.perf_counter() - t0, len(body)


def _series(url: str, n: int, gap: float) -> dict[str, Any]:
    times, size = [], 0
    for _ in range(n):
        took, size = _get(url)
        times.append(took)
        if gap:
            time.sleep(gap)
    times.sort()
    return {"n": n, "median_ms": 1000 * statistics.median(times), "p95_ms": 1000 * times[int(0.95 * (n - 1))],
            "max_ms": 1000 * times[-1], "bytes": size}


def _start_ui(zk_address: str, root: str) -> tuple[subprocess.Popen[bytes], str]:
    from nstorm.home import logs_dir
    from nstorm.net import free_port

    port = free_port("127.0.0.1")
    out = open(logs_dir() / "ui-bench.out", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([sys.executable, "-m", "ui", "--zk", zk_address, "--root", root, "--port", str(port)],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out.close()
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            _get(url + "healthz")
            return proc, url
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.1)


def _browser() -> tuple[Any, Any]:
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
    from _ui import chromium_path

    executable = chromium_path()
    if executable is None:
        msg = "Debian's chromium is not installed (apt-get install chromium)"
        raise SystemExit(msg)
    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
    return playwright, browser


def page_loads(url: str, loads: int, executors: int) -> dict[str, Any]:
    playwright, browser = _browser()
    first, later, draw, first_draw, loaded = [], [], [], [], []
    try:
        for _ in range(loads):
            context = browser.new_context(viewport={"width": 1500, "height": 1100})
            page = context.new_page()
            page.goto(url)
            page.wait_for_function("window.nstorm && window.nstorm.firstRenderAt !== null", timeout=60_000)
            first.append(page.evaluate("window.nstorm.firstRenderAt"))
            first_draw.append(page.evaluate("window.nstorm.firstDrawMs"))
            loaded.append(page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"))
            chips = page.eval_on_selector_all(".executor[data-executor]", "els => els.length")
            assert chips >= executors, chips
            page.wait_for_function("window.nstorm.renders >= 3", timeout=60_000)
            later.append(page.evaluate("window.nstorm.lastRenderMs"))
            draw.append(page.evaluate("window.nstorm.lastDrawMs"))
            context.close()
    finally:
        browser.close()
        playwright.stop()
    return {"loads": loads, "first_render_ms": sorted(first), "median_first_render_ms": statistics.median(first),
            "max_first_render_ms": max(first), "median_refresh_ms": statistics.median(later),
            "median_dom_content_loaded_ms": statistics.median(loaded),
            "median_first_draw_ms": statistics.median(first_draw), "median_refresh_draw_ms": statistics.median(draw)}


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    from benchmarks._uisim import SimulatedTopology
    from nstorm.zookeeper import EmbeddedZooKeeper

    with temporary_home() as home:
        zk = EmbeddedZooKeeper(home / "zk", 0, home / "zk.log")
        zk.start(timeout=60)
        sim = ui = None
        try:
            sim = SimulatedTopology(zk.address, "/bench-ui", executors=args.executors).start()
            ui, url = _start_ui(zk.address, "/bench-ui")
            api = url + "api/v1/topology/big"
            biggest = max((c for c, spec in sim.definition["components"].items()),
                          key=lambda c: sim.definition["components"][c]["parallelism"])
            for _ in range(3):
                _get(api)  # warm: imports, first connection
            console.print(f"{len(sim.plan.executors)} executors on {len(sim.plan.workers)} workers; measuring the API…")
            rest = {
                "topology_fresh": _series(api, args.requests, 0.6),
                "topology_shared": _series(api, args.requests, 0.0),
                "component_fresh": _series(f"{api}/component/{biggest}", max(5, args.requests // 3), 0.6),
                "metrics_fresh": _series(url + "metrics", max(5, args.requests // 3), 0.6),
            }
            console.print("measuring page loads in headless chromium…")
            page = page_loads(url + "topology/big", args.loads, args.executors)
            return {"executors": len(sim.plan.executors), "workers": len(sim.plan.workers), "rest": rest, "page": page}
        finally:
            if ui is not None:
                ui.terminate()
                ui.wait(10)
            if sim is not None:
                sim.stop()
            zk.stop()


def screenshot(path: Path, console: Console) -> None:
    """Word count on a local cluster with its UI, one live move, then the topology page."""
    from nstorm.client import ClusterClient
    from nstorm.localcluster import LocalCluster
    from nstorm.net import free_port

    with temporary_home():
        cluster = LocalCluster(supervisors=2, slots=2, ui_port=free_port("127.0.0.1")).start()
        try:
            with ClusterClient(cluster.address) as client:
                client.submit(WORDCOUNT, conf={"wordcount.rate": 2000, "wordcount.workers": 4})
                client.wait_running("wordcount", 60)
                time.sleep(12)  # rates, capacity and traffic over a window
                plan = client.plan("wordcount")
                assert plan is not None
                source = plan.executors["count:1"]
                target = next(w for w in sorted(plan.workers) if w != source and w.split(":")[0] != source.split(":")[0])
                client.rebalance("wordcount", moves=[("count:1", target)], by="ui")
                time.sleep(6)
            playwright, browser = _browser()
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1000})
                page.goto(f"{cluster.ui_url}topology/wordcount")
                page.wait_for_function("window.nstorm && window.nstorm.renders >= 2", timeout=60_000)
                time.sleep(6)  # the traffic heatmap and DAG rates (5 s poll)
                path.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(path), full_page=True)
            finally:
                browser.close()
                playwright.stop()
        finally:
            cluster.stop()
    console.print(f"screenshot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ui", description=__doc__.splitlines()[0])
    parser.add_argument("--executors", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=30, help="GETs of /api/v1/topology/:id per series")
    parser.add_argument("--loads", type=int, default=5, help="page loads in chromium")
    parser.add_argument("--screenshot", type=Path, default=None, help="only take the README's screenshot, to PATH")
    args = parser.parse_args()
    console = Console()
    if args.screenshot is not None:
        screenshot(args.screenshot, console)
        return
    result = run(args, console)
    table = Table(title=f"UI with {result['executors']} executors on {result['workers']} workers "
                        f"({machine()['cpus']} cores)", title_justify="left")
    for col in ("what", "n", "median", "p95", "max", "size"):
        table.add_column(col, justify="left" if col == "what" else "right")
    for name, s in result["rest"].items():
        table.add_row(f"GET {name.replace('_', ' ')}", str(s["n"]), f"{s['median_ms']:.1f} ms", f"{s['p95_ms']:.1f} ms",
                      f"{s['max_ms']:.1f} ms", f"{s['bytes'] / 1024:.0f} KiB")
    page = result["page"]
    table.add_row("page load to first full render", str(page["loads"]), f"{page['median_first_render_ms']:.0f} ms", "",
                  f"{page['max_first_render_ms']:.0f} ms", "")
    table.add_row("  of which: HTML and scripts loaded", str(page["loads"]), f"{page['median_dom_content_loaded_ms']:.0f} ms",
                  "", "", "")
    table.add_row("  of which: drawing after the GETs", str(page["loads"]), f"{page['median_first_draw_ms']:.0f} ms",
                  "", "", "")
    table.add_row("page refresh (every 2 s)", str(page["loads"]), f"{page['median_refresh_ms']:.0f} ms", "", "", "")
    table.add_row("  of which: drawing", str(page["loads"]), f"{page['median_refresh_draw_ms']:.0f} ms", "", "", "")
    console.print(table)
    path = write_json("ui", {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, **result})
    console.print(f"results: {path}")


if __name__ == "__main__":
    main()
