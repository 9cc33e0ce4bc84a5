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
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "h200-16c"
RUNS = {"mapping": "run.resnet50.map-opt.json", "tensor-parallel": "run.mobilebert.tensor-parallel.json"}


def devices(run: dict, predicted: dict[str, float] | None = None) -> dict[str, tuple[float, float, int]]:
    """Per device of a run report: (measured compute per input, predicted, segments per input); the
    prediction is the report's unless ``predicted`` (device -> seconds per input) is given."""
    pred = predicted if predicted is not None else run["predicted"]["compute_s_per_device"]
    return {d["device"]: (d["compute_s"], pred[d["device"]], d["segments"]) for d in run["measured"]["devices"]}


def per_segment(run: dict, predicted: dict[str, float] | None = None) -> dict[str, float]:
    """The fitted seconds per segment of each device of ``run``: (measured - predicted) / segments, not
    below 0 (``predicted`` as in ``devices``)."""
    return {dev: max(0.0, (m - p) / k) for dev, (m, p, k) in devices(run, predicted).items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    runs = {name: json.loads((args.data / f).read_text()) for name, f in RUNS.items()}
    for fit, held in (("mapping", "tensor-parallel"), ("tensor-parallel", "mapping")):
        s = per_segment(runs[fit])
        print(f"fitted on the {fit} run: " + ", ".join(f"{d} {v * 1e3:.3f} ms per segment" for d, v in s.items()))
        for dev, (m, p, k) in devices(runs[held]).items():
            with_term = p + k * s[dev]
            print(f"  held out, the {held} run's {dev} ({k} segments): measured {m * 1e3:.2f} ms, predicted today "
                  f"{p * 1e3:.2f} ms (x{m / p:.2f}), with the term {with_term * 1e3:.2f} ms (x{m / with_term:.2f})")
    mapping = runs["mapping"]
    alone = json.loads((args.data / "run.resnet50.gpu0.json").read_text())
    s = per_segment(runs["tensor-parallel"])
    bound = max(p + k * s[dev] for dev, (_, p, k) in devices(mapping).items())
    (_, p_gpu, k_gpu), = devices(alone).values()
    gpu_bound = p_gpu + k_gpu * s["gpu0"]
    print(f"ResNet-50 with the tensor-parallel run's fit (held out): the mapping {1 / bound:.1f}/s (today "
          f"{mapping['predicted']['throughput']:.1f}/s, measured {mapping['measured']['throughput']:.1f}/s), the GPU "
          f"alone {1 / gpu_bound:.1f}/s (today {alone['predicted']['throughput']:.1f}/s, measured "
          f"{alone['measured']['throughput']:.1f}/s): compute bounds only, links and waits left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
