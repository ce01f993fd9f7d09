"""``harness``: the command line. Each subcommand is one stage.

User errors (:class:`HarnessError`) print one line to stderr and exit 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness.config.matrix import Matrix, Profile, Runtime
from harness.core.errors import HarnessError
from harness.core.records import first_line
from harness.store import lock

RUNTIME_EXAMPLES = ("onnxruntime==1.17.3", "1.17.3", "ort-1.17.3", "ortov-1.24.1 (in results/openvino/)")
"""``recommend --runtime``'s examples: each answered by a published table (tests/test_recommend.py asks each)."""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--matrix", default="matrix.toml", help="the matrix file (default: matrix.toml)")
    _profile_arg(p)


def _profile_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="default", help="profile of matrix.toml (default: default)")
    p.add_argument("--out", default="build", help="build directory (default: build)")
    p.add_argument(
        "--torch",
        default=None,
        metavar="X.Y.Z",
        help="one torch release of a profile that lists them (its build folder is <out>/torch/X.Y.Z, its table <results>/X.Y.Z)",
    )
    p.add_argument(
        "--transform",
        action="append",
        default=None,
        metavar="NAME",
        help="a transform of a profile that lists them (int8-qdq-u8, fp16, ...): its build folder is "
        "<out>/transforms/NAME, its table <results>/NAME (run: repeatable, each in turn in one process)",
    )


def _corpus_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--corpus", action="append", default=[], metavar="FILE_OR_MODULE", help="add a corpus module or .py file (repeatable)"
    )
    p.add_argument("--only-corpus", action="store_true", help="use only the --corpus files, not matrix.toml's [corpus]")
    p.add_argument("--cases", default=None, metavar="A,B", help="only these cases (comma-separated names)")


def _with_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--with",
        dest="with_",
        action="append",
        default=[],
        metavar="PKG",
        help="a requirement the export environment was given for this run (nox -s matrix -- --with PKG installs it; repeatable)",
    )


def _results_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--results",
        default=None,
        help="the report's folder (default: the profile's results, else results/ for profile default, else "
        "<out>/results/<profile>/)",
    )


def _force_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--force", action="store_true", help=f"{what}, ignoring the cache")


def _no_latency_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-latency", action="store_true", help="skip the latency phase")


def _partial_arg(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--partial", action="store_true", help=help)


_PARTIAL_REPORT = (
    "publish even though some shards are not whole (a run killed or not run), labelled partial on the "
    "README's first line and on the page (default: refuse, exit 2)"
)


def matrix_options() -> argparse.ArgumentParser:
    """The options of ``nox -s matrix -- ...``: the stages' own, declared once here (the noxfile parses with it
    and hands each stage what it takes)."""
    ap = argparse.ArgumentParser(prog="nox -s matrix --", add_help=False)
    _profile_arg(ap)
    _corpus_arg(ap)
    _results_arg(ap)
    _force_arg(ap, "redo every export and every cell")
    _no_latency_arg(ap)
    _with_arg(ap)
    _partial_arg(ap, _PARTIAL_REPORT)
    ap.add_argument(
        "--keep-torch-envs",
        action="store_true",
        help="keep each torch release's export environment after its export (default: removed, one extra torch at a time)",
    )
    ap.add_argument(
        "--platform",
        action="append",
        default=[],
        metavar="NAME",
        help="run only these platform columns of the profile (repeatable; the nightly runs aarch64 on its arm64 runner, "
        "the x86-64 levels on an x86 one); default: every platform it lists",
    )
    return ap


def _all_columns() -> list[str]:
    from harness.config import runtimes

    return list(dict.fromkeys(c for k in runtimes.KINDS for c in k.columns()))


def parser() -> argparse.ArgumentParser:
    """Every subcommand and its options. (One function, over 60 lines: a flat list of declarations, one block
    per subcommand, read top to bottom; the options two commands share are the helpers above.)"""
    from harness import __version__

    ap = argparse.ArgumentParser(prog="harness", description="PyTorch → ONNX compatibility matrix")
    ap.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check matrix.toml; print the profiles")
    _common(p)

    p = sub.add_parser("sessions", help="print the runtime ids of a profile, one per line (for the noxfile)")
    _common(p)

    p = sub.add_parser("list", help="list the corpus cases with their cards (--results TABLE: a published table's cases)")
    _common(p)
    _corpus_arg(p)
    p.add_argument(
        "--results",
        default=None,
        help="list the cases of this published table (a matrix.jsonl or its folder) from its cases.json instead",
    )

    p = sub.add_parser("export", help="export stage (needs torch): write build/artifacts")
    _common(p)
    _corpus_arg(p)
    p.add_argument("--workers", type=int, default=None, help="export processes (default: [run] workers)")
    _force_arg(p, "export everything again")
    p.add_argument(
        "--no-share",
        action="store_true",
        help="each artifact in a cold process with a plain exporter call: no warm start, no registry, capture or "
        "decomposition shared between exports (slower; the same files)",
    )
    _with_arg(p)

    p = sub.add_parser("plan", help="say which stages a rerun of the profile would run, and why (runs nothing)")
    _common(p)
    _corpus_arg(p)
    _results_arg(p)
    _with_arg(p)

    p = sub.add_parser(
        "reference",
        help="record the reference runtime's value of every node of one probe (the run stage asks for it on demand)",
        description="Export environment: runs ARTIFACT's model.debug.onnx on this onnxruntime (CPU, optimizations off) "
        "for PROBE and writes every node's value to --out, as the run stage needs to localize a mismatch of a model "
        "too large to record at export. Exit status 0 when written, 2 otherwise.",
    )
    p.add_argument("artifact", type=Path, help="the artifact folder (build/artifacts/<id>)")
    p.add_argument("probe", help="the probe to record")
    p.add_argument("--out", type=Path, required=True, help="the .npz to write")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds the reference pass may take")
    p.add_argument("--runtime", default="", help="the export's reference runtime pin; refused if this environment holds another")

    p = sub.add_parser(
        "spec", help="spec stage (needs onnx): the ONNX checker and reference evaluator on every artifact → build/spec.json"
    )
    _common(p)
    p.add_argument("--workers", type=int, default=0, help="worker processes (0: one per CPU core)")
    _force_arg(p, "judge every artifact again")

    p = sub.add_parser(
        "transform",
        help="transform stage (the transform environment): the export's files quantized / converted to float16, judged "
        "by the ONNX reference evaluator → build/transforms/<name> (every transform of the profile, or --transform's)",
    )
    _common(p)
    p.add_argument("--workers", type=int, default=0, help="worker processes (0: one per CPU core)")
    _force_arg(p, "transform every artifact again")

    p = sub.add_parser("run", help="run stage (needs one onnxruntime): write build/shards")
    _common(p)
    p.add_argument("--runtime", required=True, help="pin, id or version: onnxruntime==1.17.3, ort-1.17.3, 1.17.3")
    p.add_argument("--provider", action="append", default=[], help="override the profile's columns (cpu, cuda, ...)")
    _force_arg(p, "redo every cell")
    _no_latency_arg(p)
    p.add_argument(
        "--unmeasured",
        default="",
        metavar="WHY",
        help="this runtime cannot run here (its Python is missing: the noxfile says so): record each column as not "
        "measured, with WHY, and nothing else",
    )
    p.add_argument(
        "--unavailable",
        default="",
        metavar="WHY",
        help="the platform columns asked (--provider cpu@...) cannot run on this machine: record each as unavailable, "
        "with WHY (the runtime itself runs: its frontier is measured)",
    )
    p.add_argument(
        "--launcher",
        default="",
        metavar="PATH",
        help="this process runs under a platform's launcher (harness/config/launchers.py; the noxfile starts it so): "
        "start every worker and probe through it too",
    )

    p = sub.add_parser(
        "jobs",
        help="the nightly's run jobs for a profile, as one line of JSON (a GitHub Actions matrix), from `nox -l --json -t run`",
    )
    _common(p)
    p.add_argument("sessions", type=Path, help="the output of `nox -l --json -t run`")

    p = sub.add_parser(
        "gather",
        help="merge shards that run jobs uploaded into the export's build folder (refuses shards of other artifacts)",
    )
    _common(p)
    p.add_argument("sources", nargs="+", type=Path, help="shard files, or folders searched for *.jsonl shards")
    _partial_arg(
        p,
        "leave out (and say) a shard its run did not seal or that is damaged, instead of refusing; "
        "the report then needs --partial too",
    )

    p = sub.add_parser(
        "transform-report",
        help="the tables of a profile's transforms gathered: which transform runs right on which runtime and platform, "
        "what each costs (after `harness report --transform NAME` for each)",
    )
    _common(p)
    _results_arg(p)

    p = sub.add_parser("report", help="gather shards into results/ (needs pandas, tabulate)")
    _common(p)
    _results_arg(p)
    p.add_argument("--wall", type=float, default=None, help="wall time of the run, recorded in the report")
    _partial_arg(p, _PARTIAL_REPORT)

    p = sub.add_parser(
        "torch-report",
        help="the table across torch releases (README.md, index.html, torch.json) from each release's published table",
    )
    _common(p)
    _results_arg(p)

    p = sub.add_parser(
        "recommend",
        help="the highest opset and the exporter at which every selected case passes on one runtime × provider",
        description="Answers from a published table: the highest opset written, and the exporter, at which every selected "
        "case passes every probe on --runtime × --provider; then every alternative with the cases that fail there and "
        "why. Exit status 0 with an answer, 1 when no exporter and opset passes every selected case, 2 on bad input "
        "(--json: the same statuses; the answer, or {schema, error}, on stdout).",
    )
    p.add_argument(
        "--runtime",
        required=True,
        help=f"a measured runtime: {', '.join(RUNTIME_EXAMPLES)}; a minor alone (1.20) is its newest patch measured",
    )
    p.add_argument("--provider", default="cpu", help=f"the column: {', '.join(_all_columns())} (default: cpu)")
    p.add_argument(
        "--platform",
        default="",
        help="the CPU the model ships to: x86-64-v4 (AVX-512), x86-64-v3 (AVX2), x86-64-v2 (SSE4.2), aarch64; answered "
        "from the column that measured it (results/hardware/); default: the table's own machine",
    )
    p.add_argument(
        "--transform",
        default="",
        metavar="NAME",
        help="you will ship the file transformed: int8-dynamic, int8-qdq-u8, int8-qdq-s8 (int8-qdq: both), int4-sym, "
        "int4-asym, int4-sym-a4, fp16; answered from that transform's table (results/quantized/NAME/)",
    )
    p.add_argument(
        "--exporter",
        default=None,
        help="answer for this exporter only: torchscript or dynamo (default: the best of "
        "each, and the recommendation between them)",
    )
    p.add_argument(
        "--results", default=None, help="a published matrix.jsonl or its folder (default: the results/ of this checkout)"
    )
    p.add_argument(
        "--corpus", action="append", default=[], metavar="FILE", help="select the cases of this corpus file (repeatable)"
    )
    p.add_argument(
        "--cases",
        default=None,
        metavar="A,B",
        help="select these cases, by name or title, any case (from whichever published table measured them)",
    )
    p.add_argument("--all", action="store_true", help="select every case of the table (the gotchas included)")
    p.add_argument(
        "--torch",
        default=None,
        metavar="X.Y.Z",
        help="answer for this torch release: the default table for the torch it was exported with, else the torch "
        "profile's table of it (results/torch/X.Y.Z)",
    )
    _json_arg(p, "recommend")

    p = sub.add_parser(
        "diff",
        help="cells whose status changed between two runs (regressions first); exit 1 on a regression",
        description="Matches cells on their key (case, exporter, opset, runtime, provider, probe), across a changed runtime "
        "pin where that is unambiguous, and lists regressions, fixes, changed failures, new and gone cells. "
        "Exit status 1 when a cell regressed, 0 otherwise, 2 on bad input.",
    )
    p.add_argument("old", help="the earlier run: a matrix.jsonl, its results folder, or a shard")
    p.add_argument("new", help="the later run, likewise")
    p.add_argument("--strict-pins", action="store_true", help="match runtimes by exact pin only (no pairing across a pin change)")
    p.add_argument("--limit", type=int, default=200, help="lines per section (0: all; default 200)")
    _json_arg(p, "diff")

    p = sub.add_parser(
        "check",
        help="one ONNX file (or one module) on every runtime of a profile: predicted from the measured frontiers, then "
        "loaded, run and compared (docs/your-models.md)",
        description="Answers for a file you have: which runtimes of the profile load it (predicted from the measured "
        "frontiers, then measured), run it, and agree with the expected outputs you give, else the ONNX reference "
        "evaluator on the same file, else each other. Exit status 0 when every selected runtime passes (with "
        "--baseline: none regressed), 1 otherwise, 2 on bad input (--json: the answer, or {schema, error}, on stdout).",
    )
    p.add_argument("target", help="the .onnx file (its external data beside it), or a module spec pkg.module:factory")
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=DxD",
        help="a module spec's example input: x=1x3x224x224 (:int64 for another dtype)",
    )
    p.add_argument("--dynamic", action="append", default=[], metavar="INPUT:AXIS", help="a module spec's dim that varies: x:0")
    p.add_argument(
        "--opset",
        action="append",
        type=int,
        default=[],
        help="a module spec's opset, for both exporters (default: the defaults and the recommended)",
    )
    p.add_argument("--matrix", default="matrix.toml", help="the matrix file (default: matrix.toml)")
    p.add_argument("--profile", default="default", help="whose runtimes to check on (default: default)")
    p.add_argument(
        "--runtime", action="append", default=[], metavar="PIN", help="only these runtimes of the profile (repeatable: 1.17.3)"
    )
    p.add_argument(
        "--inputs", action="append", default=[], metavar="FILE", help="a probe: .npz keyed by input name, or .npy (repeatable)"
    )
    p.add_argument(
        "--dim", action="append", default=[], metavar="NAME=N", help="bind a symbolic dim for made inputs: batch=4, or x:0=4"
    )
    p.add_argument(
        "--expected", action="append", default=[], metavar="FILE", help="each --inputs file's outputs: .npz keyed by output name"
    )
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default: matrix.toml [tolerance])")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: matrix.toml [tolerance])")
    p.add_argument(
        "--scaled",
        type=float,
        default=None,
        help="bound on max|err| / max|ref| per output (default: [tolerance], widened for int8/int4/fp16 files)",
    )
    p.add_argument("--results", default="results", help="the published table whose frontiers predict (default: results)")
    p.add_argument("--out", default=None, help="where reproducers and check.json go (default: build/check/<file>-<sha256>)")
    p.add_argument("--envs", default="build/check/envs", help="where the runtimes' environments are made and kept")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds one runtime may take (default 120)")
    p.add_argument("--workers", type=int, default=0, help="runtimes at once (0: one per CPU core, fewer where memory is short)")
    p.add_argument(
        "--platform",
        action="append",
        default=[],
        metavar="NAME",
        help="the CPU to run on, repeatable: x86-64-v4, x86-64-v3, x86-64-v2, aarch64 (under qemu-user where this machine "
        "is not it; default: the profile's platforms, else this machine)",
    )
    p.add_argument("--predict", action="store_true", help="only the predicted answer: start no runtime")
    p.add_argument("--baseline", default=None, metavar="JSON", help="an earlier --json answer: exit 1 only on a regression")
    _json_arg(p, "check")

    p = sub.add_parser(
        "readme",
        help="refresh the project README's answer block, and every fact the README and docs/ give of a published table "
        "(--check: exit 0 when fresh, 1 when stale, 2 when it cannot tell)",
    )
    p.add_argument("--results", default="results", help="the published folder (default: results)")
    p.add_argument("--readme", default="README.md", help="the README holding the block (default: README.md)")
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 0 when fresh, 1 when the block is not what the table gives, 2 when it cannot tell",
    )
    return ap


def _json_arg(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help=f"print the answer as one JSON object (schema harness.{command}/1, docs/reading-the-table.md)",
    )


def _corpus(matrix: Matrix, args: argparse.Namespace) -> list[str]:
    from harness.store.plan import corpus_sources

    return corpus_sources(matrix, args.corpus, args.only_corpus, matrix.profile(args.profile))


def _cases(args: argparse.Namespace) -> list[str] | None:
    return [c.strip() for c in args.cases.split(",") if c.strip()] if args.cases else None


def _selected(args: argparse.Namespace, profile: Profile) -> list[str] | None:
    """A stage's cases: ``--cases``, else the profile's own selection (``cases`` in matrix.toml), else every case."""
    return _cases(args) or (list(profile.cases) or None)


def _error(line: str) -> None:
    print(f"harness: error: {line}", file=sys.stderr)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _note(line: str) -> None:
    print(f"harness: {line}", file=sys.stderr)


def _problems(problems: list[str], *, echo: bool = True) -> int:
    """Corpus problems: one line each (unless already printed); exit 2 once the rest has run."""
    if echo:
        for line in problems:
            _error(line)
    return 2 if problems else 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        check_options(args)
        return _dispatch(args)
    except HarnessError as exc:
        _error(str(exc))
        if getattr(args, "json", False):  # a script reads stdout: the refusal there too, as the schema's error
            print(json.dumps({"schema": f"harness.{args.command}/1", "error": str(exc), "exit": 2}))
        return 2
    except KeyboardInterrupt:
        print("harness: interrupted; finished cells are kept and a rerun resumes", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader stopped early (`harness diff a b | head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush cannot fail again
        return 141  # 128 + SIGPIPE, as a shell reports it


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "readme":
        return _readme(args)
    if args.command in ("recommend", "diff"):  # answers from published files alone: no matrix.toml needed
        return _answer(args)
    if args.command == "check":
        return _check(args)
    if args.command == "list" and args.results is not None:
        return _list_table(args.results)
    if args.command == "reference":
        return _reference(args)
    from harness.config.matrix import load

    matrix = load(args.matrix)
    profile = matrix.profile(args.profile)
    out = Path(args.out)
    if args.command in TORCH_SCOPED:  # one torch release of a profile that lists them: its own matrix, build and table
        matrix = matrix.for_torch(profile, args.torch)
        if args.torch is not None:
            if args.command == "report":
                args.results = str(
                    profile.torch_results(out, args.torch) if args.results is None else Path(args.results) / args.torch
                )
            out = profile.torch_out(out, args.torch)
    elif getattr(args, "torch", None) is not None:
        raise HarnessError(f"--torch: `harness {args.command}` takes no torch release; drop it")
    code = 0
    for folder in _transform_scope(args, profile, out):  # the build folder, or each named transform's in turn
        code = max(code, _locked(args, matrix, profile, folder))
    return code


def _check(args: argparse.Namespace) -> int:
    """``harness check``: the answer on stdout (a screen, or JSON), progress on stderr, ``<out>/check.json`` kept."""
    from harness.check import answer, stage
    from harness.config.matrix import load

    matrix = load(args.matrix)
    profile = matrix.profile(args.profile)
    runtimes = [matrix.runtime(r) for r in args.runtime] if args.runtime else list(profile.runtimes)
    def on_cpu(rt: Runtime) -> bool:  # onnxruntime's CPU provider, installed on any machine
        return "cpu" in rt.kind.columns() and rt.kind.frontier and not rt.kind.bare

    for rt in runtimes if args.runtime else ():
        if not on_cpu(rt):
            raise HarnessError(f"--runtime {rt.pin}: harness check runs onnxruntime's CPU provider, which {rt.pin} lacks here")
    runtimes = [rt for rt in runtimes if on_cpu(rt)]
    from harness.check import inputs

    baseline = answer.load_baseline(args.baseline) if args.baseline else None
    opts = stage.Options(
        target=args.target,
        runtimes=tuple(dict.fromkeys(runtimes)),
        input_files=tuple(args.inputs),
        dims=inputs.parse_dims(args.dim),
        expected_files=tuple(args.expected),
        atol=args.atol,
        rtol=args.rtol,
        scaled=args.scaled,
        results=Path(args.results),
        out=Path(args.out) if args.out else None,
        envs=Path(args.envs),
        timeout=args.timeout,
        workers=args.workers,
        predict_only=args.predict,
        platforms=tuple(dict.fromkeys(args.platform)) or profile.platforms,
    )
    from harness.check import module

    if module.is_spec(args.target):
        data = module.check_module(matrix, args.target, args.input, args.dynamic, args.opset, opts, _note)
        if baseline is not None:
            data["baseline"] = answer.compare(baseline, data)
            data["exit"] = 1 if data["baseline"]["regressions"] else 0
        text = answer.module_screen(data)
    else:
        if args.input or args.dynamic or args.opset:
            raise HarnessError(
                "--input, --dynamic and --opset are a module spec's (pkg.module:factory); for a file use --inputs and --dim"
            )
        data = answer.to_json(stage.check(matrix, opts, _note), baseline)
        text = answer.screen(data)
    if data.get("out"):
        (Path(data["out"]) / "check.json").write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data, indent=1) if args.json else text)
    return int(data["exit"])


def _transform_scope(args: argparse.Namespace, profile: Profile, out: Path) -> list[Path]:
    """The build folders the command acts on: ``out``, or for ``--transform`` each named transform's (``run`` takes
    several, in turn in this one process: an emulated platform's interpreter and workers start once, not once per
    transform; ``report`` one, whose table is then ``<results>/<name>``)."""
    named = getattr(args, "transform", None)
    if not named or args.command == "transform":
        return [out]
    for name in named:
        if name not in profile.transforms:
            listed = ", ".join(profile.transforms) or "none"
            raise HarnessError(f"--transform {name}: profile {profile.name!r} lists {listed}; use one of them")
    if args.command not in TRANSFORM_SCOPED:
        raise HarnessError(f"--transform: `harness {args.command}` takes no transform; drop it")
    if args.command == "report":
        if len(named) > 1:
            raise HarnessError(f"--transform: `harness report` publishes one transform's table; name one, not {len(named)}")
        args.results = str(profile.transform_results(out, named[0]) if args.results is None else Path(args.results) / named[0])
    return [profile.transform_out(out, name) for name in named]


def _locked(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    """The command on build folder ``out``, holding its lock (and its results folder's) where it writes them."""
    if args.command in WRITERS:  # one writer per build folder (and per results folder): harness.store.lock
        from harness.answer import published

        with contextlib.ExitStack() as held:
            held.enter_context(lock.acquire(out, lock.command_line(), echo=_note))
            if args.command in ("report", "torch-report", "transform-report"):  # one writer per results folder too
                results = Path(args.results) if args.results else profile.results(out)
                if results.resolve() != out.resolve():
                    published.kept(results)  # a folder that is no results folder is refused before a lock is put in it
                    held.enter_context(lock.acquire(results, lock.command_line(), echo=_note))
            return _stage(args, matrix, profile, out)
    return _stage(args, matrix, profile, out)


TORCH_SCOPED = frozenset({"export", "spec", "run", "report", "plan"})
"""The stages that act on one torch release of a profile that lists them (``--torch``)."""
TRANSFORM_SCOPED = frozenset({"run", "report"})
"""The stages that act on one transform's build folder and table (``--transform``); ``harness transform`` makes it."""

WALL_MAX = 30 * 86400
"""``--wall`` at most: 30 days of wall time (the default profile takes 15 minutes)."""


def check_options(args: argparse.Namespace, root: Path | None = None) -> None:
    """What argparse's types do not bound, refused in one line before anything is read or written: an empty
    ``--cases`` (``,`` would seal an empty export over the last one), a ``--wall`` that is not a number of
    seconds (NaN is not JSON), worker counts and limits out of range, an ``--out`` that is no build folder
    (``root``: the project's folder, by default the one holding ``--matrix``). The noxfile checks
    ``nox -s matrix -- ...`` with it too.

    Raises:
        HarnessError: the option, what is wrong, the fix.
    """
    from harness.config.matrix import BOUNDS

    if getattr(args, "cases", None) is not None and not _cases(args):
        raise HarnessError(f"--cases {args.cases!r} names no case; give case names separated by commas (`harness list`)")
    from harness.config import platforms

    asked = getattr(args, "platform", None) or []
    for name in [asked] if isinstance(asked, str) else asked:
        if name not in platforms.names():
            raise HarnessError(f"--platform {name}: not a platform; use {', '.join(platforms.names())}")
    wall = getattr(args, "wall", None)
    if wall is not None and not (math.isfinite(wall) and 0 <= wall <= WALL_MAX):
        raise HarnessError(f"--wall {wall!r}: must be the run's wall time in seconds, within 0..{WALL_MAX}; e.g. --wall 812")
    workers = getattr(args, "workers", None)
    if workers is not None and not 0 <= workers <= BOUNDS["run.workers"][1]:
        raise HarnessError(f"--workers {workers}: must be within 0..{BOUNDS['run.workers'][1]} (0: [run] workers); lower it")
    if getattr(args, "limit", 0) < 0:
        raise HarnessError(f"--limit {args.limit}: must be >= 0 (0 shows every line)")
    timeout = getattr(args, "timeout", None)
    if timeout is not None and not (math.isfinite(timeout) and 1 <= timeout <= BOUNDS["export.reference_timeout"][1]):
        raise HarnessError(f"--timeout {timeout!r}: must be within 1..{BOUNDS['export.reference_timeout'][1]:.0f} seconds")
    if getattr(args, "command", None) != "reference" and getattr(args, "out", None) is not None:
        out_problem(args.out, root or Path(args.matrix).resolve().parent)


def out_problem(out: str | os.PathLike[str], root: Path) -> None:
    """Refuse a build folder that would spread build files over the project (``--out .``, ``--out ""``) or the
    published table (``--out results``).

    Raises:
        HarnessError: one line naming the option and the fix.
    """
    where = Path(out).resolve()
    if not str(out).strip() or where == root or where in root.parents:
        raise HarnessError(f"--out {str(out)!r} is the project's own folder; give a build folder such as --out build")
    if where == root / "results" or root / "results" in where.parents:
        raise HarnessError(f"--out {str(out)!r} is inside the published results/; give a build folder such as --out build")


WRITERS = ("export", "spec", "run", "report", "gather", "torch-report", "transform", "transform-report")
"""The commands that write the build folder."""


def _stage(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    return _STAGES[args.command](args, matrix, profile, out)


def _validate(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    for prof in matrix.profiles.values():
        shards = len(prof.shards())
        exports = prof.exports()
        asked = "; ".join(f"{e} {_ranges(prof.opsets_of(e))}" for e in prof.exporters)
        print(
            f"{prof.name}: {len(prof.runtimes)} runtimes, {shards} runtime × provider columns × "
            f"{len(exports)} exporter × opset ({asked}) = {shards * len(exports)} columns per case"
            + (f", for each of torch {', '.join(prof.torch)}" if prof.torch else "")
        )
    print(f"{args.matrix}: ok")
    return 0


def _jobs(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.store import nightly

    print(json.dumps(nightly.jobs(args.sessions, profile), separators=(",", ":")))
    return 0


def _gather(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.store import nightly

    written = nightly.gather(out, profile, args.sources, partial=args.partial)
    print(f"gathered {len(written)} shards into {out / 'shards'}")
    return 0


def _sessions(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    for rt in profile.runtimes:
        print(rt.id)
    return 0


def _list(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.cases import corpus

    registry = corpus.load(_corpus(matrix, args), _root(args))
    for case in registry:
        tag = f"fixes {case.fixes}" if case.fixes else (case.card.symptom if case.card else case.title)
        print(f"{case.name:<32} {tag}")
    print(f"{len(registry)} cases")
    return _problems(registry.problems)


def _plan(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.cases import corpus
    from harness.store import plan

    results = Path(args.results) if args.results else profile.results(out)
    sources = _corpus(matrix, args)
    reqs = corpus.requirements_of(matrix, args.with_, sources, _root(args))
    todo = plan.plan(matrix, profile, out, results, corpus=sources, cases=_selected(args, profile), requirements=reqs)
    print("\n".join(todo.lines()))
    return 0


def _export(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.cases import corpus
    from harness.export import stage as export

    t0 = time.perf_counter()
    sources = _corpus(matrix, args)
    records, problems = export.export_all(
        matrix,
        profile,
        sources,
        out,
        root=_root(args),
        workers=args.workers,
        cases=_selected(args, profile),
        force=args.force,
        share=not args.no_share,
        requirements=corpus.requirements_of(matrix, args.with_, sources, _root(args)),
        echo_error=_error,
    )
    ok = sum(r.ok for r in records)
    print(f"exported {ok}/{len(records)} artifacts in {time.perf_counter() - t0:.1f}s → {out / 'artifacts'}")
    return _problems(problems, echo=False)


def _spec(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.spec import stage
    from harness.store import spec

    signal.signal(signal.SIGTERM, _interrupted)
    facts = stage.judge_all(out, workers=args.workers, force=args.force, onnx_pin=matrix.export.onnx)
    said = [f for f in facts.values() if f.get("unanswered") is None]
    print(f"spec: {len(facts)} artifacts, {len(said)} evaluated → {spec.facts_path(out)}")
    return 0


def _transform(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.transform import stage

    names = list(args.transform) if args.transform else list(profile.transforms)
    if not names:
        raise HarnessError(
            f"profile {profile.name!r} lists no transforms; add transforms = [...] to it in matrix.toml "
            "or use one that does (--profile quantized)"
        )
    signal.signal(signal.SIGTERM, _interrupted)
    for name in names:
        records = stage.transform_all(matrix, profile, out, name, workers=args.workers, force=args.force)
        made = sum(1 for r in records if r.ok)
        skipped = sum(1 for r in records if not r.ok and r.error_class == "Skipped")
        print(f"transform {name}: {made} transformed, {skipped} with nothing to transform, "
              f"{len(records) - made - skipped} failed → {profile.transform_out(out, name)}")
    return 0


def _transform_report(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.publish import tables

    results = Path(args.results) if args.results else profile.results(out)
    summary = tables.write_transforms(profile, results)
    missing = [t["transform"] for t in summary["transforms"] if t.get("problem")]
    print(
        f"transform-report: {len(summary['transforms'])} transforms, {len(summary['changes'])} verdicts that change "
        f"with the runtime or the platform → {results / 'README.md'}" + (f"; not whole: {', '.join(missing)}" if missing else "")
    )
    return 1 if missing else 0


def _run(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.config import launchers, platforms
    from harness.pool import workers
    from harness.run import stage as run

    runtime = matrix.runtime(args.runtime)
    columns = args.provider or list(profile.columns(runtime))
    for col in columns:
        base, named = platforms.split(col)
        if base not in runtime.kind.columns() or (named and (named not in platforms.names() or base != "cpu")):
            offered = [*runtime.kind.columns(), *(f"cpu@{p}" for p in platforms.names() if "cpu" in runtime.kind.columns())]
            raise HarnessError(f"--provider {col!r} is not a column {runtime.pin} runs; use {', '.join(offered)}")
    how = "native"
    if args.launcher:
        workers.launch_through(args.launcher)
        how = launchers.how_of(Path(args.launcher))
    signal.signal(signal.SIGTERM, _interrupted)  # a deadline's SIGTERM ends the run as Ctrl-C does
    t0 = time.perf_counter()
    cells = run.run_runtime(
        matrix, runtime, columns, out, force=args.force, latency=not args.no_latency, unmeasured=args.unmeasured, how=how,
        cannot=args.unavailable,
    )
    counts: dict[str, int] = {}
    for c in cells:
        counts[c.status.value] = counts.get(c.status.value, 0) + 1
    print(f"{runtime.pin}: {len(cells)} cells in {time.perf_counter() - t0:.1f}s: {json.dumps(counts)}")
    return 0


def _report(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.publish import report

    results = Path(args.results) if args.results else profile.results(out)
    print(report.build(out, results, profile=profile, wall=args.wall, builtin=matrix.corpus_of(profile), partial=args.partial))
    return 0


def _torch_report(args: argparse.Namespace, matrix: Matrix, profile: Profile, out: Path) -> int:
    from harness.publish import tables

    results = Path(args.results) if args.results else profile.results(out)
    summary = tables.write_torch(matrix, profile, results)
    missing = [r["torch"] for r in summary["releases"] if r["problem"]]
    print(
        f"torch-report: {len(summary['releases'])} releases, {len(summary['changes'])} verdicts that change with the "
        f"release, {len(summary['fallbacks'])} fallback exports → {results / 'README.md'}"
        + (f"; not whole: {', '.join(missing)}" if missing else "")
    )
    return 1 if missing else 0


_STAGES: dict[str, Callable[[argparse.Namespace, Matrix, Profile, Path], int]] = {
    "validate": _validate,
    "jobs": _jobs,
    "gather": _gather,
    "sessions": _sessions,
    "list": _list,
    "plan": _plan,
    "export": _export,
    "spec": _spec,
    "run": _run,
    "report": _report,
    "torch-report": _torch_report,
    "transform": _transform,
    "transform-report": _transform_report,
}


def _root(args: argparse.Namespace) -> Path:
    return Path(args.matrix).resolve().parent


def _reference(args: argparse.Namespace) -> int:
    from harness.export import node_values as reference
    from harness.pool.workers import die_with_parent

    die_with_parent(os.getppid())  # asked by a run-stage worker: it goes when that worker goes
    try:
        meta = reference.record(args.artifact, args.probe, args.out, args.timeout, runtime=args.runtime)
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        raise HarnessError(f"{args.artifact}: probe {args.probe!r}: {first_line(str(exc)) or type(exc).__name__}") from None
    print(json.dumps(meta))
    return 0


def _reading(source: str | os.PathLike[str]) -> contextlib.AbstractContextManager[None]:
    from harness.answer.published import reading

    return reading(Path(source))


def _answer(args: argparse.Namespace) -> int:
    from harness.answer import diff, published

    if args.command == "diff":
        for table in (args.old, args.new):
            with _reading(table):
                if partial := published.read_partial(published.table_path(table)):
                    _note(f"{table} is a PARTIAL table ({len(partial)} shard(s) were not whole): {partial[0]}")
        with _reading(args.old):
            old = published.read_cells(args.old, spread=False)
        with _reading(args.new):
            new = published.read_cells(args.new, spread=False)
        result = diff.diff(old, new, pair=not args.strict_pins)
        if args.json:
            print(json.dumps(diff.to_json(result, args.old, args.new), ensure_ascii=False, indent=1))
        else:
            print(diff.render(result, args.old, args.new, limit=args.limit))
        return 1 if result.regressions else 0
    return _recommend(args)


def _list_table(results: str) -> int:
    """``harness list --results TABLE``: a published table's cases, from its cases.json (nothing else is read)."""
    from harness.answer import published

    with _reading(results):
        source = published.table_path(results)
        cards = published.read_cases(source)
    if not cards:
        raise HarnessError(f"{source}: no cases.json beside it; regenerate it with `nox -s report`")
    for name, card in cards.items():
        said = card.get("title") or (f"fixes {card['fixes']}" if card.get("fixes") else card.get("symptom", ""))
        print(f"{name:<32} {said}")
    print(f"{len(cards)} cases in {source}")
    return 0


def _readme(args: argparse.Namespace) -> int:
    from harness.answer import readme

    path, results = Path(args.readme), Path(args.results)
    if args.check:  # 0: fresh, 1: stale, 2 (a refusal, as every one): cannot tell
        stale = readme.refresh(path, results, write=False)
        said = "STALE: run `harness readme`" if stale else f"what {results} gives"
        print(f"{path}: the answer block and the facts of the README and docs/ are {said}")
        return 1 if stale else 0
    readme.results_folder(results)
    with lock.acquire(results, lock.command_line(), echo=_note):  # no report swaps the table while it is read
        changed = readme.refresh(path, results)
    print(f"{path}: answer block and facts {'refreshed' if changed else 'unchanged'} from {results}")
    return 0


def _recommend(args: argparse.Namespace) -> int:
    from harness.answer import ask

    if args.transform:
        return _recommend_transformed(args)
    asked = ask.ask(
        args.runtime,
        provider=args.provider,
        exporter=args.exporter,
        results=args.results,
        cases=_cases(args) or (),
        corpus=args.corpus,
        everything=args.all,
        torch=args.torch,
        installed_torch=ask.installed_torch(),
        platform=args.platform,
    )
    if args.json:
        print(json.dumps(ask.to_json(asked), ensure_ascii=False, indent=1))
    else:
        print(ask.text(asked))
    return asked.code


def _recommend_transformed(args: argparse.Namespace) -> int:
    """``recommend --transform NAME``: the answer from each named transform's table (a family, ``int8-qdq``: each of
    its members in turn; ``--json`` answers one)."""
    from harness.answer import ask

    if args.torch is not None:
        raise HarnessError("--transform with --torch: the transformed files are of the export's torch only; drop --torch")
    tables = ask.transform_tables(args.transform, args.results)
    if args.json and len(tables) > 1:
        names = ", ".join(name for name, _, _ in tables)
        raise HarnessError(f"--transform {args.transform} names {len(tables)} transforms ({names}); --json answers one: name it")
    code = 0
    for i, (name, table, says) in enumerate(tables):
        asked = ask.ask(
            args.runtime, provider=args.provider, exporter=args.exporter, results=str(table), cases=_cases(args) or (),
            corpus=args.corpus, everything=args.all, platform=args.platform,
        )  # fmt: skip
        if args.json:
            print(json.dumps({**ask.to_json(asked), "transform": name}, ensure_ascii=False, indent=1))
        else:
            print(("\n" if i else "") + f"Transformed with {name} ({says}):\n" + ask.text(asked))
        code = max(code, asked.code)
    return code


def _ranges(opsets: tuple[int, ...]) -> str:
    """``(13, 17, 18, 19, 20)`` → ``opsets 13, 17–20``."""
    from harness.answer.published import opset_ranges

    return opset_ranges(opsets)
