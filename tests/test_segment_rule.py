"""The segment rule (``estimate.segments``): one figure per task, the same in the compiled closed form
(which cuts the segments itself, assignment by assignment), the simulator and a pipeline's stage time."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from _cut_costs import with_cut_costs, without_cut_costs
from _instances import random_problem
from hetsplit.cluster.loader import load_cluster
from hetsplit.costs.build import build_problem
from hetsplit.estimate.mapping import MappingEvaluator, evaluate_mappings, plan_buffers, plan_segments
from hetsplit.estimate.segments import SEGMENT_PART, UNFUSED_PART, charged, segment_charges
from hetsplit.estimate.simulate import SimOptions, simulate
from hetsplit.estimate.task_costs import task_costs
from hetsplit.estimate import make_plan
from hetsplit.graph import zoo
from hetsplit.plan.check import check_plan
from test_mapping_eval import assert_matches_reference, random_mapping, random_sharded_plan, reference


@pytest.fixture(scope="module")
def alexnet_nx():
    return build_problem(zoo.load("alexnet"), load_cluster("jetson-xavier-nx-4"))


def kernel_segments(pr, tg, devices):
    """``plan_segments`` on one assignment: each task's segment (its first task) and extra seconds."""
    ev = MappingEvaluator(pr, tg)
    st = ev.kernel_structure()
    buf = plan_buffers(1, tg.num_tasks, len(tg.edge_src), pr.num_devices, 0)
    sbuf = buf[-1]
    plan_segments(np.asarray(devices, dtype=np.int64), False, tg.edge_bytes, tg.edge_bytes, st[0], st[1],
                  tg.edge_bytes, st[3], st[4], st[-12:], sbuf)
    return sbuf[0].copy(), sbuf[2].copy()


def segment_ids(tg) -> np.ndarray:
    out = np.empty(tg.num_tasks, dtype=np.int64)
    for segs in tg.segments.values():
        for seg in segs:
            out[seg] = seg[0]
    return out


@pytest.mark.parametrize("seed", range(12))
def test_the_kernel_cuts_the_segments_of_the_task_graph_and_charges_the_same(alexnet_nx, seed):
    rng = np.random.default_rng(seed)
    pr = with_cut_costs(alexnet_nx, rng)
    tg = check_plan(pr.graph, pr.cluster, random_sharded_plan(pr, rng))
    ids, extra = kernel_segments(pr, tg, tg.device)
    np.testing.assert_array_equal(ids, segment_ids(tg))
    np.testing.assert_allclose(extra, segment_charges(pr, tg).total_s, rtol=1e-12, atol=0)


@pytest.mark.parametrize("seed", range(12))
def test_with_cut_costs_the_closed_form_is_the_reference_on_the_charged_tasks(alexnet_nx, seed):
    """Sharded mappings of alexnet and random DAG mappings: the closed form's every figure is the plain
    reference's with each task's time the segment rule's charged time."""
    rng = np.random.default_rng(seed)
    base = alexnet_nx if seed % 2 else random_problem(seed, inf_prob=0.0)
    pr = with_cut_costs(base, rng)
    plan = random_sharded_plan(pr, rng) if seed % 2 else random_mapping(pr, rng)
    tg = check_plan(pr.graph, pr.cluster, plan)
    got = evaluate_mappings(pr, tg)
    assert_matches_reference(pr, tg, got, costs=charged(pr, tg, task_costs(pr, tg)))
    free = evaluate_mappings(without_cut_costs(pr), tg)
    extra = np.zeros(pr.num_devices)
    np.add.at(extra, tg.device, segment_charges(pr, tg).total_s)
    assert extra.sum() > 0
    np.testing.assert_allclose(got.compute_s_per_device[0], free.compute_s_per_device[0] + extra, rtol=1e-12)


def test_a_batch_charges_each_assignment_by_its_own_segments(alexnet_nx):
    rng = np.random.default_rng(3)
    pr = with_cut_costs(alexnet_nx, rng)
    tg = check_plan(pr.graph, pr.cluster, random_sharded_plan(pr, rng))
    devices = rng.integers(0, pr.num_devices, size=(40, tg.num_tasks))
    batch = MappingEvaluator(pr, tg).evaluate(devices)
    for i in range(0, 40, 7):
        moved = replace(tg, tasks=[replace(t, device=int(d)) for t, d in zip(tg.tasks, devices[i])])
        ref = reference(pr, moved, charged(pr, moved, task_costs(pr, moved)))
        np.testing.assert_allclose(batch.compute_s_per_device[i], ref["compute"], rtol=1e-12)
        assert batch.latency_s[i] == pytest.approx(ref["latency_s"], rel=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_a_pipelines_task_graph_charges_each_stage_its_stage_time(seed):
    """A pipeline's stages are one segment each: the rule on its TaskGraph charges a stage exactly
    ``SplitProblem.segment_time`` (call, cut bytes in and out, its first layer's unfused extra)."""
    rng = np.random.default_rng(seed)
    pr = with_cut_costs(random_problem(seed, inf_prob=0.0), rng)
    n_layers, n_dev = pr.num_layers, pr.num_devices
    stages = int(rng.integers(1, min(n_layers, n_dev) + 1))
    cuts = sorted(rng.choice(np.arange(1, n_layers), size=stages - 1, replace=False).tolist())
    bounds = [0, *cuts, n_layers]
    devices = rng.permutation(n_dev)[:stages]
    tg = check_plan(pr.graph, pr.cluster, make_plan(pr, bounds, devices, "random"))
    charges = segment_charges(pr, tg).total_s
    assert len(charges) == stages
    for s in range(stages):
        assert charges[s] == pytest.approx(pr.segment_time(bounds[s], bounds[s + 1], devices[s]), rel=1e-12)
    got = evaluate_mappings(pr, tg)
    for s in range(stages):
        assert got.compute_s_per_device[0, devices[s]] == pytest.approx(
            pr.stage_time(bounds[s], bounds[s + 1], devices[s]), rel=1e-12)


def test_the_simulator_charges_the_rule_on_each_segments_first_task(alexnet_nx):
    """One input alone through a mapping that alternates devices: its latency grows by every charge on its
    chain, shown on its critical path as parts of their own."""
    rng = np.random.default_rng(5)
    pr = with_cut_costs(alexnet_nx, rng)
    names = pr.cluster.names
    plan = random_mapping(pr, rng)
    plan = replace(plan, assign={n: names[k % 2] for k, n in enumerate(pr.graph.names)})
    tg = check_plan(pr.graph, pr.cluster, plan)
    free = without_cut_costs(pr)
    before = simulate(free, tg, SimOptions(inputs=1))
    after = simulate(pr, tg, SimOptions(inputs=1))
    charges = segment_charges(pr, tg)
    assert charges.segment_s.sum() > 0 and charges.unfused_s.sum() > 0
    closed = evaluate_mappings(pr, tg)
    assert after.unloaded_latency_s == pytest.approx(closed.latency_s[0], rel=1e-9)
    assert after.unloaded_latency_s > before.unloaded_latency_s
    parts = after.breakdown()
    assert parts[SEGMENT_PART] > 0 and parts[UNFUSED_PART] > 0


def test_with_no_cut_costs_nothing_is_charged(alexnet_nx):
    rng = np.random.default_rng(1)
    tg = check_plan(alexnet_nx.graph, alexnet_nx.cluster, random_sharded_plan(alexnet_nx, rng))
    assert not segment_charges(alexnet_nx, tg).total_s.any()
    base = task_costs(alexnet_nx, tg)
    assert charged(alexnet_nx, tg, base) is base
