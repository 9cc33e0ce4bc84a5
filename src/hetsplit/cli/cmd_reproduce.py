"""hetsplit reproduce {donna,lblp,hybrid,mcu,hierdse} [--out DIR]: re-run a paper's experiments and check its claims."""

from __future__ import annotations

import sys
import time
import warnings
from typing import Callable

from hetsplit.cli.common import add_command
from hetsplit.errors import HetsplitError
from hetsplit.units import parse_duration

PAPERS = {"donna": "AlShams et al., seed 000", "lblp": "Bougioukou & Antonakopoulos, IMC units, seed 001",
          "hybrid": "Savva, hybrid CNN partitioning with NSGA-II, seed 003",
          "mcu": "Bochem et al., Transformers on Siracusa MCUs, seed 002",
          "hierdse": "Guo et al., multi-stage hierarchical DSE with measured runs, seed 004"}


def register(sub) -> None:
    p = add_command(sub, "reproduce", "re-run a paper's experiment set and check its claims one by one",
                    ["hetsplit reproduce donna --out out/donna",
                     "hetsplit reproduce donna --models vgg8 --media hb-wcc --out out/quick",
                     "hetsplit reproduce lblp --out out/lblp",
                     "hetsplit reproduce lblp --models resnet8 --quick --out out/lblp-quick",
                     "hetsplit reproduce hybrid --out out/hybrid",
                     "hetsplit reproduce hybrid --models alexnet --quick --out out/hybrid-quick",
                     "hetsplit reproduce mcu --out out/mcu",
                     "hetsplit reproduce hierdse --budget 20m --out out/hierdse"])
    p.add_argument("paper", choices=list(PAPERS),
                   help="which paper (" + "; ".join(f"{k}: {v}" for k, v in PAPERS.items()) + ")")
    p.add_argument("--out", "-o", default=None, metavar="DIR",
                   help="where figures and claims.md go (default: out/PAPER)")
    p.add_argument("--models", nargs="+", default=None, metavar="MODEL",
                   help="default: donna resnet152 vgg19 vgg8; lblp resnet8 resnet18 yolov8n; "
                        "hybrid alexnet vgg16 densenet121")
    donna = p.add_argument_group("donna")
    donna.add_argument("--media", nargs="+", default=None, metavar="MEDIUM", help="default: pcie5 hb-wcc lb-wcc")
    donna.add_argument("--no-edge", action="store_true", help="skip the edge-CIM + cloud experiment (Fig. 4)")
    lblp = p.add_argument_group("lblp")
    p.add_argument("--budget", default=None, metavar="TIME",
                   help="lblp: map-opt's time budget per case (default 2s, --quick 0.5s); hierdse: the wall clock "
                        "of the three searches together (default 20m); 90s, 20m, 1h or seconds")
    p.add_argument("--quick", action="store_true",
                   help="a reduced run (lblp: coarse unit counts, 60 inputs, 2 RD seeds, one mix size; "
                        "hybrid: population 100 x 25 generations; mcu: only the chip counts the claims need)")
    hybrid = p.add_argument_group("hybrid")
    hybrid.add_argument("--pop", type=int, default=None,
                        help="population (hybrid: default 1000, the thesis's; hierdse: of the measured level, "
                             "default 6)")
    hybrid.add_argument("--gens", type=int, default=None, help="generations (default 100, the thesis's)")
    hier = p.add_argument_group("hierdse")
    hier.add_argument("--no-emulate", action="store_true",
                      help="run every worker at this machine's speed (no cgroup throttling to the PEs' speeds)")
    lblp.add_argument("--algorithms", nargs="+", default=None, metavar="ALG",
                      help="default: lblp wb rr rd heft map-opt (unregistered ones are skipped)")
    p.set_defaults(func=run)


def _say() -> Callable[[str], None]:
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)

    return say


def run(args) -> int:
    return {"lblp": _run_lblp, "donna": _run_donna, "hybrid": _run_hybrid, "mcu": _run_mcu,
            "hierdse": _run_hierdse}[args.paper](args)


def _run_donna(args) -> int:
    from pathlib import Path

    from hetsplit.experiments import donna as dr
    from hetsplit.experiments.donna_claims import check_claims
    from hetsplit.report import donna_repro as rep
    from hetsplit.report.claims import console_lines

    models = tuple(args.models or dr.MODELS)
    media = tuple(args.media or dr.DONNA_MEDIA)
    bad = [m for m in media if m not in dr.DONNA_MEDIA]
    if bad:
        raise HetsplitError(f"unknown medium {bad}; DONNA's media are {list(dr.DONNA_MEDIA)}")
    say = _say()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        scen = dr.run_scenarios(models=models, media=media, progress=say)
        say("single-GPU baseline")
        gpu = dr.single_gpu(models)
        edge = [] if args.no_edge else dr.run_edge(models)
    claims = check_claims(scen, gpu, edge)
    paths = rep.write_report(Path(args.out or "out/donna"), scen, gpu, edge, claims)
    print("\n".join(console_lines(claims)))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _lblp_config(args):
    from dataclasses import replace

    from hetsplit.experiments import lblp as ex

    models = tuple(args.models or ex.MODELS)
    cfg = ex.LblpConfig.quick(models) if args.quick else ex.LblpConfig(models=models)
    if args.budget is not None:
        cfg = replace(cfg, budget_s=parse_duration(args.budget, "--budget"))
    if args.algorithms:
        cfg = replace(cfg, algorithms=tuple(args.algorithms))
    return cfg


def _run_lblp(args) -> int:
    from pathlib import Path

    from hetsplit.experiments import lblp as ex
    from hetsplit.experiments.lblp_claims import check_claims
    from hetsplit.report import lblp_repro as rep
    from hetsplit.report.claims import console_lines
    from hetsplit.search import partitioner_names

    unknown = [a for a in args.algorithms or () if a not in partitioner_names()]
    if unknown:
        raise HetsplitError(f"unknown algorithm(s) {unknown}; available: {partitioner_names()}")
    results = ex.run(_lblp_config(args), progress=_say())
    claims = check_claims(results)
    searches = [ex.compare_search(results, a) for a in ("map-opt", "heft")]
    paths = rep.write_report(Path(args.out or "out/lblp"), results, claims, searches)
    print("\n".join(console_lines(claims)))
    for s in searches:
        print(f"- {s.summary()}")
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _run_hybrid(args) -> int:
    from dataclasses import replace
    from pathlib import Path

    from hetsplit.experiments import hybrid as ex
    from hetsplit.experiments.hybrid_claims import check_claims
    from hetsplit.report import hybrid_repro as rep
    from hetsplit.report.claims import console_lines

    models = tuple(args.models or ex.MODELS)
    cfg = ex.HybridConfig.quick(models) if args.quick else ex.HybridConfig(models=models)
    cfg = replace(cfg, pop_size=args.pop or cfg.pop_size, generations=args.gens or cfg.generations)
    results = ex.run(cfg, progress=_say())
    claims = check_claims(results)
    paths = rep.write_report(Path(args.out or "out/hybrid"), results, claims)
    print("\n".join(console_lines(claims)))
    for g in results.gaps:
        print(f"- {g.model} {g.setting}: SPE GA misses {g.spe_gap:.2%} of the exact vertical front's hypervolume; "
              f"hybrid GA reaches {g.hybrid_ratio:.3f} x it")
    print("wrote " + ", ".join(str(p) for p in paths[:3]) + f" and {len(paths) - 3} more figures")
    return 0


def _run_mcu(args) -> int:
    from pathlib import Path

    from hetsplit.experiments import mcu as ex
    from hetsplit.experiments.mcu_claims import check_claims
    from hetsplit.report import mcu_repro as rep
    from hetsplit.report.claims import console_lines

    results = ex.run(ex.McuConfig.quick_run() if args.quick else ex.McuConfig(), progress=_say())
    claims = check_claims(results)
    paths = rep.write_report(Path(args.out or "out/mcu"), results, claims)
    print("\n".join(console_lines(claims)))
    if results.pipeline:
        print("\n".join(rep.pipeline_table(results.pipeline)))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _run_hierdse(args) -> int:
    from dataclasses import replace
    from pathlib import Path

    from hetsplit.experiments import hierdse as ex
    from hetsplit.report import hierdse_repro as rep
    from hetsplit.report.claims import console_lines

    opts = ex.HierDseOptions()
    opts = replace(opts, budget_s=parse_duration(args.budget, "--budget") if args.budget else opts.budget_s,
                   measured_pop=args.pop or opts.measured_pop,
                   measure=replace(opts.measure, emulate_devices=not args.no_emulate))
    results = ex.run(opts, progress=_say())
    claims = ex.check_claims(results)
    paths = rep.write_report(Path(args.out or "out/hierdse"), results, claims)
    print("\n".join(rep.curve_table(results)))
    print("\n".join([*rep.stage_table(results), rep.spread_line(results)]))
    print("\n".join(console_lines(claims)))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
