"""PyTorch → ONNX compatibility matrix harness.

The package is split by stage (see README): ``matrix`` (config), ``corpus``
(gotcha cases), ``export`` (torch env only), ``run`` (runtime env only),
``compare`` (pure numpy), ``report`` (pandas + tabulate), ``cli``.

Importing :mod:`harness` imports nothing heavy: the run environments hold only
onnxruntime and numpy, and must be able to import every module they use.
"""

from __future__ import annotations

__version__ = "0.1.0"
