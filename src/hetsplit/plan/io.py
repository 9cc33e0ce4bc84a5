"""Plan and plan-set files (JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hetsplit.errors import PlanError
from hetsplit.jsonfile import read_json
from hetsplit.outpath import write_text
from hetsplit.plan.types import SET_FORMAT, Plan


def save_plans(plans: list[Plan], path: str | Path, **extra: Any) -> Path:
    """Write a plan set: ``{"format": "hetsplit.planset/1", "plans": [...], ...extra}``."""
    doc = {"format": SET_FORMAT, **extra, "plans": [pl.to_dict() for pl in plans]}
    return write_text(path, json.dumps(doc, indent=1))


def save_plan(plan: Plan, path: str | Path) -> Path:
    return write_text(path, json.dumps(plan.to_dict(), indent=1))


def load_plans(path: str | Path) -> list[Plan]:
    """Read a plan file or a plan-set file; always returns a list."""
    p = Path(path)
    doc = read_json(p, PlanError, "no such plan file")
    if isinstance(doc, dict) and doc.get("format") == SET_FORMAT:
        plans = doc.get("plans", [])
        if not isinstance(plans, list):
            raise PlanError(f"{p}: 'plans' of a {SET_FORMAT} file must be a list of plan objects, "
                            f"got {type(plans).__name__}")
        return [Plan.from_dict(d, f"{p}: plans[{i}]") for i, d in enumerate(plans)]
    if isinstance(doc, list):
        return [Plan.from_dict(d, f"{p}[{i}]") for i, d in enumerate(doc)]
    return [Plan.from_dict(doc, str(p))]


def load_plan(path: str | Path, index: int | None = None) -> Plan:
    """One plan from a file: the only one, the one at ``index``, or the first Pareto-optimal one."""
    plans = load_plans(path)
    if not plans:
        raise PlanError(f"{path}: the plan set is empty")
    if index is not None:
        if not 0 <= index < len(plans):
            raise PlanError(f"{path}: no plan #{index}; the file has {len(plans)} plans (0..{len(plans) - 1})")
        return plans[index]
    return plans[featured_index(plans)]


def featured_index(plans: list[Plan]) -> int:
    """The plan a set stands for (what ``load_plan`` gives without an index): the only one, else the
    fastest Pareto-optimal one (the fastest of all when none is marked)."""
    best = [i for i, p in enumerate(plans) if p.pareto] or list(range(len(plans)))
    def throughput(i: int) -> float:
        metrics = plans[i].metrics
        return metrics.throughput if metrics else 0.0

    return max(best, key=throughput)
