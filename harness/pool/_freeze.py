"""Imported last by the fork server of :func:`harness.pool.workers.run_tasks` (``fresh=True``), after everything it
preloads: every object the server holds then moves to the garbage collector's permanent generation (``gc.freeze``).

A worker forked from the server otherwise pays for them at its first full collections: the collector walks the
server's hundreds of thousands of objects (torch, onnxscript and their registries) and, by touching them, copies their
memory pages into the child. Measured by ``bench/export_bench.py``: a small dynamo export in a forked worker took
~0.75 s without this and ~0.3 s with it. The objects stay alive either way (the server holds them); only garbage a
task makes is collected, as before."""

import gc

gc.collect()
gc.freeze()
