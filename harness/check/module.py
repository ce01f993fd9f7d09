"""``harness check pkg.module:factory --input x=1x3x224x224 --dynamic x:0``: one model, without a corpus file.

The module spec becomes a one-case corpus file and a one-profile copy of matrix.toml (the exporters and opsets
asked, the runtimes checked) in ``<out>/``, and the export stage runs on them as it does for ``--corpus``
(``harness export``: the same exporters, probes, batch sizes, budgets and records). Each exported file is then
checked (:func:`harness.check.stage.check`) with torch's own outputs as the expected ones. A failed export is a row
of its own, with the exporter's words.

Opsets, unless ``--opset`` names them: each exporter's default (what torch writes when given none, as the published
table recorded it) and the opset ``harness recommend`` gives for it on the oldest and on the newest runtime checked.
Needs torch (``nox -s check`` installs the export's packages for a module spec).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.check import onnxinfo
from harness.config.matrix import Matrix, Runtime
from harness.core.errors import HarnessError

EXPORTERS = ("torchscript", "dynamo")
_DTYPES = ("float32", "float16", "float64", "int64", "int32", "bool")


def is_spec(target: str) -> bool:
    """``pkg.module:factory`` or ``file.py:factory``, not a path to a file."""
    return ":" in target and not target.endswith(".onnx") and not Path(target).exists()


def parse_inputs(given: Sequence[str]) -> dict[str, tuple[tuple[int, ...], str]]:
    """``--input x=1x3x224x224`` (``:int64`` for another dtype) → ``{"x": ((1, 3, 224, 224), "float32")}``."""
    found: dict[str, tuple[tuple[int, ...], str]] = {}
    for item in given:
        name, sep, rest = item.partition("=")
        dims, _, dtype = rest.partition(":")
        dtype = dtype or "float32"
        parts = dims.split("x") if dims else []
        if (
            not sep
            or not name.isidentifier()
            or not parts
            or not all(p.isdigit() and int(p) > 0 for p in parts)
            or dtype not in _DTYPES
        ):
            raise HarnessError(
                f"--input {item!r}: write NAME=DxDx… (forward()'s parameter name, positive sizes), optionally :DTYPE "
                f"({', '.join(_DTYPES)}); e.g. --input x=1x3x224x224"
            )
        found[name] = (tuple(int(p) for p in parts), dtype)
    if not found:
        raise HarnessError("a module spec needs its example inputs: --input x=1x3x224x224 (one per forward() parameter)")
    return found


def parse_dynamic(given: Sequence[str], shapes: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, dict[int, str]]:
    """``--dynamic x:0`` → ``{"x": {0: "x_0"}}`` (dim 0 of input x varies in deployment)."""
    found: dict[str, dict[int, str]] = {}
    for item in given:
        name, sep, axis = item.partition(":")
        if not sep or name not in shapes or not axis.isdigit() or int(axis) >= len(shapes[name][0]):
            raise HarnessError(
                f"--dynamic {item!r}: write INPUT:AXIS, an input given with --input ({', '.join(shapes)}) and one of its "
                "axes; e.g. --dynamic x:0"
            )
        found.setdefault(name, {})[int(axis)] = "batch" if int(axis) == 0 else f"{name}_{axis}"
    return found


def resolve(spec: str, cwd: Path) -> Any:
    """The object ``spec`` names: imported from ``cwd`` (a dotted module) or from its file (``path.py:name``)."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr.isidentifier():
        raise HarnessError(f"{spec}: not a module spec; write pkg.module:factory (or path/to/file.py:factory)")
    try:
        if where.endswith(".py"):
            path = (cwd / where).resolve()
            if not path.is_file():
                raise HarnessError(f"{spec}: no such file {path}")
            found = importlib.util.spec_from_file_location(f"_harness_check_{path.stem}", path)
            assert found is not None and found.loader is not None
            module = importlib.util.module_from_spec(found)
            found.loader.exec_module(module)
        else:
            sys.path.insert(0, str(cwd))
            module = importlib.import_module(where)
    except HarnessError:
        raise
    except Exception as exc:
        raise HarnessError(
            f"{spec}: {where} does not import: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    if not hasattr(module, attr):
        raise HarnessError(f"{spec}: {where} has no {attr!r}")
    return getattr(module, attr)


def build(spec: str, cwd: Path) -> Any:
    """The ``nn.Module`` the spec names: an instance, or what a class or factory returns when called with nothing."""
    import torch

    obj = resolve(spec, cwd)
    if not isinstance(obj, torch.nn.Module):
        if not callable(obj):
            raise HarnessError(f"{spec}: names a {type(obj).__name__}, not an nn.Module or a factory of one")
        try:
            obj = obj()
        except Exception as exc:
            raise HarnessError(
                f"{spec}: calling it raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            ) from None
    if not isinstance(obj, torch.nn.Module):
        raise HarnessError(f"{spec}: returned a {type(obj).__name__}, not a torch.nn.Module; return the model")
    return obj


_CASE = '''"""Written by `harness check {spec}`: the module spec as a one-case corpus file."""
import sys

from harness.check.module import build
from harness.cases import Case, randint, randn, register, seeded

sys.path.insert(0, {cwd!r})


def _model():
    seeded(0)
    return build({spec!r}, __import__("pathlib").Path({cwd!r}))


def _inputs():
    return {{{inputs}}}


register(Case(name={name!r}, model=_model, inputs=_inputs, dynamic={dynamic!r}))
'''


def _tensor(shape: tuple[int, ...], dtype: str) -> str:
    dims = ", ".join(map(str, shape))
    if dtype.startswith("float"):
        return f"randn({dims}).to(__import__('torch').{dtype})"
    if dtype == "bool":
        return f"randint(0, 2, {dims}).bool()"
    return f"randint(0, 4, {dims}, dtype={dtype!r})"


def opsets(matrix: Matrix, runtimes: Sequence[Runtime], results: Path, asked: Sequence[int]) -> dict[str, list[int]]:
    """Exporter → the opsets to export at: ``--opset``'s, else the default and the recommended ones."""
    if asked:
        return {e: sorted(set(asked)) for e in EXPORTERS}
    found: dict[str, set[int]] = {e: set() for e in EXPORTERS}
    try:
        defaults = json.loads((results / "environment.json").read_text()).get("default_opsets") or {}
    except (OSError, ValueError):
        defaults = {}
    for exporter in EXPORTERS:
        if isinstance(defaults.get(exporter), int):
            found[exporter].add(defaults[exporter])
    from harness.answer import ask, recommend

    for rt in dict.fromkeys([runtimes[0], runtimes[-1]]):
        try:
            best = recommend.per_exporter(ask.ask(rt.pin, results=str(results)).answer)
        except HarnessError:
            continue
        for exporter, option in best.items():
            if option.ok and option.ask is not None and exporter in found:
                found[exporter].add(option.ask)
    if not any(found.values()):
        raise HarnessError(f"no default or recommended opset is known ({results} has none): name them with --opset N")
    return {e: sorted(o) for e, o in found.items() if o}


def _profile(matrix: Matrix, runtimes: Sequence[Runtime], wanted: dict[str, list[int]]) -> str:
    pins = ", ".join(json.dumps(rt.pin) for rt in runtimes)
    per = ", ".join(f"{e} = {json.dumps(o)}" for e, o in wanted.items())
    return (
        "\n\n# Added by `harness check`: the module spec's exporters, opsets and runtimes.\n[profiles.check-module]\n"
        f'runtimes = [{pins}]\nproviders = ["cpu"]\nexporters = {json.dumps(list(wanted))}\nopsets = {{ {per} }}\n'
    )


def export(
    spec: str,
    shapes: dict[str, tuple[tuple[int, ...], str]],
    dynamic: dict[str, dict[int, str]],
    matrix: Matrix,
    runtimes: Sequence[Runtime],
    wanted: dict[str, list[int]],
    out: Path,
    echo: Callable[[str], Any],
) -> list[dict[str, Any]]:
    """The export stage on the one case; per exported (or failed) artifact ``{exporter, opset, ok, error_line, model,
    probes: {name: (inputs .npz, expected .npz)}}``."""
    cwd = Path.cwd()
    build(spec, cwd)  # a spec that does not import or build is one line here, before any export starts
    name = re.sub(r"[^a-z0-9_]+", "_", spec.rpartition(":")[2].lower()).strip("_") or "model"
    out.mkdir(parents=True, exist_ok=True)
    inputs = ", ".join(f"{k!r}: {_tensor(*v)}" for k, v in shapes.items())
    case_file = out / "case.py"
    case_file.write_text(_CASE.format(spec=spec, cwd=str(cwd), inputs=inputs, name=name, dynamic=dynamic))
    matrix_file = out / "matrix.toml"
    matrix_file.write_text(matrix.path.read_text() + _profile(matrix, runtimes, wanted))
    build_dir = out / "export"
    command = [
        sys.executable,
        "-m",
        "harness",
        "export",
        "--matrix",
        str(matrix_file),
        "--profile",
        "check-module",
        "--corpus",
        str(case_file),
        "--only-corpus",
        "--out",
        str(build_dir),
    ]
    echo(f"exporting {spec}: " + "; ".join(f"{e} opset {', '.join(map(str, o))}" for e, o in wanted.items()))
    done = subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr, cwd=matrix.path.parent)
    if done.returncode not in (0, 1):
        raise HarnessError(f"{spec}: the export stage refused it (exit {done.returncode}; its line is above)")
    from harness.store import layout

    found = []
    for rec in layout.load_artifacts(build_dir):
        art = layout.artifact_dir(build_dir, rec.key.id)
        entry: dict[str, Any] = {
            "exporter": rec.exporter,
            "opset": rec.opset,
            "ok": rec.ok,
            "error_line": rec.error_line or "",
            "opset_written": rec.opset_actual,
            "model": str(art / layout.MODEL),
            "probes": {},
            "tolerance": {"atol": rec.atol, "rtol": rec.rtol, "scaled": rec.scaled},
        }
        if rec.ok:
            info = onnxinfo.read(art / layout.MODEL)
            with np.load(art / layout.REFERENCE) as ref:
                for probe in rec.probes:
                    feeds = layout.probe_inputs(ref, probe)
                    outs = layout.probe_outputs(ref, probe)
                    if not feeds or len(outs) != len(info.outputs):
                        continue
                    given = out / "probes" / rec.key.id
                    given.mkdir(parents=True, exist_ok=True)
                    np.savez(given / f"{probe}.npz", **feeds)
                    np.savez(given / f"{probe}.expected.npz", **{o.name: a for o, a in zip(info.outputs, outs)})  # noqa: B905
                    entry["probes"][probe] = (str(given / f"{probe}.npz"), str(given / f"{probe}.expected.npz"))
        found.append(entry)
    return found


def check_module(
    matrix: Matrix,
    spec: str,
    inputs: Sequence[str],
    dynamic: Sequence[str],
    asked: Sequence[int],
    opts: Any,
    echo: Callable[[str], Any],
) -> dict[str, Any]:
    """Export the spec's model (:func:`export`), check every exported file with torch's outputs as the expected ones;
    the ``harness.check/1`` answer of a module (``exports``: each file's own answer)."""
    import dataclasses

    from harness.check import answer, stage

    shapes = parse_inputs(inputs)
    dims = parse_dynamic(dynamic, shapes)
    wanted = opsets(matrix, opts.runtimes, opts.results, asked)
    name = re.sub(r"[^a-z0-9_]+", "_", spec.lower()).strip("_")
    out = (opts.out or Path("build/check") / name).resolve()
    exported = export(spec, shapes, dims, matrix, opts.runtimes, wanted, out, echo)
    entries = []
    for e in exported:
        entry = {k: e[k] for k in ("exporter", "opset", "opset_written", "error_line")}
        if not e["ok"] or not e["probes"]:
            entry.update(
                status="export-fail", check=None, error_line=e["error_line"] or "no probe of the export could be checked"
            )
            entries.append(entry)
            continue
        tol = e["tolerance"]
        one = dataclasses.replace(
            opts,
            target=e["model"],
            input_files=tuple(p[0] for p in e["probes"].values()),
            expected_files=tuple(p[1] for p in e["probes"].values()),
            dims={},
            atol=opts.atol if opts.atol is not None else tol["atol"],
            rtol=opts.rtol if opts.rtol is not None else tol["rtol"],
            scaled=opts.scaled if opts.scaled is not None else tol["scaled"],
            out=out / "files" / f"{e['exporter']}.op{e['opset']}",
        )
        echo(f"checking {e['exporter']} opset {e['opset']} on {len(opts.runtimes)} runtimes")
        entry.update(status="checked", check=answer.to_json(stage.check(matrix, one, echo)))
        entries.append(entry)
    labels = [f"{rt.pin}@{p}" if p else rt.pin for rt in opts.runtimes for p in opts.platforms or ("",)]
    return answer.module_json(spec, shapes, dims, wanted, entries, labels, str(out))
