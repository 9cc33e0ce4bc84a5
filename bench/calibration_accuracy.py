"""Calibration accuracy on this machine's CPU: profile zoo CNNs, fit on some, predict the others.

  .venv/bin/python bench/calibration_accuracy.py --out out/calibration   # measure + fit + report
  .venv/bin/python bench/calibration_accuracy.py --profiles bench/data/epyc-milan-1t   # reuse the shipped ones

Profiles are measured with 1 onnxruntime thread, the ``min`` statistic over the runs and the whole
model timed by the thread's CPU time (this machine is shared with other jobs: the minimum is the
least disturbed layer time, CPU time leaves out the time other processes held the core), as
``hetsplit profile MODEL --device local-cpu --threads 1 --statistic min --clock cpu``. Targets (issue 4): every
held-out CNN's whole-model latency within +-10%, per-layer MAPE <= 20%.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hetsplit.costs.calibration import evaluate, fit, load_measured
from hetsplit.costs.profile import save_profile
from hetsplit.costs.profiler import profile_model

FIT = ["resnet8", "mobilenetv2", "resnet50", "vgg16", "densenet121"]
HOLDOUT = ["resnet18", "vgg8", "alexnet", "vgg19", "resnet101", "resnet152", "yolov8n"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profiles", help="directory with MODEL.json profiles (measure the missing ones)")
    ap.add_argument("--out", default="out/calibration", help="where profiles and the report go")
    ap.add_argument("--fit", nargs="+", default=FIT)
    ap.add_argument("--holdout", nargs="+", default=HOLDOUT)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--leave-one-out", action="store_true",
                    help="also fit on all models but one and predict that one, for every model")
    args = ap.parse_args()
    pdir = Path(args.profiles or args.out)
    pdir.mkdir(parents=True, exist_ok=True)
    for name in args.fit + args.holdout:
        path = pdir / f"{name}.json"
        if not path.exists():
            print(f"profiling {name} ...", flush=True)
            save_profile(profile_model(name, "local-cpu", threads=1, repeats=args.repeats, warmup=3,
                                       statistic="min", clock="cpu"), path)
    train = load_measured([str(pdir / f"{n}.json") for n in args.fit], "local-cpu")
    held = load_measured([str(pdir / f"{n}.json") for n in args.holdout], "local-cpu")
    fitted = fit(train)
    rows = [("fit", evaluate(fitted, m)) for m in train] + [("held out", evaluate(fitted, m)) for m in held]
    print(f"{'set':9} {'model':12} {'measured':>10} {'predicted':>10} {'whole err':>9} {'layer MAPE':>10} "
          f"{'within 10%':>10} {'t-weighted':>10}")
    for label, a in rows:
        print(f"{label:9} {a.model:12} {a.whole_measured_s * 1e3:8.2f}ms {a.whole_predicted_s * 1e3:8.2f}ms "
              f"{a.whole_error:+9.1%} {a.layer_mape:10.1%} {a.within_10:10.0%} {a.weighted_layer_error:10.1%}")
    held_rows = [a for label, a in rows if label == "held out"]
    worst = max(abs(a.whole_error) for a in held_rows)
    mape = sum(a.layer_mape * (a.layers - a.zero_layers) for a in held_rows) / sum(a.layers - a.zero_layers
                                                                                   for a in held_rows)
    print(f"\nheld out: worst whole-model error {worst:.1%} (target 10%), layer MAPE over all held-out layers "
          f"{mape:.1%} (target 20%)")
    loo = []
    if args.leave_one_out:
        every = train + held
        print(f"\nleave one out ({len(every)} fits):")
        for k, m in enumerate(every):
            a = evaluate(fit(every[:k] + every[k + 1:]), m)
            loo.append(a.row())
            print(f"{a.model:12} whole {a.whole_error:+7.1%}  layer MAPE {a.layer_mape:6.1%}  within 10% "
                  f"{a.within_10:4.0%}")
    report = Path(args.out) / "report.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps({"fit": args.fit, "holdout": args.holdout, "coefficients": fitted.coefficients,
                                  "rows": [{"set": s, **a.row()} for s, a in rows],
                                  "worst_whole_error": worst, "holdout_layer_mape": mape,
                                  "leave_one_out": loo}, indent=1))
    print(f"wrote {report}")


if __name__ == "__main__":
    main()
