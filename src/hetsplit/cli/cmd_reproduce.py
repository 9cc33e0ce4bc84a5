"""hetsplit reproduce donna [--out DIR]: re-run a paper's experiments and check its claims."""

from __future__ import annotations

import sys
import time
import warnings

from hetsplit.cli.common import add_command
from hetsplit.errors import HetsplitError


def register(sub) -> None:
    p = add_command(sub, "reproduce", "re-run a paper's experiment set and check its claims one by one",
                    ["hetsplit reproduce donna --out out/donna",
                     "hetsplit reproduce donna --models vgg8 --media hb-wcc --out out/quick"])
    p.add_argument("paper", choices=["donna"], help="which paper (donna: AlShams et al., seed 000)")
    p.add_argument("--out", "-o", default="out/donna", metavar="DIR", help="where figures and claims.md go")
    p.add_argument("--models", nargs="+", default=None, metavar="MODEL", help="default: resnet152 vgg19 vgg8")
    p.add_argument("--media", nargs="+", default=None, metavar="MEDIUM", help="default: pcie5 hb-wcc lb-wcc")
    p.add_argument("--no-edge", action="store_true", help="skip the edge-CIM + cloud experiment (Fig. 4)")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from hetsplit.report import donna_repro as dr

    models = tuple(args.models or dr.MODELS)
    media = tuple(args.media or dr.DONNA_MEDIA)
    bad = [m for m in media if m not in dr.DONNA_MEDIA]
    if bad:
        raise HetsplitError(f"unknown medium {bad}; DONNA's media are {list(dr.DONNA_MEDIA)}")
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        scen = dr.run_scenarios(models=models, media=media, progress=say)
        say("single-GPU baseline")
        gpu = dr.single_gpu(models)
        edge = [] if args.no_edge else dr.run_edge(models)
    paths = dr.write_report(Path(args.out), scen, gpu, edge)
    for c in dr.check_claims(scen, gpu, edge):
        print(f"- [{c.verdict}] {c.claim}\n    {c.evidence}")
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
