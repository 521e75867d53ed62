"""docker-compose.yml is checked, not run (no Docker engine here): it parses, runs only nstorm
commands that exist, and its ports agree with the defaults."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nstorm.config import DEFAULTS
from supervisor.daemon import pick_slots

ROOT = Path(__file__).parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _commands() -> list[list[str]]:
    found = []
    for service in COMPOSE["services"].values():
        if service.get("image") != "nstorm:latest":
            continue  # another project's image (redis)
        found.append(service["command"])
        if "healthcheck" in service:
            test = service["healthcheck"]["test"]
            assert test[0] == "CMD"
            found.append(test[1:])
    return found


def test_services_and_volumes() -> None:
    services = COMPOSE["services"]
    assert {"zookeeper", "nimbus", "supervisor1", "supervisor2"} <= set(services)
    for name, service in services.items():
        assert "healthcheck" in service, name
        for volume in service.get("volumes", []):
            assert volume.split(":")[0] in COMPOSE["volumes"], name
    assert (ROOT / "Dockerfile").exists()


def test_a_redis_service_keeps_checkpoints() -> None:
    redis = COMPOSE["services"]["redis"]
    assert redis["command"][0] == "redis-server" and "--appendonly" in redis["command"]
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c[:3]))
def test_every_command_is_an_existing_nstorm_command(command: list[str]) -> None:
    assert command[0] == "nstorm"
    words = [w for w in command[1:] if not w.startswith("-")][:2]
    sub = words[:1] if words[0] in ("nimbus", "supervisor", "list", "submit") else words[:2]
    result = subprocess.run([sys.executable, "-m", "nstorm", *sub, "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for option in (w for w in command if w.startswith("--")):
        assert option in result.stdout, f"{option} is not an option of nstorm {' '.join(sub)}"


def test_ports_agree_with_the_defaults() -> None:
    zk = COMPOSE["services"]["zookeeper"]
    assert "2181:2181" in zk["ports"]
    assert all("zookeeper:2181" in " ".join(c) or "127.0.0.1:2181" in " ".join(c) or c[1] == "zookeeper"
               for c in _commands())
    base = DEFAULTS["supervisor.slots.port.base"]
    for name in ("supervisor1", "supervisor2"):
        service = COMPOSE["services"][name]
        command = service["command"]
        slots = int(command[command.index("--slots") + 1])
        assert int(command[command.index("--port-base") + 1]) == base
        data = [p for p, _ in pick_slots(slots, base, "x")]
        ctl = [c for _, c in pick_slots(slots, base, "x")]
        assert service["expose"] == [f"{data[0]}-{data[-1]}", f"{ctl[0]}-{ctl[-1]}"]
