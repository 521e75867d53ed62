"""The pages in a real headless Chromium (Debian's ``chromium``, driven by playwright; no browser
is downloaded): the topology page shows every component, dragging an executor onto another
worker moves it live (the move shows in the timeline, by ``ui``, and no worker restarts), the
latency constraints' table and chained executors show, the cluster page lists what runs, a
1,000-executor topology renders, and an unreachable cluster says so instead of failing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from _ui import UiProcess, chromium_path, start_chained_with_constraints, wait_json
from conftest import TOPOLOGIES, wait_until

# Flags that work in containers and CI: no sandbox (root), no GPU, no background traffic.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: Any) -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    playwright = sync_playwright().start()
    try:
        # A fresh profile per run (playwright's persistent context would reuse one).
        profile = tmp_path_factory.mktemp("chromium-profile")
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=executable, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1500, "height": 1100})
        try:
            yield context
        finally:
            context.close()
    finally:
        playwright.stop()


@pytest.fixture(scope="module")
def ui(cluster: Any) -> Iterator[UiProcess]:
    process = UiProcess(cluster.address, cluster.root)
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def metered(cluster: Any, ui: UiProcess) -> str:
    from nstorm.client import ClusterClient

    with ClusterClient(cluster.address, cluster.root) as client:
        client.submit(TOPOLOGIES / "metered.py", conf={"test.rate": 200})
        client.wait_running("metered", timeout=60)
    wait_json(ui.http, "/api/v1/topology/metered", lambda d: all(b["executedRate"] for b in d["bolts"]),
              what="metered to run with rates")
    return "metered"


@pytest.fixture(scope="module")
def chained(cluster: Any, ui: UiProcess, tmp_path_factory: Any) -> dict[str, str]:
    """``uilat``: latency constraints (one met, one broken) and its splits chained by hand."""
    return start_chained_with_constraints(cluster.address, cluster.root, tmp_path_factory.mktemp("uilat"))


def test_drag_an_executor_to_another_worker_moves_it_live(browser: Any, ui: UiProcess, metered: str,
                                                          tmp_path: Any) -> None:
    page = browser.new_page()
    try:
        page.goto(ui.url + "topology/metered")
        for component in ("numbers", "square", "sink"):
            page.wait_for_selector(f'#dag [data-component="{component}"]', timeout=30_000)
        page.wait_for_selector('.executor[data-executor="square:1"]')
        workers = page.eval_on_selector_all(".worker:not(.free)", "els => els.map(e => [e.dataset.worker, e.dataset.pid])")
        assert len(workers) == 2
        pids = dict(workers)
        source = page.eval_on_selector('.executor[data-executor="square:1"]', "e => e.closest('.worker').dataset.worker")
        target = next(w for w in pids if w != source)
        page.drag_and_drop('.executor[data-executor="square:1"]', f'.worker[data-worker="{target}"]')
        done = '#timeline li.migration[data-executor="square:1"][data-by="ui"][data-state="COMPLETED"]'
        page.wait_for_selector(done, timeout=60_000)
        assert target in page.inner_text(done)
        page.wait_for_selector(f'.worker[data-worker="{target}"] .executor[data-executor="square:1"]', timeout=30_000)
        after = dict(page.eval_on_selector_all(".worker:not(.free)", "els => els.map(e => [e.dataset.worker, e.dataset.pid])"))
        assert after == pids  # the move restarted no worker
        api = {w["id"]: w["pid"] for w in ui.http.get("/api/v1/topology/metered").json["workers"]}
        assert {w: str(p) for w, p in api.items()} == pids
        page.screenshot(path=str(tmp_path / "topology.png"), full_page=True)
    finally:
        page.close()


def test_the_page_shows_components_errors_metrics_and_state(browser: Any, ui: UiProcess, metered: str) -> None:
    page = browser.new_page()
    try:
        page.goto(ui.url + "topology/metered")
        page.wait_for_selector('#bolts tr[data-component="sink"]')
        page.wait_for_selector('#bolts tr[data-component="sink"] a.err', timeout=30_000)
        page.click('#bolts tr[data-component="sink"] a.err')
        trace = page.wait_for_selector('dialog[data-testid="error"] pre.trace')
        assert "ValueError" in trace.inner_text() and "Traceback" in trace.inner_text()
        page.keyboard.press("Escape")
        page.wait_for_selector('#metrics tr[data-metric="squares"]')
        page.wait_for_selector('#sections [data-section="checkpoints"]')
        assert page.is_hidden("#latency")  # no constraints: no table
        assert not page.query_selector('#sections [data-section="constraints"]')  # nor a raw section
        page.click('#bolts tr[data-component="square"]')
        page.wait_for_selector('#component table[data-testid="executors"] tr[data-executor="square:0"]')
        page.click('.worker:not(.free) a.log')
        log = page.wait_for_selector('dialog pre[data-testid="log"]')
        wait_until(lambda: "worker" in log.inner_text(), 15, what="the worker's log in the dialog")
        href = page.get_attribute('dialog a[data-testid="download"]', "href")  # the whole file
        assert href is not None and href.endswith("/log/download") and page.request.get(ui.url + href.lstrip("/")).ok
        page.click('dialog button[data-testid="dump"]')  # Storm UI's "JStack"
        threads = page.wait_for_selector('dialog pre[data-testid="threads"]')
        wait_until(lambda: '"MainThread"' in threads.inner_text(), 15, what="the worker's threads in the dialog")
        page.keyboard.press("Escape")
        page.keyboard.press("Escape")
        page.click("#searchlogs")  # Storm's log search
        page.fill('dialog[data-testid="confirm"] input[name="q"]', "running topology metered")
        page.click('dialog[data-testid="confirm"] button[data-testid="confirm-ok"]')
        page.wait_for_selector('dialog [data-testid="search"] tr[data-worker]', timeout=30_000)
    finally:
        page.close()


def test_debug_samples_a_components_tuples_and_events_shows_them(browser: Any, ui: UiProcess, metered: str) -> None:
    """Storm's topology event inspector from the page: "Debug…" on one component, then "Events"
    lists the tuples its executors emitted, read from their nodes; off again from the same dialog."""
    page = browser.new_page()
    try:
        page.goto(ui.url + "topology/metered")
        page.wait_for_selector('#bolts tr[data-component="square"]')
        page.click('[data-testid="debug"]')
        page.wait_for_selector('dialog[data-testid="confirm"]')
        page.select_option('dialog select[name="component"]', "square")
        page.fill('dialog input[name="pct"]', "100")
        page.click('[data-testid="confirm-ok"]')
        page.click('[data-testid="events"]')
        page.wait_for_selector('dialog [data-testid="events"] tr[data-executor^="square:"]', timeout=30_000)
        page.keyboard.press("Escape")
        page.click('[data-testid="debug"]')
        assert "Sampled now: square 100%" in page.wait_for_selector('dialog[data-testid="confirm"]').inner_text()
        page.select_option('dialog select[name="action"]', "disable")
        page.click('[data-testid="confirm-ok"]')
        wait_until(lambda: ui.http.get("/api/v1/topology/metered").json["sampling"] == {}, 15, what="sampling off")
    finally:
        ui.http.post("/api/v1/topology/metered/debug/disable/0")
        page.close()


def test_log_levels_are_set_and_reset_from_the_page(browser: Any, ui: UiProcess, metered: str) -> None:
    """Storm UI's "Change Log Level": the dialog says what is set and posts to /logconfig."""
    page = browser.new_page()

    def change(level: str, timeout: str = "0") -> str:
        page.click('[data-testid="loglevels"]')
        dialog = page.wait_for_selector('dialog[data-testid="confirm"]')
        text = dialog.inner_text()
        page.fill('dialog input[name="logger"]', "metered.square")
        page.select_option('dialog select[name="level"]', level)
        page.fill('dialog input[name="timeout"]', timeout)
        page.click('[data-testid="confirm-ok"]')
        return text

    try:
        page.goto(ui.url + "topology/metered")
        page.wait_for_selector('#bolts tr[data-component="square"]')
        assert "None set now" in change("WARN")
        wait_json(ui.http, "/api/v1/topology/metered/logconfig",
                  lambda d: d["namedLoggerLevels"].get("metered.square", {}).get("target_level") == "WARN",
                  what="the level set from the page")
        assert "metered.square=WARN (until reset)" in change("reset")
        wait_json(ui.http, "/api/v1/topology/metered/logconfig", lambda d: d["namedLoggerLevels"] == {},
                  what="the level reset from the page")
    finally:
        page.close()


def test_the_page_shows_latency_constraints_and_chained_executors(browser: Any, ui: UiProcess,
                                                                 chained: dict[str, str]) -> None:
    wait_json(ui.http, "/api/v1/topology/uilat/latency",
              lambda d: all(c["windows"] for c in d["constraints"]) and d["constraints"][1]["actions"],
              what="uilat's constraints judged and the broken one acted on")
    page = browser.new_page()
    try:
        page.goto(ui.url + "topology/uilat")
        met, broken = '#latency tr[data-path="sentences>split>lower"]', '#latency tr[data-path="lower>count"]'
        page.wait_for_selector(met + '[data-met="true"]', timeout=30_000)
        page.wait_for_selector(broken + '[data-met="false"] li[data-kind]', timeout=30_000)
        assert page.is_visible("#latency")
        cells = page.eval_on_selector_all(met + " td", "els => els.map(e => e.innerText.trim())")
        assert cells[:2] == ["sentences>split>lower", "60000.0 ms"] and cells[2].endswith(" ms")
        assert cells[3].startswith("yes (") and ":" in cells[4]  # the dominant part, e.g. "split>lower: buffer wait"
        cells = page.eval_on_selector_all(broken + " td", "els => els.map(e => e.innerText.trim())")
        assert cells[0] == "lower>count" and cells[3].startswith("no (0 / ")
        action = page.inner_text(broken + " li[data-kind]")
        assert "lower>count" in action and ("buffer" in action or "warn" in action)
        for eid, host in chained.items():
            chip = page.wait_for_selector(f'.executor.chained[data-executor="{eid}"][data-chained-to="{host}"]')
            assert f"chained to {host}" in (chip.get_attribute("title") or "")
        assert page.eval_on_selector_all(".executor.chained[data-executor]", "els => els.length") == len(chained)
    finally:
        page.close()


def test_cluster_page_lists_supervisors_and_topologies(browser: Any, ui: UiProcess, metered: str) -> None:
    page = browser.new_page()
    try:
        page.goto(ui.url)
        page.wait_for_selector('#topologies tr[data-topology="metered"] a[href="/topology/metered"]')
        page.wait_for_selector('#supervisors tr[data-supervisor="n1"]')
        page.wait_for_selector('#supervisors tr[data-supervisor="n2"]')
        assert "Leader" in page.inner_text("#nimbuses")
        page.click('#supervisors tr[data-supervisor="n2"] a[data-testid="supervisor-log"]')  # Storm's daemonlog
        log = page.wait_for_selector('dialog pre[data-testid="log"]')
        wait_until(lambda: "[supervisor n2 " in log.inner_text(), 15, what="the supervisor's log in the dialog")
    finally:
        page.close()


def test_an_unreachable_cluster_says_so(browser: Any) -> None:
    from nstorm.net import free_port

    lonely = UiProcess(f"127.0.0.1:{free_port('127.0.0.1')}", "/nowhere", connected=False)  # nothing listens there
    page = browser.new_page()
    try:
        page.goto(lonely.url + "topology/anything")
        banner = page.wait_for_selector("#banner:not([hidden])", timeout=30_000)
        assert "cluster unreachable" in banner.inner_text()
    finally:
        page.close()
        lonely.stop()


def test_a_thousand_executors_render(browser: Any, zookeeper: str) -> None:
    from benchmarks._uisim import SimulatedTopology

    sim = SimulatedTopology(zookeeper, "/sim-browser", executors=1000).start()
    big = UiProcess(zookeeper, "/sim-browser")
    page = browser.new_page()
    try:
        page.goto(big.url + "topology/big")
        page.wait_for_function("window.nstorm && window.nstorm.renders >= 2", timeout=60_000)
        chips = page.eval_on_selector_all(".executor[data-executor]", "els => els.length")
        assert chips == len(sim.plan.executors)  # 1,000 and an acker per worker
        assert page.eval_on_selector_all("#timeline li.migration", "els => els.length") == 100
        assert page.eval_on_selector_all("#timeline li.otd", "els => els.length") == 200
    finally:
        page.close()
        big.stop()
        sim.stop()
