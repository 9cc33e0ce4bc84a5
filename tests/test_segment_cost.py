"""What a segment's executor call costs beyond its layers: the runtime's segments read off the TaskGraph,
their boundary bytes, the charge in the simulator and in the ``here`` prediction, and the fit."""

from __future__ import annotations

import numpy as np
import pytest

from hetsplit.costs.profile import Profile
from hetsplit.costs.profiler import LOCAL_CPU
from hetsplit.costs.table import CostTable
from hetsplit.errors import HetsplitError
from hetsplit.estimate import RuntimeCosts, predict_here
from hetsplit.estimate.processes import workers_problem
from hetsplit.costs.segment import SegmentCost
from hetsplit.estimate.simulate import SimOptions, simulate
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime import split_model
from hetsplit.runtime.compile import plan_cluster
from hetsplit.runtime.segment_calibration import fit_segments
from hetsplit.runtime.toy import toy_model

LAYER_S = 1e-3


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    path = tmp_path_factory.mktemp("toy") / "toy.onnx"
    graph = toy_model(path, channels=4, size=8, blocks=2)
    n = graph.num_layers
    table = CostTable(graph.names, [LOCAL_CPU], np.full((n, 1), LAYER_S), np.zeros((n, 1)), np.zeros((n, 1)),
                      {LOCAL_CPU: "given"})
    return graph, path, Profile(graph, table)


def alternating(graph) -> Plan:
    """Every layer on the other worker than the one before: each a segment of its own."""
    return Plan(graph.name, "local", "hand", assign={n: ("a", "b")[k % 2] for k, n in enumerate(graph.names)})


def runtime(fixed_s: float = 0.0, byte_s: float = 0.0) -> RuntimeCosts:
    return RuntimeCosts(0.0, 0.0, 0.0, 0.0, 0.0, "given", segment_s=fixed_s, segment_byte_s=byte_s)


@pytest.mark.parametrize("make", [alternating, lambda g: Plan(g.name, "local", "hand", [
    Stage("a", g.names[:3]), Stage("b", g.names[3:])])], ids=["mapping", "pipeline"])
def test_the_segments_are_the_runtimes_and_their_boundary_counts_what_crosses_it(toy, tmp_path, make):
    """The TaskGraph's segments are the manifest's, task for task, and a mapping's segment boundary bytes
    are what the split sub-model of that segment takes in and gives out (written independently, by
    ``runtime.split``); a pipeline stage's also count the tensors it relays."""
    graph, path, _ = toy
    plan = make(graph)
    manifest = split_model(plan, graph, path, tmp_path / "split")
    tg = check_plan(graph, plan_cluster(plan), plan)
    names = tg.cluster.names
    got = {names[d]: [[tg.tasks[t].name for t in seg] for seg in segs] for d, segs in tg.segments.items()}
    assert got == {w.device: [s.tasks for s in w.segments] for w in manifest.stages}
    bytes_ = tg.segment_boundary_bytes()
    assert len(bytes_) == sum(len(w.segments) for w in manifest.stages)
    if plan.is_pipeline:
        assert len(bytes_) == 2 and all(b > 0 for _, b in bytes_)
        return
    assert len(bytes_) == graph.num_layers
    expect = [sum(t.nbytes for t in s.inputs + s.outputs) for w in manifest.stages for s in w.segments]
    assert [b for _, b in bytes_] == pytest.approx(expect)


def test_the_simulator_charges_each_segment_once_on_its_first_task(toy):
    """One input alone through the alternating mapping runs every segment in turn, so its latency grows by
    exactly the segments' cost (the workers' table's, ``costs.segment``), which its critical path shows as
    its own part."""
    graph, _, profile = toy
    free = workers_problem(graph, profile, ["a", "b"], link_latency_s=1e-4)
    cost = SegmentCost(2e-4, 1e-9)
    problem = workers_problem(graph, profile, ["a", "b"], link_latency_s=1e-4, segment=cost)
    tg = check_plan(graph, problem.cluster, alternating(graph))
    extra = sum(cost.seconds(b) for _, b in tg.segment_boundary_bytes())
    before = simulate(free, tg, SimOptions(inputs=1))
    after = simulate(problem, tg, SimOptions(inputs=1))
    assert after.unloaded_latency_s == pytest.approx(before.unloaded_latency_s + extra)
    assert after.breakdown()["segment call"] == pytest.approx(extra)
    assert after.breakdown()["compute"] == pytest.approx(before.breakdown()["compute"])


def test_the_here_prediction_counts_the_segments_in_each_units_compute(toy):
    graph, _, profile = toy
    plan = alternating(graph)
    free = predict_here(plan, graph, profile, cores=8, runtime=runtime())
    charged = predict_here(plan, graph, profile, cores=8, runtime=runtime(3e-4, 2e-9))
    tg = check_plan(graph, workers_problem(graph, profile, ["a", "b"]).cluster, plan)
    for unit in ("a", "b"):
        d = tg.cluster.names.index(unit)
        own = [b for dev, b in tg.segment_boundary_bytes() if dev == d]
        assert charged.segments[unit] == len(own) == len(tg.segments[d])
        assert charged.segment_call_s[unit] == pytest.approx(len(own) * 3e-4 + 2e-9 * sum(own))
        assert charged.compute_s[unit] == pytest.approx(free.compute_s[unit] + charged.segment_call_s[unit])
    assert free.segment_call_s == {"a": 0.0, "b": 0.0}
    assert charged.predicted_throughput < free.predicted_throughput
    assert charged.simulated_latency_s == pytest.approx(free.simulated_latency_s + sum(charged.segment_call_s.values()))


def rows(fixed_s: float, byte_s: float, sizes: list[float]) -> list[dict]:
    return [{"boundary_bytes": b, "measured_s": 1e-3 + fixed_s + byte_s * b, "layers_s": 1e-3} for b in sizes]


def test_the_fit_recovers_a_line_and_never_goes_below_zero():
    sizes = [1e3, 6e4, 1.3e5, 1e6, 2e6, 8e6]
    assert fit_segments(rows(5e-5, 1e-10, sizes)) == pytest.approx((5e-5, 1e-10), rel=1e-6)
    # excess shrinking with bytes (noise): the byte cost pinned at 0, the fixed part their level
    shrinking = rows(1e-4, 0.0, sizes)
    for k, r in enumerate(shrinking):
        r["measured_s"] -= 1e-6 * k
    fixed_s, byte_s = fit_segments(shrinking)
    assert byte_s == 0.0 and 9.4e-5 < fixed_s < 1e-4
    # a line through below 0 at no bytes: the fixed part pinned at 0, the byte cost refitted through 0
    steep = [{"boundary_bytes": b, "measured_s": 1e-3 + max(0.0, 1e-10 * b - 2e-5), "layers_s": 1e-3}
             for b in [1e6, 2e6, 4e6, 8e6]]
    fixed_s, byte_s = fit_segments(steep)
    assert fixed_s == 0.0 and 0.5e-10 < byte_s < 1e-10
    with pytest.raises(HetsplitError, match="no segment"):
        fit_segments([])


def test_a_negative_or_infinite_segment_cost_is_refused():
    with pytest.raises(HetsplitError, match="call_s"):
        SegmentCost(-1e-4, 0.0)
    with pytest.raises(HetsplitError, match="byte_s"):
        SegmentCost(0.0, float("inf"))


def test_the_local_clusters_problem_carries_the_runtimes_segment_cost(monkeypatch):
    """One owner: a plan made on this machine's ``local`` cluster is costed with the segment cost and the
    message ends' CPU the runtime's calibration measured (what ``here`` charges); any other cluster keeps
    its own."""
    from hetsplit.runtime import calibration
    from hetsplit.workflow import load_problem

    from dataclasses import replace

    ends = replace(runtime(7e-5, 3e-10), worker_end_s=1.3e-4, worker_byte_s=2e-10)
    monkeypatch.setattr(calibration, "runtime_costs", lambda recalibrate=False: ends)
    local = load_problem("resnet8", "local")
    for t in local.costs.types:
        got = local.costs.segment_cost(t)
        assert (got.call_s, got.byte_s, got.host_byte_s) == (7e-5, 3e-10, 0.0)
    assert local.costs.charges_cuts
    if local.num_devices > 1:      # and each message end costs a worker what the calibration measured
        assert list(local.cluster.links.end_s) == [1.3e-4] * local.num_devices
        assert list(local.cluster.links.end_byte_s) == [2e-10] * local.num_devices
    other = load_problem("resnet8", "jetson-xavier-nx-4")
    for t in other.costs.types:   # its presets' own figures, not the runtime's
        got = other.costs.segment_cost(t)
        assert got.call_s == other.cluster.representative(t).params["segment_call_s"] != 7e-5
