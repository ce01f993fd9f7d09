"""matrix.toml → a frozen :class:`Matrix`, validated once.

Every problem is a :class:`HarnessError` of one line naming the key and the
fix, in nox's manner::

    matrix.toml: runtimes[2].pin: "onnxruntime==1.17" is not pinned; write "onnxruntime==1.17.3"

Standard library only: the noxfile reads this module before any environment
exists.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

EXPORTERS = ("torchscript", "dynamo")

# Provider short name → onnxruntime execution provider.
PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}

# ONNX default-domain opsets a torch exporter can be asked for. The TorchScript
# exporter stops at 20; the dynamo exporter converts down from 18 and up to what
# its onnxscript knows. A runtime that cannot load an opset is a measured cell.
OPSET_MIN, OPSET_MAX = 7, 25

PACKAGES = ("onnxruntime", "onnxruntime-gpu")

# Releases with a CPython 3.11 wheel on PyPI (pip index versions, 2026-11-30).
# A pin outside this list is refused with the nearest releases; a newer
# release is added here (and to matrix.toml's runtimes) when it appears.
KNOWN_RELEASES: dict[str, tuple[str, ...]] = {
    "onnxruntime": tuple(
        "1.15.0 1.15.1 1.16.0 1.16.1 1.16.2 1.16.3 1.17.0 1.17.1 1.17.3 1.18.0 1.18.1 "
        "1.19.0 1.19.2 1.20.0 1.20.1 1.21.0 1.21.1 1.22.0 1.22.1 1.23.0 1.23.1 1.23.2 "
        "1.24.1 1.24.2 1.24.3 1.24.4 1.25.0 1.25.1 1.26.0 1.27.0 1.28.0 1.29.0 1.30.0 "
        "1.31.0 1.31.1 1.32.0".split()
    ),
    "onnxruntime-gpu": tuple(
        "1.15.0 1.15.1 1.16.0 1.16.3 1.17.0 1.17.1 1.18.0 1.18.1 1.19.0 1.19.2 1.20.0 "
        "1.20.2 1.21.0 1.21.1 1.22.0 1.23.0 1.23.2 1.24.1 1.24.4 1.25.0 1.25.1 1.26.0 "
        "1.27.0 1.28.0 1.29.0 1.30.0 1.31.0 1.31.1".split()
    ),
}

_PIN = re.compile(r"^(?P<package>[A-Za-z0-9_.-]+)\s*==\s*(?P<version>[0-9][0-9A-Za-z.+-]*)$")


def version_tuple(version: str) -> tuple[int, ...]:
    """``"1.17.3"`` → ``(1, 17, 3)``; non-numeric parts end the tuple."""
    out: list[int] = []
    for part in version.split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Runtime:
    """One pinned runtime package and what must be installed beside it."""

    pin: str
    """``onnxruntime==1.17.3``: the cell's runtime label."""
    package: str
    version: str
    constraints: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """Short nox session id: ``ort-1.17.3``, ``ortgpu-1.20.2``."""
        prefix = "ort" if self.package == "onnxruntime" else "ortgpu"
        return f"{prefix}-{self.version}"

    @property
    def requirements(self) -> tuple[str, ...]:
        return (self.pin, *self.constraints)


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    runtimes: tuple[Runtime, ...]
    providers: tuple[str, ...]
    exporters: tuple[str, ...]
    opsets: tuple[int, ...]

    def results(self, out: str | os.PathLike[str]) -> Path:
        """Where its report goes: ``results/`` (the published table) for the default profile, else
        ``<out>/results/<profile>/`` in the build folder."""
        return Path("results") if self.name == "default" else Path(out) / "results" / self.name


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    torch: str
    onnx: str
    onnxscript: str
    onnxruntime: str = ""
    """The reference runtime installed in the export env (CPU, optimizations off): it records every
    node's value per probe, which a mismatching cell of any runtime is compared with. Default: the
    newest declared onnxruntime."""


@dataclasses.dataclass(frozen=True)
class RunSettings:
    timeout: float = 120.0
    workers: int = 0

    @property
    def worker_count(self) -> int:
        return self.workers or (os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class LatencySettings:
    threads: int = 1
    warmup: int = 5
    min_runs: int = 20
    max_runs: int = 200
    budget_seconds: float = 0.25
    stability: float = 0.02
    """Timing stops once the median of a window of ``min_runs`` runs is within this fraction of the
    previous window's median (or a cap is reached)."""


@dataclasses.dataclass(frozen=True)
class Matrix:
    path: Path
    export: ExportSettings
    corpus: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    atol: float
    rtol: float
    run: RunSettings
    latency: LatencySettings
    runtimes: tuple[Runtime, ...]
    profiles: Mapping[str, Profile]

    def profile(self, name: str) -> Profile:
        try:
            return self.profiles[name]
        except KeyError:
            raise HarnessError(
                f"{self.path.name}: no profile {name!r}{_did_you_mean(name, self.profiles)}; "
                f"profiles are: {', '.join(self.profiles)}"
            ) from None

    def runtime(self, ref: str) -> Runtime:
        """A runtime by pin (``onnxruntime==1.17.3``), id (``ort-1.17.3``) or bare version."""
        for rt in self.runtimes:
            if ref in (rt.pin, rt.id, rt.version):
                return rt
        known = [rt.pin for rt in self.runtimes]
        raise HarnessError(f"{self.path.name}: no runtime {ref!r}{_did_you_mean(ref, known)}; declared: {', '.join(known)}")


def _did_you_mean(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Reader:
    """Walks one TOML table, refusing unknown keys and wrong types with one line."""

    def __init__(self, file: str, where: str, table: Any) -> None:
        self.file, self.where = file, where
        if not isinstance(table, dict):
            self.fail(f"must be a table, got {type(table).__name__}")
        self.table: dict[str, Any] = table

    def fail(self, message: str, key: str | None = None) -> None:
        at = f"{self.where}.{key}" if key and self.where else (key or self.where)
        raise HarnessError(f"{self.file}: {at}: {message}")

    def only(self, *allowed: str) -> None:
        for key in self.table:
            if key not in allowed:
                self.fail(f"unknown key{_did_you_mean(key, allowed)}; allowed: {', '.join(allowed)}", key)

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., *, required: bool = False) -> Any:
        if key not in self.table:
            if required or default is ...:
                self.fail("missing; add it", key)
            return default
        value = self.table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            self.fail(f"must be {names}, got {value!r}", key)
        return value

    def number(self, key: str, default: float, *, minimum: float = 0, integer: bool = False) -> Any:
        value = self.get(key, int if integer else (int, float), default)
        if value < minimum:
            self.fail(f"must be >= {minimum}, got {value!r}", key)
        return value

    def strings(self, key: str, default: Any = ..., *, nonempty: bool = True) -> tuple[str, ...]:
        value = self.get(key, list, default)
        if any(not isinstance(v, str) for v in value):
            self.fail("must be a list of strings", key)
        return self._unique(key, value, nonempty)

    def ints(self, key: str, default: Any = ..., *, nonempty: bool = True) -> tuple[int, ...]:
        value = self.get(key, list, default)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            self.fail("must be a list of integers", key)
        return self._unique(key, value, nonempty)

    def _unique(self, key: str, value: Sequence[Any], nonempty: bool) -> tuple[Any, ...]:
        if nonempty and not value:
            self.fail("is empty; list at least one entry", key)
        seen: set[Any] = set()
        for v in value:
            if v in seen:
                self.fail(f"lists {v!r} twice; remove the duplicate", key)
            seen.add(v)
        return tuple(value)


def parse_runtime(file: str, where: str, pin: str, constraints: tuple[str, ...] = ()) -> Runtime:
    """Validate one pin such as ``onnxruntime==1.17.3``."""
    m = _PIN.match(pin.strip())
    if not m:
        bare = pin.strip()
        hint = f'"onnxruntime=={bare}"' if re.match(r"^\d", bare) else '"onnxruntime==X.Y.Z"'
        raise HarnessError(f"{file}: {where}: {pin!r} is not a pin; write {hint}")
    package, version = m["package"].lower(), m["version"]
    if package not in PACKAGES:
        raise HarnessError(f"{file}: {where}: unknown runtime package {package!r}; use one of {', '.join(PACKAGES)}")
    releases = KNOWN_RELEASES[package]
    if version not in releases:
        if len(version_tuple(version)) < 3:
            patches = [v for v in releases if v.startswith(version + ".")]
            newest = patches[-1] if patches else releases[-1]
            raise HarnessError(f'{file}: {where}: "{package}=={version}" is not pinned; write "{package}=={newest}"')
        target = version_tuple(version)
        nearest = sorted(releases, key=lambda v: _distance(version_tuple(v), target))[:2]
        raise HarnessError(
            f"{file}: {where}: {package} {version} is not a known release; nearest: "
            f"{', '.join(sorted(nearest, key=version_tuple))} (a newer release goes into harness.matrix.KNOWN_RELEASES)"
        )
    return Runtime(pin=f"{package}=={version}", package=package, version=version, constraints=constraints)


def _distance(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(abs(x - y) for x, y in zip(a, b, strict=False))


def load(path: str | os.PathLike[str] = "matrix.toml") -> Matrix:
    """Read and validate a matrix file.

    Raises:
        HarnessError: one line naming the file, the key and the fix.
    """
    path = Path(path)
    file = path.name
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HarnessError(f"{path}: no such file; run from the project root or pass --matrix PATH") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{file}: not valid TOML: {exc}") from None
    top = _Reader(file, "", data)
    top.only("export", "corpus", "probes", "tolerance", "run", "latency", "runtimes", "profiles")

    ex = _Reader(file, "export", top.get("export", dict, required=True))
    ex.only("torch", "onnx", "onnxscript", "onnxruntime")
    export = ExportSettings(
        torch=ex.get("torch", str),
        onnx=ex.get("onnx", str),
        onnxscript=ex.get("onnxscript", str),
        onnxruntime=ex.get("onnxruntime", str, ""),
    )
    for key in ("torch", "onnx", "onnxscript", "onnxruntime"):
        if getattr(export, key) and len(version_tuple(getattr(export, key))) < 3:
            ex.fail(f"{getattr(export, key)!r} is not pinned; write a full X.Y.Z version", key)
    if export.onnxruntime:
        parse_runtime(file, "export.onnxruntime", f"onnxruntime=={export.onnxruntime}")

    co = _Reader(file, "corpus", top.get("corpus", dict, required=True))
    co.only("modules")
    corpus = co.strings("modules")

    pr = _Reader(file, "probes", top.get("probes", dict, {}))
    pr.only("batch_sizes")
    batch_sizes = pr.ints("batch_sizes", [], nonempty=False)
    if any(b < 1 for b in batch_sizes):
        pr.fail("batch sizes must be >= 1", "batch_sizes")

    to = _Reader(file, "tolerance", top.get("tolerance", dict, {}))
    to.only("atol", "rtol")
    atol, rtol = to.number("atol", 1e-4), to.number("rtol", 1e-3)

    ru = _Reader(file, "run", top.get("run", dict, {}))
    ru.only("timeout", "workers")
    run = RunSettings(timeout=float(ru.number("timeout", 120, minimum=1)), workers=ru.number("workers", 0, integer=True))

    la = _Reader(file, "latency", top.get("latency", dict, {}))
    la.only("threads", "warmup", "min_runs", "max_runs", "budget_seconds", "stability")
    latency = LatencySettings(
        threads=la.number("threads", 1, minimum=1, integer=True),
        warmup=la.number("warmup", 5, integer=True),
        min_runs=la.number("min_runs", 20, minimum=1, integer=True),
        max_runs=la.number("max_runs", 200, minimum=1, integer=True),
        budget_seconds=float(la.number("budget_seconds", 0.25)),
        stability=float(la.number("stability", 0.02)),
    )
    if latency.max_runs < latency.min_runs:
        la.fail(f"max_runs ({latency.max_runs}) is below min_runs ({latency.min_runs}); raise max_runs", "max_runs")

    runtimes_raw = top.get("runtimes", list, required=True)
    if not runtimes_raw:
        top.fail("is empty; declare at least one [[runtimes]] entry", "runtimes")
    runtimes: list[Runtime] = []
    for i, raw in enumerate(runtimes_raw):
        rr = _Reader(file, f"runtimes[{i}]", raw)
        rr.only("pin", "constraints")
        rt = parse_runtime(file, f"runtimes[{i}].pin", rr.get("pin", str), rr.strings("constraints", [], nonempty=False))
        if any(rt.pin == other.pin for other in runtimes):
            rr.fail(f"{rt.pin} is declared twice; remove the duplicate", "pin")
        runtimes.append(rt)
    by_pin = {rt.pin: rt for rt in runtimes}
    if not export.onnxruntime:
        cpu = [rt for rt in runtimes if rt.package == "onnxruntime"]
        if not cpu:
            ex.fail("missing, and no onnxruntime is declared in [[runtimes]] to default to; add it", "onnxruntime")
        newest = max(cpu, key=lambda rt: version_tuple(rt.version))
        export = dataclasses.replace(export, onnxruntime=newest.version)

    profiles_raw = top.get("profiles", dict, required=True)
    if "default" not in profiles_raw:
        top.fail("has no [profiles.default]; add one (nox -s matrix runs it)", "profiles")
    profiles: dict[str, Profile] = {}
    for name, raw in profiles_raw.items():
        pp = _Reader(file, f"profiles.{name}", raw)
        pp.only("runtimes", "providers", "exporters", "opsets")
        refs = pp.strings("runtimes")
        prof_runtimes = []
        for j, ref in enumerate(refs):
            rt = parse_runtime(file, f"profiles.{name}.runtimes[{j}]", ref)
            if rt.pin not in by_pin:
                pp.fail(f"{rt.pin} is not declared; add a [[runtimes]] entry with pin = {rt.pin!r}", "runtimes")
            prof_runtimes.append(by_pin[rt.pin])
        providers = pp.strings("providers", ["cpu"])
        for p in providers:
            if p not in PROVIDERS:
                pp.fail(f"unknown provider {p!r}{_did_you_mean(p, PROVIDERS)}; use {', '.join(PROVIDERS)}", "providers")
        exporters = pp.strings("exporters", list(EXPORTERS))
        for e in exporters:
            if e not in EXPORTERS:
                pp.fail(f"unknown exporter {e!r}{_did_you_mean(e, EXPORTERS)}; use {', '.join(EXPORTERS)}", "exporters")
        opsets = pp.ints("opsets")
        for o in opsets:
            if not OPSET_MIN <= o <= OPSET_MAX:
                pp.fail(f"opset {o} is out of range; use {OPSET_MIN}..{OPSET_MAX}", "opsets")
        profiles[name] = Profile(name, tuple(prof_runtimes), providers, exporters, tuple(sorted(opsets)))

    return Matrix(
        path=path,
        export=export,
        corpus=corpus,
        batch_sizes=batch_sizes,
        atol=float(atol),
        rtol=float(rtol),
        run=run,
        latency=latency,
        runtimes=tuple(runtimes),
        profiles=profiles,
    )
