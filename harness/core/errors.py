"""The user-facing error type.

Two kinds of error, in Polygraphy's manner: a :class:`HarnessError` is the
user's to fix (bad config, unknown version, a model file that does not import)
and is printed as one line with no traceback, exit status 2. Anything else is
a bug in the harness and keeps its traceback.
"""

from __future__ import annotations


class HarnessError(Exception):
    """A problem with the user's input: printed as one line, exit status 2."""
