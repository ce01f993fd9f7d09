"""The corpus API: what a case file declares (its requirements, its tolerances) is checked before use."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cases import corpus
from harness.core.errors import HarnessError

ROOT = Path(__file__).resolve().parent.parent


def test_a_corpus_file_declares_its_requirements_without_being_imported(tmp_path: Path) -> None:
    source = tmp_path / "mine.py"
    source.write_text('import not_installed_here\nREQUIREMENTS = ["transformers==5.24.0", "timm>=1.0"]\n')
    assert corpus.declared_requirements(str(source), tmp_path) == ("transformers==5.24.0", "timm>=1.0")
    assert corpus.declared_requirements("examples/hf_models.py", ROOT) == ("transformers==5.24.0",)
    assert corpus.declared_requirements("models.articles", ROOT) == ()  # a dotted module, none declared
    source.write_text("REQUIREMENTS = ['torch==2.1']\n")
    with pytest.raises(HarnessError, match=r"REQUIREMENTS: torch is pinned by \[export\] itself"):
        corpus.declared_requirements(str(source), tmp_path)
    source.write_text("REQUIREMENTS = [name for name in ('a',)]\n")
    with pytest.raises(HarnessError, match=r"REQUIREMENTS must be a literal list of strings"):
        corpus.declared_requirements(str(source), tmp_path)


def test_a_missing_package_is_one_line_naming_the_option_that_adds_it(tmp_path: Path) -> None:
    source = tmp_path / "needs_pkg.py"
    source.write_text("import no_such_package_xyz.sub\n")
    registry = corpus.load([str(source)], tmp_path)
    (line,) = registry.import_failures
    assert line == (
        f"corpus {source}: import failed: ModuleNotFoundError: No module named 'no_such_package_xyz'; add the package that "
        "provides 'no_such_package_xyz' to the export environment: `nox -s matrix -- --with no_such_package_xyz` for one "
        'run, REQUIREMENTS = ["no_such_package_xyz==..."] in the corpus file, or [export] requirements in matrix.toml'
    )
    (tmp_path / "helpers.py").write_text("import does_not_exist_either\n")  # a local module's own typo: no package hint
    local = tmp_path / "local.py"
    local.write_text("import helpers\n")
    (line,) = corpus.load([str(local)], tmp_path).import_failures
    assert line.endswith(
        "No module named 'does_not_exist_either'; add the package that provides 'does_not_exist_either' to the export "
        "environment: `nox -s matrix -- --with does_not_exist_either` for one run, "
        'REQUIREMENTS = ["does_not_exist_either==..."] in the corpus file, or [export] requirements in matrix.toml'
    )
    (tmp_path / "pkg").mkdir()  # a folder of the user's own tree that is not importable: no package to install
    (tmp_path / "uses_pkg.py").write_text("import pkg.missing\n")
    (line,) = corpus.load([str(tmp_path / "uses_pkg.py")], tmp_path).import_failures
    assert line.endswith("No module named 'pkg.missing'"), line


BAD_TOLERANCES = [
    ({"atol": float("nan")}, r"atol must be a finite number >= 0, got nan"),
    ({"scaled": -1.0}, r"scaled must be a finite number >= 0, got -1.0"),
    ({"export_timeout": 0}, r"export_timeout must be > 0 seconds, got 0"),
    ({"output_tolerance": {"out0": {"atol": 1.0}}}, r"output_tolerance keys are output indices \(0, 1, \.\.\.\), got 'out0'"),
    ({"output_tolerance": {0: {"atl": 1.0}}}, r"output_tolerance\[0\]: unknown key 'atl'; use atol, rtol, scaled"),
    ({"output_tolerance": {0: {"rtol": float("inf")}}}, r"output_tolerance\[0\]\['rtol'\] must be a finite number >= 0, got inf"),
    # Issue 26: atol = 1e300 published real mismatches as pass; a case's own bound is capped as matrix.toml's is.
    ({"atol": 1e300}, r"atol must be <= 0\.1 \(a wider bound passes real mismatches\), got 1e\+300"),
    ({"output_tolerance": {1: {"scaled": 0.5}}}, r"output_tolerance\[1\]\['scaled'\] must be <= 0\.1 .*, got 0\.5"),
]


@pytest.mark.parametrize(("fields", "pattern"), BAD_TOLERANCES)
def test_a_tolerance_that_is_not_a_number_is_refused(fields: dict, pattern: str) -> None:  # type: ignore[type-arg]
    case = corpus.Case(name="tol", model=lambda: None, inputs=lambda: {}, source_file="mine.py", **fields)  # type: ignore[arg-type,return-value]
    with pytest.raises(HarnessError, match=pattern):
        corpus.Registry().add(case)


def test_the_export_requirements_merge_matrix_toml_the_command_line_and_the_corpus_files(tmp_path: Path) -> None:
    from harness.cases.corpus import requirements_of
    from harness.config.matrix import load

    text = (
        (ROOT / "matrix.toml")
        .read_text()
        .replace('onnxruntime = "1.32.0"\n', 'onnxruntime = "1.32.0"\nrequirements = ["timm==1.0.20"]\n', 1)
    )
    (tmp_path / "matrix.toml").write_text(text)
    matrix = load(tmp_path / "matrix.toml")
    assert matrix.export.requirements == ("timm==1.0.20",)
    got = requirements_of(matrix, ["einops>=0.8", "timm==1.0.20"], [*matrix.corpus, "examples/hf_models.py"], ROOT)
    assert got == ["timm==1.0.20", "einops>=0.8", "transformers==5.24.0"]  # each once, matrix.toml's first
    with pytest.raises(HarnessError, match=r"^--with: onnxruntime is pinned by \[export\] itself"):
        requirements_of(matrix, ["onnxruntime==1.20.1"], [], ROOT)
    with pytest.raises(HarnessError, match=r"^--with: 'https://example.com/x.whl' is not a requirement"):
        requirements_of(matrix, ["https://example.com/x.whl"], [], ROOT)


def test_a_case_for_one_exporter_says_why_the_other_does_not_apply() -> None:
    """Its cells under the other exporter are `skipped` with that reason: a case that narrows its exporters
    without one, or to none, is refused at registration."""

    def case(**fields: object) -> corpus.Case:
        return corpus.Case(name="mine", model=lambda: None, inputs=lambda: {}, source_file="mine.py", **fields)  # type: ignore[arg-type,return-value]

    with pytest.raises(HarnessError, match=r"case 'mine' applies to torchscript only: set skip_reason to say why"):
        corpus.Registry().add(case(exporters=("torchscript",)))
    with pytest.raises(HarnessError, match=r"case 'mine': exporters is empty"):
        corpus.Registry().add(case(exporters=()))
    corpus.Registry().add(case(exporters=("torchscript",), skip_reason="a ScriptModule"))
    scripted = corpus.load(["models.articles"], ROOT)["loop_scripted"]
    assert scripted.exporters == ("torchscript",) and "torchscript exporter only" in scripted.skip_reason


def test_a_corpus_module_that_registers_no_case_is_one_line(tmp_path: Path) -> None:
    """Issue 26: `corpus = "os"` was accepted and added nothing; a corpus source must register a case."""
    (tmp_path / "helpers.py").write_text("X = 1\n")
    registry = corpus.load(["os", str(tmp_path / "helpers.py")], tmp_path)
    assert len(registry) == 0
    assert registry.import_failures == [
        f"corpus {source}: registers no case (a corpus module calls harness.cases.corpus.register); "
        "remove it from [corpus] modules or --corpus, or register its cases"
        for source in ("os", str(tmp_path / "helpers.py"))
    ]
