"""Which machine a supervisor runs on, for OTD's autoscaling (``supervisors/<node>``' ``machine``).

Supervisors in network namespaces (``cluster up --netns``) or in containers (the compose
cluster) on one machine each have an address of their own, yet share its cores: a starved
worker on one of them means no CPU on the others either. The kernel's boot id is what they
share and separate machines (and virtual machines) do not.
"""

from __future__ import annotations

import socket
from pathlib import Path

__all__ = ["BOOT_ID", "machine_id"]

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def machine_id(boot_id: Path = BOOT_ID) -> str:
    """The running kernel's boot id, or, where there is none to read (not Linux), the host name."""
    try:
        value = boot_id.read_text().strip()
    except OSError:
        value = ""
    return value or f"host:{socket.gethostname()}"
