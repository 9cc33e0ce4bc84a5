"""The thesis's MAC / frequency model (seed 003, 4.3) against hetsplit's calibrated model, leave one out.

  .venv/bin/python bench/thesis_model_accuracy.py [--profiles bench/data/epyc-milan-1t] [--all] [--aggregate median]

Each zoo CNN is predicted by both models fitted on the other CNNs + the non-CNN fit data (the
protocol of bench/calibration_accuracy.py, whose hetsplit numbers this reproduces); ``--all`` holds
out every profile instead. The frequency is the profiles' ``frequency_hz`` where they state one, else
2 GHz: any constant gives the same predictions, the thesis coefficients absorb it. Also prints the
thesis model's coefficients fitted on every profile and its memory fit (eq. 4.9: whole-model expected
memory against the profile's peak RSS).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from hetsplit.costs.calibration import load_measured
from hetsplit.costs.mac_frequency_fit import DEFAULT_FREQUENCY_HZ, MacFitOptions, fit_mac_frequency, fit_memory
from hetsplit.costs.models.base import default_mem_bytes
from hetsplit.costs.profile import load_profile
from hetsplit.experiments.model_accuracy import ComparisonOptions, compare_on_held_out, summarize

CNNS = ["resnet8", "resnet18", "resnet50", "resnet101", "resnet152", "vgg8", "vgg16", "vgg19", "alexnet",
        "densenet121", "mobilenetv2", "yolov8n"]
EXTRA = ["tinyllama-42m", "mobilebert", "silu-bench", "dw-bench"]


def stated_frequency(meta: dict) -> float | None:
    params = meta.get("device_params") or {}
    value = meta.get("frequency_hz", params.get("frequency_hz"))
    return float(value) if value else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profiles", default=str(Path(__file__).parent / "data" / "epyc-milan-1t"))
    ap.add_argument("--device-type", default="local-cpu")
    ap.add_argument("--all", action="store_true", help="hold out every profile, not only the CNNs")
    ap.add_argument("--aggregate", choices=["mean", "median"], default="mean",
                    help="per-kind coefficient: mean of the layers' (the thesis) or their median")
    args = ap.parse_args()
    pdir = Path(args.profiles)
    names = [n for n in CNNS + EXTRA if (pdir / f"{n}.json").exists()]
    paths = [str(pdir / f"{n}.json") for n in names]
    metas = [load_profile(p).meta for p in paths]
    every = dict(zip(names, load_measured(paths, args.device_type)))
    stated = {f for m in metas if (f := stated_frequency(m))}
    freq = stated.pop() if len(stated) == 1 else DEFAULT_FREQUENCY_HZ
    held = names if args.all else [n for n in names if n in CNNS]
    extra = [every[n] for n in names if n not in held]
    rows = compare_on_held_out([every[n] for n in held], extra, ComparisonOptions(freq, MacFitOptions(args.aggregate)))
    print(f"{len(held)} held out, each fitted on the other {len(held) - 1} + {', '.join(m.name for m in extra) or 'nothing else'}; "
          f"{args.aggregate} per kind; frequency {freq:.3g} Hz ({'stated by the profiles' if freq != DEFAULT_FREQUENCY_HZ else 'none stated: default'})")
    print(f"{'held out':13} {'measured':>9} | {'thesis whole':>12} {'MAPE':>7} {'in 10%':>6} | "
          f"{'hetsplit whole':>14} {'MAPE':>7} {'in 10%':>6}")
    for r in rows:
        t, h = r.thesis, r.hetsplit
        print(f"{r.held_out:13} {t.whole_measured_s * 1e3:7.2f}ms | {t.whole_error:+12.1%} {t.layer_mape:7.1%} "
              f"{t.within_10:6.0%} | {h.whole_error:+14.1%} {h.layer_mape:7.1%} {h.within_10:6.0%}")
    s = summarize(rows)
    t, h = s["thesis"], s["hetsplit"]
    print(f"{'median':13} {'':9} | {t.median_abs_whole_error:12.1%} {t.median_layer_mape:7.1%} {t.median_within_10:6.0%} | "
          f"{h.median_abs_whole_error:14.1%} {h.median_layer_mape:7.1%} {h.median_within_10:6.0%}   (whole: median |error|)")
    print(f"{'worst |whole|':13} {'':9} | {t.worst_abs_whole_error:12.1%} {'':7} {'':6} | {h.worst_abs_whole_error:14.1%}")

    allfit = fit_mac_frequency(list(every.values()), freq, MacFitOptions(args.aggregate))
    print("\nthesis coefficients (ops per cycle) fitted on every profile: "
          + ", ".join(f"{k} {v:.3g} ({allfit.layers.get(k, '-')} layers)" for k, v in allfit.layer_coefficients.items()))
    print(f"energy: {allfit.energy_note}")
    pairs = [(float(default_mem_bytes(every[n].graph).sum()), float(m["memory"]["peak_rss_bytes"]))
             for n, m in zip(names, metas) if m.get("memory", {}).get("peak_rss_bytes")]
    if len(pairs) >= 2:
        coef, bias = fit_memory([p[0] for p in pairs], [p[1] for p in pairs])
        rel = [abs((e * coef + bias) / r - 1) for e, r in pairs]
        print(f"memory (eq. 4.9) over {len(pairs)} profiles, expected = sum of layer memory, measured = peak RSS: "
              f"coefficient {coef:.3f}, bias {bias / 2**20:.1f} MiB, in-sample |error| median {np.median(rel):.1%}, "
              f"worst {max(rel):.1%}")


if __name__ == "__main__":
    main()
