"""The user-facing error type, and the names errors are recorded under.

Two kinds of error, in Polygraphy's manner: a :class:`HarnessError` is the
user's to fix (bad config, unknown version, a model file that does not import)
and is printed as one line with no traceback, exit status 2. Anything else is
a bug in the harness and keeps its traceback.
"""

from __future__ import annotations


class HarnessError(Exception):
    """A problem with the user's input: printed as one line, exit status 2."""


PROBE_FILE_ERROR = "ProbeFileError"
"""How a probe whose file could not be used is named in an export record's ``probe_errors`` (written by the
corpus, shown by the report)."""
