"""The corpus: gotcha cases, each a tiny ``nn.Module`` with a card.

A case module (``models/*.py`` or a user's own file) declares cases with
:func:`register`::

    from harness.cases.corpus import Card, Case, randn, register

    register(Case(
        name="my_model",
        model=lambda: MyModel(),
        inputs=lambda: {"x": randn(1, 3, 32, 32)},
        dynamic={"x": {0: "batch"}},
        probes=lambda: {"batch8": {"x": randn(8, 3, 32, 32, seed=1)}},
    ))

``inputs`` keys are the names of ``forward``'s parameters, in order; values
are tensors or Python scalars (a scalar is what tracing freezes). Each probe
is one cell of the table; the example inputs are always probed too, as
``example``. Only the export environment imports torch: nothing here does at
import time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import math
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import PROBE_FILE_ERROR, HarnessError

if TYPE_CHECKING:
    import torch

    from harness.config.matrix import Matrix

EXPORTERS = ("torchscript", "dynamo")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")

Inputs = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Card:
    """The gotcha a case demonstrates, as claimed; the table says what happened."""

    symptom: str
    cause: str
    fix: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Claim:
    """Where a case's gotcha was reproduced: a cell the tests assert.

    Among the cells of this case that match ``exporter``, ``opset``,
    ``runtime`` and ``probe`` (None matches any), at least one has ``status``
    (and, with ``match``, an error line containing it). A claim says where the
    gotcha shows, not that it shows everywhere: newer runtimes may fix it.

    Attributes:
        status: A status of the table: ``mismatch``, ``run-fail``, ``load-fail``, ...
        exporter: ``torchscript`` or ``dynamo``; None for either.
        probe: The probe that reaches the gotcha; None for any.
        opset: The requested opset; None means 18 (the opset the tests export at).
        runtime: The runtime pin (``onnxruntime==1.17.3``); None means the newest
            (the one the tests run on). Claims on other runtimes are checked
            against the published table.
        match: A substring of the cell's error line.
    """

    status: str
    exporter: str | None = None
    probe: str | None = None
    opset: int | None = None
    runtime: str | None = None
    match: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class Case:
    """One model of the corpus and how to export and probe it.

    Attributes:
        name: Unique, ``[a-z0-9_]``; the table's row label.
        model: Builds the module. Seed your weights (:func:`seeded`); the
            harness calls ``eval()`` unless ``train_mode`` is set.
        inputs: Example inputs used for the export, keyed by ``forward``'s
            parameter names.
        probes: Further named inputs to run (other batch sizes, negative
            values, ...). Each must reach the behaviour the gotcha is about.
        dynamic: Dimensions to export as dynamic, ``{input: {dim: name}}``.
            Empty means every shape is frozen at the example's.
        card: The gotcha; None for a fixed twin that only shows the fix.
        fixes: For a fixed twin, the name of the case it fixes.
        atol: Absolute tolerance of the comparison with torch; None takes
            ``[tolerance]`` from matrix.toml.
        rtol: Relative tolerance; None likewise.
        scaled: A floating output also matches when its largest error is
            within this fraction of its largest magnitude
            (``max|out - ref| <= scaled * max|ref|``, see :mod:`harness.numeric.compare`);
            None takes ``[tolerance] scaled``, 0 compares element-wise only.
        output_tolerance: Per-output overrides of ``atol``, ``rtol`` and
            ``scaled``, by output index: ``{1: {"atol": 1e-2}}``.
        export_timeout: Seconds this case's artifacts may take to build the
            model, run torch on every probe and export; None takes
            ``[export] timeout``.
        script: Export ``torch.jit.script(model)`` instead of the module.
        exporters: Exporters this case applies to; cells of the others are
            ``skipped`` with ``skip_reason``.
        skip_reason: Why the other exporters do not apply.
        train_mode: Export in training mode (a gotcha of its own).
        claims: Where the gotcha was reproduced (:class:`Claim`); the tests
            assert each one.
        title: How the table names the model (``Llama (decode step)``); ``recommend --cases`` takes it as well
            as the name. Empty: the name.
        about: A real model's card: what it is and what its export needs (dynamic axes, cache, attention);
            shown on its page. A case with ``about`` and no ``card`` is a model with no gotcha of its own.
        probe_files: Glob patterns, relative to the case's file, of real
            samples to probe with: each ``.npz`` is one probe (its keys are the
            input names), each ``.npy`` one probe of the first input; the probe
            is named after the file. Random inputs miss data-dependent paths.
        source_file: Filled in by :func:`register`: where the case came from.
        source_dir: Filled in by :func:`register`: the directory of that file.
    """

    name: str
    model: Callable[[], torch.nn.Module]
    inputs: Callable[[], Inputs]
    probes: Callable[[], Mapping[str, Inputs]] | None = None
    dynamic: Mapping[str, Mapping[int, str]] = dataclasses.field(default_factory=dict)
    card: Card | None = None
    fixes: str | None = None
    atol: float | None = None
    rtol: float | None = None
    scaled: float | None = None
    output_tolerance: Mapping[int, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    export_timeout: float | None = None
    script: bool = False
    exporters: tuple[str, ...] = EXPORTERS
    skip_reason: str = ""
    train_mode: bool = False
    claims: tuple[Claim, ...] = ()
    probe_files: tuple[str, ...] = ()
    title: str = ""
    about: str = ""
    source_file: str = ""
    source_dir: str = ""

    def all_probes(self, errors: dict[str, str] | None = None) -> dict[str, Inputs]:
        """The example inputs as probe ``example``, then the declared probes. A probe file that cannot be
        used costs that probe only when ``errors`` is given (its reason is put there under the probe's
        name); otherwise it raises."""
        example = self.inputs()
        probes: dict[str, Inputs] = {"example": example}
        declared = dict(self.probes()) if self.probes is not None else {}
        declared.update(self._file_probes(list(example), errors))
        for name, inputs in declared.items():
            if name == "example":
                raise HarnessError(f"{self.source_file}: case {self.name!r}: probe name 'example' is reserved; rename it")
            probes[name] = inputs
        return probes

    def _file_probes(self, input_names: list[str], errors: dict[str, str] | None) -> dict[str, Inputs]:
        out: dict[str, Inputs] = {}
        for pattern in self.probe_files:
            for path in sorted(Path(self.source_dir).glob(pattern)):
                try:
                    out[path.stem] = self._file_probe(path, input_names)
                except Exception as exc:  # a damaged file, a pickle, a missing array: this probe's problem alone
                    if errors is None:
                        raise
                    said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    errors[path.stem] = f"{PROBE_FILE_ERROR}: {path.name}: {said}"
        return out

    def _file_probe(self, path: Path, input_names: list[str]) -> Inputs:
        import numpy as np
        import torch

        if path.suffix == ".npz":
            with np.load(path) as data:
                missing = [n for n in input_names if n not in data.files]
                if missing:
                    raise HarnessError(f"{path}: case {self.name!r}: no array for input(s) {missing}; the file has {data.files}")
                return {n: torch.from_numpy(data[n].copy()) for n in input_names}
        if path.suffix == ".npy":
            return {input_names[0]: torch.from_numpy(np.load(path))}
        raise HarnessError(f"{path}: case {self.name!r}: probe files must be .npz or .npy")




class Registry:
    """Cases by name, in declaration order. Refuses duplicate names."""

    def __init__(self) -> None:
        self._cases: dict[str, Case] = {}
        self.problems: list[str] = []
        """One line per corpus problem (a module that fails to import, a bad case): those
        cases are left out and the rest run; the command exits non-zero at the end."""
        self.import_failures: list[str] = []
        """The problems that are a whole corpus file failing to import (also in :attr:`problems`): the
        export stops on them, since none of the file's cases could run and a table without them would
        not say so."""

    def add(self, case: Case) -> None:
        where = case.source_file or "<unknown file>"
        if not _NAME.match(case.name):
            raise HarnessError(f"{where}: case name {case.name!r} must match [a-z0-9_]+; rename it")
        if case.name in self._cases:
            other = self._cases[case.name].source_file
            raise HarnessError(f"{where}: case {case.name!r} is already defined in {other}; give it another name")
        unknown = set(case.exporters) - set(EXPORTERS)
        if unknown:
            raise HarnessError(f"{where}: case {case.name!r}: unknown exporter(s) {sorted(unknown)}; use {list(EXPORTERS)}")
        if not case.exporters:
            raise HarnessError(f"{where}: case {case.name!r}: exporters is empty; name at least one of {list(EXPORTERS)}")
        if set(case.exporters) != set(EXPORTERS) and not case.skip_reason.strip():
            raise HarnessError(
                f"{where}: case {case.name!r} applies to {', '.join(case.exporters)} only: set skip_reason to say why "
                "(it is shown on every skipped cell)"
            )
        for claim in case.claims:
            _check_claim(where, case, claim)
        _check_tolerance(where, case)
        self._cases[case.name] = case

    def __iter__(self) -> Iterator[Case]:
        return iter(self._cases.values())

    def __len__(self) -> int:
        return len(self._cases)

    def __contains__(self, name: object) -> bool:
        return name in self._cases

    def __getitem__(self, name: str) -> Case:
        return self._cases[name]

    def names(self) -> list[str]:
        return list(self._cases)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


TOLERANCE_MAX = 0.1
"""The most a case's own atol, rtol or scaled may be, as matrix.toml's ``[tolerance]`` (harness.config.matrix.BOUNDS):
outputs further apart are not the same answer, and a wider bound would publish a wrong graph as a pass."""


def _check_tolerance(where: str, case: Case) -> None:
    """Tolerances are finite numbers within 0..:data:`TOLERANCE_MAX` (a NaN bound would pass every comparison,
    1e300 every mismatch); per-output keys are output indices and name only atol, rtol and scaled."""
    for name in ("atol", "rtol", "scaled", "export_timeout"):
        value = getattr(case, name)
        if value is not None and not _number(value):
            raise HarnessError(f"{where}: case {case.name!r}: {name} must be a finite number >= 0, got {value!r}")
        if name != "export_timeout" and value is not None and value > TOLERANCE_MAX:
            raise HarnessError(_too_loose(where, case, name, value))
    if case.export_timeout is not None and case.export_timeout <= 0:
        raise HarnessError(f"{where}: case {case.name!r}: export_timeout must be > 0 seconds, got {case.export_timeout!r}")
    for index, own in dict(case.output_tolerance).items():
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise HarnessError(
                f"{where}: case {case.name!r}: output_tolerance keys are output indices (0, 1, ...), got {index!r}"
            )
        if not isinstance(own, Mapping):
            raise HarnessError(f"{where}: case {case.name!r}: output_tolerance[{index}] must be a dict such as {{'atol': 1e-2}}")
        for key, value in own.items():
            if key not in ("atol", "rtol", "scaled"):
                raise HarnessError(
                    f"{where}: case {case.name!r}: output_tolerance[{index}]: unknown key {key!r}; use atol, rtol, scaled"
                )
            if not _number(value):
                raise HarnessError(
                    f"{where}: case {case.name!r}: output_tolerance[{index}][{key!r}] must be a finite number >= 0, got {value!r}"
                )
            if value > TOLERANCE_MAX:
                raise HarnessError(_too_loose(where, case, f"output_tolerance[{index}][{key!r}]", value))


def _too_loose(where: str, case: Case, name: str, value: float) -> str:
    return (
        f"{where}: case {case.name!r}: {name} must be <= {TOLERANCE_MAX} (a wider bound passes real mismatches), got "
        f"{value!r}; compare what the case means to compare (an output of its own, a scaled bound) instead"
    )


def _check_claim(where: str, case: Case, claim: Claim) -> None:
    from harness.core.records import Status

    statuses = [s.value for s in Status]
    if claim.status not in statuses:
        raise HarnessError(f"{where}: case {case.name!r}: claim status {claim.status!r} is unknown; use one of {statuses}")
    if claim.exporter is not None and claim.exporter not in EXPORTERS:
        raise HarnessError(f"{where}: case {case.name!r}: claim exporter {claim.exporter!r} is unknown; use {list(EXPORTERS)}")
    if claim.runtime is not None and "==" not in claim.runtime:
        raise HarnessError(
            f"{where}: case {case.name!r}: claim runtime {claim.runtime!r} is not a pin; write 'onnxruntime==X.Y.Z'"
        )


# The registry that ``register`` fills while a corpus module is imported.
_loading: Registry | None = None
_loading_file: str = ""
_loading_dir: str = ""


def register(case: Case) -> Case:
    """Declare a case. Call at import time of a corpus module."""
    if _loading is None:
        raise HarnessError(
            "register() was called outside a corpus load; list the file under [corpus] in matrix.toml or pass --corpus"
        )
    # A case may name its own file (a package's family module); by default it is the corpus source being loaded.
    case = dataclasses.replace(case, source_file=case.source_file or _loading_file, source_dir=case.source_dir or _loading_dir)
    try:
        for pattern in case.probe_files:
            if not sorted(Path(case.source_dir).glob(pattern)):
                raise HarnessError(
                    f"{case.source_file}: case {case.name!r}: probe_files {pattern!r} matches no file under {case.source_dir}"
                )
        _loading.add(case)
    except HarnessError as exc:
        _loading.problems.append(str(exc))
    return case


def load(sources: Iterable[str], root: Path | None = None) -> Registry:
    """Import corpus modules (dotted names or ``.py`` paths) into one registry.

    A module that is missing or fails to import, and a case that cannot be
    registered (duplicate name, bad claim, missing probe file), become one line
    each in ``registry.problems``, naming the file and the case; everything
    else is loaded.
    """
    global _loading, _loading_file, _loading_dir
    registry = Registry()
    root = root or Path.cwd()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    for source in sources:
        _loading, _loading_file, _loading_dir = registry, source, str(_source_dir(source, root))
        before = (len(registry), len(registry.problems))
        try:
            _import(source, root)
            if (len(registry), len(registry.problems)) == before:  # `corpus = "os"`: imports, adds nothing
                raise HarnessError(
                    f"corpus {source}: registers no case (a corpus module calls harness.cases.corpus.register); "
                    "remove it from [corpus] modules or --corpus, or register its cases"
                )
        except HarnessError as exc:
            registry.problems.append(str(exc))
            registry.import_failures.append(str(exc))
        except Exception as exc:  # the user's module: any error is theirs
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            line = f"corpus {source}: import failed: {type(exc).__name__}: {msg}"
            if isinstance(exc, ModuleNotFoundError) and exc.name and not _is_local(exc.name, root):
                line += "; " + missing_package_hint(exc.name.split(".")[0])
            registry.problems.append(line)
            registry.import_failures.append(line)
        finally:
            _loading, _loading_file, _loading_dir = None, "", ""
    return registry


def missing_package_hint(module: str) -> str:
    """How to put a missing package into the export environment (never a run environment)."""
    return (
        f"add the package that provides {module!r} to the export environment: `nox -s matrix -- --with {module}` "
        f'for one run, REQUIREMENTS = ["{module}==..."] in the corpus file, or [export] requirements in matrix.toml'
    )


def _is_local(module: str, root: Path) -> bool:
    """A module of the user's own tree (a typo in a local import), not a package to install."""
    top = module.split(".")[0]
    return (root / top).is_dir() or (root / f"{top}.py").is_file()


REQUIREMENTS = "REQUIREMENTS"
"""The module-level name under which a corpus file declares what its models need installed."""


def declared_requirements(source: str, root: Path) -> tuple[str, ...]:
    """A corpus file's ``REQUIREMENTS = ["transformers==5.24.0", ...]``, read without importing it (the
    noxfile installs them into the export environment before anything there can import the file).

    Raises:
        HarnessError: ``REQUIREMENTS`` is not a literal list of requirement strings.
    """
    import ast

    from harness.config.matrix import parse_requirements

    path = source_file(source, root)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, ValueError):
        return ()  # importing it says what is wrong, in one line
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, expr = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, expr = [node.target], node.value
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == REQUIREMENTS for t in targets):
            continue
        try:
            value = ast.literal_eval(expr)
        except ValueError:
            value = None
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise HarnessError(f'{source}: {REQUIREMENTS} must be a literal list of strings such as ["transformers==5.24.0"]')
        return parse_requirements(f"{source}: {REQUIREMENTS}", list(value))
    return ()


def source_file(source: str, root: Path) -> Path:
    """The file of a corpus source (a dotted module name or a ``.py`` path), found without importing it
    (a dotted name's parent packages are imported, as loading it would)."""
    if source.endswith(".py") or "/" in source:
        path = Path(source)
        return path if path.is_absolute() else root / path
    try:
        spec = importlib.util.find_spec(source)
    except Exception:  # a parent package that fails to import: loading the source says so, in one line
        spec = None
    return Path(spec.origin) if spec is not None and spec.origin else root / source


def selected(registry: Registry, chosen: Sequence[str], root: Path) -> tuple[list[str], list[str]]:
    """The cases ``chosen`` names, in declaration order, and what it names that is no case: each entry a case's name, or
    a corpus source (``models.attention``, ``models.architectures.bert``: a dotted module or a ``.py`` path) standing for
    every case declared in its file."""

    def where(source: str) -> Path | None:
        with contextlib.suppress(Exception):
            return source_file(source, root).resolve()
        return None

    files = {e: where(e) for e in chosen if not _NAME.match(e)}
    of = {c.name: where(c.source_file) if c.source_file else None for c in registry}
    names = [c.name for c in registry if c.name in chosen or (of[c.name] is not None and of[c.name] in files.values())]
    matched = set(names) | {e for e, f in files.items() if f is not None and f in of.values()}
    return names, [e for e in chosen if e not in matched]


def _source_dir(source: str, root: Path) -> Path:
    """Where a corpus module lives: probe_files are relative to it."""
    return source_file(source, root).parent


def _import(source: str, root: Path) -> None:
    if source.endswith(".py") or "/" in source:
        path = Path(source)
        if not path.is_absolute():
            path = root / path
        if not path.is_file():
            raise HarnessError(f"corpus {source}: no such file; check the path under [corpus] in matrix.toml or --corpus")
        name = "harness_user_corpus_" + re.sub(r"\W", "_", str(path.resolve()))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        if source in sys.modules:  # a re-load must re-register
            del sys.modules[source]
        try:
            importlib.import_module(source)
        except ModuleNotFoundError as exc:
            if exc.name and source.startswith(exc.name):
                raise HarnessError(
                    f"corpus {source}: no such module; use a dotted module name (models.articles) or a .py path"
                ) from exc
            raise


# Helpers for case modules -------------------------------------------------


def lazy(module: str, name: str, *args: Any, seed: int = 0, **kwargs: Any) -> Callable[[], torch.nn.Module]:
    """A model factory that seeds torch, imports ``module`` and builds ``name(*args, **kwargs)`` when called.

    Keeps ``torch`` out of a corpus module's import: the modules live in a
    sibling file that only the export environment imports.
    """

    def build() -> torch.nn.Module:
        seeded(seed)
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    build.__qualname__ = f"lazy({module}.{name})"
    build.__harness_lazy__ = (module, name)  # type: ignore[attr-defined]  # what harness.store.cache hashes
    return build


def seeded(seed: int = 0) -> None:
    """Seed torch's global RNG before building a model, so weights are fixed."""
    import torch

    torch.manual_seed(seed)


def randn(*shape: int, seed: int = 0, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    """A seeded float32 normal tensor: the same values on every machine."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen) * scale + shift


def randint(low: int, high: int, *shape: int, seed: int = 0, dtype: Any = None) -> torch.Tensor:
    """A seeded integer tensor in ``[low, high)``; ``dtype`` is a torch dtype or its name (``"int16"``)."""
    import torch

    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=gen, dtype=dtype or torch.int64)


def requirements_of(matrix: Matrix, extra: Sequence[str], corpus: Sequence[str], root: Path) -> list[str]:
    """What the export environment installs beyond the pins: ``[export] requirements``, then ``--with``,
    then what each corpus file declares (``REQUIREMENTS = [...]``), each once."""
    from harness.config.matrix import parse_requirements

    declared = [r for source in corpus for r in declared_requirements(source, root)]
    given = parse_requirements("--with", list(extra))
    return list(dict.fromkeys([*matrix.export.requirements, *given, *declared]))
