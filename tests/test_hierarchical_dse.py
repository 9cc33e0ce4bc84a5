"""The multi-stage two-level exploration (search.hierarchical) with a fake measurer, and the
encodings it uses (spe with a device limit, ne)."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import numpy as np
import pytest

from hetsplit.errors import HetsplitError
from hetsplit.plan.check import check_plan
from hetsplit.plan.pareto import pareto_mask
from hetsplit.search.encodings import make_encoding
from hetsplit.search.hierarchical import (FAILED, HierarchicalOptions, Measurement, StageRecord, _Clock, _Measured,
                                          _measured_level, hierarchical_explore, plan_key)
from hetsplit.search.node_mapping import NodeMapping
from hetsplit.workflow import load_problem


@pytest.fixture(scope="module")
def problem():
    return load_problem("resnet18", "jetson-xavier-nx-4")


class FakeMeasurer:
    """Objectives from the plan's own metrics, skewed per device so 'measured' differs from analytic."""

    def __init__(self, sleep_s: float = 0.0, fail_every: int = 0):
        self.calls: list[tuple] = []
        self.sleep_s, self.fail_every = sleep_s, fail_every

    def __call__(self, plan) -> Measurement:
        self.calls.append(plan_key(plan))
        time.sleep(self.sleep_s)
        if self.fail_every and len(self.calls) % self.fail_every == 0:
            return Measurement(seconds=self.sleep_s, error="worker died (fake)")
        m = plan.metrics
        skew = 1.0 + 0.1 * len(plan.devices)
        return Measurement(m.throughput / skew, max(m.memory_per_device_bytes.values()),
                           max(m.energy_per_device_j.values()) * skew, self.sleep_s)


def used_devices(plan) -> set[str]:
    return set(plan.devices)


@pytest.mark.parametrize("n, stages, want", [(8, None, [2, 4, 8]), (8, 1, [8]), (8, 2, [2, 8]), (5, None, [2, 4, 5]),
                                             (2, None, [2]), (1, None, [1]), (8, 6, [2, 4, 8])])
def test_stage_devices(n, stages, want):
    assert HierarchicalOptions(stages=stages).stage_devices(n) == want


def test_spe_device_limit_and_widen(problem):
    small = make_encoding(problem, "spe", devices=2)
    big = make_encoding(problem, "spe", devices=8)
    x = np.array([[5], [0], [problem.num_layers]])
    for a, b in zip(small.plans(x), big.plans(small.widen(x, 8))):
        assert [(s.device, s.layers) for s in a.stages] == [(s.device, s.layers) for s in b.stages]
        assert used_devices(a) <= {"nx0-cpu", "nx0-gpu"}
        assert a.metrics.throughput == pytest.approx(b.metrics.throughput)
    with pytest.raises(HetsplitError, match="device limit of 9"):
        make_encoding(problem, "spe", devices=9)
    with pytest.raises(HetsplitError, match="only spe and ne"):
        make_encoding(problem, "advanced", devices=2)


def test_ne_encoding_plans_are_valid_mappings(problem):
    enc = make_encoding(problem, "ne", devices=4)
    x = np.random.default_rng(1).integers(0, 4, size=(5, enc.n_var))
    plans = enc.plans(x)
    nm = NodeMapping(problem)
    batch = nm.evaluate(x)
    for i, plan in enumerate(plans):
        check_plan(problem.graph, problem.cluster, plan)
        assert used_devices(plan) <= set(problem.cluster.names[:4])
        assert plan.metrics.throughput == pytest.approx(batch.throughput[i])
    assert np.array_equal(enc.widen(x, 8), x)


def test_ne_replaces_a_device_that_cannot_run_the_layer():
    prob = load_problem("resnet8", "imce-4")     # IMC units cannot pool or add
    enc = make_encoding(prob, "ne")
    x = np.zeros((1, enc.n_var), dtype=np.int64)  # everything on unit 0 (an IMC unit)
    dev = enc.decode(x)[0]
    nm = NodeMapping(prob)
    assert nm.feasible[np.arange(prob.num_layers), dev].all()
    check_plan(prob.graph, prob.cluster, enc.plans(x)[0])


def test_hierarchical_runs_stages_on_growing_device_sets(problem):
    measure = FakeMeasurer()
    opts = HierarchicalOptions(encoding="spe", analytic_pop=20, analytic_gens=5, measured_pop=6, budget_s=3.0)
    res = hierarchical_explore(problem, measure, opts)
    assert [s.devices for s in res.stages] == [2, 4, 8]
    assert res.stages[0].carried == 0 and all(s.carried > 0 for s in res.stages[1:])
    assert all(s.analytic_front > 0 for s in res.stages)
    for p in res.points:   # a stage's plans use only its devices
        assert len(used_devices(p.plan)) <= p.devices
        assert used_devices(p.plan) <= set(problem.cluster.names[:p.devices])
    # every plan measured once (the cache), every measurement a point, each stage's counted in it
    assert len(measure.calls) == len(set(measure.calls)) == len(res.points)
    assert [s.measured for s in res.stages] == [sum(p.stage == s.stage for p in res.points) for s in res.stages]
    # the final front: non-dominated among every measured point, each with its measurement
    f = np.vstack([p.objectives for p in res.points])
    assert len(res.plans) == int(pareto_mask(np.unique(f, axis=0)).sum())
    assert len(res.measurements) == len(res.plans) and all(m.throughput > 0 for m in res.measurements)
    point_of = {id(p.plan): p for p in res.points}
    assert all(point_of[id(p)].measurement is m for p, m in zip(res.plans, res.measurements))
    t, best = res.best_over_time()
    assert np.all(np.diff(t) >= 0) and np.all(np.diff(best, axis=0) <= 0)
    assert best[-1] == pytest.approx(f.min(axis=0))


def test_an_identical_plan_is_answered_from_the_cache_without_a_run(problem):
    """Two plan objects with the same device per layer are one plan: the second is not run."""
    enc = make_encoding(problem, "ne", devices=8)
    x = np.random.default_rng(5).integers(0, enc.upper + 1, size=(1, enc.n_var))
    a, b = enc.plans(x)[0], enc.plans(x.copy())[0]
    assert a is not b and plan_key(a) == plan_key(b)
    measure = FakeMeasurer(sleep_s=0.3)
    measured = _Measured(measure, _Clock(60.0), None)
    fa = measured.objectives(a, 1, 8, 60.0)
    t0 = time.perf_counter()
    fb = measured.objectives(b, 1, 8, 60.0)
    assert time.perf_counter() - t0 < 0.2 and len(measure.calls) == 1 and measured.hits == 1
    assert np.array_equal(fa, fb) and len(measured.points) == 1
    other = enc.plans(np.where(x == 0, 1, 0))[0]       # another plan is run
    measured.objectives(other, 1, 8, 60.0)
    assert len(measure.calls) == 2 and measured.hits == 1


def test_budget_stops_between_measurements(problem):
    """A measurement expected (from the last ones' durations) to run past the deadline is not started:
    the 50 ms measurements end within the budget, give or take one measurement's jitter (the search's
    own clock, not the test's)."""
    opts = HierarchicalOptions(encoding="spe", analytic_pop=10, analytic_gens=2, measured_pop=4, budget_s=1.0)
    measure = FakeMeasurer(sleep_s=0.05)
    res = hierarchical_explore(problem, measure, opts)
    assert len(res.points) >= 3 and all(p.t_s <= 1.0 + 0.05 for p in res.points)
    assert len(measure.calls) == len(res.points)


def test_a_stage_ends_once_every_one_of_its_plans_has_run(problem):
    """Two devices: spe's one cut point has L + 1 values. The measuring level runs each distinct plan once
    and stops in the generation that ran the last one, not spinning on cache hits until its deadline."""
    enc = make_encoding(problem, "spe", devices=2)
    distinct = {plan_key(p) for p in enc.plans(np.arange(problem.num_layers + 1)[:, None])}
    measure = FakeMeasurer()
    measured = _Measured(measure, _Clock(120.0), None)
    answered: list[bool] = []                      # per plan asked for: was it a new run
    ask = measured.objectives

    def logged(plan, *args):
        runs = len(measure.calls)
        f = ask(plan, *args)
        answered.append(len(measure.calls) > runs)
        return f

    measured.objectives = logged
    opts = HierarchicalOptions(encoding="spe", measured_pop=4)
    record = StageRecord(1, 2)
    _measured_level(enc, None, opts, measured, 1, 2, 120.0, record)
    assert sorted(measure.calls) == sorted(distinct)          # every plan of the space, each run once
    last_new = max(i for i, new in enumerate(answered) if new)
    assert len(answered) - 1 - last_new < opts.measured_pop   # nothing asked after that generation


def test_one_stage_measured_only_baselines(problem):
    for encoding in ("spe", "ne"):
        opts = HierarchicalOptions(encoding=encoding, stages=1, analytic=False, measured_pop=6, budget_s=1.5)
        res = hierarchical_explore(problem, FakeMeasurer(), opts)
        assert [(s.devices, s.analytic_front, s.carried) for s in res.stages] == [(8, 0, 0)]
        assert res.stages[0].generations >= 2


def test_failed_runs_are_infeasible_and_never_in_the_front(problem):
    measure = FakeMeasurer(fail_every=3)
    opts = HierarchicalOptions(encoding="ne", stages=1, analytic=False, measured_pop=6, budget_s=1.0)
    res = hierarchical_explore(problem, measure, opts)
    failed = [p for p in res.points if p.measurement.error]
    assert failed and all((p.objectives == FAILED).all() for p in failed)
    assert res.plans and all(m.error is None for m in res.measurements)


def test_bad_options():
    with pytest.raises(HetsplitError, match="spe or ne"):
        HierarchicalOptions(encoding="advanced")
    with pytest.raises(HetsplitError, match="budget"):
        HierarchicalOptions(budget_s=0)
    with pytest.raises(HetsplitError, match="stages"):
        HierarchicalOptions(stages=0)


def test_search_touches_no_process():
    """The measuring is given by the caller: the search module imports nothing that starts processes."""
    src = Path(__file__).parents[1] / "src/hetsplit/search/hierarchical.py"
    names = set()
    for node in ast.walk(ast.parse(src.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    assert not {n for n in names if n.startswith(("subprocess", "multiprocessing", "hetsplit.runtime",
                                                  "hetsplit.experiments", "hetsplit.workflow"))}
