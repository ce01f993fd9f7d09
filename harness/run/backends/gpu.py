"""What the machine has for a GPU backend: the CPU model, the NVIDIA GPU and driver, and whether the
driver initialises. Standard library only (ctypes on libcuda): every backend uses it, before and
without importing its runtime."""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import re
import struct
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


def needed_libraries(path: str | os.PathLike[str]) -> list[str]:
    """The ``DT_NEEDED`` entries of an ELF64 shared object: what ``readelf -d`` lists as NEEDED, the
    libraries the loader must find (``libcublasLt.so.12``, ``libcudnn.so.9``, ``libnvinfer.so.10``).
    Read with the standard library, so a check needs no binutils.

    Raises:
        ValueError: not a little-endian ELF64 file, or one without a dynamic section.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError(f"{path}: not a little-endian ELF64 file")
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        dynamic = next((s for s in sections if s[1] == 6), None)  # SHT_DYNAMIC
        if dynamic is None:
            raise ValueError(f"{path}: no dynamic section")
        strtab = sections[dynamic[6]]
        names = []
        for tag, value in struct.iter_unpack("<qQ", data[dynamic[4] : dynamic[4] + dynamic[5]]):
            if tag == 0:  # DT_NULL
                break
            if tag == 1:  # DT_NEEDED
                start = strtab[4] + value
                names.append(data[start : data.find(b"\0", start)].decode())
        return names


def majors(libraries: list[str]) -> dict[str, str]:
    """The CUDA, cuDNN and TensorRT majors a list of NEEDED libraries asks for (``{"cuda": "12", ...}``)."""
    found: dict[str, str] = {}
    for lib in libraries:
        m = re.match(r"lib(cudart|cublas|cublasLt|cudnn|nvinfer)\.so\.(\d+)$", lib)
        if m:
            key = {"cudnn": "cudnn", "nvinfer": "tensorrt"}.get(m[1], "cuda")
            found.setdefault(key, m[2])
    return found
