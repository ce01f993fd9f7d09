"""Standalone reproducers: one folder per failing artifact, runnable with onnxruntime and numpy alone.

For every artifact (case × exporter × opset) with at least one failing cell
(``mismatch``, ``run-fail``, ``load-fail``, ``crash``, ``timeout``),
:func:`write_repros` writes ``results/repro/<artifact id>/``::

    model.onnx                    the exported model, as the runtimes ran it (stack-trace paths made relative)
    test_data_set_<k>/            one per probe, "example" first (the ONNX backend test-data layout)
        input_<i>.pb              onnx.TensorProto of each graph input the probe feeds, ``name`` = graph input name
        output_<i>.pb             torch's expected output i, ``name`` = graph output name
        probe.txt                 the probe's name (``batch8``)
    README.txt                    the failing cells it reproduces, and per runtime pin what to install and run
    repro.json                    the script's parameters: the artifact, its tolerances, the ``--provider`` choices
    repro.py                      loads the model, runs every set, compares; exit 1 when a probe fails

``repro.py`` is :mod:`harness.publish.repro._script`, the same bytes in every folder (ruff and mypy check
it like the rest of the package); it decodes the TensorProtos that :mod:`~harness.publish.repro._tensor`
encodes by hand, so it needs nothing but onnxruntime and numpy. The folders are made of
:mod:`~harness.publish.repro._files` and :mod:`~harness.publish.repro._readme` and staged by
:mod:`~harness.publish.repro._write`; :mod:`~harness.publish.repro._portable` makes the paths of the checkout that
exported a model (in its nodes' stack traces) relative, so the published bytes do not depend on where it lives.

Everything written is a function of the inputs (no time stamps, sorted listings), so rerunning the report
leaves ``git diff`` empty.
"""

from harness.publish.repro._files import SCRIPT, ZEROS
from harness.publish.repro._readme import MARKER
from harness.publish.repro._tensor import ONNX_TYPES, encode_tensor
from harness.publish.repro._write import FAILING, REPRO_DIR, write_repros

__all__ = ["FAILING", "MARKER", "ONNX_TYPES", "REPRO_DIR", "SCRIPT", "ZEROS", "encode_tensor", "write_repros"]
