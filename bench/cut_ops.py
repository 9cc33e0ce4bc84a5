"""What a mapping's sub-models lose to their cuts, operator type by operator type, in onnxruntime's own
profile: every sub-model of the ResNet-50 map-opt mapping of ``bench/data/h200-16c`` (split here, as
``bench/segment_cost.py --per-call`` splits it) run alone on one thread, against the whole model.

onnxruntime's CPU provider computes convolutions in a blocked channel layout (NCHWc): a model reorders its
input into it once and its output out of it once, and fuses each residual Add and its Relu into the
convolution before them. A sub-model does both at its own inputs and outputs, and cannot fuse an Add whose
convolution lies in another sub-model: what those cost is the part of a cut the sub-models themselves
pay, beyond the runtime's own work per call. Printed: milliseconds per inference by operator type (the
kernels' own times, the median run of ``--runs``), whole model against the sub-models' sum, and both
sessions' whole runs.

    python bench/cut_ops.py [--runs 5] [--split-dir DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from segment_cost import DATA, per_call_cases  # noqa: E402


def profiled(path: Path, runs: int, folder: Path) -> tuple[dict[str, float], float]:
    """(seconds per run by operator type, seconds per whole run) of ``path``'s onnxruntime session on one
    thread, fed random inputs: each the median over ``runs`` profiled runs (after one unprofiled)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.enable_profiling, so.profile_file_prefix = True, str(folder / path.stem)
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.random.rand(*[d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
             for i in session.get_inputs()}
    for _ in range(runs + 1):
        session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]
    spans = spans[1:]                     # the first run warms up
    per_run: list[collections.Counter] = [collections.Counter() for _ in spans]
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            for k, (a, b) in enumerate(spans):
                if a <= e["ts"] <= b:
                    per_run[k][e["args"]["op_name"]] += e["dur"]
    names = {op for c in per_run for op in c}
    ops = {op: statistics.median(c.get(op, 0) for c in per_run) * 1e-6 for op in names}
    whole = [b - a for a, b in spans]
    return ops, statistics.median(whole) * 1e-6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--split-dir", type=Path, default=None, help="where the sub-models are split (reused when there)")
    args = ap.parse_args()
    from hetsplit.runtime import resolve_model

    with tempfile.TemporaryDirectory(prefix="hetsplit-cut-ops-") as tmp:
        split = args.split_dir or Path(tmp) / "split"
        manifest = per_call_cases(DATA, split)[1][1]
        root = split / "resnet50-map-opt"
        _, whole_path = resolve_model("resnet50")
        whole_ops, whole_s = profiled(Path(whole_path), args.runs, Path(tmp))
        parts = [root / s.submodel for w in manifest.stages for s in w.segments if s.submodel]
        cut_ops: collections.Counter = collections.Counter()
        cut_s = 0.0
        for p in parts:
            ops, s = profiled(p, args.runs, Path(tmp))
            cut_ops.update(ops)
            cut_s += s
    print(f"ResNet-50 whole: {whole_s * 1e3:.1f} ms a run; its map-opt mapping's {len(parts)} sub-models: "
          f"{cut_s * 1e3:.1f} ms ({cut_s / whole_s:.2f}x), one thread, each alone")
    print(f"{'operator':22} {'whole ms':>9} {'sub-models ms':>14} {'difference':>11}")
    for op in sorted(set(whole_ops) | set(cut_ops), key=lambda o: -abs(cut_ops.get(o, 0) - whole_ops.get(o, 0))):
        a, b = whole_ops.get(op, 0.0), cut_ops.get(op, 0.0)
        print(f"{op:22} {a * 1e3:>9.2f} {b * 1e3:>14.2f} {(b - a) * 1e3:>+11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
