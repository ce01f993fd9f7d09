"""The published table: produced by a real run of this corpus, and showing every claim.

These tests read the committed results/ (default profile) and results/full/.
They fail when the corpus changed and the table was not regenerated, or when
a claim is no longer what the table shows: rerun `nox -s matrix` (and
`nox -s matrix -- --profile full`) and commit results/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import claims, corpus
from harness.matrix import load, version_tuple
from harness.records import CellRecord

ROOT = Path(__file__).resolve().parent.parent
MATRIX = load(ROOT / "matrix.toml")
REGISTRY = corpus.load(MATRIX.corpus, ROOT)
TABLES = {name: ROOT / "results" / ("" if name == "default" else name) for name in ("default", "full")}


def _cells(profile: str) -> list[CellRecord]:
    path = TABLES[profile] / "matrix.jsonl"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `nox -s matrix{'' if profile == 'default' else ' -- --profile ' + profile}`")
    return [CellRecord.from_dict(json.loads(line)) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def published() -> dict[str, list[CellRecord]]:
    return {name: _cells(name) for name in TABLES}


@pytest.mark.parametrize("profile", list(TABLES))
def test_table_covers_the_corpus_and_the_profile(published: dict[str, list[CellRecord]], profile: str) -> None:
    cells = published[profile]
    prof = MATRIX.profile(profile)
    assert {c.case for c in cells} == set(REGISTRY.names()), "corpus changed: regenerate the table"
    assert {c.runtime for c in cells} == {rt.pin for rt in prof.runtimes}
    assert {c.opset for c in cells} == set(prof.opsets)
    assert {c.exporter for c in cells} == set(prof.exporters)
    assert len({c.key for c in cells}) == len(cells), "a cell appears twice"
    env = json.loads((TABLES[profile] / "environment.json").read_text())
    assert env["profile"] == profile and env["cells"] == len(cells)
    readme = (TABLES[profile] / "README.md").read_text()
    assert f"Profile **{profile}**" in readme
    for status in {c.status for c in cells}:
        assert f"`{status.value}`" in readme


CLAIMS = [(case.name, claim) for case in REGISTRY for claim in case.claims]


@pytest.mark.parametrize(("case", "claim"), CLAIMS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CLAIMS)])
def test_every_claim_is_shown_by_the_published_table(
    published: dict[str, list[CellRecord]], case: str, claim: corpus.Claim
) -> None:
    verdicts = []
    for cells in published.values():
        newest = max({c.runtime for c in cells}, key=lambda pin: version_tuple(pin.split("==")[-1]))
        verdicts.append(claims.holds(claim.to_dict(), case, cells, newest))
    assert any(v is not None for v in verdicts), f"{claims.describe(claim.to_dict(), 'newest')}: no published table measures it"
    assert all(v is not False for v in verdicts), f"{claims.describe(claim.to_dict(), 'newest')}: the table disagrees"
