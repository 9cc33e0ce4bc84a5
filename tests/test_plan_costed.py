"""``Plan.costed``: a costed plan's metrics, and a clear error for a plan nobody costed."""

from __future__ import annotations

import pytest

from hetsplit.errors import PlanError
from hetsplit.plan.types import Metrics, Plan, Stage


def test_costed_gives_the_metrics_or_says_the_plan_has_none():
    plan = Plan("m", "c", "by-hand", stages=[Stage("d0", ["a"])])
    with pytest.raises(PlanError, match="'by-hand' plan of 'm' has no metrics"):
        _ = plan.costed
    plan.metrics = Metrics(throughput=2.0, bottleneck_s=0.5, bottleneck="stage d0", latency_s=0.5, energy_j=1.0,
                           energy_per_device_j={"d0": 1.0}, compute_s_per_device={"d0": 0.5},
                           memory_per_device_bytes={"d0": 1.0}, fits=True, edp=0.5)
    assert plan.costed is plan.metrics
