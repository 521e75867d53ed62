"""Which machine a supervisor runs on, for OTD's autoscaling (``supervisors/<node>``' ``machine``).

Supervisors in network namespaces (``cluster up --netns``) or in containers (the compose
cluster) on one machine each have an address of their own, yet share its cores: a starved
worker on one of them means no CPU on the others either. The kernel's boot id is what they
share and separate machines (and virtual machines) do not; with the CPUs a supervisor may use
(its affinity), containers given CPU sets of their own count as machines of their own.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from pathlib import Path

__all__ = ["BOOT_ID", "machine_id"]

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def machine_id(boot_id: Path = BOOT_ID, cpus: Iterable[int] | None = None) -> str:
    """``<boot id>/cpus <ranges>``: the running kernel's boot id (where there is none to read, not
    Linux, the host name) and the CPUs this process may use (``os.sched_getaffinity``)."""
    try:
        value = boot_id.read_text().strip()
    except OSError:
        value = ""
    return f"{value or 'host:' + socket.gethostname()}/cpus {_ranges(os.sched_getaffinity(0) if cpus is None else cpus)}"


def _ranges(cpus: Iterable[int]) -> str:
    """``0-3,6``: CPU numbers as ranges."""
    spans: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)
