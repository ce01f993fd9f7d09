"""The gotcha corpus: loading cases (the project's and a user's), and their sources' digests.

A corpus file writes its cases with what this package exports: ``from harness.cases import Case, register``.
"""

from harness.cases.corpus import Card, Case, Claim, lazy, randint, randn, register, seeded

__all__ = ["Card", "Case", "Claim", "lazy", "randint", "randn", "register", "seeded"]
