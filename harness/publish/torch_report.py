"""Publishing the table across torch releases (:mod:`harness.answer.torch_table` composes it): its ``README.md``,
``index.html`` and ``torch.json`` written beside the release tables as one unit, through the same staged swap as every
report (:func:`harness.publish.staged.publishing`): a kill, a full disk or a file-size limit at any instant leaves the
previous three files whole, and the release tables inside the folder are carried over untouched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.answer import torch_table
from harness.config.matrix import Matrix, Profile
from harness.publish.staged import publishing


def write(matrix: Matrix, profile: Profile, results: Path) -> dict[str, Any]:
    """Publish the table across ``profile``'s torch releases in ``results``; returns its summary (``torch.json``).

    Raises:
        HarnessError: no release has a whole table, ``results`` is not a folder of torch tables, or it cannot be
            written (the previous files are left as they were).
    """
    with publishing(results, "torch-report") as stage:
        files = torch_table.compose(matrix, profile, results)
        stage.folder(results)
        for name, text in files.items():
            stage.write_text(results / name, text)
    summary: dict[str, Any] = json.loads(files[torch_table.SUMMARY])
    return summary
