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
import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

EXPORTERS = ("torchscript", "dynamo")

# Provider short name → onnxruntime execution provider. For the native TensorRT runtime (package
# ``tensorrt``), ``tensorrt`` is TensorRT itself: its ONNX parser and an engine built by its builder.
PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}

# What each runtime package can run. A profile's providers are run where the package offers them.
PACKAGE_PROVIDERS: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("cpu",),
    "onnxruntime-gpu": ("cpu", "cuda", "tensorrt"),
    "tensorrt": ("tensorrt",),
}

# The precision axis: TensorRT (the execution provider and the native backend) builds fp32 or fp16
# engines. A column is the provider, plus the precision when it is not fp32: ``tensorrt-fp16``.
PRECISIONS = ("fp32", "fp16")
PRECISION_PROVIDERS = ("tensorrt",)


def column(provider: str, precision: str = "fp32") -> str:
    """The shard and table column of ``provider`` at ``precision``: ``cuda``, ``tensorrt``, ``tensorrt-fp16``."""
    return provider if precision == "fp32" else f"{provider}-{precision}"


def _columns(providers: Sequence[str], precisions: Sequence[str]) -> tuple[str, ...]:
    """Each provider's columns in order, the precision providers once per precision."""
    return tuple(column(p, q) for p in providers for q in (precisions if p in PRECISION_PROVIDERS else ("fp32",)))


def columns_of(package: str) -> tuple[str, ...]:
    """Every provider column a package can run: ``cpu``, ``cuda``, ``tensorrt``, ``tensorrt-fp16``."""
    return _columns(PACKAGE_PROVIDERS[package], PRECISIONS)


def split_column(name: str) -> tuple[str, str]:
    """``tensorrt-fp16`` → ``("tensorrt", "fp16")``; ``cuda`` → ``("cuda", "fp32")``."""
    provider, _, precision = name.partition("-")
    return provider, precision or "fp32"


# ONNX default-domain opsets a torch exporter can be asked for, per exporter, as torch 2.13 writes them
# (tests/test_matrix.py asks the real exporters): TorchScript writes 7..23 as asked (torch.onnx's
# ONNX_MIN_OPSET..ONNX_MAX_OPSET; past ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET = 20 it reuses the opset-20
# symbolics) and refuses 24; dynamo builds at 18 and converts with onnxscript's version converter: it
# writes 18..28 as asked and rewrites a request below 18 to 18 (or converts it down, model by model).
# A runtime that cannot load an opset is a measured cell.
OPSET_MIN, OPSET_MAX = 7, 28
EXPORTER_OPSETS = {"torchscript": (7, 23), "dynamo": (7, 28)}

PACKAGES = ("onnxruntime", "onnxruntime-gpu", "tensorrt")
GPU_PACKAGES = ("onnxruntime-gpu", "tensorrt")
# Session id prefix per package: ``ort-1.17.3``, ``ortgpu-1.23.2``, ``trt-10.13.3.9``.
_ID_PREFIX = {"onnxruntime": "ort", "onnxruntime-gpu": "ortgpu", "tensorrt": "trt"}

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
    # NVIDIA's meta-package (it pulls tensorrt-cu12 or -cu13: bindings and libraries), pip index versions.
    "tensorrt": tuple(
        "8.6.1 10.0.1 10.1.0 10.2.0 10.3.0 10.4.0 10.5.0 10.6.0 10.7.0 10.8.0.43 10.9.0.34 10.10.0.31 "
        "10.11.0.33 10.12.0.36 10.13.0.35 10.13.2.6 10.13.3.9 10.14.1.48 10.15.1.29 10.16.0.72 10.16.1.11 "
        "11.0.0.114 11.1.0.106 11.2.1.2 11.3.0.99 11.4.0.106".split()
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
    cuda: str = ""
    """The CUDA major its GPU libraries are built against (``12``), read from the wheel's provider
    libraries (``libcublasLt.so.12``); empty for the CPU package."""
    cudnn: str = ""
    """The cuDNN major (``9``)."""
    tensorrt: str = ""
    """The TensorRT major the TensorRT execution provider (or the native backend) needs (``10``)."""
    gpu_requirements: tuple[str, ...] = ()
    """Installed beside it only on a machine with an NVIDIA driver: the CUDA, cuDNN and TensorRT
    libraries as wheels (``nvidia-cudnn-cu12``), or, for the native runtime, pycuda (which only
    builds against a CUDA toolkit). Without a driver they are not installed and every GPU cell is
    ``unavailable`` with the reason."""

    @property
    def id(self) -> str:
        """Short nox session id: ``ort-1.17.3``, ``ortgpu-1.20.2``, ``trt-10.13.3.9``."""
        return f"{_ID_PREFIX[self.package]}-{self.version}"

    @property
    def gpu(self) -> bool:
        """Whether it is a GPU package: the nightly runs it on a runner labelled for GPUs."""
        return self.package in GPU_PACKAGES

    @property
    def requirements(self) -> tuple[str, ...]:
        """What its environment installs on any machine. The native TensorRT runtime installs nothing of
        its own without a driver: its wheels are GBs of CUDA libraries and pycuda needs a toolkit."""
        if self.package == "tensorrt":
            return ("numpy", *self.constraints)
        return (self.pin, *self.constraints)

    @property
    def gpu_install(self) -> tuple[str, ...]:
        """What its environment installs on a machine with an NVIDIA driver."""
        own = (self.pin,) if self.package == "tensorrt" else ()
        return (*own, *self.requirements, *self.gpu_requirements)


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    runtimes: tuple[Runtime, ...]
    providers: tuple[str, ...]
    exporters: tuple[str, ...]
    opsets: tuple[int, ...]
    """Every opset of the profile, either exporter's (sorted)."""
    precisions: tuple[str, ...] = ("fp32",)
    """TensorRT's precision axis (fp32, fp16): each precision is a column of its own."""
    exporter_opsets: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """The opsets each exporter is asked for, when they differ (``opsets = {torchscript = [..], dynamo = [..]}``);
    empty: every exporter at :attr:`opsets`."""

    def opsets_of(self, exporter: str) -> tuple[int, ...]:
        """The opsets ``exporter`` is asked for in this profile."""
        return dict(self.exporter_opsets).get(exporter, self.opsets) if self.exporter_opsets else self.opsets

    def exports(self) -> list[tuple[str, int]]:
        """Every (exporter, opset) of the profile: the columns of a case's row."""
        return [(e, o) for e in self.exporters for o in self.opsets_of(e)]

    def columns(self, runtime: Runtime) -> tuple[str, ...]:
        """The provider columns ``runtime`` runs in this profile: the profile's providers its package
        offers, TensorRT once per precision (``cpu``, ``cuda``, ``tensorrt``, ``tensorrt-fp16``)."""
        offered = PACKAGE_PROVIDERS[runtime.package]
        return _columns([p for p in self.providers if p in offered], self.precisions)

    def shards(self) -> list[tuple[Runtime, str]]:
        """Every (runtime, column) of the profile: one shard each."""
        return [(rt, c) for rt in self.runtimes for c in self.columns(rt)]

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
    requirements: tuple[str, ...] = ()
    """More packages for the export environment only (never a run environment): what the corpus's
    models need to be built (``transformers==5.24.0``). Installed beside the pinned torch, so a
    requirement cannot replace it with another build."""
    timeout: float = 600.0
    """Seconds one artifact may take to build its model, compute torch's outputs on every probe and
    export (a case's ``export_timeout`` overrides it); past it the artifact is ``timeout``, phase named."""
    reference_timeout: float = 300.0
    """Seconds the reference runtime's pass over an exported model may take; past it the export stands
    and only its localization data is not recorded."""
    intermediates_mib: float = 64.0
    """At most this many MiB of every node's value are recorded at export; a larger model's values are
    recorded on demand, one probe at a time, for the cells that mismatch."""
    external_data_mib: float = 1536.0
    """A model whose weights exceed this many MiB is saved as ``model.onnx`` plus ``model.onnx.data``
    (ONNX external data): one protobuf file cannot exceed 2 GiB."""


@dataclasses.dataclass(frozen=True)
class RunSettings:
    timeout: float = 120.0
    workers: int = 0
    gpu_workers: int = 4
    """Correctness workers of a GPU column: they share one GPU, and TensorRT's engine builds compete
    for it (16 at once made tactic timings noisy and builds slow enough to hit ``timeout``)."""

    @property
    def worker_count(self) -> int:
        return self.workers or (os.cpu_count() or 1)

    def workers_for(self, provider: str) -> int:
        return self.worker_count if provider == "cpu" else min(self.worker_count, max(1, self.gpu_workers))


@dataclasses.dataclass(frozen=True)
class LatencySettings:
    iobinding: bool = True
    """On a GPU provider, time with the inputs and outputs already on the device (onnxruntime's
    IOBinding; device buffers for native TensorRT): the figure excludes host/device copies and says so
    (``Latency.copies == "device"``). False: every timed run includes them (``"host"``)."""
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
    scaled: float
    """``[tolerance] scaled``: a floating output also matches when ``max|out - ref| <= scaled * max|ref|``."""
    run: RunSettings
    latency: LatencySettings
    runtimes: tuple[Runtime, ...]
    profiles: Mapping[str, Profile]
    provider_options: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """``[providers.<name>] options``: onnxruntime provider options (``cuda``, ``tensorrt``), and for
    the native TensorRT backend ``[providers.tensorrt] native`` (``workspace_mib``)."""

    def options(self, provider: str, *, native: bool = False) -> dict[str, Any]:
        """The options of a provider column as matrix.toml gives them; for ``tensorrt-fp16`` the
        execution provider also gets ``trt_fp16_enable``."""
        base, precision = split_column(provider)
        table = self.provider_options.get(base, {})
        out = dict(table.get("native" if native else "options", {}))
        if base == "tensorrt" and not native:
            out["trt_fp16_enable"] = precision == "fp16"
        return out

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
        if not math.isfinite(value):  # nan passes every comparison, inf every bound: neither is a setting
            self.fail(f"must be a finite number, got {value!r}", key)
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


def _fraction(reader: _Reader, key: str, default: float) -> float:
    """A finite number strictly between 0 and 1 (a relative change: 0 never settles, 1 always has)."""
    value = float(reader.number(key, default))
    if not 0 < value < 1:
        reader.fail(f"must be between 0 and 1 (a fraction, e.g. 0.02), got {value!r}", key)
    return value


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _corpus_problem(root: Path, name: str) -> str | None:
    """Why a ``[corpus] modules`` entry cannot be found from ``root`` (None: it can). A ``.py`` path must be a
    file; a dotted name a module under ``root`` or one Python finds (an installed package), without importing
    it: matrix.toml is read where torch is not."""
    import importlib.util

    if name.endswith(".py"):
        return None if (root / name).is_file() else f"no such file under {root}; fix the path or remove it"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
        return "is neither a dotted module name (models.articles) nor a .py path"
    parts = name.split(".")
    local = root.joinpath(*parts)
    if local.with_suffix(".py").is_file() or (local / "__init__.py").is_file():
        return None
    if (root / parts[0]).exists():  # a package of this project: the module is not in it
        return f"no module {name} under {root} (no {local.with_suffix('.py').relative_to(root)}); fix the name or remove it"
    try:
        found = importlib.util.find_spec(parts[0]) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"no module {parts[0]!r} here or installed; fix the name or remove it"


def _profile_opsets(file: str, where: str, pp: _Reader, exporters: Sequence[str]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``opsets = [17, 18]`` (every exporter) or ``opsets = {torchscript = [..], dynamo = [..]}`` (one list per
    exporter of the profile), each opset within what its exporter writes."""
    raw = pp.get("opsets", (list, dict), required=True)
    if isinstance(raw, list):
        both = pp.ints("opsets")
        lists = {e: both for e in exporters}
        at = {e: "opsets" for e in exporters}
    else:
        sub = _Reader(file, f"{where}.opsets", raw)
        sub.only(*exporters)
        missing = [e for e in exporters if e not in raw]
        if missing:
            sub.fail(f"has no list for {', '.join(missing)}; add `{missing[0]} = [18]` or drop it from exporters")
        lists = {e: sub.ints(e) for e in exporters}
        at = {e: f"opsets.{e}" for e in exporters}
    for e, opsets in lists.items():
        low, high = EXPORTER_OPSETS.get(e, (OPSET_MIN, OPSET_MAX))
        for o in opsets:
            if not low <= o <= high:
                pp.fail(f"opset {o} is out of range; the {e} exporter writes {low}..{high}", at[e])
    return tuple((e, tuple(sorted(lists[e]))) for e in exporters)


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


# A requirement as pip and uv take it: a name, optional extras, an optional version specifier.
_REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?\s*((===|==|!=|~=|>=|<=|>|<)\s*[\w.*+!-]+\s*,?\s*)*$"
)
# Pinned by [export] itself: a requirement may not name them (torch must stay the CPU build matrix.toml pins).
_EXPORT_PINNED = ("torch", "onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu")


def requirement_name(requirement: str) -> str:
    """``Transformers[torch]>=5`` → ``transformers`` (PEP 503 normalized)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~\s]", requirement.strip(), maxsplit=1)[0]).lower()


def parse_requirements(where: str, requirements: Sequence[str]) -> tuple[str, ...]:
    """Validate export requirements (``transformers==5.24.0``, ``timm>=1.0``): one line per problem, starting
    with ``where`` they were given (``matrix.toml: export.requirements``, ``--with``)."""
    out = []
    for req in requirements:
        text = req.strip()
        if not _REQUIREMENT.match(text):
            raise HarnessError(f'{where}: {req!r} is not a requirement; write "name==version" (or a range)')
        name = requirement_name(text)
        if name in _EXPORT_PINNED:
            raise HarnessError(f"{where}: {name} is pinned by [export] itself; change [export] {name.split('-')[0]} instead")
        out.append(text)
    return tuple(dict.fromkeys(out))


def _distance(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(abs(x - y) for x, y in zip(a, b, strict=False))


def load(path: str | os.PathLike[str] = "matrix.toml") -> Matrix:
    """Read and validate a matrix file.

    Raises:
        HarnessError: one line naming the file, the key and the fix.
    """
    path = Path(path)
    file = path.name
    if path.is_dir():
        raise HarnessError(f"{path}: is a folder; pass the matrix file itself, e.g. --matrix {path / 'matrix.toml'}")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HarnessError(f"{path}: no such file; run from the project root or pass --matrix PATH") from None
    except UnicodeDecodeError as exc:
        raise HarnessError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8") from None
    except OSError as exc:
        raise HarnessError(f"{path}: cannot be read ({exc.strerror or exc}); check its permissions") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{file}: not valid TOML: {exc}") from None
    top = _Reader(file, "", data)
    top.only("export", "corpus", "probes", "tolerance", "run", "latency", "providers", "runtimes", "profiles")

    ex = _Reader(file, "export", top.get("export", dict, required=True))
    ex.only(
        "torch",
        "onnx",
        "onnxscript",
        "onnxruntime",
        "requirements",
        "timeout",
        "reference_timeout",
        "intermediates_mib",
        "external_data_mib",
    )
    export = ExportSettings(
        torch=ex.get("torch", str),
        onnx=ex.get("onnx", str),
        onnxscript=ex.get("onnxscript", str),
        onnxruntime=ex.get("onnxruntime", str, ""),
        requirements=parse_requirements(f"{file}: export.requirements", ex.strings("requirements", [], nonempty=False)),
        timeout=float(ex.number("timeout", 600, minimum=1)),
        reference_timeout=float(ex.number("reference_timeout", 300, minimum=1)),
        intermediates_mib=float(ex.number("intermediates_mib", 64)),
        external_data_mib=float(ex.number("external_data_mib", 1536)),
    )
    for key in ("torch", "onnx", "onnxscript", "onnxruntime"):
        if getattr(export, key) and len(version_tuple(getattr(export, key))) < 3:
            ex.fail(f"{getattr(export, key)!r} is not pinned; write a full X.Y.Z version", key)
    if export.onnxruntime:
        parse_runtime(file, "export.onnxruntime", f"onnxruntime=={export.onnxruntime}")

    co = _Reader(file, "corpus", top.get("corpus", dict, required=True))
    co.only("modules")
    corpus = co.strings("modules")
    for name in corpus:
        problem = _corpus_problem(path.resolve().parent, name)
        if problem:
            co.fail(f"{name!r}: {problem}", "modules")

    pr = _Reader(file, "probes", top.get("probes", dict, {}))
    pr.only("batch_sizes")
    batch_sizes = pr.ints("batch_sizes", [], nonempty=False)
    if any(b < 1 for b in batch_sizes):
        pr.fail("batch sizes must be >= 1", "batch_sizes")

    to = _Reader(file, "tolerance", top.get("tolerance", dict, {}))
    to.only("atol", "rtol", "scaled")
    atol, rtol, scaled = to.number("atol", 1e-4), to.number("rtol", 1e-3), to.number("scaled", 1e-5)

    ru = _Reader(file, "run", top.get("run", dict, {}))
    ru.only("timeout", "workers", "gpu_workers")
    run = RunSettings(
        timeout=float(ru.number("timeout", 120, minimum=1)),
        workers=ru.number("workers", 0, integer=True),
        gpu_workers=ru.number("gpu_workers", 4, minimum=1, integer=True),
    )

    la = _Reader(file, "latency", top.get("latency", dict, {}))
    la.only("iobinding", "threads", "warmup", "min_runs", "max_runs", "budget_seconds", "stability")
    latency = LatencySettings(
        iobinding=la.get("iobinding", bool, True),
        threads=la.number("threads", 1, minimum=1, integer=True),
        warmup=la.number("warmup", 5, integer=True),
        min_runs=la.number("min_runs", 20, minimum=1, integer=True),
        max_runs=la.number("max_runs", 200, minimum=1, integer=True),
        budget_seconds=float(la.number("budget_seconds", 0.25)),
        stability=_fraction(la, "stability", 0.02),
    )
    if latency.max_runs < latency.min_runs:
        la.fail(f"max_runs ({latency.max_runs}) is below min_runs ({latency.min_runs}); raise max_runs", "max_runs")

    runtimes_raw = top.get("runtimes", list, required=True)
    if not runtimes_raw:
        top.fail("is empty; declare at least one [[runtimes]] entry", "runtimes")
    runtimes: list[Runtime] = []
    for i, raw in enumerate(runtimes_raw):
        rr = _Reader(file, f"runtimes[{i}]", raw)
        rr.only("pin", "constraints", "cuda", "cudnn", "tensorrt", "gpu_requirements")
        rt = parse_runtime(file, f"runtimes[{i}].pin", rr.get("pin", str), rr.strings("constraints", [], nonempty=False))
        if any(rt.pin == other.pin for other in runtimes):
            rr.fail(f"{rt.pin} is declared twice; remove the duplicate", "pin")
        majors = {}
        for key in ("cuda", "cudnn", "tensorrt"):
            value = rr.get(key, str, "")
            if value and not value.isdigit():
                rr.fail(f'must be a major version such as "12", got {value!r}', key)
            majors[key] = value
        if rt.gpu and not majors["cuda"]:
            rr.fail(f'{rt.pin} is a GPU runtime: record the CUDA major it needs (cuda = "12")', "cuda")
        if not rt.gpu and any(majors.values()):
            rr.fail(f"{rt.pin} is the CPU package: it needs no CUDA, cuDNN or TensorRT; remove the key", "cuda")
        gpu_reqs = rr.strings("gpu_requirements", [], nonempty=False)
        if gpu_reqs and not rt.gpu:
            rr.fail(f"{rt.pin} is the CPU package: gpu_requirements do not apply; remove the key", "gpu_requirements")
        runtimes.append(dataclasses.replace(rt, **majors, gpu_requirements=gpu_reqs))
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
        if not _SAFE_NAME.fullmatch(name) or ".." in name:  # a profile's name becomes a folder: build/results/<name>/
            top.fail(f"profile name {name!r} must be letters, digits, '-', '_' or '.' (it names a folder); rename it", "profiles")
        pp = _Reader(file, f"profiles.{name}", raw)
        pp.only("runtimes", "providers", "precisions", "exporters", "opsets")
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
        precisions = pp.strings("precisions", ["fp32"])
        for q in precisions:
            if q not in PRECISIONS:
                pp.fail(f"unknown precision {q!r}{_did_you_mean(q, PRECISIONS)}; use {', '.join(PRECISIONS)}", "precisions")
        for rt in prof_runtimes:
            if not any(p in PACKAGE_PROVIDERS[rt.package] for p in providers):
                pp.fail(
                    f"{rt.pin} offers none of the providers {', '.join(providers)} (it offers "
                    f"{', '.join(PACKAGE_PROVIDERS[rt.package])}); add one to providers or drop the runtime",
                    "providers",
                )
        if precisions != ("fp32",) and not any(p in PRECISION_PROVIDERS for p in providers):
            listed = ", ".join(PRECISION_PROVIDERS)
            pp.fail(f"precisions apply to {listed} only, which providers does not list; add it or remove the key", "precisions")
        for p in providers:
            if not any(p in PACKAGE_PROVIDERS[rt.package] for rt in prof_runtimes):
                pp.fail(f"no runtime of the profile offers provider {p!r}; add a runtime that does or remove it", "providers")
        exporters = pp.strings("exporters", list(EXPORTERS))
        for e in exporters:
            if e not in EXPORTERS:
                pp.fail(f"unknown exporter {e!r}{_did_you_mean(e, EXPORTERS)}; use {', '.join(EXPORTERS)}", "exporters")
        per_exporter = _profile_opsets(file, f"profiles.{name}", pp, exporters)
        opsets = tuple(sorted({o for _, os_ in per_exporter for o in os_}))
        same = len({os_ for _, os_ in per_exporter}) == 1
        profiles[name] = Profile(
            name, tuple(prof_runtimes), providers, exporters, opsets, precisions, () if same else per_exporter
        )

    provider_options = _provider_options(file, top.get("providers", dict, {}))

    return Matrix(
        path=path,
        export=export,
        corpus=corpus,
        batch_sizes=batch_sizes,
        atol=float(atol),
        rtol=float(rtol),
        scaled=float(scaled),
        run=run,
        latency=latency,
        runtimes=tuple(runtimes),
        profiles=profiles,
        provider_options=provider_options,
    )


def _provider_options(file: str, raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``[providers.cuda] options = {...}``, ``[providers.tensorrt] options = {...}, native = {...}``:
    scalar values only (onnxruntime takes provider options as strings, numbers and booleans)."""
    out: dict[str, dict[str, Any]] = {}
    for name, table in raw.items():
        where = f"providers.{name}"
        if name not in PROVIDERS or name == "cpu":
            raise HarnessError(f"{file}: {where}: no options for provider {name!r}; options are for cuda and tensorrt")
        rd = _Reader(file, where, table)
        rd.only("options", "native") if name == "tensorrt" else rd.only("options")
        entry: dict[str, Any] = {}
        for key in ("options", "native"):
            opts = rd.get(key, dict, {})
            for k, v in opts.items():
                if isinstance(v, (dict, list)):
                    rd.fail(f"{k}: must be a string, number or boolean, got {v!r}", key)
            entry[key] = dict(opts)
        unknown = sorted(set(entry["native"]) - {"workspace_mib"})
        if unknown:
            rd.fail(f"unknown key(s) {', '.join(unknown)}; allowed: workspace_mib", "native")
        workspace = entry["native"].get("workspace_mib", 1)
        if isinstance(workspace, bool) or not isinstance(workspace, int) or workspace < 1:
            rd.fail(f"workspace_mib must be a positive integer (MiB), got {workspace!r}", "native")
        if "trt_fp16_enable" in entry["options"]:
            rd.fail("trt_fp16_enable is set per column by the profile's precisions (tensorrt-fp16); remove it", "options")
        out[name] = entry
    return out
