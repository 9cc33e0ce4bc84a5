"""A pipeline's closed form charges each stage as one segment, by the rule a TaskGraph's segments follow:
each segment pays its type's call plus per boundary byte on its first task, and a whole-layer task of
layer l > 0 pays ``unfused_s[l]`` when layer l-1's task is in another segment."""

from __future__ import annotations

import numpy as np
import pytest
from _instances import random_problem, with_cut_costs

from hetsplit.costs.problem import SplitProblem
from hetsplit.estimate import evaluate_mappings, evaluate_pipelines
from hetsplit.plan.check import check_plan
from hetsplit.plan.tasks import TaskGraph
from hetsplit.plan.types import Plan, Stage


def task_graph_compute(problem: SplitProblem, tg: TaskGraph) -> np.ndarray:
    """Per device, seconds per input: its tasks' layers from the cost table plus each segment's charge."""
    costs, types = problem.costs, problem.device_type
    out = np.zeros(problem.num_devices)
    seg_of = {n: (d, k) for d, segs in tg.segments.items() for k, seg in enumerate(segs) for n in seg}
    task_of_layer = {layer: n for n, t in enumerate(tg.tasks) for layer in t.layers}
    for n, task in enumerate(tg.tasks):
        t = types[task.device]
        out[task.device] += float(costs.time_s[list(task.layers), t].sum())
        first = task.layers[0]
        if first > 0 and seg_of[task_of_layer[first - 1]] != seg_of[n]:
            out[task.device] += float(costs.unfused_s[first, t])
    for device, nbytes in tg.segment_boundary_bytes():
        out[device] += costs.segment_cost(problem.cluster.types[types[device]]).seconds(nbytes)
    links = problem.cluster.links
    for m in tg.messages():            # each end of a message run by a task: its device's CPU per end
        if m.producer >= 0:
            out[m.src] += links.end_s[m.src] + links.end_byte_s[m.src] * m.nbytes
        if m.consumers[0] >= 0:
            out[m.dst] += links.end_s[m.dst] + links.end_byte_s[m.dst] * m.nbytes
    return out


def random_pipeline(rng: np.random.Generator, problem: SplitProblem) -> tuple[list[int], list[int]]:
    """Random bounds and devices; a device may take several stages, never two in a row (which the
    runtime would run as one segment)."""
    L, D = problem.num_layers, problem.num_devices
    s = int(rng.integers(1, min(L, 2 * D if D > 1 else 1) + 1))
    bounds = [0, *sorted(rng.choice(np.arange(1, L), size=s - 1, replace=False).tolist()), L]
    devices = [int(rng.integers(D))]
    for _ in range(s - 1):
        devices.append(int(rng.choice([d for d in range(D) if d != devices[-1]])))
    return bounds, devices


@pytest.mark.parametrize("seed, messages", [(s, False) for s in range(40)] + [(s, True) for s in range(40, 70)])
def test_closed_form_equals_the_task_graph_segments(seed, messages):
    """Also with message ends charged (``cluster.links``) and, then, a source and a sink that run no task."""
    rng = np.random.default_rng(seed)
    ends = dict(source=bool(rng.random() < 0.5), sink=bool(rng.random() < 0.5)) if messages else {}
    p = with_cut_costs(random_problem(seed, n_layers=int(rng.integers(1, 9)), n_dev=int(rng.integers(2, 5)),
                                      inf_prob=0.0, **ends), seed, messages=messages)
    assert p.costs.charges_cuts
    for _ in range(5):
        bounds, devices = random_pipeline(rng, p)
        stages = [Stage(p.cluster.names[d], p.graph.names[bounds[s]:bounds[s + 1]]) for s, d in enumerate(devices)]
        tg = check_plan(p.graph, p.cluster, Plan(p.graph.name, p.cluster.name, "", stages))
        assert sum(len(s) for s in tg.segments.values()) == len(stages)   # one segment per stage
        m = evaluate_pipelines(p, np.array([bounds]), np.array([devices]))
        want = task_graph_compute(p, tg)
        assert np.allclose(m.compute_s_per_device[0], want, rtol=1e-12, atol=0)
        # the mapping closed form, which costs the plan through its TaskGraph, agrees
        tm = evaluate_mappings(p, tg)
        assert np.allclose(tm.compute_s_per_device[0], want, rtol=1e-12, atol=0)
        assert np.isclose(tm.bottleneck_s[0], m.bottleneck_s[0], rtol=1e-12, atol=0)
        # and the latency holds every stage's charge once
        stages_s = sum(p.stage_time(bounds[s], bounds[s + 1], d) for s, d in enumerate(devices))
        assert np.isclose(m.latency_s[0] - m.comm_time_s[0], stages_s, rtol=1e-12, atol=0)


def test_zero_cut_costs_change_nothing():
    p = random_problem(3, n_layers=6, n_dev=3, inf_prob=0.0)
    b, d = np.array([[0, 2, 6]]), np.array([[0, 2]])
    m = evaluate_pipelines(p, b, d)
    assert m.compute_s_per_device[0, 0] == p.layers_time(0, 2, 0) and m.compute_s_per_device[0, 2] == p.layers_time(2, 6, 2)
