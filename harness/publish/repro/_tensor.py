"""onnx.TensorProto written by hand in protobuf wire format: the report environment has no ``onnx`` package.

Fields ``dims`` = 1 (unpacked varints, as onnx's own serializer writes them), ``data_type`` = 2, ``name`` = 8,
``raw_data`` = 9 (little-endian): ``onnx.numpy_helper.from_array`` gives the same bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ONNX_TYPES: dict[np.dtype[Any], int] = {
    np.dtype(np.float32): 1,
    np.dtype(np.uint8): 2,
    np.dtype(np.int8): 3,
    np.dtype(np.uint16): 4,
    np.dtype(np.int16): 5,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
    np.dtype(np.bool_): 9,
    np.dtype(np.float16): 10,
    np.dtype(np.float64): 11,
    np.dtype(np.uint32): 12,
    np.dtype(np.uint64): 13,
    np.dtype(np.complex64): 14,
    np.dtype(np.complex128): 15,
}
"""ONNX TensorProto.DataType of every numpy dtype that has one (native byte order)."""


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    if value < 0:
        raise ValueError(f"varint of a negative number: {value}")
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def encode_tensor(array: Any, name: str) -> bytes:
    """Serialize ``array`` as an ``onnx.TensorProto`` named ``name``: the bytes
    ``onnx.numpy_helper.from_array(array, name).SerializeToString()`` gives.

    Raises TypeError for a dtype ONNX cannot hold as raw data (strings, objects, datetimes).
    """
    arr = np.asarray(array)
    native = arr.dtype.newbyteorder("=")
    code = ONNX_TYPES.get(native)
    if code is None:
        raise TypeError(f"tensor {name!r}: dtype {arr.dtype} has no ONNX raw-data encoding")
    raw = np.ascontiguousarray(arr, dtype=native.newbyteorder("<")).tobytes()
    out = bytearray()
    for dim in arr.shape:
        out += _key(1, 0) + _varint(dim)
    out += _key(2, 0) + _varint(code)
    if name:
        encoded = name.encode("utf-8")
        out += _key(8, 2) + _varint(len(encoded)) + encoded
    out += _key(9, 2) + _varint(len(raw)) + raw
    return bytes(out)
