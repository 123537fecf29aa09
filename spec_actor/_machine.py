"""The machine a benchmark ran on, for the JSON of ``spec-actor bench`` and of the scripts in ``bench/``."""

from __future__ import annotations

import os
import platform
from typing import Any


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one, else the CPU count."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def machine_info() -> dict[str, Any]:
    """CPU model, CPU count, the CPUs this process may use, OS, Python and the 1-minute load average."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu or "unknown", "cpu_count": os.cpu_count(), "cpus_usable": usable_cpus(),
            "system": platform.platform(), "python": platform.python_version(), "load_average": load}
