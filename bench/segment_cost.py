"""What a per-segment cost would buy the estimate, checked on runs it was not fitted to.

When these runs were made no estimate charged a segment (one executor call per input on a device) beyond
its layers; every one now does, from its type's ``SegmentCost`` (``estimate.segments``; the H200 profiles'
figures come from ``bench/h200_check.py``, which builds on this fit). On
a lent H200 host (``bench/data/h200-16c``) a ResNet-50 mapping of 10 segments per device and a MobileBERT
tensor-parallel plan of ~120 per device both computed well above their predictions. This fits one
figure per device, seconds per segment = (measured compute - predicted) / segments, on one plan's run
and uses it to predict the other plan's compute per device (held out), beside today's prediction:

    predicted with the term = predicted today + segments x the fitted seconds per segment

It also says what the term does to the choice the planner made there: the mapping (predicted 385/s)
against ResNet-50 on the GPU alone (predicted 294/s, one segment), both run.

    python bench/segment_cost.py [--data bench/data/h200-16c]

The data are run reports (``hetsplit run --compare --out``); nothing is run.

``--per-call`` measures instead what the runtime itself adds to a segment's executor call on this
machine's CPU (onnxruntime, one thread): per call of a few sub-models (a tiny segment of the toy CNN, and
segments of the H200 run's ResNet-50 map-opt mapping, split here), the executor alone in a tight loop
(``session.run`` on feeds made once) against the worker's own call (``worker.Segments``: the call reading
its inputs from an input's tensors and adding its outputs there, the timers, the tensors dropped after
it; taking and posting messages are the hop's costs, ``bench/runtime_overhead.py``). The ways take turns call
by call, each going first in turn; printed: both medians and the median of the pairs' differences with a 95%
bootstrap interval (target: <= 30 us), and beside them the binding's own ``run`` in the same rotation (the
floor: no per-call checks of the feed's names, which the worker's executor also skips) and what the worker
adds to it.

    python bench/segment_cost.py --per-call [--seconds 10] [--split-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hetsplit.workflow.comparison import Comparison
from hetsplit.workflow.run import read_run_doc

DATA = Path(__file__).resolve().parent / "data" / "h200-16c"
RUNS = {"mapping": "run.resnet50.map-opt.json", "tensor-parallel": "run.mobilebert.tensor-parallel.json"}


def read_run(path: Path) -> Comparison:
    """A ``hetsplit run --compare --out`` document, with its measurements and the plan's predicted metrics."""
    run = read_run_doc(path)
    if not isinstance(run, Comparison) or run.report is None or run.predicted is None:
        raise SystemExit(f"{path}: not a run compared with its plan's metrics (hetsplit run --compare --out)")
    return run


def devices(run: Comparison, predicted: dict[str, float] | None = None) -> dict[str, tuple[float, float, int]]:
    """Per device of a compared run: (measured compute per input, predicted, segments per input); the
    prediction is the run's unless ``predicted`` (device -> seconds per input) is given."""
    assert run.report is not None and run.predicted is not None
    pred = predicted if predicted is not None else run.predicted.compute_s_per_device
    return {d.device: (d.compute_s, pred[d.device], d.segments) for d in run.report.devices}


def per_segment(run: Comparison, predicted: dict[str, float] | None = None) -> dict[str, float]:
    """The fitted seconds per segment of each device of ``run``: (measured - predicted) / segments, not
    below 0 (``predicted`` as in ``devices``)."""
    return {dev: max(0.0, (m - p) / k) for dev, (m, p, k) in devices(run, predicted).items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--per-call", action="store_true",
                    help="measure the runtime's own cost per segment call here instead (see above)")
    ap.add_argument("--seconds", type=float, default=10.0, help="--per-call: seconds per sub-model")
    ap.add_argument("--split-dir", type=Path, default=None,
                    help="--per-call: where the sub-models are split (kept, reused when there); default a temporary "
                         "one")
    args = ap.parse_args(argv)
    if args.per_call:
        return per_call(args.data, args.seconds, args.split_dir)
    runs = {name: read_run(args.data / f) for name, f in RUNS.items()}
    for fit, held in (("mapping", "tensor-parallel"), ("tensor-parallel", "mapping")):
        s = per_segment(runs[fit])
        print(f"fitted on the {fit} run: " + ", ".join(f"{d} {v * 1e3:.3f} ms per segment" for d, v in s.items()))
        for dev, (m, p, k) in devices(runs[held]).items():
            with_term = p + k * s[dev]
            print(f"  held out, the {held} run's {dev} ({k} segments): measured {m * 1e3:.2f} ms, predicted today "
                  f"{p * 1e3:.2f} ms (x{m / p:.2f}), with the term {with_term * 1e3:.2f} ms (x{m / with_term:.2f})")
    mapping = runs["mapping"]
    alone = read_run(args.data / "run.resnet50.gpu0.json")
    s = per_segment(runs["tensor-parallel"])
    bound = max(p + k * s[dev] for dev, (_, p, k) in devices(mapping).items())
    (_, p_gpu, k_gpu), = devices(alone).values()
    gpu_bound = p_gpu + k_gpu * s["gpu0"]
    print(f"ResNet-50 with the tensor-parallel run's fit (held out): the mapping {1 / bound:.1f}/s (today "
          f"{mapping.predicted.throughput:.1f}/s, measured {mapping.report.throughput:.1f}/s), the GPU "
          f"alone {1 / gpu_bound:.1f}/s (today {alone.predicted.throughput:.1f}/s, measured "
          f"{alone.report.throughput:.1f}/s): compute bounds only, links and waits left out")
    return 0


TARGET_US = 30.0


def per_call_cases(data: Path, where: Path) -> list[tuple[str, object, int, int]]:
    """(label, manifest, rank, segment) of the sub-models measured: the toy CNN mapped layer by layer onto
    two workers (one-layer segments, tens of us) and three of the ResNet-50 map-opt mapping's CPU
    segments (~0.25 ms, ~1 ms and ~5 ms here), split under ``where`` (reused when already there)."""
    from hetsplit.plan.io import load_plan
    from hetsplit.plan.types import Plan
    from hetsplit.runtime import resolve_model, split_model
    from hetsplit.runtime.manifest import load_manifest
    from hetsplit.runtime.toy import toy_model

    def split(name: str, make) -> object:
        done = where / name / "manifest.json"
        if not done.exists():
            plan, graph, path = make()
            split_model(plan, graph, path, where / name)
        return load_manifest(done)

    def toy():
        (where / "toy").mkdir(parents=True, exist_ok=True)
        graph = toy_model(where / "toy" / "toy.onnx", channels=8, size=16, blocks=2)
        workers = ("local-cpu0", "local-cpu1")
        return Plan(graph.name, "local", "per-call", assign={n: workers[k % 2] for k, n in
                                                             enumerate(graph.names)}), graph, where / "toy" / "toy.onnx"

    def resnet():
        graph, path = resolve_model("resnet50")
        return load_plan(data / "plans.resnet50.json", 0), graph, path

    t = split("toy-split", toy)
    r = split("resnet50-map-opt", resnet)
    cpu = next(w.rank for w in r.stages if w.device.startswith("cpu"))
    return [("toy, 1 conv 8x16x16", t, 2, 1), ("resnet50 map-opt cpu0 seg7", r, cpu, 7),
            ("resnet50 map-opt cpu0 seg3", r, cpu, 3), ("resnet50 map-opt cpu0 seg2", r, cpu, 2)]


def paired_calls(manifest, rank: int, index: int, seconds: float) -> dict[str, list[float]]:
    """Per-call seconds of the executor alone (``session.run``; its binding's own ``run``, without the
    wrapper's per-call checks: the floor) and of the worker's call, the three in turn, each going first in turn."""
    import time

    import numpy as np

    from hetsplit.runtime.executor import OrtExecutor, SegmentSpec
    from hetsplit.runtime.worker import Segments, dropped_after

    w = manifest.worker(rank)
    seg = w.segments[index]
    exe = OrtExecutor(manifest.submodel_path(rank, index), SegmentSpec.of(w.device, seg), 1)
    rng = np.random.default_rng(0)
    feeds = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in seg.inputs}
    steps = Segments([exe if k == index else None for k in range(len(w.segments))], dropped_after(manifest, rank), 1)
    run, binding, outputs, clock = exe.session.run, exe._run, exe.outputs, time.perf_counter
    local: dict = {}

    def worker() -> None:
        steps.run(0, index, local)
        steps.drop(index, local)

    ways = {"alone": lambda: run(outputs, feeds), "binding": lambda: binding(outputs, feeds, None), "worker": worker}
    out: dict[str, list[float]] = {k: [] for k in ways}
    order = list(ways)
    for _ in range(20):
        for f in ways.values():
            local.update(feeds)
            f()
    end = clock() + seconds
    k = 0
    while clock() < end:
        for name in order[k % 3:] + order[:k % 3]:
            f = ways[name]
            local.update(feeds)
            t = clock()
            f()
            out[name].append(clock() - t)
        k += 1
        if k % 1000 == 0:
            steps.per_segment[0].clear()
    return out


def per_call(data: Path, seconds: float, split_dir: Path | None) -> int:
    """Print, per sub-model, the executor alone, the worker's call and what the worker adds (us per call)."""
    import statistics
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory(prefix="segment-cost-") as tmp:
        where = split_dir or Path(tmp)
        cases = per_call_cases(data, where)
        print(f"{'sub-model':30} {'calls':>6} {'alone us':>9} {'worker us':>9} {'added us':>9} {'95% interval':>16} "
              f"{'ratio':>6} {'binding us':>10} {'worker-binding us':>17}")
        verdicts = []
        for label, manifest, rank, index in cases:
            t = paired_calls(manifest, rank, index, seconds)
            d = np.subtract(t["worker"], t["alone"]) * 1e6
            rng = np.random.default_rng(1)
            boot = np.median(rng.choice(d, (1000, len(d))), axis=1)
            lo, hi = np.quantile(boot, [0.025, 0.975])
            verdicts.append("met" if hi <= TARGET_US else "not met" if lo > TARGET_US else "inconclusive")
            print(f"{label:30} {len(d):6d} {statistics.median(t['alone']) * 1e6:9.1f} "
                  f"{statistics.median(t['worker']) * 1e6:9.1f} {float(np.median(d)):+9.1f} [{lo:+6.1f}, {hi:+6.1f}] "
                  f"{statistics.median(np.divide(t['worker'], t['alone'])):6.3f} "
                  f"{statistics.median(t['binding']) * 1e6:10.1f} "
                  f"{float(np.median(np.subtract(t['worker'], t['binding']))) * 1e6:+17.1f}", flush=True)
        print(f"target, the worker adds <= {TARGET_US:.0f} us per call (its interval at or below it): "
              + ", ".join(f"{label} {v}" for (label, *_), v in zip(cases, verdicts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
