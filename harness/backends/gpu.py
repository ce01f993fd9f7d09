"""What the machine has for a GPU backend: the CPU model, the NVIDIA GPU and driver, and whether the
driver initialises. Standard library only (ctypes on libcuda): every backend uses it, before and
without importing its runtime."""

from __future__ import annotations

import ctypes
import platform
import re
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_model() -> str:
    """The NVIDIA GPU(s) and driver as the kernel driver reports them; ``none`` without a driver."""
    root = Path("/proc/driver/nvidia")
    try:
        driver = (root / "version").read_text().splitlines()[0]
        names = [
            line.split(":", 1)[1].strip()
            for info in sorted((root / "gpus").glob("*/information"))
            for line in info.read_text().splitlines()
            if line.startswith("Model:")
        ]
    except (OSError, IndexError):
        return "none"
    m = re.search(r"Kernel Module\s+(\S+)", driver)
    return f"{', '.join(names) or 'unknown GPU'} (driver {m[1] if m else 'unknown'})"


def nvidia_driver_problem() -> str | None:
    """None when the NVIDIA driver initialises and shows at least one device; else why not."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        missing = "cannot open shared object file" in str(exc)
        return "no NVIDIA driver (libcuda.so.1 not found)" if missing else f"the NVIDIA driver does not load: {exc}"
    rc = cuda.cuInit(0)
    if rc != 0:
        return f"the NVIDIA driver does not initialise (cuInit returned CUresult {rc})"
    count = ctypes.c_int(0)
    rc = cuda.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0 or count.value == 0:
        return f"no CUDA device is visible (cuDeviceGetCount: CUresult {rc}, {count.value} devices)"
    return None
