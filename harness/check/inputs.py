"""The probes of ``harness check``: the user's input files, checked against the model's signature, or inputs made
from the signature with its symbolic dims bound (``--dim batch=4``); and the user's expected outputs.

Every refusal is one line (a :class:`HarnessError`) that names the file, the input and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from harness.check.onnxinfo import ModelInfo, Value
from harness.core.errors import HarnessError

INT_HIGH = 4
"""Made integer inputs are drawn from ``[0, INT_HIGH)``: valid indices and token ids of any table of at least 4
rows. A model whose integers mean more (lengths, positions) needs its real inputs: ``--inputs``."""


def parse_dims(given: Sequence[str]) -> dict[str, int]:
    """``--dim batch=4`` / ``--dim x:0=4`` → ``{"batch": 4, "x:0": 4}``."""
    dims: dict[str, int] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise HarnessError(f"--dim {item!r}: write NAME=N (a symbolic dim's name, or INPUT:AXIS) with N ≥ 1")
        dims[name.strip()] = int(value)
    return dims


def _load(path: str, info: ModelInfo) -> dict[str, np.ndarray]:
    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"--inputs {path}: no such file")
    try:
        if p.suffix == ".npy":
            if len(info.inputs) != 1:
                names = ", ".join(v.name for v in info.inputs)
                raise HarnessError(
                    f"--inputs {path}: a .npy holds one array; the model takes {len(info.inputs)} ({names}): save an .npz"
                )
            return {info.inputs[0].name: np.load(p, allow_pickle=False)}
        with np.load(p, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except HarnessError:
        raise
    except Exception as exc:
        raise HarnessError(
            f"--inputs {path}: not a numpy .npz or .npy file ({type(exc).__name__}); save it with numpy.savez"
        ) from None


def _checked(feeds: Mapping[str, np.ndarray], info: ModelInfo, where: str) -> dict[str, np.ndarray]:
    names = [v.name for v in info.inputs]
    for name in feeds:
        if name not in names:
            raise HarnessError(f"{where} has {name!r}, which is not an input of the model (its inputs: {', '.join(names)})")
    for value in info.inputs:
        if value.name not in feeds:
            raise HarnessError(
                f"{where} lacks input {value.name!r} (the model's inputs: {', '.join(v.words() for v in info.inputs)})"
            )
        array = feeds[value.name]
        if value.dtype != "unknown" and str(array.dtype) != value.dtype:
            raise HarnessError(
                f"{where}: input {value.name!r} is {array.dtype}, the model takes {value.dtype}: save it as {value.dtype}"
            )
        if value.shape is not None:
            if array.ndim != len(value.shape):
                raise HarnessError(
                    f"{where}: input {value.name!r} has shape {list(array.shape)}, the model takes {value.words()}"
                )
            for axis, (want, got) in enumerate(zip(value.shape, array.shape)):  # noqa: B905 (same rank: checked above)
                if isinstance(want, int) and want != got:
                    raise HarnessError(
                        f"{where}: input {value.name!r} has {got} on axis {axis}, the model's is fixed at {want} "
                        f"({value.words()})"
                    )
    return {v.name: feeds[v.name] for v in info.inputs}


def _shape(value: Value, dims: Mapping[str, int]) -> tuple[int, ...]:
    if value.shape is None:
        raise HarnessError(f"input {value.name!r} declares no shape: give its values with --inputs a.npz")
    shape = []
    for axis, dim in enumerate(value.shape):
        if isinstance(dim, int):
            shape.append(dim)
            continue
        key = f"{value.name}:{axis}"
        if key in dims:
            shape.append(dims[key])
        elif isinstance(dim, str) and dim in dims:
            shape.append(dims[dim])
        else:
            named = f"symbolic ({dim!r})" if dim else "dynamic (unnamed)"
            bind = f"--dim {dim}=N" if dim else f"--dim {key}=N"
            raise HarnessError(f"input {value.name!r} axis {axis} is {named}: bind it with {bind}, or give --inputs a.npz")
    return tuple(shape)


def made(info: ModelInfo, dims: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Inputs from the signature (seeded): normal floats, integers in ``[0, INT_HIGH)``, random booleans."""
    rng = np.random.default_rng(0)
    feeds: dict[str, np.ndarray] = {}
    known = {d for v in info.inputs for d in (v.shape or ()) if isinstance(d, str)} | {
        f"{v.name}:{a}" for v in info.inputs for a in range(len(v.shape or ()))
    }
    for name in dims:
        if name not in known:
            raise HarnessError(
                f"--dim {name}: the model has no such dim (its inputs: {', '.join(v.words() for v in info.inputs)})"
            )
    for value in info.inputs:
        shape = _shape(value, dims)
        if value.dtype in ("float32", "float64", "float16"):
            feeds[value.name] = rng.standard_normal(shape).astype(value.dtype)
        elif value.dtype == "bool":
            feeds[value.name] = rng.integers(0, 2, shape).astype(bool)
        elif value.dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
            feeds[value.name] = rng.integers(0, INT_HIGH, shape).astype(value.dtype)
        else:
            raise HarnessError(
                f"input {value.name!r} is {value.dtype}: no inputs are made of that type; give them with --inputs a.npz"
            )
    return feeds


def probes(info: ModelInfo, files: Sequence[str], dims: Mapping[str, int]) -> dict[str, dict[str, np.ndarray]]:
    """Probe name → feeds: each ``--inputs`` file (named after it), else one made from the signature (``made``)."""
    if not files:
        return {"made": made(info, dims)}
    found: dict[str, dict[str, np.ndarray]] = {}
    for path in files:
        name = Path(path).stem or "inputs"
        while name in found:
            name += "_"
        found[name] = _checked(_load(path, info), info, f"--inputs {path}")
    return found


def expected(info: ModelInfo, files: Sequence[str], names: Sequence[str]) -> dict[str, list[np.ndarray]]:
    """``--expected`` files, paired in order with the probes: probe → outputs in the model's order."""
    if len(files) != len(names) or names == ["made"]:
        raise HarnessError(
            f"--expected is given {len(files)} time(s) for {len(names)} --inputs file(s): give one expected .npz per "
            "--inputs file, in the same order (made inputs have no expected outputs)"
        )
    outputs = [v.name for v in info.outputs]
    found: dict[str, list[np.ndarray]] = {}
    for name, path in zip(names, files):  # noqa: B905 (same length: checked above)
        p = Path(path)
        try:
            with np.load(p, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except Exception as exc:
            raise HarnessError(
                f"--expected {path}: not a numpy .npz file ({type(exc).__name__}); save it with numpy.savez"
            ) from None
        missing = [o for o in outputs if o not in arrays]
        if missing:
            raise HarnessError(f"--expected {path} lacks output {missing[0]!r} (the model's outputs: {', '.join(outputs)})")
        found[name] = [arrays[o] for o in outputs]
    return found
