"""search_time.png, claims.md and results.json of ``hetsplit reproduce hierdse`` (Guo et al., seed 004);
computes nothing: the curves and claims come from ``hetsplit.experiments.hierdse``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hetsplit.experiments.claims import ClaimSet
from hetsplit.experiments.hierdse import OBJECTIVE_NAMES, HierDseResults, best_at, horizon_s
from hetsplit.report.claims import claims_section, write_claims_json
from hetsplit.report.explore_plots import search_time_plot
from hetsplit.outpath import write_text

FORMAT = "hetsplit.hierdse-repro/1"
CHECKPOINTS = (0.25, 0.5, 0.75, 1.0)     # fractions of the search time every experiment had


def figure(results: HierDseResults, out: Path) -> Path:
    o = results.options
    return search_time_plot({name: r.best_over_time() for name, r in results.runs.items()}, out / "search_time.png",
                            f"{o.model} on {o.cluster}: best measured mapping against search time (Fig. 4 of the paper)")


def curve_table(results: HierDseResults) -> list[str]:
    """The best value of each objective per experiment at a few points of the search."""
    h = horizon_s(results)
    lines = ["| experiment | time (s) | plans measured | throughput (/s) | memory per device (MB) | "
             "energy per device (J) |", "|---|---|---|---|---|---|"]
    for name, run in results.runs.items():
        times = [p.t_s for p in run.points]
        for frac in CHECKPOINTS:
            t = frac * h
            f = best_at(run, t)
            n = int(np.searchsorted(times, t, side="right"))
            cells = ["-", "-", "-"] if not np.isfinite(f).all() or f[0] >= 1e30 else \
                [f"{1 / f[0]:.4g}", f"{f[1] / 1e6:.4g}", f"{f[2]:.4g}"]
            lines.append(f"| {name} | {t:.0f} | {n} | " + " | ".join(cells) + " |")
    return lines


def stage_table(results: HierDseResults) -> list[str]:
    lines = ["| experiment | stage | PEs | seeded from the previous stage | level-1 Pareto plans | level-1 time (s) | "
             "plans run | met again (cache) | generations | stage time (s) | s per run |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, run in results.runs.items():
        for s in run.stages:
            runs = [p.measurement.seconds for p in run.points if p.stage == s.stage]
            per = f"{np.median(runs):.1f}" if runs else "-"
            lines.append(f"| {name} | {s.stage} | {s.devices} | {s.carried} | {s.analytic_front} | "
                         f"{s.analytic_seconds:.1f} | {s.measured} | {s.cached} | {s.generations} | {s.seconds:.0f} | "
                         f"{per} |")
    return lines


def spread_line(results: HierDseResults) -> str:
    """How far the spacing of one run's outputs spreads: (max - min) / median per plan, over the plans."""
    spread = [(iv.max - iv.min) / iv.median for r in results.runs.values() for p in r.points
              if (iv := p.measurement.details.interval_s).n >= 2 and iv.median > 0]
    if not spread:
        return "- spread of the outputs' spacing within a run: not recorded"
    q = np.percentile(spread, [50, 90])
    return (f"- spread of the outputs' spacing within a run ((max - min) / median, per plan; what the throughput is "
            f"measured over): median {q[0]:.0%}, 90th percentile {q[1]:.0%} over {len(spread)} plans")


def setup_lines(results: HierDseResults) -> list[str]:
    o, m = results.options, results.options.measure
    failed = sum(1 for r in results.runs.values() for p in r.points if p.measurement.error)
    measured = sum(len(r.points) for r in results.runs.values())
    d = results.emulation
    emu = (f"each worker throttled by a cgroup CPU quota to its PE's speed at a time dilation of {d.median:.3g} "
           f"(median; {d.low:.3g} to {d.high:.3g} over the plans) "
           "(the emulated cluster runs that many times slower than the real one; measured times are divided by it)"
           if d is not None else "workers ran at this machine's speed (no device emulation)")
    return [f"- model {o.model}, cluster {o.cluster} (8 PEs: 4 Jetson Xavier NX boards x CPU + GPU), "
            f"budget {o.budget_s:.0f} s in all, {results.seconds:.0f} s used",
            f"- every plan's fitness is a real run by hetsplit's runtime on this machine ({m.inputs} inputs, "
            f"{m.latency_inputs} of them one at a time, the throughput from the spacing of the streamed ones' outputs; "
            "one process per PE" + (", warm processes reused from run to run" if m.pool else "") + f"); {emu}",
            spread_line(results),
            f"- {measured} plans run, {failed} failed (a failed run is infeasible to the search); a plan a search met "
            "again was answered from its cache (keyed by the plan's device per layer), not run again",
            f"- level 2 (measured) population {o.measured_pop}; level 1 (analytical) {o.analytic_pop} x "
            f"{o.analytic_gens} generations; crossover 0.5, mutation 0.2 as in the paper",
            "- memory per device: the largest worker's peak RSS above an idle worker's; energy per device: measured "
            "busy time (emulated) x the device model's power, plus its sends (no power meter reads here)"]


SCALED_DOWN = ("The paper ran each search for 70 h with populations of 100 on the real boards, on ResNet-101's 344 "
               "ONNX nodes; here each runs a third of the budget (minutes) with a measured population of "
               "{pop}, on the {layers} grouped layers hetsplit splits between (a convolution with its batch norm "
               "and activation is one layer). The curves therefore show the searches' first minutes, not their "
               "70-hour end points; the claims are judged on them at the search time every experiment had (its budget share).")


def claims_lines(results: HierDseResults, claims: ClaimSet) -> list[str]:
    return ["# Guo et al., multi-stage hierarchical DSE (seed 004): reproduction", "", *claims_section(claims), "",
            "## Setup", "", *setup_lines(results), "",
            SCALED_DOWN.format(pop=results.options.measured_pop, layers=results.layers), "",
            "## Best value found against search time (search_time.png)", "", *curve_table(results), "",
            "## Stages", "", *stage_table(results), ""]


def results_dict(results: HierDseResults, claims: ClaimSet) -> dict:
    o = results.options
    runs = {}
    for name, run in results.runs.items():
        runs[name] = {
            "options": {k: getattr(run.options, k) for k in ("encoding", "stages", "analytic", "measured_pop",
                                                              "analytic_pop", "analytic_gens", "budget_s")},
            "seconds": run.seconds,
            "stages": [vars(s) for s in run.stages],
            "points": [{"t_s": p.t_s, "stage": p.stage, "devices": p.devices, "run_s": p.measurement.seconds,
                        "objectives": [float(v) for v in p.objectives], "error": p.measurement.error,
                        "interval_s": p.measurement.details.interval_s.to_dict()}
                       for p in run.points],
            "pareto": [{"stages": [[s.device, len(s.layers)] for s in plan.stages] if plan.stages else None,
                        "measured": m.to_dict()} for plan, m in zip(run.plans, run.measurements)],
        }
    return {"format": FORMAT, "model": o.model, "cluster": o.cluster, "budget_s": o.budget_s,
            "seconds": results.seconds, "emulation": results.emulation.to_dict() if results.emulation else {},
            "objectives": ["1/throughput (s)", "memory per device (B)", "energy per device (J)"],
            "objective_names": list(OBJECTIVE_NAMES), "runs": runs,
            "claims": claims.to_dict()}


def write_report(out: Path, results: HierDseResults, claims: ClaimSet) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [figure(results, out)]
    md = out / "claims.md"
    write_text(md, "\n".join(claims_lines(results, claims)))
    js = out / "results.json"
    write_text(js, json.dumps(results_dict(results, claims), indent=1, default=float))
    return paths + [md, write_claims_json(out, claims), js]



