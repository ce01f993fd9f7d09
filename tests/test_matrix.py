"""matrix.toml validation: the real file loads; every bad input is one line naming key and fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.config import runtimes
from harness.config.matrix import EXPORTER_OPSETS, load, version_tuple
from harness.core.errors import HarnessError

ROOT = Path(__file__).resolve().parent.parent

GOOD = """
[export]
torch = "2.13.0"
onnx = "1.23.2"
onnxscript = "0.7.2"

[corpus]
modules = ["models.articles"]

[[runtimes]]
pin = "onnxruntime==1.17.3"
constraints = ["numpy<2"]

[[runtimes]]
pin = "onnxruntime==1.32.0"

[profiles.default]
runtimes = ["onnxruntime==1.17.3", "onnxruntime==1.32.0"]
providers = ["cpu"]
exporters = ["torchscript", "dynamo"]
opsets = [17, 18]
"""


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return load(path)


def test_the_committed_matrix_loads_and_meets_the_profile_rules() -> None:
    m = load(ROOT / "matrix.toml")
    default = m.profile("default")
    assert set(default.exporters) == {"torchscript", "dynamo"}
    # every opset each exporter writes as asked, from 13 (TorchScript) and 18 (dynamo, what it builds) to its last: so
    # every runtime's frontier (results/README.md, "What each runtime loads") is measured for both exporters
    assert default.opsets_of("torchscript") == tuple(range(13, EXPORTER_OPSETS["torchscript"][1] + 1))
    assert default.opsets_of("dynamo") == tuple(range(18, EXPORTER_OPSETS["dynamo"][1] + 1))
    assert min(default.opsets_of("dynamo")) >= 18  # below 18 dynamo rewrites the request: profile `full` asks it
    full_profile = m.profile("full")
    for exporter, (_, high) in EXPORTER_OPSETS.items():
        assert set(default.opsets_of(exporter)) <= set(full_profile.opsets_of(exporter))
        assert max(full_profile.opsets_of(exporter)) == high
    assert m.profile("nightly").exports() == default.exports()
    # default: the newest patch of every minor from 1.10 to the newest (1.10 to 1.14 on the Python their wheels stop at)
    full = {version_tuple(rt.version)[:2]: rt.version for rt in default.runtimes}
    newest_patch: dict[tuple[int, ...], str] = {}
    ort = runtimes.kind("onnxruntime")
    for v in (*ort.older, *ort.releases):
        newest_patch[version_tuple(v)[:2]] = max(newest_patch.get(version_tuple(v)[:2], v), v, key=version_tuple)
    assert full == newest_patch
    assert set(m.profile("quick").runtimes) < set(default.runtimes)
    # the reference runtime is the newest
    assert version_tuple(m.export.onnxruntime) == max(version_tuple(v) for v in runtimes.kind("onnxruntime").releases)
    # runtimes before 1.19 were built against numpy 1.x: the constraint must travel with them
    for rt in m.runtimes:
        assert ("numpy<2" in rt.constraints) == (version_tuple(rt.version) < (1, 19)), rt.pin
        # a release with no wheel for the project's Python runs on the newest its wheels have; the others on ours
        assert rt.python == (rt.kind.older[rt.version][1] if rt.version in rt.kind.older else ""), rt.pin


def test_good_minimal_file(tmp_path: Path) -> None:
    m = _load(tmp_path, GOOD)
    assert [rt.id for rt in m.profile("default").runtimes] == ["ort-1.17.3", "ort-1.32.0"]
    assert m.runtime("1.17.3").requirements == ("onnxruntime==1.17.3", "numpy<2")


OLD_RUNTIME = '\n[[runtimes]]\npin = "onnxruntime==1.12.1"\nconstraints = ["numpy<2"]\n'

BAD = [
    ("unknown-top-key", GOOD + "\n[colour]\nx = 1\n", r"matrix\.toml: colour: unknown key; allowed: .*"),
    # a release built only for older Pythons: its entry names the one its wheels stop at
    (
        "old-release-without-python",
        GOOD + OLD_RUNTIME,
        r"runtimes\[2\]\.pin: onnxruntime==1\.12\.1 has no wheel for Python 3\.11 or newer \(its wheels stop at 3\.10\): "
        r'add python = "3\.10"',
    ),
    (
        "python-its-wheels-lack",
        GOOD + OLD_RUNTIME + 'python = "3.11"\n',
        r"runtimes\[2\]\.python: onnxruntime==1\.12\.1 has wheels for Python 3\.7 to 3\.10 only, not 3\.11",
    ),
    (
        "python-older-than-the-run-stage",
        GOOD + OLD_RUNTIME + 'python = "3.8"\n',
        r"runtimes\[2\]\.python: the run stage runs on Python 3\.9 or newer, not 3\.8; name 3\.10 or newer",
    ),
    (
        "python-not-a-minor",
        GOOD + OLD_RUNTIME + 'python = "3.10.13"\n',
        r"runtimes\[2\]\.python: must be a Python minor version such as \"3\.10\", got '3\.10\.13'",
    ),
    (
        "unknown-key-typo",
        GOOD.replace("opsets = [17, 18]", "opset = [17, 18]"),
        r"profiles\.default\.opset: unknown key \(did you mean 'opsets'\?\)",
    ),
    (
        "unpinned",
        GOOD.replace('pin = "onnxruntime==1.32.0"', 'pin = "onnxruntime==1.17"'),
        r'runtimes\[1\]\.pin: "onnxruntime==1\.17" is not pinned; write "onnxruntime==1\.17\.3"',
    ),
    (
        "bare-version",
        GOOD.replace('pin = "onnxruntime==1.32.0"', 'pin = "1.20.1"'),
        r"runtimes\[1\]\.pin: '1\.20\.1' is not a pin; write \"onnxruntime==1\.20\.1\"",
    ),
    (
        "never-released",
        GOOD.replace('pin = "onnxruntime==1.32.0"', 'pin = "onnxruntime==1.17.2"'),
        r"onnxruntime 1\.17\.2 is not a known release; nearest: 1\.17\.1, 1\.17\.3",
    ),
    (
        "opset-range",
        GOOD.replace("opsets = [17, 18]", "opsets = [17, 99]"),
        r"profiles\.default\.opsets: opset 99 is out of range; the torchscript exporter writes 7\.\.23",
    ),
    (
        "opset-range-per-exporter",
        GOOD.replace("opsets = [17, 18]", "opsets = { torchscript = [18, 24], dynamo = [18] }"),
        r"profiles\.default\.opsets\.torchscript: opset 24 is out of range; the torchscript exporter writes 7\.\.23",
    ),
    (
        "opsets-missing-an-exporter",
        GOOD.replace("opsets = [17, 18]", "opsets = { torchscript = [18] }"),
        r"profiles\.default\.opsets: has no list for dynamo; add `dynamo = \[18\]` or drop it from exporters",
    ),
    (
        "opsets-unknown-exporter",
        GOOD.replace("opsets = [17, 18]", "opsets = { torchscript = [18], dynamo = [18], dynamoo = [21] }"),
        r"profiles\.default\.opsets\.dynamoo: unknown key \(did you mean 'dynamo'\?\)",
    ),
    (
        "opsets-per-exporter-duplicate",
        GOOD.replace("opsets = [17, 18]", "opsets = { torchscript = [18], dynamo = [21, 21] }"),
        r"profiles\.default\.opsets\.dynamo: lists 21 twice; remove the duplicate",
    ),
    (
        "provider",
        GOOD.replace('providers = ["cpu"]', 'providers = ["cpu", "cudaa"]'),
        r"profiles\.default\.providers: unknown provider 'cudaa' \(did you mean 'cuda'\?\)",
    ),
    (
        "exporter",
        GOOD.replace('exporters = ["torchscript", "dynamo"]', 'exporters = ["fx"]'),
        r"profiles\.default\.exporters: unknown exporter 'fx'",
    ),
    (
        "empty-axis",
        GOOD.replace("opsets = [17, 18]", "opsets = []"),
        r"profiles\.default\.opsets: is empty; list at least one entry",
    ),
    (
        "duplicate-opset",
        GOOD.replace("opsets = [17, 18]", "opsets = [17, 17]"),
        r"profiles\.default\.opsets: lists 17 twice; remove the duplicate",
    ),
    (
        "duplicate-runtime",
        GOOD.replace('pin = "onnxruntime==1.32.0"', 'pin = "onnxruntime==1.17.3"'),
        r"runtimes\[1\]\.pin: onnxruntime==1\.17\.3 is declared twice",
    ),
    (
        "undeclared-runtime",
        GOOD.replace('runtimes = ["onnxruntime==1.17.3", "onnxruntime==1.32.0"]', 'runtimes = ["onnxruntime==1.20.1"]'),
        r"profiles\.default\.runtimes: onnxruntime==1\.20\.1 is not declared; add a \[\[runtimes\]\] entry",
    ),
    ("no-default-profile", GOOD.replace("[profiles.default]", "[profiles.nightly]"), r"profiles: has no \[profiles\.default\]"),
    (
        "stability-not-a-fraction",
        GOOD + "\n[latency]\nstability = 1.5\n",
        r"latency\.stability: must be between 0 and 1 \(a fraction, e\.g\. 0\.02\), got 1\.5",
    ),
    (
        "corpus-module-missing",
        GOOD.replace('modules = ["models.articles"]', 'modules = ["models.articles", "nosuchpkg.cases"]'),
        r"corpus\.modules: 'nosuchpkg\.cases': no module 'nosuchpkg' here or installed; fix the name or remove it",
    ),
    (
        "corpus-file-missing",
        GOOD.replace('modules = ["models.articles"]', 'modules = ["models.articles", "mine.py"]'),
        r"corpus\.modules: 'mine\.py': no such file under .*; fix the path or remove it",
    ),
    (
        "profile-name-a-path",
        GOOD.replace(
            "[profiles.default]",
            '[profiles."../elsewhere"]\nruntimes = ["onnxruntime==1.32.0"]\nopsets = [18]\n\n[profiles.default]',
        ),
        r"profiles: profile name '\.\./elsewhere' must be letters, digits, '-', '_' or '\.' \(it names a folder\)",
    ),
    (
        "wrong-type",
        GOOD.replace("opsets = [17, 18]", 'opsets = "17"'),
        r"profiles\.default\.opsets: must be list or dict, got '17'",
    ),
    ("not-toml", GOOD + "\n[broken\n", r"matrix\.toml: not valid TOML"),
    ("export-unpinned", GOOD.replace('torch = "2.13.0"', 'torch = "2.13"'), r"export\.torch: '2\.13' is not pinned"),
    (
        "requirement-not-a-requirement",
        GOOD.replace('onnxscript = "0.7.2"', 'onnxscript = "0.7.2"\nrequirements = ["transformers; os_name == \'nt\'"]'),
        r"export\.requirements: \"transformers; os_name == 'nt'\" is not a requirement; write \"name==version\" \(or a range\)",
    ),
    (
        "requirement-replaces-torch",
        GOOD.replace('onnxscript = "0.7.2"', 'onnxscript = "0.7.2"\nrequirements = ["Torch>=2.14"]'),
        r"export\.requirements: torch is pinned by \[export\] itself; change \[export\] torch instead",
    ),
    (
        "export-timeout-zero",
        GOOD.replace('onnxscript = "0.7.2"', 'onnxscript = "0.7.2"\ntimeout = 0'),
        r"export\.timeout: must be >= 1, got 0",
    ),
    ("atol-nan", GOOD + "\n[tolerance]\natol = nan\n", r"tolerance\.atol: must be a finite number, got nan"),
    ("scaled-inf", GOOD + "\n[tolerance]\nscaled = inf\n", r"tolerance\.scaled: must be a finite number, got inf"),
    ("run-timeout-inf", GOOD + "\n[run]\ntimeout = inf\n", r"run\.timeout: must be a finite number, got inf"),
]


@pytest.mark.parametrize(("text", "pattern"), [(t, p) for _, t, p in BAD], ids=[i for i, _, _ in BAD])
def test_bad_input_is_one_line_naming_key_and_fix(tmp_path: Path, text: str, pattern: str) -> None:
    with pytest.raises(HarnessError) as info:
        _load(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("matrix.toml: ")
    assert re.search(pattern, message), message


def test_an_older_release_names_its_python_and_its_environment_reads_toml_without_tomllib(tmp_path: Path) -> None:
    rt = _load(tmp_path, GOOD + OLD_RUNTIME + 'python = "3.10"\n').runtime("1.12.1")
    assert rt.python == "3.10" and rt.id == "ort-1.12.1"
    assert rt.requirements == ("onnxruntime==1.12.1", "numpy<2", "tomli")
    assert _load(tmp_path, GOOD).runtime("1.17.3").python == ""


def test_missing_profile_lists_the_profiles(tmp_path: Path) -> None:
    m = _load(tmp_path, GOOD)
    with pytest.raises(HarnessError, match=r"no profile 'defualt' \(did you mean 'default'\?\); profiles are: default"):
        m.profile("defualt")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="no such file"):
        load(tmp_path / "nope.toml")


def test_export_budgets_requirements_and_the_scaled_tolerance(tmp_path: Path) -> None:
    text = GOOD.replace(
        'onnxscript = "0.7.2"',
        'onnxscript = "0.7.2"\nrequirements = ["transformers==5.24.0", "timm>=1.0,<2"]\ntimeout = 900\nreference_timeout = 60',
    )
    m = _load(tmp_path, text + "\n[tolerance]\nscaled = 2e-5\n")
    assert m.export.requirements == ("transformers==5.24.0", "timm>=1.0,<2")
    assert (m.export.timeout, m.export.reference_timeout) == (900.0, 60.0)
    assert m.scaled == 2e-5
    defaults = _load(tmp_path, GOOD)
    assert defaults.export.requirements == () and defaults.scaled == 1e-5
    assert (defaults.export.timeout, defaults.export.reference_timeout) == (600.0, 300.0)


def test_a_profile_can_ask_each_exporter_for_its_own_opsets(tmp_path: Path) -> None:
    m = _load(tmp_path, GOOD.replace("opsets = [17, 18]", "opsets = { torchscript = [20, 17], dynamo = [18, 28] }"))
    prof = m.profile("default")
    assert prof.opsets_of("torchscript") == (17, 20) and prof.opsets_of("dynamo") == (18, 28)
    assert prof.opsets == (17, 18, 20, 28)  # the union, for what reads the whole axis
    assert prof.exports() == [("torchscript", 17), ("torchscript", 20), ("dynamo", 18), ("dynamo", 28)]
    same = _load(tmp_path, GOOD.replace("opsets = [17, 18]", "opsets = { torchscript = [17, 18], dynamo = [18, 17] }"))
    assert same.profile("default").exporter_opsets == ()  # the same list for both is the plain form
    assert same.profile("default").exports() == [(e, o) for e in ("torchscript", "dynamo") for o in (17, 18)]


@pytest.mark.torch
def test_each_exporter_s_range_is_what_torch_writes(tmp_path: Path) -> None:
    """EXPORTER_OPSETS, which the profiles are checked against, asked of the real exporters (torch 2.13):
    TorchScript writes its last opset as asked and refuses the next; dynamo writes 18 and its last as asked,
    and rewrites a request below 18 for a model its converter cannot take down (a Reduce with axes)."""
    import warnings

    import onnx
    import torch

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x).mean(dim=1) + 1

    def written(exporter: str, opset: int) -> int:
        path = tmp_path / f"{exporter}{opset}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Net(), (torch.randn(2, 3),), str(path), opset_version=opset, dynamo=exporter == "dynamo")
        return next(o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx"))

    ts_high = EXPORTER_OPSETS["torchscript"][1]
    assert written("torchscript", ts_high) == ts_high and written("torchscript", 13) == 13
    with pytest.raises(Exception, match=f"Unsupported onnx_opset_version: {ts_high + 1}"):
        written("torchscript", ts_high + 1)
    dyn_high = EXPORTER_OPSETS["dynamo"][1]
    assert written("dynamo", dyn_high) == dyn_high and written("dynamo", 18) == 18 and written("dynamo", 21) == 21
    assert written("dynamo", dyn_high + 1) == 18  # past its converter's last: it keeps what it built
    assert written("dynamo", 17) == 18


def test_a_matrix_path_that_is_a_folder_or_not_utf8_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=r": is a folder; pass the matrix file itself, e\.g\. --matrix .*matrix\.toml$"):
        load(tmp_path)
    (tmp_path / "matrix.toml").write_bytes(b"\xff\xfe[export]\n")
    with pytest.raises(HarnessError, match=r"matrix\.toml: not UTF-8 text \(byte 0: invalid start byte\); save it as UTF-8$"):
        load(tmp_path / "matrix.toml")


@pytest.mark.parametrize("results", ['""', '"."', '"/tmp/x"', '"../x"'])
def test_a_results_folder_that_is_not_inside_the_project_is_one_line(tmp_path: Path, results: str) -> None:
    """``results = ""`` is not the default folder: written, it must name one (left out, the default applies)."""
    text = GOOD.replace('opsets = [17, 18]\n"""', 'opsets = [17, 18]\n').replace(
        "opsets = [17, 18]\n", f"opsets = [17, 18]\nresults = {results}\n"
    )
    with pytest.raises(HarnessError, match=r"profiles\.default\.results: .* must be a folder inside the project"):
        _load(tmp_path, text)
