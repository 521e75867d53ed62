"""What the cluster commands start, they end: `nstorm local`, `cluster up|down` and `zookeeper run`
on failures, signals and homes shared by two commands (a review of session 31). The neighbours
(ZooKeeper, the daemons) are fakes: nothing here starts a JVM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nstorm.cli.main import app


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NSTORM_HOME", str(tmp_path))
    return tmp_path


def _lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


class _FakeZooKeeper:
    """``EmbeddedZooKeeper`` for ``zookeeper run``: ``dies`` makes the JVM exit on its own at once."""

    dies: int | None = None

    def __init__(self, data_dir: Path, port: int, log_file: Path, host: str = "127.0.0.1") -> None:
        self.address = f"{host}:{port}"
        self.pid = 4242
        self.log_file = log_file
        self.stopped = False

    def start(self) -> None:
        pass

    @property
    def exit_code(self) -> int | None:
        return type(self).dies

    @property
    def running(self) -> bool:
        return type(self).dies is None

    def stop(self) -> None:
        self.stopped = True


def test_zookeeper_run_exits_1_when_the_jvm_dies_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """It exited 0, so a container's ``restart: on-failure`` never started it again."""
    monkeypatch.setattr("nstorm.zookeeper.EmbeddedZooKeeper", _FakeZooKeeper)
    monkeypatch.setattr(_FakeZooKeeper, "dies", 3)
    monkeypatch.setattr("nstorm.signals.relay_signals", lambda actions: None)
    result = CliRunner().invoke(app, ["zookeeper", "run", "--port", "2181"])
    assert result.exit_code == 1, result.output
    assert "ZooKeeper exited on its own with code 3" in _lines(result.output)[-1]
    assert "Traceback" not in result.output


def test_zookeeper_run_exits_0_when_asked_to_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    monkeypatch.setattr("nstorm.zookeeper.EmbeddedZooKeeper", _FakeZooKeeper)
    actions: dict[int, Any] = {}
    monkeypatch.setattr("nstorm.signals.relay_signals", actions.update)
    monkeypatch.setattr(_FakeZooKeeper, "start", lambda self: actions[signal.SIGTERM]())  # SIGTERM at once
    result = CliRunner().invoke(app, ["zookeeper", "run", "--port", "2181"])
    assert result.exit_code == 0, result.output
