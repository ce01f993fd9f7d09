"""A published ``model.onnx`` that says nothing of where the checkout that exported it lives.

The dynamo exporter writes each node's Python stack trace into the node's metadata
(``pkg.torch.onnx.stack_trace``), one ``File "<path>", line N, in f`` line per frame, the paths absolute:
``/work/main/models/_dtypes_nets.py``, ``/work/main/.nox/export/lib/python3.11/site-packages/torch/...``. A
reproducer copied as it is would change whenever the table is published from another folder, no cell changed.
:func:`portable` rewrites each such path (:func:`portable_path`) at publication, and copies every other byte as
it is: a model with no such path comes back the same bytes (every TorchScript export). The export's own
artifact, and so every cache key, is left as the export wrote it.

The report has no ``onnx`` package: the protobuf wire format is read and written with the helpers of
:mod:`harness.core.onnxfile`. Only the strings the exporters write as debugging text are looked at, the
``metadata_props`` values (``StringStringEntryProto.value``, 2) and ``doc_string`` of the model, its graph, its
nodes and its functions, through every subgraph of an attribute (the bodies of ``If``, ``Loop``, ``Scan``).
Each message on the way to a rewritten string is written again with its new length; all else is copied.
Field numbers are onnx.proto's:

========================  =====================================================================
``ModelProto``            doc_string 6, graph 7, metadata_props 14, functions 25
``GraphProto``            node 1, doc_string 10, metadata_props 16
``NodeProto``             attribute 5, doc_string 6, metadata_props 9
``AttributeProto``        g 6, graphs 11
``FunctionProto``         node 7, doc_string 8, metadata_props 14
========================  =====================================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import harness
from harness.core.onnxfile import _fields, _len_field

ROOT = Path(harness.__file__).resolve().parents[1]
"""The checkout: what a path in a stack trace is made relative to by default."""

_TEXT, _ENTRY = "text", "entry"
_MESSAGES: dict[str, dict[int, str]] = {
    "model": {6: _TEXT, 7: "graph", 14: _ENTRY, 25: "function"},
    "graph": {1: "node", 10: _TEXT, 16: _ENTRY},
    "node": {5: "attribute", 6: _TEXT, 9: _ENTRY},
    "attribute": {6: "graph", 11: "graph"},
    "function": {7: "node", 8: _TEXT, 14: _ENTRY},
    _ENTRY: {2: _TEXT},
}
"""Per message, the length-delimited fields looked into: another message, or a string to rewrite."""

_FRAME = re.compile(rb'File "([^"\n]*)"')
_WINDOWS = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def portable(model: bytes, root: str | Path | None = None) -> bytes:
    """``model`` (an ``.onnx`` file's bytes) with every absolute path of its stack traces made independent of
    where the checkout lives (:func:`portable_path`, against ``root``, by default :data:`ROOT`).

    Raises:
        ValueError: the bytes are not a protobuf message.
    """
    roots = _roots(ROOT if root is None else Path(root))
    try:
        rewritten = _message(memoryview(model), 0, len(model), "model", lambda text: _frames(text, roots))
    except IndexError:  # a varint that runs past the end
        raise ValueError("truncated protobuf") from None
    return model if rewritten is None else rewritten


def portable_path(path: str, roots: tuple[str, ...]) -> str:
    """An absolute ``path`` under one of ``roots`` relative to it (``models/_dtypes_nets.py``), else from its
    last ``site-packages`` on (``site-packages/torch/nn/modules/linear.py``), else its file name; any other path
    (relative already, ``<string>``) as it is. Separators are ``/``."""
    if _WINDOWS.match(path):
        path = path.replace("\\", "/")
    elif not path.startswith("/"):
        return path
    for root in roots:
        if path.startswith(root + "/"):
            return path[len(root) + 1 :]
    parts = path.split("/")
    if "site-packages" in parts:
        at = len(parts) - 1 - parts[::-1].index("site-packages")
        return "/".join(parts[at:])
    return parts[-1]


def _frames(text: bytes, roots: tuple[str, ...]) -> bytes:
    """``text`` with the path of each ``File "<path>"`` made portable."""

    def one(m: re.Match[bytes]) -> bytes:
        path = portable_path(m.group(1).decode("utf-8", "surrogateescape"), roots)
        return b'File "' + path.encode("utf-8", "surrogateescape") + b'"'

    return _FRAME.sub(one, text)


def _roots(root: Path) -> tuple[str, ...]:
    """``root`` as given and as resolved (a checkout reached through a link is traced either way)."""
    named = (str(p).replace("\\", "/").rstrip("/") for p in (root, root.resolve()))
    return tuple(dict.fromkeys(r for r in named if r))


def _message(buf: memoryview, start: int, end: int, kind: str, fix: Callable[[bytes], bytes]) -> bytes | None:
    """The payload ``buf[start:end]`` of a message of ``kind`` with its strings fixed, or None where none changed."""
    looked = _MESSAGES[kind]
    parts: list[bytes | memoryview] = []
    changed = False
    for number, wire, at, p_start, p_end in _fields(buf, start, end):
        inner = looked.get(number) if wire == 2 else None
        new: bytes | None = None
        if inner == _TEXT:
            text = bytes(buf[p_start:p_end])
            fixed = fix(text)
            new = None if fixed == text else fixed
        elif inner is not None:
            new = _message(buf, p_start, p_end, inner, fix)
        if new is None:
            parts.append(buf[at:p_end])
        else:
            parts.append(_len_field(number, new))
            changed = True
    return b"".join(parts) if changed else None
