"""docker-compose.yml, checked here without containers: it parses, runs only nstorm commands that
exist, its ports agree with the defaults, and its images can be replaced where no registry
answers. ``scripts/compose-check`` (run by ``.ci/run``) runs it for real, with Docker or podman."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nstorm.config import DEFAULTS
from supervisor.daemon import pick_slots

ROOT = Path(__file__).parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
CHECK = ROOT / "scripts" / "compose_check.py"


def _compose_check() -> object:
    spec = importlib.util.spec_from_file_location("compose_check", CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


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
    assert "127.0.0.1:2181:2181" in zk["ports"]
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


def test_zookeeper_and_the_ui_are_published_on_this_host_only() -> None:
    """Both were published on every interface, without authentication: anyone reaching the
    host's port 2181 could submit code that the supervisors run."""
    published = {name: s["ports"] for name, s in COMPOSE["services"].items() if "ports" in s}
    assert published == {"zookeeper": ["127.0.0.1:2181:2181"], "ui": ["127.0.0.1:8080:8080"]}
    check = _compose_check()
    assert check.PUBLISHED == {name: int(ports[0].rsplit(":", 1)[1]) for name, ports in published.items()}


def test_every_service_restarts_on_failure() -> None:
    """ZooKeeper, the UI and Redis had no restart policy: one that died stayed down."""
    assert {name: s.get("restart") for name, s in COMPOSE["services"].items()} == dict.fromkeys(
        COMPOSE["services"], "on-failure")


def test_the_images_can_be_replaced() -> None:
    """Docker users keep the official images; where no registry answers, compose-check builds on a
    base made from Debian's packages and runs redis from the nstorm image (it has redis-server)."""
    assert "ARG BASE=python:3.11-slim" in (ROOT / "Dockerfile").read_text()
    build = COMPOSE["services"]["zookeeper"]["build"]
    assert build["args"]["BASE"] == "${NSTORM_BASE_IMAGE:-python:3.11-slim}"
    assert COMPOSE["services"]["redis"]["image"] == "${NSTORM_REDIS_IMAGE:-redis:7}"
    assert "--protected-mode" in COMPOSE["services"]["redis"]["command"]  # Debian's redis-server, reached by name


def test_compose_check_agrees_with_the_compose_file() -> None:
    check = _compose_check()
    services = COMPOSE["services"]
    nodes = {name: s["command"][s["command"].index("--node-id") + 1] for name, s in services.items()
             if s["command"][:2] == ["nstorm", "supervisor"]}
    assert check.SUPERVISORS == nodes
    assert check.KILLED in nodes and "nimbus" in services and "redis" in services
    assert f"ARG BASE={check.OFFICIAL_BASE}" in (ROOT / "Dockerfile").read_text()


def test_compose_check_skips_saying_why_without_a_container_engine(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "NSTORM_COMPOSE": ""}
    result = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 77, result.stdout + result.stderr
    assert "SKIPPED: no container engine" in result.stdout
    assert "apt-get install podman" in result.stdout
