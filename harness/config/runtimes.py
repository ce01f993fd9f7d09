"""The runtimes and providers the matrix knows, as data: one :class:`Kind` per runtime package and one
:class:`Provider` per execution provider. Every module asks this registry; none keeps a table of its own.

A new column is an entry here (and, for a runtime with its own API, a backend under
``harness/run/backends/``): matrix.toml's validation, the run stage, the keys, the report, the page,
``harness recommend``, the reproducers and the noxfile all read it.

Standard library only: the noxfile and ``harness recommend`` read it with nothing installed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

PRECISIONS = ("fp32", "fp16")
"""The precision axis. A column is a provider, plus its precision when that is not fp32: ``tensorrt-fp16``."""

DEVICES = ("cpu", "nvidia", "intel")
"""Where a provider computes: the host CPU, an NVIDIA GPU (it needs the driver), an Intel device through
OpenVINO (``device_type`` in its options: the CPU here)."""


@dataclasses.dataclass(frozen=True)
class Provider:
    """One execution provider: how a session asks for it and what it needs."""

    name: str
    """Its name in matrix.toml and in the table (``cuda``)."""
    ep: str
    """onnxruntime's execution provider (``CUDAExecutionProvider``)."""
    device: str
    """One of :data:`DEVICES`."""
    precisions: tuple[str, ...] = ("fp32",)
    """The precisions it builds for; each but fp32 is a column of its own (``tensorrt-fp16``)."""
    precision_options: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """Provider options per precision, set by the column, never by matrix.toml (``trt_fp16_enable``)."""
    library: str = ""
    """The shared library onnxruntime loads for it at session creation (``libonnxruntime_providers_<library>.so``);
    empty for one built into onnxruntime (the CPU provider)."""
    session_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Options every session gives it unless matrix.toml does (``device_id`` 0)."""
    threads_option: str = ""
    """The option that takes the run's thread count, where the provider keeps threads of its own
    (OpenVINO's ``num_of_threads``): onnxruntime's ``intra_op_num_threads`` does not reach them."""
    then: tuple[str, ...] = ()
    """Providers the session lists after it, for the nodes it refuses (TensorRT → CUDA, on the same device)."""
    binds_to: str = ""
    """The device IOBinding keeps a timed run's inputs and outputs on (``cuda``); empty: host arrays only."""
    shares_device: bool = False
    """Its cells share one device (a GPU): at most ``[run] gpu_workers`` run at once."""
    engine_cache: bool = False
    """It builds engines, which the run stage caches under ``build/cache/trt-engines/``."""
    cache_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The options that point it at its engine cache (``{path}``: the folder of one artifact's session kind)."""
    unavailable: str = "Failed to load library"
    """A regular expression: a session-creation error that matches it says the provider cannot run here
    (libraries, driver, device), not that it refused the model."""

    def columns(self) -> tuple[str, ...]:
        return tuple(column(self.name, q) for q in self.precisions)

    @property
    def nvidia(self) -> bool:
        """It computes on an NVIDIA GPU: it needs the driver, and each of its cells names the GPU it ran on."""
        return self.device == "nvidia"


@dataclasses.dataclass(frozen=True)
class Kind:
    """One runtime package: how it is installed, labelled, run and reproduced."""

    package: str
    """The distribution a ``[[runtimes]]`` pin names (``onnxruntime-gpu``)."""
    id_prefix: str
    """Of its nox session ids: ``ortgpu-1.31.1``."""
    label: str
    """Before the version in a column's label (``gpu-1.31.1 cuda``); empty for plain onnxruntime."""
    providers: tuple[str, ...]
    """The providers it can run, in column order."""
    backend: str
    """``module:Class`` of the :class:`harness.run.backends.contract.Backend` that runs its cells."""
    releases: tuple[str, ...]
    """Releases with a CPython 3.11 wheel (``pip index versions``); a pin outside them (and outside :attr:`older`) is
    refused with the nearest. A newer release is added here, and to matrix.toml's runtimes, when it appears."""
    version_key: str = "onnxruntime"
    """The environment fact (:meth:`Backend.environment`) that holds its version."""
    gpu: bool = False
    """It runs on an NVIDIA GPU: matrix.toml records the CUDA major it needs, the nightly runs it on a
    GPU runner, and its ``gpu_requirements`` are installed only where a driver is."""
    bare: bool = False
    """Without a driver nothing of it is installed (its wheels are GBs of CUDA libraries): its columns
    are then ``unavailable``, the package not importable."""
    frontier: bool = True
    """It loads ONNX files with onnxruntime's loader: the run stage measures what it loads (:mod:`harness.store.frontier`)."""
    options_key: str = "options"
    """Which table of ``[providers.<name>]`` its columns take (``native`` for native TensorRT)."""
    older: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    """Releases with no CPython 3.11 wheel → the oldest and newest Python their wheels are built for: a runtime entry
    of one names the interpreter its environment runs (``python = "3.10"``, :data:`RUN_PYTHON` or newer)."""
    reproducer: str = "onnxruntime"
    """How a failing cell is reproduced: ``onnxruntime`` (``repro.py``, onnxruntime and numpy only) or
    ``polygraphy`` (``polygraphy run --trt``: onnxruntime cannot stand in for a native engine)."""

    def columns(self) -> tuple[str, ...]:
        """Every column it can run: ``cpu``, ``cuda``, ``tensorrt``, ``tensorrt-fp16``."""
        return tuple(c for p in self.providers for c in provider(p).columns())

    def column_words(self, col: str) -> str:
        """What runs column ``col`` of this kind, in words: the execution provider, or the native runtime."""
        return provider(col).ep if self.options_key == "options" else f"{self.package} ({col})"

    def requirements(self, pin: str, constraints: Sequence[str]) -> tuple[str, ...]:
        """What its environment installs on any machine."""
        return ("numpy", *constraints) if self.bare else (pin, *constraints)

    def gpu_install(self, pin: str, constraints: Sequence[str], gpu_requirements: Sequence[str]) -> tuple[str, ...]:
        """What its environment installs on a machine with an NVIDIA driver."""
        own = (pin,) if self.bare else ()
        return (*own, *self.requirements(pin, constraints), *gpu_requirements)

    def python(self, pin: str) -> str:
        """The Python a release's wheels stop at, for one with none for the project's (``"3.10"``); else empty."""
        return self.older.get(pin.partition("==")[2], ("", ""))[1]

    def pip(self, pin: str) -> str:
        """What installs a reproducer's requirements: ``pip``, or ``python3.10 -m pip`` for a release built only for
        older Pythons (a ``pip install`` on the project's Python finds no wheel of it)."""
        return f"python{self.python(pin)} -m pip" if self.python(pin) else "pip"

    def reproduce(self, pin: str, col: str, constraints: Sequence[str] = (), where: str = "") -> tuple[tuple[str, ...], str]:
        """What a reproducer of a cell of column ``col`` installs (with :meth:`pip`), and the command that runs it
        (``where`` is the reproducer's folder, with its trailing slash)."""
        if self.reproducer == "polygraphy":
            fp16 = " --fp16" if split_column(col)[1] == "fp16" else ""
            return (pin, "polygraphy"), f"polygraphy run {where}model.onnx --trt{fp16}"
        has_numpy = any(c.replace(" ", "").startswith("numpy") for c in constraints)
        flag = "" if col == "cpu" else f" --provider {col}"
        python = f"python{self.python(pin)}"
        return (pin, *constraints, *(() if has_numpy else ("numpy",))), f"{python} {where}repro.py{flag}"


_ORT = tuple(
    "1.15.0 1.15.1 1.16.0 1.16.1 1.16.2 1.16.3 1.17.0 1.17.1 1.17.3 1.18.0 1.18.1 "
    "1.19.0 1.19.2 1.20.0 1.20.1 1.21.0 1.21.1 1.22.0 1.22.1 1.23.0 1.23.1 1.23.2 "
    "1.24.1 1.24.2 1.24.3 1.24.4 1.25.0 1.25.1 1.26.0 1.27.0 1.28.0 1.29.0 1.30.0 "
    "1.31.0 1.31.1 1.32.0".split()
)
_ORT_GPU = tuple(
    "1.15.0 1.15.1 1.16.0 1.16.3 1.17.0 1.17.1 1.18.0 1.18.1 1.19.0 1.19.2 1.20.0 "
    "1.20.2 1.21.0 1.21.1 1.22.0 1.23.0 1.23.2 1.24.1 1.24.4 1.25.0 1.25.1 1.26.0 "
    "1.27.0 1.28.0 1.29.0 1.30.0 1.31.0 1.31.1".split()
)
# Releases built only for older Pythons (PyPI's simple index, manylinux x86-64 wheels, 2026-12-06): the oldest and the
# newest CPython of their wheels. Each minor's newest patch is in matrix.toml, on that newest Python.
_ORT_OLDER = {
    "1.10.0": ("3.6", "3.9"),
    "1.11.0": ("3.7", "3.9"),
    "1.11.1": ("3.7", "3.9"),
    "1.12.0": ("3.7", "3.10"),
    "1.12.1": ("3.7", "3.10"),
    "1.13.1": ("3.7", "3.10"),
    "1.14.0": ("3.7", "3.10"),
    "1.14.1": ("3.7", "3.10"),
}
RUN_PYTHON = "3.9"
"""The oldest Python the run stage runs on (its code, :func:`harness.store.code.run_files`; tests/test_old_python.py
compiles and imports it there). The export and report stages run on the project's Python (3.11)."""

# onnxruntime built with OpenVINO (its libraries inside the wheel), pip index versions, 2026-12-02.
_ORT_OPENVINO = tuple("1.17.1 1.18.0 1.19.0 1.20.0 1.21.0 1.22.0 1.23.0 1.24.1".split())
# NVIDIA's meta-package (it pulls tensorrt-cu12 or -cu13: bindings and libraries).
_TRT = tuple(
    "8.6.1 10.0.1 10.1.0 10.2.0 10.3.0 10.4.0 10.5.0 10.6.0 10.7.0 10.8.0.43 10.9.0.34 10.10.0.31 "
    "10.11.0.33 10.12.0.36 10.13.0.35 10.13.2.6 10.13.3.9 10.14.1.48 10.15.1.29 10.16.0.72 10.16.1.11 "
    "11.0.0.114 11.1.0.106 11.2.1.2 11.3.0.99 11.4.0.106".split()
)

# The NVIDIA providers' libraries, driver or device failed at session creation: onnxruntime falls back to the CPU
# once and says why only then. A provider's refusal of the model itself (TensorRT cannot build an engine) is not here.
_NVIDIA_UNAVAILABLE = (
    r"Failed to load library|cudaSetDevice|CUDA driver version is insufficient|no CUDA-capable device|"
    r"CUDA failure (?:35|100)\b"
)

PROVIDERS: tuple[Provider, ...] = (
    Provider("cpu", "CPUExecutionProvider", "cpu", unavailable=""),
    Provider(
        "cuda",
        "CUDAExecutionProvider",
        "nvidia",
        library="cuda",
        session_options={"device_id": 0},
        binds_to="cuda",
        shares_device=True,
        unavailable=_NVIDIA_UNAVAILABLE,
    ),
    Provider(
        "tensorrt",
        "TensorrtExecutionProvider",
        "nvidia",
        precisions=PRECISIONS,
        precision_options={"fp32": {"trt_fp16_enable": False}, "fp16": {"trt_fp16_enable": True}},
        library="tensorrt",
        session_options={"device_id": 0},
        then=("cuda",),
        binds_to="cuda",
        shares_device=True,
        engine_cache=True,
        cache_options={"trt_engine_cache_enable": True, "trt_engine_cache_path": "{path}"},
        unavailable=_NVIDIA_UNAVAILABLE,
    ),
    # OpenVINO's own threads, precision and device: [providers.openvino] options names the device (device_type CPU
    # here); fp32 asks for FP32 inference explicitly (the CPU plugin would otherwise pick bf16 where the CPU has it).
    # It falls back to the CPU provider, without a word, for a device it lacks, a precision the device refuses (FP16 on
    # a CPU) or a graph it takes nothing of (a dynamic rank): the contract's fallback check makes those unavailable.
    Provider(
        "openvino",
        "OpenVINOExecutionProvider",
        "intel",
        precision_options={"fp32": {"precision": "FP32"}},
        library="openvino",
        threads_option="num_of_threads",
    ),
)

_ONNXRUNTIME = "harness.run.backends.onnxruntime:OnnxRuntime"

KINDS: tuple[Kind, ...] = (
    Kind("onnxruntime", "ort", "", ("cpu",), _ONNXRUNTIME, _ORT, older=_ORT_OLDER),
    Kind("onnxruntime-gpu", "ortgpu", "gpu-", ("cpu", "cuda", "tensorrt"), _ONNXRUNTIME, _ORT_GPU, gpu=True),
    Kind("onnxruntime-openvino", "ortov", "ov-", ("cpu", "openvino"), _ONNXRUNTIME, _ORT_OPENVINO),
    Kind(
        "tensorrt",
        "trt",
        "trt-",
        ("tensorrt",),
        "harness.run.backends.tensorrt:TensorRT",
        _TRT,
        version_key="tensorrt",
        gpu=True,
        bare=True,
        frontier=False,
        options_key="native",
        reproducer="polygraphy",
    ),
)


REFERENCE = "onnxruntime"
"""The package of the reference runtime (``[export] onnxruntime``, the newest declared by default): installed in the
export environment, it records every node's value, which a mismatch of any column is compared with; a bare version
(``--runtime 1.20.1``) and the corpus's claims mean it too."""


def column(name: str, precision: str = "fp32") -> str:
    """The shard and table column of provider ``name`` at ``precision``: ``cuda``, ``tensorrt``, ``tensorrt-fp16``."""
    return name if precision == "fp32" else f"{name}-{precision}"


def split_column(name: str) -> tuple[str, str]:
    """``tensorrt-fp16`` → ``("tensorrt", "fp16")``; ``cuda`` → ``("cuda", "fp32")``; ``cpu@x86-64-v3`` (a platform
    column, :mod:`harness.config.platforms`) → ``("cpu", "fp32")``."""
    base, _, precision = name.partition("@")[0].partition("-")
    return base, precision or "fp32"


_PROVIDERS = {p.name: p for p in PROVIDERS}
_KINDS = {k.package: k for k in KINDS}


def provider(name: str) -> Provider:
    """A provider by name, or by column (``tensorrt-fp16`` → ``tensorrt``).

    Raises:
        KeyError: no such provider (matrix.toml's validation says so in one line before this is asked).
    """
    return _PROVIDERS[split_column(name)[0]]


def kind(package: str) -> Kind:
    """A runtime kind by package name.

    Raises:
        KeyError: no such kind.
    """
    return _KINDS[package]


def provider_names() -> tuple[str, ...]:
    return tuple(_PROVIDERS)


def packages() -> tuple[str, ...]:
    return tuple(_KINDS)


def by_prefix(prefix: str) -> Kind | None:
    """The kind whose session ids start with ``prefix`` (``ortgpu``), or None."""
    return next((k for k in KINDS if k.id_prefix == prefix), None)


def package_of(pin: str) -> str:
    return pin.partition("==")[0]


def label(pin: str) -> str:
    """A runtime's label in a table: the version for onnxruntime, prefixed for the other packages
    (``gpu-1.31.1``, ``trt-10.13.3.9``; an unknown package by its name: ``foo-1.0``)."""
    package, _, version = pin.partition("==")
    found = _KINDS.get(package)
    return (found.label if found else f"{package}-") + version


def order(pin: str) -> int:
    """A runtime's package's place among the columns: the registry's order (an unknown package last)."""
    return list(_KINDS).index(package_of(pin)) if package_of(pin) in _KINDS else len(_KINDS)


def precision_keys() -> frozenset[str]:
    """Every provider option a precision sets: matrix.toml may not set them."""
    return frozenset(k for p in PROVIDERS for opts in p.precision_options.values() for k in opts)


def reproducer_columns(reproducer: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every column the kinds reproduced by ``reproducer`` can run → (execution provider, the options its precision
    sets): what an onnxruntime reproducer's ``--provider`` offers."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for k in KINDS:
        if k.reproducer != reproducer:
            continue
        for name in k.providers:
            p = provider(name)
            for q in p.precisions:
                out.setdefault(column(name, q), (p.ep, dict(p.precision_options.get(q, {}))))
    return out
