"""Where the weights of an ``.onnx`` file are, read from its protobuf wire format with the standard library.

Two stages need to handle a model's weights without copying them, and neither
may load the model into memory as a whole:

- the export stage writes ``model.debug.onnx`` (every node output exposed)
  whose initializers point into ``model.onnx`` itself as ONNX external data
  (``location = "model.onnx"``, the byte offset and length of each tensor's
  ``raw_data``): a 440 MB BERT's debug model is 0.3 MB, not another 440 MB;
- the report stage (no ``onnx`` package there) writes a reproducer of a model
  that every runtime refused at load without its weights: the floating
  initializers point into a zero-filled sparse file, and the refusal, which
  comes from the graph (its IR version, opsets, operators), is the same.

Only the fields these need are decoded: ``ModelProto.graph`` (7),
``GraphProto.initializer`` (5), and in ``TensorProto`` ``data_type`` (2),
``raw_data`` (9), ``external_data`` (13, ``StringStringEntryProto`` key 1 /
value 2) and ``data_location`` (14). Everything else is copied byte for byte.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

# TensorProto.DataType of the floating types: zeros of them cannot make a kernel trap (an integer zero can: Div).
FLOATING = frozenset({1, 10, 11, 16})  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


def _varint(buf: bytes | memoryview, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | 0x80 if value else low)
        if not value:
            return bytes(out)


def _fields(buf: bytes | memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """``(field number, wire type, start of the field's key, start of its payload, end)`` of each field."""
    i = start
    while i < end:
        at = i
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, j = _varint(buf, i)
        elif wire == 1:
            j = i + 8
        elif wire == 5:
            j = i + 4
        elif wire == 2:
            n, i = _varint(buf, i)
            j = i + n
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} at byte {at}")
        if j > end:
            raise ValueError(f"truncated protobuf field {number} at byte {at}")
        yield number, wire, at, i, j
        i = j


def _graph(buf: memoryview) -> tuple[int, int, int]:
    """``(key start, payload start, end)`` of the model's graph field."""
    found = None
    for number, wire, at, start, end in _fields(buf, 0, len(buf)):
        if number == 7 and wire == 2:
            found = (at, start, end)
    if found is None:
        raise ValueError("no graph in this model")
    return found


def initializer_spans(path: str | os.PathLike[str]) -> list[tuple[int, int] | None]:
    """Per initializer of the model's graph, in order: the ``(offset, length)`` in the file of its
    ``raw_data``, or None when it has none (typed fields, or already external data)."""
    with open(path, "rb") as f:
        buf = memoryview(f.read())
    _, g_start, g_end = _graph(buf)
    spans: list[tuple[int, int] | None] = []
    for number, wire, _, start, end in _fields(buf, g_start, g_end):
        if number == 5 and wire == 2:
            raw = None
            for t_number, t_wire, _, t_start, t_end in _fields(buf, start, end):
                if t_number == 9 and t_wire == 2:
                    raw = (t_start, t_end - t_start)
            spans.append(raw)
    return spans


def _entry(key: str, value: str) -> bytes:
    body = b"".join(_len_field(n, s.encode()) for n, s in ((1, key), (2, value)))
    return _len_field(13, body)


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def strip_weights(src: str | os.PathLike[str] | bytes, zeros: str, minimum: int = 1024) -> tuple[bytes, int]:
    """The model at ``src`` (a path, or the model's bytes) with the data of every floating initializer of at
    least ``minimum`` bytes in a file of zeros named ``zeros`` beside it (ONNX external data); other initializers
    keep their data, initializers already external are pointed at ``zeros`` too, and all keep their shape and type.

    Returns the model's bytes and the size of the zeros file (:func:`write_zeros` makes it sparse). The
    graph is unchanged, so a model a runtime refuses at load (IR version, opset, operator) is refused the
    same way; what it computes is not kept.

    Raises:
        ValueError: The file is not a model, or it keeps external data that cannot be zeros.
    """
    if not isinstance(src, bytes):
        with open(src, "rb") as f:
            src = f.read()
    buf = memoryview(src)
    g_at, g_start, g_end = _graph(buf)
    graph = bytearray()
    offset = 0
    for number, wire, at, start, end in _fields(buf, g_start, g_end):
        if not (number == 5 and wire == 2):
            graph += buf[at:end]
            continue
        kept = bytearray()
        dtype, length, external = 0, None, False
        for t_number, t_wire, t_at, t_start, t_end in _fields(buf, start, end):
            if t_number == 2 and t_wire == 0:
                dtype = _varint(buf, t_start)[0]
            if t_number == 9 and t_wire == 2:
                length = t_end - t_start
                continue
            if t_number == 14 and t_wire == 0 and _varint(buf, t_start)[0] == _EXTERNAL:
                external = True
            if t_number in (13, 14):
                continue  # external data entries and location: rewritten below
            kept += buf[t_at:t_end]
        if external:
            length = _external_length(buf, start, end)
            if length is None or dtype not in FLOATING:
                raise ValueError("an initializer in external data cannot be left out (not floating, or no length)")
        elif length is None or dtype not in FLOATING or length < minimum:
            graph += buf[at:end]
            continue
        kept += _entry("location", zeros) + _entry("offset", str(offset)) + _entry("length", str(length))
        kept += _encode_varint(14 << 3) + _encode_varint(_EXTERNAL)
        graph += _len_field(5, bytes(kept))
        offset += length
    return bytes(buf[:g_at]) + _len_field(7, bytes(graph)) + bytes(buf[g_end:]), offset


def write_zeros(path: str | os.PathLike[str], size: int) -> None:
    """A file of ``size`` zero bytes that takes no disk blocks (a sparse file)."""
    with open(path, "wb") as f:
        f.truncate(size)


def _external_length(buf: memoryview, start: int, end: int) -> int | None:
    """The ``length`` entry of an external initializer's ``external_data``."""
    for number, wire, _, e_start, e_end in _fields(buf, start, end):
        if number != 13 or wire != 2:
            continue
        key = value = b""
        for k_number, _, _, k_start, k_end in _fields(buf, e_start, e_end):
            if k_number == 1:
                key = bytes(buf[k_start:k_end])
            elif k_number == 2:
                value = bytes(buf[k_start:k_end])
        if key == b"length" and value.isdigit():
            return int(value)
    return None
