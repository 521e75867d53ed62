"""The machine a supervisor registers (supervisor/machine.py)."""

from __future__ import annotations

import socket
from pathlib import Path

from supervisor.machine import BOOT_ID, machine_id


def test_the_machine_is_the_kernels_boot_id(tmp_path: Path) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("3f1c5a70-1b2d-4e5f-8a9b-0c1d2e3f4a5b\n")
    assert machine_id(boot, [0, 1]) == "3f1c5a70-1b2d-4e5f-8a9b-0c1d2e3f4a5b/cpus 0-1"
    assert machine_id(boot, [3, 0, 1, 2, 6, 8, 9]) == "3f1c5a70-1b2d-4e5f-8a9b-0c1d2e3f4a5b/cpus 0-3,6,8-9"
    if BOOT_ID.exists():
        assert machine_id().startswith(BOOT_ID.read_text().strip() + "/cpus ")


def test_without_a_boot_id_the_machine_is_the_host_name(tmp_path: Path) -> None:
    assert machine_id(tmp_path / "missing", [2]) == f"host:{socket.gethostname()}/cpus 2"
