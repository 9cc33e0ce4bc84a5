"""The golden cases: zoo models on built-in clusters, one per algorithm family, and how their
figures are computed at every deterministic fidelity.

``python tests/golden/regenerate.py`` rewrites ``tests/golden/*.json`` from these; ``tests/test_golden.py``
compares them to 1e-9. A commit that moves a figure regenerates the file it moves and says why.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsplit.estimate import SimOptions, estimate
from hetsplit.estimate.batch import metrics_at
from hetsplit.plan.io import load_plan
from hetsplit.plan.types import Plan
from hetsplit.workflow import PlanRequest, load_problem, search_plans

HERE = Path(__file__).parent
FIDELITIES = {"closed": None, "simulated": SimOptions(inputs=100, keep_timeline=False)}


@dataclass(frozen=True)
class Case:
    """One family's plans: found by ``algorithm`` (or read from ``plan_file``) for ``model`` on ``cluster``."""

    name: str
    model: str
    cluster: str
    algorithm: str = ""
    plan_file: str = ""            # a hand-written plan (hybrid LOP/LIP) instead of a search
    decode: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


CASES = (
    Case("pipeline-exact", "resnet18", "donna-2cpu-1gpu-1cim-hb-wcc", "exact"),
    Case("pipeline-donna", "resnet18", "donna-2cpu-1gpu-1cim-hb-wcc", "donna"),
    Case("mapping-lblp", "resnet18", "imce-12", "lblp"),
    Case("mapping-heft", "yolov8n", "jetson-xavier-nx-4", "heft"),
    Case("mapping-map-opt", "resnet8", "imce-4", "map-opt"),
    Case("hybrid-lop-lip", "alexnet", "jetson-xavier-nx-4", plan_file="alexnet-lop-lip.json"),
    Case("tensor-parallel-prompt", "tinyllama-42m", "siracusa-8", "tensor-parallel"),
    Case("tensor-parallel-decode", "tinyllama-42m", "siracusa-8", "tensor-parallel", decode=128),
)


def case_plans(case: Case) -> tuple[Any, list[Plan]]:
    """The problem and the plans of a case (searches are deterministic: fixed seeds, proven optima)."""
    problem = load_problem(case.model, case.cluster, decode_context=case.decode)
    if case.plan_file:
        return problem, [load_plan(HERE / case.plan_file)]
    found = search_plans(problem, PlanRequest(algorithms=(case.algorithm,), baselines=False, **case.options))
    return problem, found.plans


def figures(case: Case) -> dict[str, Any]:
    """Every plan's devices, a fingerprint of its placement, and its metrics at every deterministic
    fidelity."""
    problem, plans = case_plans(case)
    out: dict[str, Any] = {"model": problem.graph.name, "cluster": problem.cluster.name, "plans": []}
    batches = {f: estimate(problem, plans, f, opts) for f, opts in FIDELITIES.items()}
    for i, plan in enumerate(plans):
        entry = {"algorithm": plan.algorithm, "devices": plan.devices,
                 "placement_sha256": _digest({"assign": plan.to_dict()["assign"], "combine": plan.to_dict().get(
                     "combine", {}), "order": plan.order}),
                 "fidelities": {f: metrics_at(problem, b, i).to_dict() for f, b in batches.items()}}
        out["plans"].append(entry)
    return out


def _digest(doc: Any) -> str:
    """A short fingerprint of a placement (layers or shards to devices, combines, run order)."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def golden_path(case: Case) -> Path:
    return HERE / f"{case.name}.json"


def read_golden(case: Case) -> dict[str, Any]:
    return json.loads(golden_path(case).read_text())
