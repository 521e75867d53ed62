"""Bad input the CLI used to answer with a traceback, several lines or a running topology left
stuck (a review of every command, session 29): one line and exit code 2, before anything runs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nstorm.cli.main import app
from nstorm.client import ClusterClient
from nstorm.errors import ConfigError, UsageError
from nstorm.zkschema import connect

WORDCOUNT = str(Path(__file__).parents[2] / "topologies" / "wordcount.py")


def _one_line_exit_2(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("address", ["host:notaport", "127.0.0.1:99999", ":2181x", ","])
def test_a_malformed_zookeeper_address_is_one_line_and_exit_2(address: str) -> None:
    with pytest.raises(ConfigError, match="bad ZooKeeper address"):
        connect(address, timeout=1.0)
    _one_line_exit_2(["list", "--zk", address], "bad ZooKeeper address")


@pytest.mark.parametrize("value", ["abc", "NaN", "Infinity", "0", "-3", "true", "2.5", "1" + "0" * 400])
def test_local_checks_its_worker_count_before_starting_a_cluster(value: str) -> None:
    _one_line_exit_2(["local", WORDCOUNT, "-c", f"topology.workers={value}"], "topology.workers")


@pytest.mark.parametrize(("option", "value"), [("--duration", "nan"), ("--duration", "-5"),
                                               ("--migrate-every", "-1"), ("--migrate-every", "inf")])
def test_local_checks_its_durations_before_starting_a_cluster(option: str, value: str) -> None:
    _one_line_exit_2(["local", WORDCOUNT, option, value], option)


@pytest.mark.parametrize("wait", [math.nan, math.inf, -1.0])
def test_a_kill_or_a_stop_mode_wait_that_is_not_finite_is_refused(wait: float, monkeypatch: Any) -> None:
    """``kill --wait nan`` wrote a ``kill_at`` Nimbus never reached: the topology stayed
    deactivated and was never removed; ``rebalance --mode stop --wait nan`` stopped it for good."""
    client = object.__new__(ClusterClient)  # no connection: the check comes before any write
    monkeypatch.setattr(client, "_require", lambda name: {"definition": {"conf": {}}, "conf": {}}, raising=False)
    with pytest.raises(UsageError, match="--wait must be a finite number of seconds >= 0"):
        client.kill("t", wait)
    with pytest.raises(UsageError, match="--wait must be a finite number of seconds >= 0"):
        client.rebalance("t", mode="stop", random_count=1, wait_secs=wait)


@pytest.mark.parametrize(("key", "value"), [
    ("topology.batch.size", "abc"), ("topology.batch.size", 0), ("topology.batch.size", 2.5),
    ("topology.max.spout.pending", "abc"), ("topology.message.timeout.secs", -1),
    ("topology.message.timeout.secs", "abc"), ("topology.window.max.tuples", "abc"),
    ("topology.hash.seed", "abc"), ("topology.chaining", "maybe"), ("topology.batch.max.latency.ms", math.nan),
    ("worker.heartbeat.interval.secs", 0), ("worker.lazy.kill.ms", 10**400), ("topology.scheduler", 3),
    ("topology.hash.seed", 2**32), ("worker.gc.threshold", 2**40), ("otd.autoscale", "on"),
    ("topology.state.dir", 123), ("topology.state.dir", ["a"]), ("nstorm.metrics.dir", 5),
    ("topology.acker.executors", "abc"), ("topology.acker.executors", -1), ("topology.acker.executors", 1.5),
    ("topology.scheduler", "OTD"), ("topology.scheduler", "bogus"), ("otd.period.secs", 0),
])
def test_a_known_setting_of_the_wrong_kind_is_refused_at_submit(key: str, value: Any) -> None:
    """The workers used to fail at ``int()``/``float()`` of it, over and over, after the submit."""
    from nstorm.config import check_topology_conf, merge_conf

    with pytest.raises(ConfigError, match=f"^{key}="):
        check_topology_conf(merge_conf({key: value}))
    client = object.__new__(ClusterClient)  # no connection: checked before anything is stored
    with pytest.raises(ConfigError, match=f"^{key}="):
        client.submit(WORDCOUNT, conf={key: value})


def test_settings_of_the_right_kind_pass() -> None:
    from nstorm.config import DEFAULTS, check_topology_conf, merge_conf

    check_topology_conf(DEFAULTS)
    check_topology_conf(merge_conf({
        "topology.max.spout.pending": None, "topology.max.spout.pending.x": "anything", "wordcount.spouts": "x",
        "topology.batch.size": "100", "worker.lazy.kill.ms": 0, "topology.batch.adaptive": "false",
        "worker.sched.batch": 0, "topology.batch.max.latency.ms": 0, "worker.metrics.interval.secs": 0,
        "topology.window.max.tuples": 0, "topology.latency.control": 1, "topology.hash.seed": 2**32 - 1,
        "topology.state.dir": "/tmp/s", "nstorm.metrics.dir": None, "topology.acker.executors": 0,
        "topology.scheduler": "otd", "otd.period.secs": 0.5}))


@pytest.mark.parametrize(("args", "needle"), [
    (["nimbus", "--id", "a/b", "--zk", "127.0.0.1:1"], "--id 'a/b'"),
    (["supervisor", "--node-id", "../x", "--zk", "127.0.0.1:1"], "--node-id '../x'"),
    (["ui", "-c", "nstorm.ui.port=abc", "--ping"], "nstorm.ui.port='abc'"),
    (["ui", "-c", "nstorm.ui.port=70000", "--ping"], "nstorm.ui.port=70000"),
    (["zookeeper", "ping", "--zk", "nonsense"], "bad ZooKeeper address 'nonsense'"),
])
def test_daemon_commands_check_their_ids_ports_and_addresses_first(args: list[str], needle: str) -> None:
    _one_line_exit_2(args, needle)


def test_an_nstorm_home_that_cannot_be_a_directory_is_one_line(tmp_path: Path, monkeypatch: Any) -> None:
    home = tmp_path / "a-file"
    home.write_text("")
    monkeypatch.setenv("NSTORM_HOME", str(home))
    _one_line_exit_2(["zookeeper", "status"], "NSTORM_HOME: cannot use")


@pytest.mark.parametrize(("args", "needle"), [
    (["zookeeper", "start", "--port", "70000"], "--port"),
    (["zookeeper", "run", "--port", "-1"], "--port"),
    (["cluster", "up", "--port-base", "-5"], "--port-base"),
])
def test_ports_out_of_range_are_refused_before_anything_starts(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output, result.output


def test_a_ui_ping_at_a_host_that_is_not_one_answers_not_healthy() -> None:
    result = CliRunner().invoke(app, ["ui", "--ping", "--host", "bad host", "--port", "1"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output


def test_a_curve_keys_dir_given_as_a_number_is_a_directory_name(tmp_path: Path, monkeypatch: Any) -> None:
    from nstorm.curvekeys import curve_keys_dir

    monkeypatch.chdir(tmp_path)
    assert curve_keys_dir({"nstorm.transport.curve.keys.dir": 5}) == (tmp_path / "5").resolve()


def test_an_empty_keys_dir_is_refused_not_the_current_directory(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    _one_line_exit_2(["keys", "generate", "--dir", ""], "--dir is empty")
    assert list(tmp_path.iterdir()) == [], "nothing written into the current directory"


@pytest.mark.parametrize("rate", ["bogus", "20mbits", "0mbit", "", "-5mbit"])
def test_a_link_rate_tc_cannot_read_is_refused_before_any_namespace(rate: str) -> None:
    from nstorm.netns import check_rate

    with pytest.raises(UsageError, match="--link-rate"):
        check_rate(rate)


@pytest.mark.parametrize("rate", ["20mbit", "1gbit", "500kbps", "1.5Mbit", "100000", "10Kibit"])
def test_link_rates_tc_reads_pass(rate: str) -> None:
    from nstorm.netns import check_rate

    check_rate(rate)


def test_a_topology_file_that_calls_sys_exit_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "exits.py"
    path.write_text("import sys\nsys.exit(3)\n")
    _one_line_exit_2(["local", str(path)], "called sys.exit(3)")


@pytest.mark.parametrize(("value", "empty_ok", "ok"), [
    ("", True, True), ("", False, False), ("node-1.a_b", False, True), (".", True, False),
    ("..", False, False), ("a/b", True, False),
])
def test_daemon_ids(value: str, empty_ok: bool, ok: bool) -> None:
    from nstorm.cli.common import check_daemon_id

    if ok:
        check_daemon_id("--id", value, empty_ok=empty_ok)
    else:
        with pytest.raises(UsageError, match="--id"):
            check_daemon_id("--id", value, empty_ok=empty_ok)


@pytest.mark.parametrize(("args", "needle"), [
    (["-e", "count=3", "--move", "garbage"], "not both"),
    (["-e", "count=3", "--random", "5"], "not both"),
    (["--workers", "3", "--random", "1"], "--workers goes alone"),
    (["--workers", "2", "--move", "count:0=n1:6701"], "--workers goes alone"),
    (["-e", "count=3", "--timeout", "-1"], "--timeout"),
    (["--random", "1", "--timeout", "nan"], "--timeout"),
])
def test_rebalance_options_that_do_not_go_together_are_refused_before_anything_is_sent(
        args: list[str], needle: str) -> None:
    """``-e`` with ``--move`` sent the rescale alone and dropped the moves, exit 0."""
    _one_line_exit_2(["rebalance", "wc", *args, "--zk", "127.0.0.1:1"], needle)


@pytest.mark.parametrize(("body", "needle"), [
    ("import sys\n    sys.exit(0)", "make_topology(conf) line 3 called sys.exit(0)"),
    ("raise SystemExit('boom')", "called sys.exit('boom')"),
    ("raise GeneratorExit('x')", "raised GeneratorExit: x"),
    ("raise ValueError('first\\nsecond')", "raised ValueError: first second"),
])
def test_a_make_topology_that_exits_or_raises_is_one_line_and_exit_2(tmp_path: Path, body: str, needle: str) -> None:
    """``sys.exit(0)`` in ``make_topology`` ended ``submit`` silently with exit 0, nothing submitted;
    ``SystemExit("boom")`` exited 1, other BaseExceptions printed a traceback."""
    path = tmp_path / "factory.py"
    path.write_text(f"def make_topology(conf):\n    {body}\n")
    _one_line_exit_2(["submit", str(path), "--zk", "127.0.0.1:1"], needle)


@pytest.mark.parametrize("args", [
    ["status", ".."], ["kill", "."], ["activate", "a/.."], ["deactivate", ".."], ["rebalance", "..", "--random", "1"],
    ["traffic", "a/b"], ["status", "summary"],
])
def test_a_topology_name_that_is_not_one_is_exit_2_before_connecting(args: list[str]) -> None:
    """It became a ZooKeeper path: kazoo's ValueError("relative paths not allowed"), a traceback."""
    _one_line_exit_2([*args, "--zk", "127.0.0.1:1"], "is invalid")


@pytest.mark.parametrize("name", ["..", ".", "a/..", "", "a b"])
def test_the_client_refuses_a_name_that_is_not_one_and_not_found_stays_for_an_unknown_one(name: str) -> None:
    from nstorm.errors import NotFoundError

    class Cluster:
        def topology(self, name: str) -> None:
            assert ".." not in name, "a bad name reached ZooKeeper"

    client = object.__new__(ClusterClient)
    client.cluster = Cluster()  # type: ignore[assignment]
    for call in (client.status, client.activate, client.deactivate, client.kill):
        with pytest.raises(UsageError, match="is invalid"):
            call(name)
    with pytest.raises(NotFoundError, match="no topology named 'wordcount'"):
        client.status("wordcount")


@pytest.mark.parametrize("root", ["/a/../b", "nstorm", "/a/./b", "//", "/a//b", "", "/x\n"])
@pytest.mark.parametrize("command", [["list"], ["status", "wc"], ["nimbus"], ["supervisor"], ["ui"]])
def test_a_zk_root_that_is_not_an_absolute_path_is_exit_2_before_anything(root: str, command: list[str]) -> None:
    _one_line_exit_2([*command, "--zk-root", root, "--zk", "127.0.0.1:1"], "ZooKeeper root")


@pytest.mark.parametrize("root", ["/", "/nstorm", "/a/b-c_1", "/nstorm/"])
def test_zk_roots_that_are_paths_pass(root: str) -> None:
    from nstorm.zkschema import ZkPaths

    assert ZkPaths(root).topology("wc").endswith("/topologies/wc")


@pytest.mark.parametrize("value", ["123", "[1]", "true"])
def test_a_state_dir_that_is_not_a_string_is_one_line_at_submit(value: str) -> None:
    """``Path(123)`` in nstorm/state/config.py was a TypeError traceback."""
    from nstorm.config import merge_conf
    from nstorm.state.config import state_config

    _one_line_exit_2(["submit", WORDCOUNT, "-c", f"topology.state.dir={value}", "--zk", "127.0.0.1:1"],
                     "topology.state.dir=")
    with pytest.raises(ConfigError, match="^topology.state.dir="):
        state_config(merge_conf({"topology.state.provider": "lmdb", "topology.state.dir": 123}))


def test_a_scheduler_that_is_not_static_or_otd_is_one_line_at_submit() -> None:
    """``-c topology.scheduler=OTD`` ran the static scheduler without a word."""
    _one_line_exit_2(["submit", WORDCOUNT, "-c", "topology.scheduler=OTD", "--zk", "127.0.0.1:1"],
                     "expected one of static, otd")


@pytest.mark.parametrize(("command", "setting"), [
    ("supervisor", "supervisor.sync.interval.ms=abc"), ("supervisor", "nimbus.supervisor.timeout.secs=0"),
    ("supervisor", "nstorm.zookeeper.session.timeout.secs=nan"), ("supervisor", "supervisor.worker.cpu.limit=abc"),
    ("supervisor", "supervisor.worker.cpu.limit=-1"), ("supervisor", "supervisor.sync.watch=maybe"),
    ("supervisor", "supervisor.worker.timeout.secs=abc"),
    ("supervisor", "supervisor.logviewer.port=abc"), ("supervisor", "supervisor.logviewer.port=70000"),
    ("supervisor", "supervisor.logviewer.port=1.5"),
    ("nimbus", "nimbus.monitor.interval.secs=abc"),
    ("nimbus", "nstorm.zookeeper.session.timeout.secs=-1"), ("nimbus", "nimbus.spread.grace.secs=abc"),
    ("nimbus", "otd.spark.eager=maybe"), ("nimbus", "nstorm.metrics.dir=5"), ("nimbus", "otd.spark.master=3"),
])
def test_a_daemon_checks_its_own_settings_before_it_starts(command: str, setting: str) -> None:
    """They failed in ``float()`` inside run(), after connecting: a traceback."""
    _one_line_exit_2([command, "-c", setting, "--zk", "127.0.0.1:1"], f"{setting.partition('=')[0]}=")


def test_a_supervisor_takes_its_sync_watch_as_a_flag() -> None:
    """``-c supervisor.sync.watch=false`` (a string) turned the watch on: ``bool("false")``."""
    from nstorm.config import daemon_flag, merge_conf
    from supervisor.daemon import check_supervisor_conf

    check_supervisor_conf(merge_conf({"supervisor.sync.watch": "false", "supervisor.worker.cpu.limit": 0,
                                      "nimbus.supervisor.timeout.secs": "5"}))
    assert daemon_flag({"supervisor.sync.watch": "false"}, "supervisor.sync.watch", True) is False
    assert daemon_flag({}, "supervisor.sync.watch", True) is True
    assert daemon_flag({"supervisor.sync.watch": 0}, "supervisor.sync.watch", True) is False


def test_nimbus_settings_of_the_right_kind_pass() -> None:
    from nimbus.daemon import check_nimbus_conf
    from nstorm.config import DEFAULTS, merge_conf

    check_nimbus_conf(DEFAULTS)
    check_nimbus_conf(merge_conf({"nimbus.spread.grace.secs": 0, "otd.spark.eager": "false",
                                  "nstorm.metrics.dir": "/tmp/m"}))


@pytest.mark.parametrize(("args", "needle"), [
    (["traffic", "wc", "--window", "nan"], "--window"), (["traffic", "wc", "--window", "inf"], "--window"),
    (["traffic", "wc", "--window", "0"], "--window"),
    (["kill", "wc", "--wait", "-1"], "--wait"), (["kill", "wc", "--wait", "nan"], "--wait"),
])
def test_traffic_windows_and_kill_waits_are_checked_before_connecting(args: list[str], needle: str) -> None:
    """``--window nan`` passed the ``<= 0`` check; ``kill --wait -1`` was checked only after
    connecting, so exit 1 instead of 2 with ZooKeeper down."""
    _one_line_exit_2([*args, "--zk", "127.0.0.1:1"], needle)


class _Daemon:
    """Stands in for a daemon class: records how the CLI built it, runs nothing."""

    built: list[tuple[Any, ...]] = []

    def __init__(self, *args: Any) -> None:
        _Daemon.built.append(args)

    def install_signal_handlers(self) -> None:
        pass

    def run(self) -> int:
        return 0


@pytest.fixture
def no_daemon(monkeypatch: Any) -> list[tuple[Any, ...]]:
    import nimbus.daemon
    import nstorm.logs
    import supervisor.daemon

    monkeypatch.delenv("NSTORM_ZK", raising=False)
    monkeypatch.delenv("NSTORM_ZK_ROOT", raising=False)
    monkeypatch.setattr(nimbus.daemon, "Nimbus", _Daemon)
    monkeypatch.setattr(supervisor.daemon, "Supervisor", _Daemon)
    monkeypatch.setattr(nstorm.logs, "setup_daemon_logging", lambda *a, **k: None)
    _Daemon.built = []
    return _Daemon.built


def test_daemons_take_servers_root_and_port_base_from_their_settings(no_daemon: list[tuple[Any, ...]]) -> None:
    """``nstorm.zookeeper.servers``, ``nstorm.zookeeper.root`` and ``supervisor.slots.port.base``
    were in DEFAULTS and read by nothing."""
    conf = ["-c", "nstorm.zookeeper.servers=10.0.0.9:2181", "-c", "nstorm.zookeeper.root=/other",
            "-c", "supervisor.slots.port.base=7000"]
    assert CliRunner().invoke(app, ["nimbus", *conf]).exit_code == 0
    assert CliRunner().invoke(app, ["supervisor", "--node-id", "n1", "--slots", "2", *conf]).exit_code == 0
    (n_address, n_root, _), (_, _, slots, s_address, s_root, _) = no_daemon
    assert (n_address, n_root, s_address, s_root) == ("10.0.0.9:2181", "/other", "10.0.0.9:2181", "/other")
    assert slots == [(7000, 8000), (7001, 8001)]


def test_options_win_over_settings(no_daemon: list[tuple[Any, ...]], monkeypatch: Any) -> None:
    conf = ["-c", "nstorm.zookeeper.servers=10.0.0.9:2181", "-c", "nstorm.zookeeper.root=/other",
            "-c", "supervisor.slots.port.base=7000"]
    args = ["supervisor", "--node-id", "n1", "--slots", "1", "--zk", "h:1", "--zk-root", "/mine", "--port-base", "7100"]
    assert CliRunner().invoke(app, [*args, *conf]).exit_code == 0
    monkeypatch.setenv("NSTORM_ZK", "e:2")
    monkeypatch.setenv("NSTORM_ZK_ROOT", "/env")
    assert CliRunner().invoke(app, ["nimbus", *conf]).exit_code == 0
    (_, _, slots, address, root, _), (n_address, n_root, _) = no_daemon
    assert (address, root, slots, n_address, n_root) == ("h:1", "/mine", [(7100, 8100)], "e:2", "/env")


@pytest.mark.parametrize(("args", "needle"), [
    (["nimbus", "-c", "nstorm.zookeeper.servers=2181"], "nstorm.zookeeper.servers=2181"),
    (["nimbus", "-c", "nstorm.zookeeper.root=/a/../b"], "ZooKeeper root '/a/../b'"),
    (["supervisor", "-c", "supervisor.slots.port.base=abc"], "supervisor.slots.port.base='abc'"),
    (["supervisor", "-c", "supervisor.slots.port.base=70000"], "supervisor.slots.port.base=70000"),
    (["supervisor", "--port-base", "65000"], "first worker port 65000"),
    # cluster up reads the setting too (its --port-base defaulted to 6700 whatever it said)
    (["cluster", "up", "-c", "supervisor.slots.port.base=65400"], "--port-base 65400: the last control port"),
    (["cluster", "up", "-c", "supervisor.slots.port.base=abc"], "supervisor.slots.port.base='abc'"),
    (["submit", WORDCOUNT, "-c", "nstorm.zookeeper.root=x"], "ZooKeeper root 'x'"),
])
def test_cluster_settings_of_the_wrong_kind_are_one_line(no_daemon: list[tuple[Any, ...]], args: list[str],
                                                         needle: str) -> None:
    _one_line_exit_2(args, needle)
    assert no_daemon == []


def test_submit_connects_where_its_settings_say(monkeypatch: Any) -> None:
    import nstorm.client

    seen: list[tuple[Any, ...]] = []

    class Client:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            seen.append((*args, kwargs.get("auth")))

        def __enter__(self) -> Client:
            return self

        def __exit__(self, *_: Any) -> None:
            pass

        def submit(self, *_: Any, **__: Any) -> dict[str, Any]:
            return {"name": "wc", "executors": 1, "workers": 1}

    monkeypatch.delenv("NSTORM_ZK", raising=False)
    monkeypatch.delenv("NSTORM_ZK_ROOT", raising=False)
    monkeypatch.setattr(nstorm.client, "ClusterClient", Client)
    result = CliRunner().invoke(app, ["submit", WORDCOUNT, "-c", "nstorm.zookeeper.servers=z:1",
                                      "-c", "nstorm.zookeeper.root=/r", "-c", "nstorm.zookeeper.auth=u:p"])
    assert result.exit_code == 0, result.output
    assert seen == [("z:1", "/r", "u:p")]


@pytest.mark.parametrize(("args", "needle"), [
    (["-l", "ROOT"], "expected LOGGER=LEVEL"), (["-l", "ROOT=LOUD"], "log level 'LOUD'"),
    (["-l", "ROOT=DEBUG:nan"], "timeout nan"), (["-l", "ROOT=DEBUG:-5"], "timeout -5.0"),
    (["-l", "=INFO"], "logger name ''"), (["-r", "a=b"], "logger name 'a=b'"),
])
def test_set_log_level_checks_its_settings_before_connecting(args: list[str], needle: str) -> None:
    _one_line_exit_2(["set-log-level", "wc", *args, "--zk", "127.0.0.1:1"], needle)
