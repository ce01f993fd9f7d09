"""matrix.toml → a frozen :class:`Matrix`, validated once.

Every problem is a :class:`HarnessError` of one line naming the key and the
fix, in nox's manner::

    matrix.toml: runtimes[2].pin: "onnxruntime==1.17" is not pinned; write "onnxruntime==1.17.3"

Standard library only (``packaging`` checks requirements where it is installed):
the noxfile reads this module before any environment exists.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.9, 3.10: the run environments of onnxruntime 1.10–1.14 install tomli, its origin
    import tomli as tomllib  # type: ignore[no-redef]

from harness.config import platforms, runtimes, transforms
from harness.config.runtimes import PRECISIONS, Kind, Provider
from harness.core.errors import HarnessError

EXPORTERS = ("torchscript", "dynamo")

# ONNX default-domain opsets a torch exporter can be asked for, per exporter, as torch 2.13 writes them
# (tests/test_matrix.py asks the real exporters): TorchScript writes 7..23 as asked (torch.onnx's
# ONNX_MIN_OPSET..ONNX_MAX_OPSET; past ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET = 20 it reuses the opset-20
# symbolics) and refuses 24; dynamo builds at 18 and converts with onnxscript's version converter: it
# writes 18..28 as asked and rewrites a request below 18 to 18 (or converts it down, model by model).
# A runtime that cannot load an opset is a measured cell.
OPSET_MIN, OPSET_MAX = 7, 28
EXPORTER_OPSETS = {"torchscript": (7, 23), "dynamo": (7, 28)}

_VERSION = re.compile(r"[0-9]+(\.[0-9]+){2,}((a|b|rc|\.post|\.dev)[0-9]+)*")
"""A release as [export] pins it (``2.13.0``, ``1.24.0rc1``): no local part (``+cpu`` is the noxfile's)."""
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
    python: str = ""
    """The Python its environment runs (``"3.10"``), for a release with no wheel for the project's; empty: the
    project's own (the export's). Its interpreter is found by :func:`harness.config.pythons.find`."""
    gpu_requirements: tuple[str, ...] = ()
    """Installed beside it only on a machine with an NVIDIA driver: the CUDA, cuDNN and TensorRT
    libraries as wheels (``nvidia-cudnn-cu12``), or, for the native runtime, pycuda (which only
    builds against a CUDA toolkit). Without a driver they are not installed and every GPU cell is
    ``unavailable`` with the reason."""

    @property
    def kind(self) -> Kind:
        """Its runtime kind in the registry (:mod:`harness.config.runtimes`)."""
        return runtimes.kind(self.package)

    @property
    def id(self) -> str:
        """Short nox session id: ``ort-1.17.3``, ``ortgpu-1.20.2``, ``trt-10.13.3.9``."""
        return f"{self.kind.id_prefix}-{self.version}"

    @property
    def gpu(self) -> bool:
        """Whether it is a GPU package: the nightly runs it on a runner labelled for GPUs."""
        return self.kind.gpu

    @property
    def requirements(self) -> tuple[str, ...]:
        """What its environment installs on any machine (:meth:`harness.config.runtimes.Kind.requirements`), and
        ``tomli`` on a Python older than 3.11 (the run stage reads matrix.toml with it: no ``tomllib`` there)."""
        older = self.python and version_tuple(self.python) < (3, 11)
        return (*self.kind.requirements(self.pin, self.constraints), *(("tomli",) if older else ()))

    @property
    def gpu_install(self) -> tuple[str, ...]:
        """What its environment installs on a machine with an NVIDIA driver."""
        return self.kind.gpu_install(self.pin, self.constraints, self.gpu_requirements)


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
    results_dir: str = ""
    """``results = "results/openvino"``: where its report is published, inside the project; empty: ``results/``
    for the default profile, the build folder for the others (:meth:`results`)."""
    corpus: tuple[str, ...] = ()
    """``corpus = ["models.architectures"]``: the profile's own corpus, in place of ``[corpus] modules``; empty:
    those modules."""
    torch: tuple[str, ...] = ()
    """``torch = ["2.5.1", …, "2.13.0"]``: torch releases as an axis. Each is exported in an export environment of its
    own (its onnx and onnxscript resolved with it), into a build folder of its own (:meth:`torch_out`), run on the
    profile's runtimes and reported as a table of its own (:meth:`torch_results`); ``harness torch-report`` gathers
    them. Empty: the one torch of ``[export]``, as every other profile."""
    platforms: tuple[str, ...] = ()
    """``platforms = ["x86-64-v4", "x86-64-v3", "x86-64-v2", "aarch64"]``: the CPU provider once per platform, each a
    column of its own (``cpu@aarch64``, :mod:`harness.config.platforms`), run natively or emulated; empty: the plain
    ``cpu`` column, on this machine whatever it is."""
    cases: tuple[str, ...] = ()
    """``cases = ["bert", "llama", "llama_step"]``: only these cases of the profile's corpus (as ``--cases``, which
    replaces it for a run); empty: every case."""
    transforms: tuple[str, ...] = ()
    """``transforms = ["int8-dynamic", "fp16", ...]`` (:mod:`harness.config.transforms`): each fp32 artifact of the
    profile transformed by each, into a build folder per transform (:meth:`transform_out`), run on the profile's
    runtimes and platforms and reported as a table per transform (:meth:`transform_results`); ``harness
    transform-report`` gathers them. Empty: the exported files themselves, as every other profile."""

    def torch_out(self, out: str | os.PathLike[str], release: str) -> Path:
        """The build folder of one torch release of this profile: ``<out>/torch/<release>/``."""
        return Path(out) / "torch" / release

    def torch_results(self, out: str | os.PathLike[str], release: str) -> Path:
        """The table of one torch release: ``<results>/<release>/``."""
        return self.results(out) / release

    def transform_out(self, out: str | os.PathLike[str], name: str) -> Path:
        """The build folder of one transform of this profile: ``<out>/transforms/<name>/``."""
        return Path(out) / "transforms" / name

    def transform_results(self, out: str | os.PathLike[str], name: str) -> Path:
        """The table of one transform: ``<results>/<name>/``."""
        return self.results(out) / name

    def opsets_of(self, exporter: str) -> tuple[int, ...]:
        """The opsets ``exporter`` is asked for in this profile."""
        return dict(self.exporter_opsets).get(exporter, self.opsets) if self.exporter_opsets else self.opsets

    def exports(self) -> list[tuple[str, int]]:
        """Every (exporter, opset) of the profile: the columns of a case's row."""
        return [(e, o) for e in self.exporters for o in self.opsets_of(e)]

    def columns(self, runtime: Runtime) -> tuple[str, ...]:
        """The provider columns ``runtime`` runs in this profile: the profile's providers its package
        offers, TensorRT once per precision (``cpu``, ``cuda``, ``tensorrt``, ``tensorrt-fp16``)."""
        offered = runtime.kind.columns()
        plain = tuple(c for c in _columns(self.providers, self.precisions) if c in offered)
        if self.platforms:
            return tuple(platforms.column(c, p) for c in plain for p in self.platforms)
        return plain

    def shards(self) -> list[tuple[Runtime, str]]:
        """Every (runtime, column) of the profile: one shard each."""
        return [(rt, c) for rt in self.runtimes for c in self.columns(rt)]

    def results(self, out: str | os.PathLike[str]) -> Path:
        """Where its report goes: its ``results`` folder where matrix.toml gives one, else ``results/`` (the published
        table) for the default profile and ``<out>/results/<profile>/`` in the build folder for the others."""
        if self.results_dir:
            return Path(self.results_dir)
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

    def workers_for(self, provider: Provider) -> int:
        """Correctness workers of a column: one per core, or ``gpu_workers`` where its cells share one device."""
        return min(self.worker_count, max(1, self.gpu_workers)) if provider.shares_device else self.worker_count


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
    transform_requirements: tuple[str, ...] = ()
    """``[transforms] requirements``: the pinned tools of the transform environment besides the export's onnx and
    its reference onnxruntime (whose ``onnxruntime.quantization`` is the quantizer): the float16 converter and what
    the quantizer imports."""

    def options(self, col: str, kind: Kind) -> dict[str, Any]:
        """The options of column ``col`` on a runtime of ``kind``, as matrix.toml gives them (the table
        :attr:`Kind.options_key` names), plus what the column's precision sets (``trt_fp16_enable``) where
        the kind takes execution provider options."""
        name, precision = runtimes.split_column(col)
        out = dict(self.provider_options.get(name, {}).get(kind.options_key, {}))
        if kind.options_key == "options":
            out.update(runtimes.provider(name).precision_options.get(precision, {}))
        return out

    def for_torch(self, profile: Profile, release: str | None) -> Matrix:
        """The matrix one torch release of ``profile`` is exported with: ``[export]`` with that torch (its onnx and
        onnxscript pins kept, as every release installs them), the profile's own list of releases. None: this one.

        Raises:
            HarnessError: the profile lists no such release, or it lists releases and none was named.
        """
        if release is None:
            if profile.torch:
                raise HarnessError(
                    f"profile {profile.name!r} has torch releases ({', '.join(profile.torch)}): name one with --torch, "
                    f"or run them all with `nox -s matrix -- --profile {profile.name}`"
                )
            return self
        if release not in profile.torch:
            listed = f"lists {', '.join(profile.torch)}" if profile.torch else "lists none (only [export] torch)"
            raise HarnessError(
                f"--torch {release}: profile {profile.name!r} {listed}; use one of them or add it to its torch list"
            )
        return dataclasses.replace(self, export=dataclasses.replace(self.export, torch=release))

    def corpus_of(self, profile: Profile | None) -> tuple[str, ...]:
        """The built-in corpus of a run of ``profile``: its own ``corpus`` where it names one, else ``[corpus] modules``."""
        return profile.corpus if profile is not None and profile.corpus else self.corpus

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

    def number(self, key: str, default: float, *, integer: bool = False) -> Any:
        """A number within its :data:`BOUNDS` (finite: nan passes every comparison, inf every bound)."""
        value = self.get(key, int if integer else (int, float), default)
        if not math.isfinite(value):
            self.fail(f"must be a finite number, got {value!r}", key)
        low, high, what = BOUNDS[f"{self.where}.{key}"]
        if value < low:
            self.fail(f"must be >= {low}, got {value!r}; raise it", key)
        if value > high:
            self.fail(f"must be <= {high} {what}, got {value!r}; {_FIX_HIGH.get(self.where, 'lower it')}", key)
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


_TOLERANCE = "(a wider bound passes real mismatches)"
_DAY = "seconds (a day)"
BOUNDS: dict[str, tuple[float, float, str]] = {
    "tolerance.atol": (0, 0.1, _TOLERANCE),
    "tolerance.rtol": (0, 0.1, _TOLERANCE),
    "tolerance.scaled": (0, 0.1, _TOLERANCE),
    "export.timeout": (1, 86400, _DAY),
    "export.reference_timeout": (1, 86400, _DAY),
    "export.intermediates_mib": (0, 65536, "MiB (64 GiB)"),
    "export.external_data_mib": (0, 2047, "MiB (one protobuf file cannot exceed 2 GiB)"),
    "run.timeout": (1, 86400, _DAY),
    "run.workers": (0, 256, "processes (0: one per core)"),
    "run.gpu_workers": (1, 256, "processes sharing one GPU"),
    "latency.threads": (1, 256, "intra-op threads"),
    "latency.warmup": (0, 100_000, "untimed runs"),
    "latency.min_runs": (1, 1_000_000_000, "runs per window"),
    "latency.max_runs": (1, 1_000_000_000, "runs (budget_seconds bounds their time)"),
    "latency.budget_seconds": (0, 3600, "seconds per artifact (an hour)"),
}
"""Every number matrix.toml takes, as (lowest, highest, what the highest is): a value outside is one line. The
tolerances stay within 0.1, far above what fp32 or fp16 rounding needs (the defaults are atol 1e-4, rtol 1e-3,
scaled 1e-5; the corpus's own cases set none), so no setting can call a wrong graph a pass; timeouts stay within
a day (1e9 s overflowed the run stage's clocks), workers within 256 processes."""
BATCH_MAX = 4096
"""``[probes] batch_sizes`` at most: each such probe tiles the example inputs that many times."""
WORKSPACE_MAX_MIB = 1 << 20
"""``[providers.tensorrt] native.workspace_mib`` at most (1 TiB)."""
_FIX_HIGH = {"tolerance": "lower it; a case that needs a looser bound sets its own atol, rtol or scaled, within the same 0.1"}


def _fraction(reader: _Reader, key: str, default: float) -> float:
    """A finite number strictly between 0 and 1 (a relative change: 0 never settles, 1 always has)."""
    value = float(reader.get(key, (int, float), default))
    if not 0 < value < 1:  # nan included
        reader.fail(f"must be between 0 and 1 (a fraction, e.g. 0.02), got {value!r}", key)
    return value


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


_NO_CASES = "is a module of {}, which registers no cases; list a corpus module (models.articles) or a .py file"


def corpus_problem(root: Path, name: str) -> str | None:
    """Why a ``[corpus] modules`` entry (or a ``--corpus``) cannot be found from ``root`` (None: it can). A ``.py``
    path must be a file; a dotted name a module under ``root`` or one Python finds (an installed package, not
    Python's own nor the harness's: they register no cases), without importing it: matrix.toml is read where torch
    is not."""
    import importlib.util

    if name.endswith(".py"):
        return None if (root / name).is_file() else f"no such file under {root}; fix the path or remove it"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
        return "is neither a dotted module name (models.articles) nor a .py path"
    parts = name.split(".")
    if parts[0] == "harness":
        return _NO_CASES.format("the harness")
    local = root.joinpath(*parts)
    if local.with_suffix(".py").is_file() or (local / "__init__.py").is_file():
        return None
    if parts[0] in getattr(sys, "stdlib_module_names", ()):  # 3.10+; the run stage's 3.9 never asks this
        return _NO_CASES.format("Python's standard library")
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
    if package not in runtimes.packages():
        known = runtimes.packages()
        raise HarnessError(
            f"{file}: {where}: unknown runtime package {package!r}{_did_you_mean(package, known)}; use one of {', '.join(known)}"
        )
    releases = runtimes.kind(package).releases
    if version not in releases and version not in runtimes.kind(package).older:
        if len(version_tuple(version)) < 3:
            patches = [v for v in releases if v.startswith(version + ".")]
            newest = patches[-1] if patches else releases[-1]
            raise HarnessError(f'{file}: {where}: "{package}=={version}" is not pinned; write "{package}=={newest}"')
        target = version_tuple(version)
        nearest = sorted(releases, key=lambda v: _distance(version_tuple(v), target))[:2]
        raise HarnessError(
            f"{file}: {where}: {package} {version} is not a known release; nearest: "
            f"{', '.join(sorted(nearest, key=version_tuple))} (a newer release goes into its entry in harness/config/runtimes.py)"
        )
    return Runtime(pin=f"{package}=={version}", package=package, version=version, constraints=constraints)


# A requirement as pip and uv take it: a name, optional extras, an optional version specifier.
_REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?\s*((===|==|!=|~=|>=|<=|>|<)\s*[\w.*+!-]+\s*,?\s*)*$"
)
# Pinned by [export] itself: a requirement may not name them (torch must stay the CPU build matrix.toml pins).
_EXPORT_PINNED = ("torch", "onnx", "onnxscript", *(k.package for k in runtimes.KINDS if k.version_key == "onnxruntime"))


def requirement_name(requirement: str) -> str:
    """``Transformers[torch]>=5`` → ``transformers`` (PEP 503 normalized)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~;@\s]", requirement.strip(), maxsplit=1)[0]).lower()


def parse_requirement(where: str, requirement: str) -> str:
    """One requirement handed to uv or pip, by name and version only (``numpy<2``, ``nvidia-cudnn-cu11==8.*``):
    a PEP 508 specifier without URL or marker (from the configured index), never an installer option
    (``--index-url=...`` would be one).
    Parsed by ``packaging`` where it is installed (nox depends on it, so the noxfile always has it), and by the
    same grammar's subset below everywhere.

    Raises:
        HarnessError: one line starting with ``where``.
    """
    text = requirement.strip()
    write = 'write "name==version" (or a range)'
    if re.search(r"(^|\s)-", text):
        raise HarnessError(f"{where}: {requirement!r} is an installer option, not a requirement; {write}, no options")
    if not _REQUIREMENT.match(text):
        raise HarnessError(f"{where}: {requirement!r} is not a requirement; {write}")
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # an environment without packaging (a run env of native TensorRT): the grammar above holds
        return text
    try:
        Requirement(text)
    except InvalidRequirement as exc:
        raise HarnessError(f"{where}: {requirement!r} is not a requirement ({str(exc).splitlines()[0]}); {write}") from None
    return text


def parse_requirements(where: str, requirements: Sequence[str], *, pinned: Sequence[str] = _EXPORT_PINNED) -> tuple[str, ...]:
    """Validate requirements (``transformers==5.24.0``, ``timm>=1.0``; :func:`parse_requirement`): one line per
    problem, starting with ``where`` they were given (``matrix.toml: export.requirements``, ``--with``). A
    requirement may not name a package of ``pinned`` (by default what [export] pins)."""
    out = []
    for req in requirements:
        text = parse_requirement(where, req)
        name = requirement_name(text)
        if name in pinned:
            if pinned is _EXPORT_PINNED:
                raise HarnessError(f"{where}: {name} is pinned by [export] itself; change [export] {name.split('-')[0]} instead")
            raise HarnessError(f"{where}: {name} is pinned by the runtime's pin itself; remove {req!r}")
        out.append(text)
    return tuple(dict.fromkeys(out))


def _distance(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(abs(x - y) for x, y in zip(a, b))  # noqa: B905 (run closure: Python 3.9)


def load(path: str | os.PathLike[str] = "matrix.toml") -> Matrix:
    """Read and validate a matrix file.

    Raises:
        HarnessError: one line naming the file, the key and the fix.
    """
    path = Path(path)
    file = path.name
    top = _Reader(file, "", _read_toml(path))
    top.only("export", "corpus", "probes", "tolerance", "run", "latency", "providers", "runtimes", "profiles", "transforms")
    export = _export_settings(_Reader(file, "export", top.get("export", dict, required=True)))
    corpus = _corpus(_Reader(file, "corpus", top.get("corpus", dict, required=True)), path.resolve().parent)
    batch_sizes = _batch_sizes(_Reader(file, "probes", top.get("probes", dict, {})))
    to = _Reader(file, "tolerance", top.get("tolerance", dict, {}))
    to.only("atol", "rtol", "scaled")
    declared = _runtimes(file, top)
    export = _reference_runtime(export, declared, _Reader(file, "export", top.get("export", dict)))
    profiles_raw = top.get("profiles", dict, required=True)
    if "default" not in profiles_raw:
        top.fail("has no [profiles.default]; add one (nox -s matrix runs it)", "profiles")
    by_pin = {rt.pin: rt for rt in declared}
    return Matrix(
        path=path,
        export=export,
        corpus=corpus,
        batch_sizes=batch_sizes,
        atol=float(to.number("atol", 1e-4)),
        rtol=float(to.number("rtol", 1e-3)),
        scaled=float(to.number("scaled", 1e-5)),
        run=_run_settings(_Reader(file, "run", top.get("run", dict, {}))),
        latency=_latency_settings(_Reader(file, "latency", top.get("latency", dict, {}))),
        runtimes=declared,
        profiles={name: _profile(file, top, name, raw, by_pin, path.resolve().parent) for name, raw in profiles_raw.items()},
        provider_options=_provider_options(file, top.get("providers", dict, {})),
        transform_requirements=_transform_requirements(_Reader(file, "transforms", top.get("transforms", dict, {}))),
    )


def _transform_requirements(tr: _Reader) -> tuple[str, ...]:
    """``[transforms] requirements``: each pinned with ``==`` (a transform's tools are recorded on every artifact)."""
    tr.only("requirements")
    found = parse_requirements(f"{tr.file}: transforms.requirements", tr.strings("requirements", [], nonempty=False))
    for req in found:
        if "==" not in req:
            why = "write name==X.Y.Z (its version is recorded on every transformed file)"
            tr.fail(f"{req!r} is not pinned; {why}", "requirements")
    return found


def _read_toml(path: Path) -> Any:
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
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{path.name}: not valid TOML: {exc}") from None


def _export_settings(ex: _Reader) -> ExportSettings:
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
        requirements=parse_requirements(f"{ex.file}: export.requirements", ex.strings("requirements", [], nonempty=False)),
        timeout=float(ex.number("timeout", 600)),
        reference_timeout=float(ex.number("reference_timeout", 300)),
        intermediates_mib=float(ex.number("intermediates_mib", 64)),
        external_data_mib=float(ex.number("external_data_mib", 1536)),
    )
    for key in ("torch", "onnx", "onnxscript", "onnxruntime"):
        if getattr(export, key) and len(version_tuple(getattr(export, key))) < 3:
            ex.fail(f"{getattr(export, key)!r} is not pinned; write a full X.Y.Z version", key)
        if getattr(export, key) and not _VERSION.fullmatch(getattr(export, key)):
            ex.fail(f"{getattr(export, key)!r} is not a version; write a release such as X.Y.Z", key)
    if export.onnxruntime:
        parse_runtime(ex.file, "export.onnxruntime", f"{runtimes.REFERENCE}=={export.onnxruntime}")
    return export


def _reference_runtime(export: ExportSettings, declared: Sequence[Runtime], ex: _Reader) -> ExportSettings:
    """``[export] onnxruntime``, by default the newest declared onnxruntime."""
    if export.onnxruntime:
        return export
    cpu = [rt for rt in declared if rt.package == runtimes.REFERENCE]
    if not cpu:
        ex.fail("missing, and no onnxruntime is declared in [[runtimes]] to default to; add it", "onnxruntime")
    newest = max(cpu, key=lambda rt: version_tuple(rt.version))
    return dataclasses.replace(export, onnxruntime=newest.version)


def _corpus(co: _Reader, root: Path) -> tuple[str, ...]:
    co.only("modules")
    corpus = co.strings("modules")
    for name in corpus:
        problem = corpus_problem(root, name)
        if problem:
            co.fail(f"{name!r}: {problem}", "modules")
    return corpus


def _batch_sizes(pr: _Reader) -> tuple[int, ...]:
    pr.only("batch_sizes")
    batch_sizes = pr.ints("batch_sizes", [], nonempty=False)
    if any(b < 1 for b in batch_sizes):
        pr.fail("batch sizes must be >= 1", "batch_sizes")
    if any(b > BATCH_MAX for b in batch_sizes):
        too_big = max(batch_sizes)
        pr.fail(f"batch sizes must be <= {BATCH_MAX} (each tiles the example inputs), got {too_big}; lower it", "batch_sizes")
    return batch_sizes


def _run_settings(ru: _Reader) -> RunSettings:
    ru.only("timeout", "workers", "gpu_workers")
    return RunSettings(
        timeout=float(ru.number("timeout", 120)),
        workers=ru.number("workers", 0, integer=True),
        gpu_workers=ru.number("gpu_workers", 4, integer=True),
    )


def _latency_settings(la: _Reader) -> LatencySettings:
    la.only("iobinding", "threads", "warmup", "min_runs", "max_runs", "budget_seconds", "stability")
    latency = LatencySettings(
        iobinding=la.get("iobinding", bool, True),
        threads=la.number("threads", 1, integer=True),
        warmup=la.number("warmup", 5, integer=True),
        min_runs=la.number("min_runs", 20, integer=True),
        max_runs=la.number("max_runs", 200, integer=True),
        budget_seconds=float(la.number("budget_seconds", 0.25)),
        stability=_fraction(la, "stability", 0.02),
    )
    if latency.max_runs < latency.min_runs:
        la.fail(f"max_runs ({latency.max_runs}) is below min_runs ({latency.min_runs}); raise max_runs", "max_runs")
    return latency


def _runtimes(file: str, top: _Reader) -> tuple[Runtime, ...]:
    """The ``[[runtimes]]`` entries: each pinned to a known release, once, with the CUDA majors a GPU kind needs."""
    raw_list = top.get("runtimes", list, required=True)
    if not raw_list:
        top.fail("is empty; declare at least one [[runtimes]] entry", "runtimes")
    declared: list[Runtime] = []
    for i, raw in enumerate(raw_list):
        rr = _Reader(file, f"runtimes[{i}]", raw)
        rr.only("pin", "constraints", "python", "cuda", "cudnn", "tensorrt", "gpu_requirements")
        rt = parse_runtime(file, f"runtimes[{i}].pin", rr.get("pin", str))
        rt = dataclasses.replace(rt, python=_python(rr, rt))
        where = f"{file}: runtimes[{i}]"
        constraints = rr.strings("constraints", [], nonempty=False)
        rt = dataclasses.replace(rt, constraints=parse_requirements(f"{where}.constraints", constraints, pinned=(rt.package,)))
        if any(rt.pin == other.pin for other in declared):
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
            rr.fail(f"{rt.pin} is not a GPU runtime: it needs no CUDA, cuDNN or TensorRT; remove the key", "cuda")
        gpu_reqs = parse_requirements(f"{where}.gpu_requirements", rr.strings("gpu_requirements", [], nonempty=False), pinned=())
        if gpu_reqs and not rt.gpu:
            rr.fail(f"{rt.pin} is not a GPU runtime: gpu_requirements do not apply; remove the key", "gpu_requirements")
        declared.append(dataclasses.replace(rt, **majors, gpu_requirements=gpu_reqs))
    return tuple(declared)


def _python(rr: _Reader, rt: Runtime) -> str:
    """A runtime entry's ``python``: ``"3.10"``, one its release has wheels for and the run stage runs on; required
    where the release has no wheel for the project's Python (:attr:`harness.config.runtimes.Kind.older`)."""
    span = rt.kind.older.get(rt.version)
    python = rr.get("python", str, "")
    if not python:
        if span:
            rr.fail(
                f'{rt.pin} has no wheel for Python 3.11 or newer (its wheels stop at {span[1]}): add python = "{span[1]}"',
                "pin",
            )
        return ""
    if not re.fullmatch(r"3\.\d+", python):
        rr.fail(f'must be a Python minor version such as "3.10", got {python!r}', "python")
    if version_tuple(python) < version_tuple(runtimes.RUN_PYTHON):
        newest = span[1] if span else runtimes.RUN_PYTHON
        rr.fail(f"the run stage runs on Python {runtimes.RUN_PYTHON} or newer, not {python}; name {newest} or newer", "python")
    if span and not version_tuple(span[0]) <= version_tuple(python) <= version_tuple(span[1]):
        rr.fail(f"{rt.pin} has wheels for Python {span[0]} to {span[1]} only, not {python}", "python")
    return python


def _profile(file: str, top: _Reader, name: str, raw: Any, by_pin: Mapping[str, Runtime], root: Path) -> Profile:
    """One ``[profiles.<name>]``: declared runtimes, providers and precisions some runtime of it runs, opsets each
    exporter writes."""
    if not _SAFE_NAME.fullmatch(name) or ".." in name:  # a profile's name becomes a folder: build/results/<name>/
        top.fail(f"profile name {name!r} must be letters, digits, '-', '_' or '.' (it names a folder); rename it", "profiles")
    pp = _Reader(file, f"profiles.{name}", raw)
    pp.only(
        "runtimes", "providers", "precisions", "exporters", "opsets", "results", "corpus", "torch", "platforms", "cases",
        "transforms",
    )
    prof_runtimes = []
    for j, ref in enumerate(pp.strings("runtimes")):
        rt = parse_runtime(file, f"profiles.{name}.runtimes[{j}]", ref)
        if rt.pin not in by_pin:
            pp.fail(f"{rt.pin} is not declared; add a [[runtimes]] entry with pin = {rt.pin!r}", "runtimes")
        prof_runtimes.append(by_pin[rt.pin])
    providers = pp.strings("providers", ["cpu"])
    precisions = pp.strings("precisions", ["fp32"])
    _check_columns(pp, prof_runtimes, providers, precisions)
    exporters = pp.strings("exporters", list(EXPORTERS))
    for e in exporters:
        if e not in EXPORTERS:
            pp.fail(f"unknown exporter {e!r}{_did_you_mean(e, EXPORTERS)}; use {', '.join(EXPORTERS)}", "exporters")
    per_exporter = _profile_opsets(file, f"profiles.{name}", pp, exporters)
    opsets = tuple(sorted({o for _, os_ in per_exporter for o in os_}))
    same = len({os_ for _, os_ in per_exporter}) == 1
    results = pp.get("results", str, "")
    if "results" in raw and (Path(results).is_absolute() or ".." in Path(results).parts or not Path(results).parts):
        pp.fail(f"results = {results!r} must be a folder inside the project (results/{name}); fix it", "results")
    corpus = pp.strings("corpus", []) if "corpus" in raw else ()
    for source in corpus:
        if problem := corpus_problem(root, source):
            pp.fail(f"{source!r} {problem}", "corpus")
    releases = _torch_releases(pp, raw)
    on = _platforms(pp, raw, prof_runtimes, providers)
    chosen = pp.strings("cases", []) if "cases" in raw else ()
    if "cases" in raw and (not chosen or len(set(chosen)) != len(chosen)):
        pp.fail("list each case once, at least one (or remove the key: every case)", "cases")
    chosen_transforms = pp.strings("transforms", []) if "transforms" in raw else ()
    for t in chosen_transforms:
        if t not in transforms.CATALOG:
            known = transforms.names()
            pp.fail(f"unknown transform {t!r}{_did_you_mean(t, known)}; use {', '.join(known)}", "transforms")
    if "transforms" in raw and (not chosen_transforms or len(set(chosen_transforms)) != len(chosen_transforms)):
        pp.fail("list each transform once, at least one (or remove the key: the exported files themselves)", "transforms")
    if chosen_transforms and releases:
        pp.fail("transforms and torch releases in one profile are not supported; give each a profile of its own", "transforms")
    return Profile(
        name,
        tuple(prof_runtimes),
        providers,
        exporters,
        opsets,
        precisions,
        () if same else per_exporter,
        results,
        corpus,
        releases,
        on,
        tuple(chosen),
        tuple(chosen_transforms),
    )


def _platforms(
    pp: _Reader, raw: Mapping[str, Any], prof_runtimes: Sequence[Runtime], providers: Sequence[str]
) -> tuple[str, ...]:
    """``platforms``: known names, once each, on the CPU provider of plain onnxruntime only (the package PyPI has
    aarch64 wheels of; a GPU provider runs on its GPU, whatever the CPU)."""
    if "platforms" not in raw:
        return ()
    named = pp.strings("platforms")
    known = platforms.names()
    for p in named:
        if p not in known:
            pp.fail(f"unknown platform {p!r}{_did_you_mean(p, known)}; use {', '.join(known)}", "platforms")
    if len(set(named)) != len(named) or not named:
        pp.fail("list each platform once, at least one", "platforms")
    if list(providers) != ["cpu"]:
        has = ", ".join(providers)
        pp.fail(f'platforms apply to the cpu provider only; set providers = ["cpu"] (it has {has})', "platforms")
    for rt in prof_runtimes:
        if rt.package != "onnxruntime":
            why = "platforms are measured on plain onnxruntime only (its wheels cover every platform); drop it"
            pp.fail(f"{rt.pin}: {why}", "platforms")
    return tuple(named)


RELEASE = re.compile(r"(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)")
"""A torch release as the torch table names one: ``2.7.1`` (no leading zero, no build tag, no path): a profile's
``torch`` list and ``--torch`` are held to it, so every release measured is one the torch table can name."""


def is_release(text: str) -> bool:
    """Whether ``text`` is a torch release (:data:`RELEASE`): ``2.7.1``, not ``02.07.01``, ``2.7.1+cpu`` or ``..``."""
    return RELEASE.fullmatch(text) is not None


def _torch_releases(pp: _Reader, raw: Any) -> tuple[str, ...]:
    """``torch = ["2.5.1", …]``: full X.Y.Z releases (no local build tag: the export environment picks the build), each
    once (the reader refuses a duplicate), oldest first."""
    releases = pp.strings("torch", []) if "torch" in raw else ()
    for release in releases:
        if not is_release(release):
            pp.fail(
                f'{release!r} is not a torch release; write X.Y.Z as torch names it (e.g. "2.7.1": no leading zero, no '
                "+cpu or +cu tag)",
                "torch",
            )
    if list(releases) != sorted(releases, key=version_tuple):
        pp.fail(f"list the releases oldest first: {', '.join(sorted(releases, key=version_tuple))}", "torch")
    return tuple(releases)


def _check_columns(pp: _Reader, prof_runtimes: Sequence[Runtime], providers: Sequence[str], precisions: Sequence[str]) -> None:
    """Every provider and precision is known, and every runtime runs one of the providers, every provider
    one of the runtimes, every precision one of the providers."""
    known = runtimes.provider_names()
    for p in providers:
        if p not in known:
            pp.fail(f"unknown provider {p!r}{_did_you_mean(p, known)}; use {', '.join(known)}", "providers")
    for q in precisions:
        if q not in PRECISIONS:
            pp.fail(f"unknown precision {q!r}{_did_you_mean(q, PRECISIONS)}; use {', '.join(PRECISIONS)}", "precisions")
    for rt in prof_runtimes:
        if not any(p in rt.kind.providers for p in providers):
            pp.fail(
                f"{rt.pin} offers none of the providers {', '.join(providers)} (it offers "
                f"{', '.join(rt.kind.providers)}); add one to providers or drop the runtime",
                "providers",
            )
    with_axis = [p.name for p in runtimes.PROVIDERS if len(p.precisions) > 1]
    if tuple(precisions) != ("fp32",) and not any(p in with_axis for p in providers):
        listed = ", ".join(with_axis)
        pp.fail(f"precisions apply to {listed} only, which providers does not list; add it or remove the key", "precisions")
    for p in providers:
        if not any(p in rt.kind.providers for rt in prof_runtimes):
            pp.fail(f"no runtime of the profile offers provider {p!r}; add a runtime that does or remove it", "providers")


def _provider_options(file: str, raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``[providers.<name>] options = {...}`` (execution provider options) and, for a provider a native runtime
    runs, ``native = {...}`` (``[providers.tensorrt] native``: ``workspace_mib``): scalar values only
    (onnxruntime takes provider options as strings, numbers and booleans)."""
    out: dict[str, dict[str, Any]] = {}
    for name, table in raw.items():
        where = f"providers.{name}"
        takes = [p for p in runtimes.provider_names() if p != "cpu"]
        if name not in takes:
            raise HarnessError(f"{file}: {where}: no options for provider {name!r}; options are for {' and '.join(takes)}")
        native = any(k.options_key == "native" and name in k.providers for k in runtimes.KINDS)
        rd = _Reader(file, where, table)
        rd.only("options", "native") if native else rd.only("options")
        entry: dict[str, Any] = {}
        for key in ("options", "native"):
            opts = rd.get(key, dict, {})
            for k, v in opts.items():
                if isinstance(v, (dict, list)):
                    rd.fail(f"{k}: must be a string, number or boolean, got {v!r}", key)
                if isinstance(v, float) and not math.isfinite(v):
                    rd.fail(f"{k}: must be a finite number, got {v!r}", key)
            entry[key] = dict(opts)
        unknown = sorted(set(entry["native"]) - {"workspace_mib"})
        if unknown:
            rd.fail(f"unknown key(s) {', '.join(unknown)}; allowed: workspace_mib", "native")
        workspace = entry["native"].get("workspace_mib", 1)
        if isinstance(workspace, bool) or not isinstance(workspace, int) or not 1 <= workspace <= WORKSPACE_MAX_MIB:
            rd.fail(f"workspace_mib must be an integer of MiB within 1..{WORKSPACE_MAX_MIB} (1 TiB), got {workspace!r}", "native")
        for key in sorted(runtimes.precision_keys() & set(entry["options"])):
            rd.fail(f"{key} is set per column by the profile's precisions ({name}-fp16); remove it", "options")
        out[name] = entry
    return out


def _columns(providers: Sequence[str], precisions: Sequence[str]) -> tuple[str, ...]:
    """Each provider's columns in order, a provider with a precision axis once per precision of the profile."""
    out = []
    for name in providers:
        axis = runtimes.provider(name).precisions
        out += [runtimes.column(name, q) for q in (precisions if len(axis) > 1 else ("fp32",)) if q in axis]
    return tuple(out)
