"""Real exports (torch 2.13) run on the real onnxruntime of this environment.

Every case of the corpus is exported by both exporters at opset 18 and run
on the newest onnxruntime, once per session (module fixture); the tests then
assert what the articles and the runtimes promise, cell by cell.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import onnxruntime
import pytest

from harness.cases import corpus
from harness.config.matrix import Matrix, Profile, load
from harness.core.records import CellRecord, ExportRecord, Status
from harness.export.stage import export_all
from harness.publish import claims
from harness.run.stage import run_runtime
from harness.store.layout import read_shard, shard_path

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`


ROOT = Path(__file__).resolve().parent.parent
MATRIX = load(ROOT / "matrix.toml")
REGISTRY = corpus.load(MATRIX.corpus, ROOT)
TWINS = [c.name for c in REGISTRY if c.fixes]


NEWEST = MATRIX.runtime(onnxruntime.__version__)
# Claims about the newest runtime are checked live here; the others against the published table (test_results.py).
LIVE_CLAIMS = [(case.name, claim) for case in REGISTRY for claim in case.claims if claim.runtime in (None, NEWEST.pin)]


def _export_and_run(out: Path, opset: int, cases: list[str] | None) -> list[CellRecord]:
    profile = Profile(f"test-op{opset}", (NEWEST,), ("cpu",), ("torchscript", "dynamo"), (opset,))
    export_all(MATRIX, profile, MATRIX.corpus, out, root=ROOT, cases=cases, echo=lambda _: None)
    return run_runtime(MATRIX, NEWEST, ["cpu"], out, echo=lambda _: None)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Matrix]]:
    """Every case at opset 18 on both exporters, on the newest runtime (this environment's)."""
    out = tmp_path_factory.mktemp("build")
    _export_and_run(out, 18, None)
    yield out, MATRIX


@pytest.fixture(scope="module")
def claim_cells(run: tuple[Path, Matrix], tmp_path_factory: pytest.TempPathFactory) -> list[CellRecord]:
    """The opset-18 cells plus those of other opsets that claims name (only those cases)."""
    out, _ = run
    cells = list(read_shard(shard_path(out, NEWEST, "cpu")).values())
    opsets = sorted({claim.opset for _, claim in LIVE_CLAIMS if claim.opset not in (None, 18)})
    for opset in opsets:
        names = sorted({name for name, claim in LIVE_CLAIMS if claim.opset == opset})
        cells += _export_and_run(tmp_path_factory.mktemp(f"op{opset}"), opset, names)
    return cells


def _cells(out: Path, case: str, exporter: str | None = None) -> dict[tuple[str, str], CellRecord]:
    cells = read_shard(shard_path(out, NEWEST, "cpu")).values()
    return {(c.exporter, c.probe): c for c in cells if c.case == case and exporter in (None, c.exporter)}


def _export(out: Path, case: str, exporter: str) -> ExportRecord:
    path = out / "artifacts" / f"{case}.{exporter}.op18" / "export.json"
    return ExportRecord.from_dict(json.loads(path.read_text()))


@pytest.mark.parametrize(("case", "claim"), LIVE_CLAIMS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(LIVE_CLAIMS)])
def test_claim_holds_where_it_was_reproduced(claim_cells: list[CellRecord], case: str, claim: corpus.Claim) -> None:
    verdict = claims.holds(claim.to_dict(), case, claim_cells, NEWEST.pin)
    chosen = claims.cells_for(claim.to_dict(), case, claim_cells, NEWEST.pin)
    seen = sorted({(c.exporter, c.probe, c.status.value, (c.error_line or "")[:80]) for c in chosen})
    assert verdict is True, f"{claims.describe(claim.to_dict(), NEWEST.pin)} not shown; measured: {seen}"


@pytest.mark.parametrize("case", REGISTRY.names())
def test_every_case_exports_and_runs_every_probe(run: tuple[Path, Matrix], case: str) -> None:
    out, _ = run
    cells = _cells(out, case)
    for exporter in ("torchscript", "dynamo"):
        rec = _export(out, case, exporter)
        assert "example" in rec.probes
        assert {p for (e, p) in cells if e == exporter} == set(rec.probes)
        if rec.ok:
            assert (out / "artifacts" / rec.key.id / "model.onnx").is_file()
            assert rec.checker and rec.ir_version and rec.opset_actual
    for cell in cells.values():
        # a corpus case may fail in many ways, but never by crashing the harness
        assert cell.status not in (Status.CRASH, Status.TIMEOUT, Status.ENV_ERROR), cell.error
        if cell.status in (Status.PASS, Status.MISMATCH):
            assert cell.diff is not None and (cell.diff.total > 0 or cell.diff.shape_mismatch)
            assert cell.providers_used[0] == "CPUExecutionProvider"


@pytest.mark.parametrize("case", TWINS)
def test_fixed_twins_pass(run: tuple[Path, Matrix], case: str) -> None:
    out, _ = run
    for (exporter, probe), cell in _cells(out, case).items():
        if (case, exporter) == ("loop_scripted", "dynamo"):
            # the scripted twin is a TorchScript-exporter fix: it says so, and its dynamo cells are skipped
            assert cell.status is Status.SKIPPED and cell.error_line == REGISTRY["loop_scripted"].skip_reason
            continue
        assert cell.status is Status.PASS, f"{exporter}/{probe}: {cell.error_line}"


def test_frozen_batch_fails_at_batch_8(run: tuple[Path, Matrix]) -> None:
    out, _ = run
    for exporter in ("torchscript", "dynamo"):
        cells = _cells(out, "frozen_batch", exporter)
        assert cells[(exporter, "example")].status is Status.PASS
        bad = cells[(exporter, "batch8")]
        assert bad.status is Status.RUN_FAIL
        assert "Got invalid dimensions" in (bad.error_line or "")
        assert "Got: 8 Expected: 1" in (bad.error_line or "")


def test_data_dependent_branch_is_a_mismatch_on_negative_inputs_for_torchscript(run: tuple[Path, Matrix]) -> None:
    out, _ = run
    cells = _cells(out, "data_dependent_branch", "torchscript")
    assert cells[("torchscript", "example")].status is Status.PASS
    neg = cells[("torchscript", "negative")]
    assert neg.status is Status.MISMATCH
    assert neg.diff is not None and neg.diff.mismatched == neg.diff.total and neg.diff.max_abs is not None
    assert neg.diff.max_abs > 50  # x - 100 against x * 2
    rec = _export(out, "data_dependent_branch", "torchscript")
    assert rec.warnings[0]["category"] == "TracerWarning"  # TracerWarnings come first


def test_data_dependent_branch_is_refused_by_dynamo_in_torch_2_13(run: tuple[Path, Matrix]) -> None:
    out, _ = run
    rec = _export(out, "data_dependent_branch", "dynamo")
    assert not rec.ok
    assert "data-dependent" in (rec.error_line or "")
    assert {c.status for c in _cells(out, "data_dependent_branch", "dynamo").values()} == {Status.EXPORT_FAIL}


def test_fft_rfft_is_an_export_fail_for_torchscript_and_runs_for_dynamo_at_18(run: tuple[Path, Matrix]) -> None:
    out, _ = run
    rec = _export(out, "fft_rfft", "torchscript")
    assert not rec.ok and rec.error_class == "UnsupportedOperatorError"
    assert "aten::fft_rfft" in (rec.error_line or "")
    assert {c.status for c in _cells(out, "fft_rfft", "torchscript").values()} == {Status.EXPORT_FAIL}
    assert {c.status for c in _cells(out, "fft_rfft", "dynamo").values()} == {Status.PASS}


def test_loop_count_is_frozen_by_tracing(run: tuple[Path, Matrix]) -> None:
    out, _ = run
    for exporter in ("torchscript", "dynamo"):
        cells = _cells(out, "loop_unrolled", exporter)
        assert cells[(exporter, "example")].status is Status.PASS
        other = [c for (e, p), c in cells.items() if p.startswith("n")]  # other loop counts than the export's
        assert other and all(c.status is Status.MISMATCH for c in other)
        assert all("not graph inputs" in (c.note or "") for c in other)


def test_constants_in_forward_vs_buffers_graph_counts(run: tuple[Path, Matrix]) -> None:
    out, _ = run
    # TorchScript keeps tensors built in forward() as Constant nodes; buffers become initializers.
    inline = _export(out, "constants_in_forward", "torchscript").graph
    buffers = _export(out, "constants_as_buffers", "torchscript").graph
    assert (inline["constants"], inline["initializers"]) == (2, 0)
    assert (buffers["constants"], buffers["initializers"]) == (0, 2)
    # dynamo lifts both into initializers: the gotcha is the TorchScript exporter's
    assert _export(out, "constants_in_forward", "dynamo").graph["constants"] == 0


def test_latency_is_measured_for_passing_example_probes(run: tuple[Path, Matrix]) -> None:
    out, _ = run
    cell = _cells(out, "frozen_batch_fixed", "torchscript")[("torchscript", "example")]
    assert cell.latency is not None
    assert cell.latency.runs >= MATRIX.latency.min_runs
    assert 0 < cell.latency.median_ms <= cell.latency.p90_ms
    assert cell.latency.threads == MATRIX.latency.threads


def test_rerun_reuses_unchanged_cells_and_redoes_changed_ones(run: tuple[Path, Matrix]) -> None:
    out, matrix = run
    runtime = matrix.runtime(onnxruntime.__version__)
    shard = shard_path(out, runtime, "cpu")
    before = read_shard(shard)
    lines: list[str] = []
    run_runtime(matrix, runtime, ["cpu"], out, echo=lines.append)
    assert " 0 to run" in lines[0]
    assert read_shard(shard) == before
    # one artifact's tolerance changes (an input of its verdict): that artifact alone runs again
    path = out / "artifacts" / "nan_chain.torchscript.op18" / "export.json"
    data = json.loads(path.read_text())
    data["atol"] = 1e9
    path.write_text(json.dumps(data))
    lines.clear()
    run_runtime(matrix, runtime, ["cpu"], out, echo=lines.append)
    assert " 1 to run" in lines[0]
    after = read_shard(shard)
    assert after.keys() == before.keys()
    changed = {k for k in after if after[k] != before[k]}
    assert changed and all(k.startswith("nan_chain|torchscript|op18|") for k in changed)
    assert len(shard.read_text().splitlines()) == len(after)  # compacted: one line per cell


def test_every_mismatch_says_where_it_starts_and_whether_the_optimizer_is_to_blame(claim_cells: list[CellRecord]) -> None:
    mismatches = [c for c in claim_cells if c.status is Status.MISMATCH]
    assert mismatches
    for c in mismatches:
        assert c.localization, c.key
        assert c.optimizer is not None, c.key
    by_key = {(c.case, c.exporter, c.probe): c for c in mismatches if c.opset == 18}
    # a dynamo export that differs from torch names the torch value where it starts
    chain = by_key[("nan_chain", "dynamo", "constant_row")].localization or ""
    assert chain.startswith("the graph differs from torch from FX value div = aten.div.Tensor")
    # a probe the export specialized away names the guard it breaks
    assert by_key[("loop_unrolled", "dynamo", "n5")].localization == "the probe breaks the export's guards: Guard failed: n == 3"
    # TorchScript has no torch value per ONNX value: the first differing output and its node
    branch = by_key[("data_dependent_branch", "torchscript", "negative")].localization or ""
    assert branch.startswith("the graph itself differs from torch: output out0 of node /Mul (Mul)")


def test_export_records_what_a_mismatch_is_localized_with(run: tuple[Path, Matrix]) -> None:
    out, matrix = run
    for exporter in ("torchscript", "dynamo"):
        rec = _export(out, "nan_chain", exporter)
        assert rec.reference_runtime == f"onnxruntime=={matrix.export.onnxruntime}"
        assert rec.intermediates_sha256
        art = out / "artifacts" / rec.key.id
        nodes = json.loads((art / "nodes.json").read_text())
        assert len(nodes) == rec.graph["nodes"]
        assert (art / "model.debug.onnx").is_file() and (art / "intermediates.npz").is_file()


@pytest.mark.parametrize("case", ["layer_norm_no_keepdim", "rms_norm_no_keepdim", "rms_norm_rsqrt_no_keepdim"])
def test_the_optimizer_is_blamed_where_a_fusion_changes_the_result(run: tuple[Path, Matrix], case: str) -> None:
    """onnxruntime's norm fusions ignore keepdims=0: wrong with the default session, right with optimizations off."""
    out, _ = run
    cells = _cells(out, case, "torchscript")
    assert {c.status for c in cells.values()} == {Status.MISMATCH}
    assert all(c.optimizer is True for c in cells.values())
    twin = _cells(out, f"{case}_fixed")
    assert twin and all(c.status is Status.PASS for c in twin.values())


def test_the_dynamo_exporter_really_refuses_the_scripted_twin(tmp_path: Path) -> None:
    """Why loop_scripted is skipped under dynamo, not assumed: torch 2.13's dynamo exporter, given the twin's
    ScriptModule, raises (so a dynamo user must write the loop another way)."""
    import warnings

    import torch

    case = REGISTRY["loop_scripted"]
    scripted = torch.jit.script(case.model().eval())
    with warnings.catch_warnings(), pytest.raises(Exception, match="ScriptModule is not supported"):
        warnings.simplefilter("ignore")
        torch.onnx.export(scripted, tuple(case.inputs().values()), str(tmp_path / "m.onnx"), dynamo=True)
