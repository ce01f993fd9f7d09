"""torch's own CUDA outputs as a second reference, and what the machine's GPU is.

Every reference in the table is torch on the CPU (the export stage's ``reference.npz``). On a GPU a
cell can mismatch because the runtime is wrong, or because the GPU computes the model differently
from the CPU in the first place (TF32 matmuls, other reduction orders, fp16). This script runs each
case of an export in torch on CUDA, on the very probe inputs of ``reference.npz``, and compares with
the CPU reference at the case's tolerance: a case that mismatches here mismatches on a GPU before any
exporter or runtime is involved.

    python bench/cuda_reference.py --out build            # the export's folder
    python bench/cuda_reference.py --out build --json     # one JSON line per case × probe

The report joins it into the verdicts (:mod:`harness.publish.gpu_outputs`): each mismatch of an NVIDIA column says whether
torch on the GPU agrees with the CPU reference. It needs torch built with CUDA and the corpus (matrix.toml's
[corpus]); bench/device_check.sh and bench/gpu_check.sh run it
with the interpreter named by TORCH_PYTHON (default python3) when that torch sees a GPU. It writes
``<out>/cuda_reference.jsonl``. Exit status 0 whatever it finds; 2 without a CUDA device or export.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def gpu_facts(torch: Any) -> dict[str, Any]:
    """What torch sees of the GPU: name, compute capability, memory, CUDA and cuDNN versions, TF32."""
    props = torch.cuda.get_device_properties(0)
    return {
        "device": torch.cuda.get_device_name(0),
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
        "memory_gib": round(props.total_memory / 2**30, 1),
        "devices": torch.cuda.device_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
    }


def _flatten(outputs: Any, torch: Any) -> list[Any]:
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, (list, tuple)):
        return [t for o in outputs for t in _flatten(o, torch)]
    if isinstance(outputs, Mapping):
        return [t for o in outputs.values() for t in _flatten(o, torch)]
    raise TypeError(f"model output of type {type(outputs).__name__} is not a tensor")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build", help="the export's folder (default: build)")
    ap.add_argument("--matrix", default=str(ROOT / "matrix.toml"))
    ap.add_argument("--corpus", action="append", default=[], help="corpus files the export also used")
    ap.add_argument("--json", action="store_true", help="print one JSON line per case × probe")
    ap.add_argument(
        "--device", default="cuda", help="torch device (default cuda; cpu checks the script itself: every probe should pass)"
    )
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from harness.cases import corpus
    from harness.config.matrix import load
    from harness.core.records import ExportRecord
    from harness.numeric.compare import compare, describe
    from harness.store import layout

    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        print(f"cuda_reference: torch {torch.__version__} sees no CUDA device; nothing to compare", file=sys.stderr)
        return 2
    out = Path(args.out)
    manifest = out / "manifest.json"
    if not manifest.is_file():
        print(f"cuda_reference: {manifest}: no export; run `nox -s export` first", file=sys.stderr)
        return 2
    facts = gpu_facts(torch) if device.startswith("cuda") else {"device": device, "torch": torch.__version__}
    print("device: " + ", ".join(f"{k} {v}" for k, v in facts.items()))
    matrix = load(args.matrix)
    registry = corpus.load([*matrix.corpus, *args.corpus], ROOT)
    # One artifact per case: torch's reference is the same for every exporter and opset.
    first: dict[str, Path] = {}
    for art_id in json.loads(manifest.read_text())["artifacts"]:
        folder = out / "artifacts" / art_id
        rec = ExportRecord.from_dict(json.loads((folder / "export.json").read_text()))
        if (folder / "reference.npz").is_file():
            first.setdefault(rec.case, folder)
    rows = []
    t0 = time.perf_counter()
    for case_name, folder in first.items():
        rec = ExportRecord.from_dict(json.loads((folder / "export.json").read_text()))
        ref = np.load(folder / "reference.npz")
        try:
            case = registry[case_name]
            model = case.model().to(device)
            model.train(case.train_mode)
        except Exception as exc:  # a case that does not build or move: said, and the next one
            rows.append({"case": case_name, "probe": "*", "status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        for probe in rec.probes:
            inputs = [torch.from_numpy(np.array(v)).to(device) for v in layout.probe_inputs(ref, probe).values()]
            want = layout.probe_outputs(ref, probe)
            # The reference it compared with: the report joins a row only into cells of the export that wrote it.
            row: dict[str, Any] = {"case": case_name, "probe": probe, "reference_sha256": rec.reference_sha256}
            try:
                torch.manual_seed(0)
                with torch.no_grad():
                    got = [t.detach().cpu().numpy() for t in _flatten(model(*inputs), torch)]
                ok, stats = compare(want, got, **rec.tolerance)
                row.update(status="pass" if ok else "mismatch", max_abs=stats.max_abs)
                row.update(mismatched=stats.mismatched, total=stats.total)
                if not ok:
                    row["error"] = describe(stats)
            except Exception as exc:
                row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:300])
            rows.append(row)
    seconds = time.perf_counter() - t0
    path = out / layout.CUDA_REFERENCE
    path.write_text("".join(json.dumps({**r, "device": facts["device"]}, sort_keys=True) + "\n" for r in rows))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    if args.json:
        for r in rows:
            print(json.dumps(r, sort_keys=True))
    print(f"cuda_reference: {len(first)} cases, {len(rows)} probes in {seconds:.1f}s: {json.dumps(counts)} → {path}")
    for r in rows:
        if r["status"] != "pass":
            print(f"  {r['case']} [{r['probe']}]: {r['status']}: {r.get('error', '')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
