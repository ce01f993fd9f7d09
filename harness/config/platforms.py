"""The CPUs a model ships to, as data: one :class:`Platform` per instruction-set level the table can name.

A platform column is the CPU provider on one of them: ``cpu@x86-64-v3``. Plain ``cpu`` is this machine, whatever it
is (the default and architectures tables); a column that names a platform is run on it, natively where this machine
is that CPU, else under Debian's ``qemu-user`` through a launcher (:mod:`harness.config.launchers` makes them), and
is published only where the process itself saw the instruction set its name promises (:func:`contradiction`).

Levels: the x86-64 micro-architecture levels of the psABI (v2: SSE4.2 + POPCNT; v3: AVX2 + FMA + F16C + BMI; v4:
AVX-512 F/CD/BW/DQ/VL) and ARM64. What a process sees is read from numpy's runtime dispatch
(``__cpu_features__``), which asks CPUID (or the auxiliary vector) of the CPU the process really runs on, emulated or
not; onnxruntime does not expose its own (MLAS dispatches on CPUID inside the library).

Standard library only, and Python 3.9: the run stage reads it on the runtime's Python and under the emulator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

SEP = "@"
"""Between a column's provider and its platform: ``cpu@aarch64``."""


@dataclasses.dataclass(frozen=True)
class Platform:
    name: str
    """Its name in matrix.toml and the table (``x86-64-v3``)."""
    machine: str
    """``platform.machine()`` on it: ``x86_64`` or ``aarch64``."""
    words: str
    """What users know it as."""
    needs: tuple[str, ...] = ()
    """numpy ``__cpu_features__`` names a process on it must see."""
    lacks: tuple[str, ...] = ()
    """Names it must not see (the next level's first feature): an AVX2 column that sees AVX-512 is another CPU."""
    qemu_cpu: str = ""
    """``qemu-<machine> -cpu`` model that emulates it; empty: no emulator can (AVX-512: native only)."""
    flags: tuple[str, ...] = ()
    """``/proc/cpuinfo`` flags of a host that is (at least) this level: whether this machine runs it natively."""


_V2 = ("SSE3", "SSSE3", "SSE41", "SSE42", "POPCNT")
_V3 = ("AVX", "AVX2", "FMA3", "F16C")
# v3 also has BMI1/2, LZCNT and MOVBE, which numpy 1.x does not report (the runtimes before 1.19 run on it): the
# features above are what every numpy that can say anything says, and what MLAS dispatches on.
_V4 = ("AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL")

PLATFORMS = (
    Platform(
        "x86-64-v4",
        "x86_64",
        "x86-64 with AVX-512 (servers; desktops of some generations)",
        needs=_V2 + _V3 + _V4,
        flags=("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"),
    ),
    Platform(
        "x86-64-v3",
        "x86_64",
        "x86-64 with AVX2 + FMA, no AVX-512 (most laptops and desktops)",
        needs=_V2 + _V3,
        lacks=("AVX512F",),
        qemu_cpu="Haswell-noTSX",
        flags=("avx2", "fma", "f16c", "bmi2", "movbe"),
    ),
    Platform(
        "x86-64-v2",
        "x86_64",
        "x86-64 with SSE4.2, no AVX (older servers and low-power CPUs)",
        needs=_V2,
        lacks=("AVX",),
        qemu_cpu="Nehalem",
        flags=("sse4_2", "popcnt", "ssse3"),
    ),
    Platform(
        "aarch64",
        "aarch64",
        "ARM64 with NEON (Graviton, Ampere, Raspberry Pi 4/5, Jetson's CPU)",
        needs=("ASIMD",),
        qemu_cpu="neoverse-n1",
    ),
)

_BY_NAME = {p.name: p for p in PLATFORMS}


def names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def get(name: str) -> Platform:
    """A platform by name.

    Raises:
        KeyError: no such platform (matrix.toml's validation says so in one line first).
    """
    return _BY_NAME[name]


def column(base: str, platform: str) -> str:
    """``cpu`` on ``aarch64`` → ``cpu@aarch64``; no platform: ``base``."""
    return f"{base}{SEP}{platform}" if platform else base


def split(col: str) -> tuple[str, str]:
    """``cpu@x86-64-v3`` → ``("cpu", "x86-64-v3")``; ``cuda`` → ``("cuda", "")``."""
    base, _, platform = col.partition(SEP)
    return base, platform


def of(col: str) -> str:
    """The platform a column names (``""``: this machine)."""
    return split(col)[1]


def level(features: Mapping[str, bool], machine: str) -> str:
    """The most a process that sees ``features`` (numpy's names) on ``machine`` is: ``x86-64-v3``, ``aarch64``;
    ``x86-64`` for a CPU below v2, the machine's own name for one the table has no level of."""
    seen = {k for k, v in features.items() if v}
    if machine in ("x86_64", "AMD64"):
        best = "x86-64"
        for p in sorted((p for p in PLATFORMS if p.machine == "x86_64"), key=lambda p: len(p.needs)):
            if set(p.needs) <= seen:
                best = p.name
        return best
    return next((p.name for p in PLATFORMS if p.machine == machine and set(p.needs) <= seen), machine)


def contradiction(name: str, features: Mapping[str, bool], machine: str) -> str | None:
    """Why a column named for platform ``name`` is not it, judged from what its process saw (one line), or None."""
    p = get(name)
    if machine != p.machine:
        return f"the {name} column ran on {machine}, not {p.machine}"
    missing = [f for f in p.needs if not features.get(f)]
    extra = [f for f in p.lacks if features.get(f)]
    if not features:
        return f"the {name} column's process could not say which instruction sets it saw (numpy's __cpu_features__)"
    if missing:
        return f"the {name} column's process lacks {', '.join(missing)}: it ran on {level(features, machine)}"
    if extra:
        return f"the {name} column's process sees {', '.join(extra)}: it ran on {level(features, machine)}, not {name}"
    return None


def host_flags(cpuinfo: str) -> set[str]:
    """The ``flags`` (x86) or ``Features`` (ARM) of ``/proc/cpuinfo``'s first processor."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def native(name: str, machine: str, flags: Iterable[str]) -> bool:
    """Whether this machine (``platform.machine()``, ``/proc/cpuinfo`` flags) is platform ``name`` itself: the same
    machine, and for x86-64 exactly that level (a v4 host is not a v3 CPU: it would run AVX-512 kernels)."""
    p = get(name)
    if machine != p.machine:
        return False
    if p.machine != "x86_64":
        return True
    have = set(flags)
    levels = [q for q in PLATFORMS if q.machine == "x86_64" and set(q.flags) <= have]
    top = max(levels, key=lambda q: len(q.needs), default=None)
    return top is not None and top.name == name


def seen(features: Mapping[str, bool]) -> str:
    """The features a process saw, for a cell's ``env``: the names that are set, sorted, space-separated."""
    return " ".join(sorted(k for k, v in features.items() if v))
