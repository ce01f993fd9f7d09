"""What an ``.onnx`` file declares, read from its protobuf wire format with the standard library.

``harness check`` answers "which runtimes load this?" before it runs anything, from the file's IR version, its
opset per domain and its op types against the measured frontiers. Reading those needs neither ``onnx`` nor the
weights: the fields are decoded straight from the bytes (:mod:`harness.core.onnxfile`'s reader), a 1 GB file's
header in milliseconds, and a damaged file is told apart from a whole one here, before any runtime sees it.

Decoded: ``ModelProto`` ``ir_version`` (1), ``opset_import`` (8: ``domain`` 1, ``version`` 2), ``graph`` (7),
``producer_name`` (2) / ``producer_version`` (3); ``GraphProto`` ``node`` (1), ``initializer`` (5), ``input`` (11),
``output`` (12); ``NodeProto`` ``op_type`` (4), ``domain`` (7), ``attribute`` (5: subgraphs ``g`` 6 and ``graphs``
11, whose nodes are counted too); ``ValueInfoProto`` ``name`` (1), ``type`` (2: ``tensor_type`` 1: ``elem_type`` 1,
``shape`` 2: ``dim`` 1: ``dim_value`` 1 / ``dim_param`` 2); ``TensorProto`` ``name`` (8), ``external_data`` (13),
``data_location`` (14).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.onnxfile import _fields, _varint

ELEM_TYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "string",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
}
"""``TensorProto.DataType`` → the numpy dtype name an input of it is fed as (``bfloat16``: none; refused)."""

_EXTERNAL = 1


@dataclasses.dataclass(frozen=True)
class Value:
    """A graph input or output: its name, element type and shape (an int, a symbolic name, or None: unnamed)."""

    name: str
    dtype: str
    shape: tuple[int | str | None, ...] | None
    """None: the file declares no shape (any rank)."""

    def words(self) -> str:
        """``x float32[batch,3,224,224]``."""
        if self.shape is None:
            return f"{self.name} {self.dtype}[?]"
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.name} {self.dtype}[{dims}]"


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    path: str
    size: int
    """Bytes of the file and of its external data together."""
    ir_version: int
    opsets: dict[str, int]
    """Domain (``ai.onnx`` for the default one) → version."""
    ops: dict[str, int]
    """Op type (domain-qualified outside ai.onnx: ``com.microsoft::MatMulNBits``) → nodes, subgraphs included."""
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    external: tuple[str, ...]
    """The external data files it names (relative to the file's folder)."""
    producer: str

    @property
    def opset(self) -> int | None:
        """The default domain's opset (None: the file imports none)."""
        return self.opsets.get("ai.onnx")


def _str(buf: memoryview, start: int, end: int) -> str:
    return bytes(buf[start:end]).decode("utf-8", "replace")


def _sub(buf: memoryview, start: int, end: int, number: int) -> Iterator[tuple[int, int]]:
    """The payload spans of every length-delimited field ``number`` within ``[start, end)``."""
    for n, wire, _, s, e in _fields(buf, start, end):
        if n == number and wire == 2:
            yield s, e


def _int(buf: memoryview, start: int, end: int, number: int) -> int | None:
    found = None
    for n, wire, _, s, _ in _fields(buf, start, end):
        if n == number and wire == 0:
            found = _varint(buf, s)[0]
    return found


def _value(buf: memoryview, start: int, end: int) -> Value:
    name = next((_str(buf, s, e) for s, e in _sub(buf, start, end, 1)), "")
    dtype, shape = "unknown", None
    for ts, te in _sub(buf, start, end, 2):  # TypeProto
        for ts2, te2 in _sub(buf, ts, te, 1):  # tensor_type
            elem = _int(buf, ts2, te2, 1)
            dtype = ELEM_TYPES.get(elem or 0, f"type {elem}")
            for ss, se in _sub(buf, ts2, te2, 2):  # shape
                dims: list[int | str | None] = []
                for ds, de in _sub(buf, ss, se, 1):
                    value = _int(buf, ds, de, 1)
                    param = next((_str(buf, s, e) for s, e in _sub(buf, ds, de, 2)), None)
                    dims.append(value if value is not None else (param or None))
                shape = tuple(dims)
    return Value(name, dtype, shape)


def _nodes(buf: memoryview, start: int, end: int, ops: dict[str, int], depth: int = 0) -> None:
    for ns, ne in _sub(buf, start, end, 1):
        op = next((_str(buf, s, e) for s, e in _sub(buf, ns, ne, 4)), "")
        domain = next((_str(buf, s, e) for s, e in _sub(buf, ns, ne, 7)), "")
        key = op if domain in ("", "ai.onnx") else f"{domain}::{op}"
        ops[key] = ops.get(key, 0) + 1
        if depth > 16:
            continue
        for a_s, a_e in _sub(buf, ns, ne, 5):  # attributes: an If's or a Loop's bodies
            for number in (6, 11):
                for gs, ge in _sub(buf, a_s, a_e, number):
                    _nodes(buf, gs, ge, ops, depth + 1)


def _external(buf: memoryview, start: int, end: int) -> list[tuple[str, int, int | None]]:
    """``(location, offset, length)`` of every initializer kept in external data."""
    found = []
    for ts, te in _sub(buf, start, end, 5):
        if _int(buf, ts, te, 14) != _EXTERNAL:
            continue
        entry: dict[str, str] = {}
        for es, ee in _sub(buf, ts, te, 13):
            key = next((_str(buf, s, e) for s, e in _sub(buf, es, ee, 1)), "")
            entry[key] = next((_str(buf, s, e) for s, e in _sub(buf, es, ee, 2)), "")
        offset = int(entry.get("offset") or 0) if (entry.get("offset") or "0").isdigit() else 0
        length = int(entry["length"]) if entry.get("length", "").isdigit() else None
        found.append((entry.get("location", ""), offset, length))
    return found


def read(path: str | os.PathLike[str]) -> ModelInfo:
    """The file's declarations; a file that is not a whole ONNX model, or whose external data is not all there, is
    a :class:`HarnessError` in one line that says what to do."""
    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"{p}: no such file; give the path of an .onnx file, or a module spec pkg.module:factory")
    data = p.read_bytes()
    buf = memoryview(data)
    try:
        ir = graph = None
        opsets: dict[str, int] = {}
        producer = []
        for number, wire, _, start, end in _fields(buf, 0, len(buf)):
            if number == 1 and wire == 0:
                ir = _varint(buf, start)[0]
            elif number == 7 and wire == 2:
                graph = (start, end)
            elif number == 8 and wire == 2:
                domain = next((_str(buf, s, e) for s, e in _sub(buf, start, end, 1)), "") or "ai.onnx"
                opsets[domain] = _int(buf, start, end, 2) or 0
            elif number in (2, 3) and wire == 2:
                producer.append(_str(buf, start, end))
        if ir is None or graph is None:
            raise ValueError("it has no IR version or no graph")
        ops: dict[str, int] = {}
        _nodes(buf, *graph, ops)
        initializers = {next((_str(buf, s, e) for s, e in _sub(buf, ts, te, 8)), "") for ts, te in _sub(buf, *graph, 5)}
        inputs = tuple(v for v in (_value(buf, s, e) for s, e in _sub(buf, *graph, 11)) if v.name not in initializers)
        outputs = tuple(_value(buf, s, e) for s, e in _sub(buf, *graph, 12))
        external = _external(buf, *graph)
    except (ValueError, IndexError) as exc:
        if isinstance(exc, IndexError) or "truncated" in str(exc):
            raise HarnessError(
                f"{p}: not a whole ONNX model (it ends inside a field: the file is truncated); "
                "export it again or copy the whole file"
            ) from None
        raise HarnessError(f"{p}: not an ONNX model (its bytes are no ModelProto: {exc}); give the .onnx file itself") from None
    size = len(data)
    for location, offset, length in external:
        where = p.parent / location
        if not location or not where.is_file():
            raise HarnessError(
                f"{p}: its weights are in external data {location or '(no location)'!r}, which is not beside it "
                f"({where}); copy the .data file next to the model"
            )
        if length is not None and where.stat().st_size < offset + length:
            raise HarnessError(
                f"{p}: external data {location!r} is shorter ({where.stat().st_size} bytes) than the model says "
                f"({offset + length}); copy the whole .data file"
            )
    locations = tuple(sorted({loc for loc, _, _ in external}))
    size += sum((p.parent / loc).stat().st_size for loc in locations)
    return ModelInfo(str(p), size, ir, opsets, ops, inputs, outputs, locations, " ".join(filter(None, producer)))
