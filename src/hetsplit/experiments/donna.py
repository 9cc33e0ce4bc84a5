"""DONNA's experiments (AlShams et al.) re-run with hetsplit, with the exact front beside them.

Scenarios: ResNet-152, VGG-19 and VGG-8 on DONNA's four device sets over PCIe-5, HB-WCC and LB-WCC
(the built-in ``donna-*`` clusters), DONNA's Algorithm 1 for alpha = 0, 0.2, ..., 1, and the exact
Pareto front of (bottleneck, energy) from ``pareto``. Baselines: one GPU (``donna-1gpu``) for its
Fig. 3; the edge-CIM + cloud set-up of its Fig. 4 (first stage forced onto an edge CIM device,
baseline = every layer offloaded to the cloud device). Metrics all come from the one evaluator.

``experiments.donna_claims.check_claims`` turns the paper's findings into labelled claims, every number
in the paper's band; ``report.donna_repro.write_report`` draws them (fig2_*.png, fig3.png, fig4.png,
claims.md, claims.json, results.json).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hetsplit.cluster.examples import DONNA_MEDIA, DONNA_SETS
from hetsplit.costs.problem import SplitProblem
from hetsplit.estimate.evaluate import make_plan
from hetsplit.plan.types import Plan
from hetsplit.search import PipelineConstraints, make_partitioner
from hetsplit.search.pareto_exact import Domination, compare_to_front

MODELS = ("resnet152", "vgg19", "vgg8")
ALPHAS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
CLOUDS = ("gpu", "cpu")
Loader = Callable[[str, str], SplitProblem]


def _default_loader(model: str, cluster: str) -> SplitProblem:
    from hetsplit.workflow import load_problem

    return load_problem(model, cluster)


@dataclass
class Scenario:
    """One (model, device set, medium): DONNA's alpha plans and the exact front."""

    model: str
    devices: str
    medium: str
    donna: list[Plan]
    front: list[Plan]
    dominations: list[Domination] = field(default_factory=list)
    fits_one_device: bool = True   # some device can hold and run the whole model

    @property
    def name(self) -> str:
        return f"{self.model} {{{self.devices}}} {self.medium}"

    def by_alpha(self, alpha: float) -> Plan:
        return next(p for p in self.donna if abs(p.params["alpha"] - alpha) < 1e-9)

    def unsupported(self) -> list[Plan]:
        """Front points no weighted sum of bottleneck and energy can select (not on the convex hull)."""
        pts = np.array([(p.costed.bottleneck_s, p.costed.energy_j) for p in self.front])
        if len(pts) < 3:
            return []
        order = np.argsort(pts[:, 0])
        hull: list[int] = []
        for i in order:  # lower convex hull, monotone chain
            while len(hull) >= 2:
                (x1, y1), (x2, y2), (x3, y3) = pts[hull[-2]], pts[hull[-1]], pts[i]
                if (x2 - x1) * (y3 - y1) - (y2 - y1) * (x3 - x1) <= 0:
                    hull.pop()
                else:
                    break
            hull.append(int(i))
        on = set(hull)
        return [self.front[i] for i in range(len(self.front)) if i not in on]


@dataclass
class EdgeResult:
    """Fig. 4: edge CIM devices plus one cloud device behind LB-WCC."""

    model: str
    cloud: str
    donna: Plan          # alpha = 1, first stage on an edge device
    fastest: Plan        # exact minimum bottleneck under the same constraint
    offload: Plan        # everything on the cloud device (the inputs travel from the edge)


def run_scenarios(models=MODELS, sets=tuple(DONNA_SETS), media=DONNA_MEDIA, alphas=ALPHAS,
                  loader: Loader = _default_loader, progress: Callable[[str], None] | None = None) -> list[Scenario]:
    out = []
    for model in models:
        for label in sets:
            for medium in media:
                if progress:
                    progress(f"{model} {{{label}}} {medium}")
                problem = loader(model, f"donna-{label}-{medium}")
                donna = make_partitioner("donna", alphas=tuple(alphas)).solve(problem)
                front = make_partitioner("pareto").solve(problem)
                devs = np.arange(problem.num_devices)
                L = problem.num_layers
                one = bool((problem.fits(0, L, devs) & np.isfinite(problem.stage_time(0, L, devs))).any())
                out.append(Scenario(model, label, medium, donna, front, compare_to_front(donna, front), one))
    return out


def single_gpu(models=MODELS, loader: Loader = _default_loader) -> dict[str, Plan]:
    """Each model on DONNA's single-GPU baseline cluster."""
    return {m: make_partitioner("exact").solve(loader(m, "donna-1gpu"))[0] for m in models}


def run_edge(models=MODELS, clouds=CLOUDS, loader: Loader = _default_loader) -> list[EdgeResult]:
    out = []
    for model in models:
        for cloud in clouds:
            problem = loader(model, f"donna-edge-4cim-cloud-{cloud}")
            edge = tuple(n for n in problem.cluster.names if n.startswith("cim"))
            c = PipelineConstraints(first_stage_devices=edge)
            donna = make_partitioner("donna", alphas=(1.0,), constraints=c).solve(problem)[0]
            fastest = make_partitioner("exact", constraints=c).solve(problem)[0]
            cloud_dev = problem.cluster.index(f"{cloud}0")
            offload = make_plan(problem, [0, problem.num_layers], [cloud_dev], "offload", {"device": f"{cloud}0"})
            out.append(EdgeResult(model, cloud, donna, fastest, offload))
    return out


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"
