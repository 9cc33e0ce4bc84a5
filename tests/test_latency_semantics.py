"""One latency semantics everywhere: the closed form's one-input schedule against the simulator's,
run orders, shared ports, extra jobs, and the closed-form throughput as the limit of a long stream."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _cut_costs import with_message_costs
from _instances import random_problem
from factories import cluster, problem
from test_mapping_eval import one_input_latency, random_mapping, random_sharded_plan
from hetsplit.cluster.loader import load_cluster
from hetsplit.costs.build import build_problem
from hetsplit.errors import PlanError
from hetsplit.estimate import MappingEvaluator, SimOptions, estimate_plan, evaluate, evaluate_mappings, simulate
from hetsplit.estimate.schedule import ExtraJobs
from hetsplit.estimate.segments import charged
from hetsplit.estimate.task_costs import task_costs
from hetsplit.graph import zoo
from hetsplit.plan.check import check_plan
from hetsplit.plan.io import load_plan, save_plan
from hetsplit.plan.tasks import TaskGraph
from hetsplit.plan.types import Plan

ONE = SimOptions(inputs=1, keep_timeline=False)


@pytest.fixture(scope="module")
def alexnet_nx():
    return build_problem(zoo.load("alexnet"), load_cluster("jetson-xavier-nx-4"))


def with_ports(pr, shared: bool, ends: np.random.Generator | None = None):
    """The same problem on a cluster whose devices share one port each (or per-link wires); with ``ends``,
    every message's ends cost random CPU (``cluster.links``) drawn from it."""
    pr = replace(pr, cluster=replace(pr.cluster, ports="shared" if shared else "links"))
    return pr if ends is None else with_message_costs(pr, ends)


def linear_extension(tg: TaskGraph, rng: np.random.Generator) -> list[int]:
    """A random topological order of the tasks (dependencies only)."""
    preds = [set() for _ in range(tg.num_tasks)]
    for a, b in zip(tg.edge_src, tg.edge_dst):
        if a >= 0 and b >= 0:
            preds[int(b)].add(int(a))
    done: list[int] = []
    left = set(range(tg.num_tasks))
    while left:
        ready = sorted(t for t in left if preds[t] <= set(done))
        t = ready[int(rng.integers(len(ready)))]
        done.append(t)
        left.remove(t)
    return done


def random_order(tg: TaskGraph, rng: np.random.Generator) -> dict[str, list[str]]:
    """Run orders for a random subset of devices, each consistent with a random topological order."""
    ext = linear_extension(tg, rng)
    names = tg.cluster.names
    out: dict[str, list[str]] = {}
    for d in sorted({t.device for t in tg.tasks}):
        if rng.random() < 0.5:
            out[names[d]] = [tg.tasks[t].name for t in ext if tg.tasks[t].device == d]
    return out


def random_extras(tg: TaskGraph, rng: np.random.Generator, scale: float) -> ExtraJobs:
    """Memory-channel jobs after one task and before a later one (in a topological order: no cycle)."""
    ext = linear_extension(tg, rng)
    k = int(rng.integers(0, 6))
    picks = [sorted(rng.choice(len(ext) + 1, size=2, replace=False)) for _ in range(k)]
    after = [ext[a - 1] if a > 0 else -1 for a, _ in picks]
    before = [ext[b - 1] if b <= len(ext) and rng.random() < 0.8 else -1 for _, b in picks]
    return ExtraJobs(rng.uniform(0, scale, size=k), rng.integers(0, tg.cluster.num_devices, size=k),
                     np.array(after, dtype=np.int64), np.array(before, dtype=np.int64))


def both_latencies(pr, tg: TaskGraph, extras: ExtraJobs | None = None) -> tuple[float, float]:
    closed = evaluate_mappings(pr, tg, extras=None if extras is None else [extras]).latency_s[0]
    return float(closed), simulate(pr, tg, ONE, extras=extras).unloaded_latency_s


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), shared=st.booleans(), ordered=st.booleans(), extra=st.booleans(),
       ends=st.booleans())
def test_one_input_latency_is_the_simulators_on_random_sharded_mappings(alexnet_nx, seed, shared, ordered, extra, ends):
    """Shards, concats, flat and tree sums, run orders, shared ports, extra jobs and message ends: the
    compiled schedule and the event simulator (two implementations of one rule) agree to 1e-9, and so
    do their throughputs' busiest resources."""
    rng = np.random.default_rng(seed)
    pr = with_ports(alexnet_nx, shared, rng if ends else None)
    plan = random_sharded_plan(pr, rng)
    tg = check_plan(pr.graph, pr.cluster, plan)
    if ordered:
        plan.order = random_order(tg, rng)
        tg = check_plan(pr.graph, pr.cluster, plan)
    extras = random_extras(tg, rng, 0.01) if extra else None
    closed, simulated = both_latencies(pr, tg, extras)
    assert closed == pytest.approx(simulated, rel=1e-9)
    if ends:          # each device's compute: the kernel's, the simulator's charged task costs
        batch = evaluate_mappings(pr, tg, extras=None if extras is None else [extras])
        costs = charged(pr, tg, task_costs(pr, tg))
        per = np.zeros(pr.num_devices)
        np.add.at(per, tg.device, costs.time_s[np.arange(tg.num_tasks), pr.device_type[tg.device]])
        assert np.allclose(batch.compute_s_per_device[0], per, rtol=1e-12, atol=0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), shared=st.booleans(), extra=st.booleans())
def test_the_critical_path_tiles_one_inputs_latency(alexnet_nx, seed, shared, extra):
    """Each job on the path starts when the one before it ends, from the arrival to the latency."""
    rng = np.random.default_rng(seed)
    pr = with_ports(alexnet_nx, shared)
    tg = check_plan(pr.graph, pr.cluster, random_sharded_plan(pr, rng))
    extras = random_extras(tg, rng, 0.01) if extra else None
    sim = simulate(pr, tg, ONE, extras=extras)
    path = sim.critical_path
    assert path[0].start == 0.0 and path[-1].end == sim.unloaded_latency_s
    assert all(b.start == a.end for a, b in zip(path, path[1:]))
    assert all(s.end - s.start == pytest.approx(sum(s.parts.values()), abs=1e-15) for s in path)
    assert sum(sim.breakdown().values()) == pytest.approx(sim.unloaded_latency_s, rel=1e-12)


def test_the_closed_form_counts_each_memory_channel_in_the_bottleneck():
    from hetsplit.estimate.batch import metrics_at
    from hetsplit.graph.types import Graph, Layer, Tensor

    layers = [Layer("a", "conv", 1, 0, 1), Layer("b", "conv", 1, 0, 1)]
    g = Graph("two", layers, [Tensor("input", -1, 1, (0,)), Tensor("ta", 0, 1, (1,)),
                              Tensor("tb", 1, 1, (), is_output=True)])
    cl = cluster(["t", "t"], bandwidth=np.inf)
    time = np.array([[1.0], [2.0]])
    pr = problem(g, cl, time, np.zeros_like(time))
    tg = check_plan(g, cl, Plan(g.name, cl.name, "hand", assign={"a": "d0", "b": "d1"}))
    loads = ExtraJobs(np.array([3.0, 4.0]), np.array([1, 1]), np.array([-1, 0]), np.array([1, -1]))
    batch = evaluate_mappings(pr, tg, extras=[loads])
    assert batch.bottleneck_s[0] == 7.0 and metrics_at(pr, batch, 0).bottleneck == "memory d1"
    assert batch.latency_s[0] == 7.0            # b waits for the 3 s load, the 4 s one after a ends at 1
    stream = simulate(pr, tg, SimOptions(inputs=30, keep_timeline=False), extras=loads)
    assert stream.throughput == pytest.approx(1 / 7.0, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), shared=st.booleans(), ends=st.booleans())
def test_one_input_latency_is_the_simulators_on_random_dags(seed, shared, ends):
    """Random DAGs with skips, sources and sinks (and message ends): closed form = simulator = the plain
    reference."""
    rng = np.random.default_rng(seed)
    pr = with_ports(random_problem(seed, inf_prob=0.0), shared, rng if ends else None)
    tg = check_plan(pr.graph, pr.cluster, random_mapping(pr, rng))
    closed, simulated = both_latencies(pr, tg)
    assert closed == pytest.approx(simulated, rel=1e-9)
    assert closed == pytest.approx(one_input_latency(pr, tg, charged(pr, tg, task_costs(pr, tg))), rel=1e-9)


def test_work_conserving_beats_index_order_when_a_later_task_is_ready_first():
    """Worked by hand: d0 holds p (index 1, needs s from d1, ready at 3 s) and q (index 2, reads
    the input, ready at once); a device that waited for its lowest index would idle until 3 s."""
    from hetsplit.graph.types import Graph, Layer, Tensor

    layers = [Layer("s", "conv", 1, 0, 1), Layer("p", "conv", 1, 0, 1), Layer("q", "conv", 1, 0, 1),
              Layer("r", "conv", 1, 0, 1)]
    tensors = [Tensor("input", -1, 1, (0, 2)), Tensor("ts", 0, 1, (1,)), Tensor("tp", 1, 1, (3,)),
               Tensor("tq", 2, 1, (3,)), Tensor("tr", 3, 1, (), is_output=True)]
    g = Graph("branch", layers, tensors)
    cl = cluster(["t", "t"], bandwidth=np.inf)
    # s (d1, 3 s) -> p (d0, 1 s); q (d0, 2 s) reads the input; r (d0, 1 s) joins p and q
    time = np.array([[3.0], [1.0], [2.0], [1.0]])
    pr = problem(g, cl, time, np.zeros_like(time))
    plan = Plan(g.name, cl.name, "hand", assign={"s": "d1", "p": "d0", "q": "d0", "r": "d0"})
    # first ready first: q at 0-2, s on d1 0-3, p 3-4, r 4-5. Index order (p before q) would give
    # p 3-4, q 4-6, r 6-7.
    assert evaluate(pr, plan).latency_s == pytest.approx(5.0)
    tg = check_plan(pr.graph, pr.cluster, plan)
    sim = simulate(pr, tg, ONE)
    assert sim.unloaded_latency_s == pytest.approx(5.0)
    # the critical path: r waited for p, p for s (through its message, instant here); q ended earlier
    assert [(s.label, s.start, s.end) for s in sim.critical_path if s.end > s.start] == \
        [("s", 0.0, 3.0), ("p", 3.0, 4.0), ("r", 4.0, 5.0)]
    assert sim.breakdown() == pytest.approx({"compute": 5.0, "transfer": 0.0})
    plan.order = {"d0": ["p", "q", "r"], "d1": ["s"]}
    assert evaluate(pr, plan).latency_s == pytest.approx(7.0)     # the order is obeyed, idle time and all
    assert simulate(pr, check_plan(pr.graph, pr.cluster, plan), ONE).unloaded_latency_s == pytest.approx(7.0)


def test_an_order_that_contradicts_the_dependencies_is_refused(alexnet_nx):
    pr = alexnet_nx
    names = pr.graph.names
    dev = pr.cluster.names[0]
    plan = Plan(pr.graph.name, pr.cluster.name, "hand", assign={n: dev for n in names})
    plan.order = {dev: [names[1], names[0], *names[2:]]}
    with pytest.raises(PlanError, match=rf"order\[{dev!r}\] runs {names[1]!r} before {names[0]!r}.*wait forever"):
        check_plan(pr.graph, pr.cluster, plan)


@pytest.mark.parametrize("order, message", [
    ({"nope": []}, "not in cluster"),
    ({"nx0-cpu": ["features.0/Conv"]}, "leaves out"),
    ({"nx0-cpu": ["ghost"]}, "does not run"),
])
def test_a_malformed_order_is_named(alexnet_nx, order, message):
    pr = alexnet_nx
    names = pr.graph.names
    plan = Plan(pr.graph.name, pr.cluster.name, "hand", assign={n: "nx0-cpu" for n in names}, order=order)
    with pytest.raises(PlanError, match=message):
        check_plan(pr.graph, pr.cluster, plan)


def test_an_order_survives_the_plan_file(alexnet_nx, tmp_path):
    pr = alexnet_nx
    names = pr.graph.names
    plan = Plan(pr.graph.name, pr.cluster.name, "hand", assign={n: "nx0-cpu" for n in names},
                order={"nx0-cpu": list(names)})
    back = load_plan(save_plan(plan, tmp_path / "p.json"))
    assert back.order == plan.order
    assert evaluate(pr, back).latency_s == pytest.approx(evaluate(pr, plan).latency_s)


@pytest.mark.parametrize("seed", range(6))
def test_the_closed_form_throughput_is_the_limit_of_a_long_stream(alexnet_nx, seed):
    """The busiest device or link bounds any stream; a long saturated stream in the free order (a device
    may start a later input's ready task while it waits) reaches it (within 2% at 4000 inputs; a finite
    stream's fill and transient keep it below)."""
    pr = alexnet_nx
    tg = check_plan(pr.graph, pr.cluster, random_sharded_plan(pr, np.random.default_rng(seed)))
    bound = evaluate_mappings(pr, tg).throughput[0]
    r = simulate(pr, tg, SimOptions(inputs=4000, keep_timeline=False, inputs_in_order=False))
    assert 0.98 * bound <= r.throughput <= 1.01 * bound


@pytest.mark.parametrize("seed", range(6))
def test_the_closed_form_streams_a_plan_as_the_runtime_runs_it(alexnet_nx, seed):
    """A plan whose sum combines cross devices runs input by input (``runtime.rounds``): the closed
    fidelity's throughput is then the limit of a long in-order stream (within 1% of 400 inputs), never
    above the busiest resource's bound; a plan without such a sum keeps the bound."""
    pr = alexnet_nx
    plan = random_sharded_plan(pr, np.random.default_rng(seed))
    tg = check_plan(pr.graph, pr.cluster, plan)
    bound = evaluate_mappings(pr, tg).throughput[0]
    closed = estimate_plan(pr, plan, "closed")
    if not tg.sums_across_devices():
        assert closed.throughput == pytest.approx(bound, rel=1e-12)
        return
    stream = simulate(pr, tg, SimOptions(inputs=400, keep_timeline=False, inputs_in_order=True))
    assert closed.throughput <= bound * (1 + 1e-12)
    assert closed.throughput == pytest.approx(stream.throughput, rel=0.01)
    assert closed.bottleneck_s == pytest.approx(1 / closed.throughput)


def test_shared_ports_carry_every_message_in_and_out_of_a_device():
    """Three devices; d0 sends a 1 s message to d1 and another to d2. Per link, both go at once; on
    one shared port of d0 they take turns: the port is busy 2 s per input (the bottleneck)."""
    from hetsplit.graph.types import Graph, Layer, Tensor

    layers = [Layer("a", "conv", 1, 0, 1), Layer("b", "conv", 1, 0, 1), Layer("c", "conv", 1, 0, 1)]
    tensors = [Tensor("input", -1, 1, (0,)), Tensor("ta", 0, 1, (1, 2)), Tensor("tb", 1, 1, (), is_output=True),
               Tensor("tc", 2, 1, (), is_output=True)]
    g = Graph("fan", layers, tensors)
    time = np.full((3, 1), 0.1)
    links = cluster(["t", "t", "t"], bandwidth=1.0)   # 1 byte at 1 B/s: 1 s per message
    pr = problem(g, links, time, np.zeros_like(time))
    plan = Plan(g.name, links.name, "hand", assign={"a": "d0", "b": "d1", "c": "d2"})
    per_link = evaluate(pr, plan)
    shared = with_ports(pr, True)
    per_port = evaluate(shared, plan)
    assert per_link.bottleneck_s == pytest.approx(1.0) and per_link.latency_s == pytest.approx(1.2)
    assert per_port.bottleneck_s == pytest.approx(2.0) and per_port.bottleneck == "port d0"
    assert per_port.latency_s == pytest.approx(2.2)
    sim = simulate(shared, check_plan(g, shared.cluster, plan), SimOptions(inputs=400, keep_timeline=False))
    assert sim.throughput == pytest.approx(0.5, rel=0.01)


def test_the_batch_and_one_plan_at_a_time_agree_with_extras_and_ports(alexnet_nx):
    rng = np.random.default_rng(3)
    pr = with_ports(alexnet_nx, True)
    tg = check_plan(pr.graph, pr.cluster, random_sharded_plan(pr, rng))
    ev = MappingEvaluator(pr, tg)
    devices = rng.integers(0, pr.num_devices, size=(12, tg.num_tasks))
    extras = [random_extras(tg, rng, 0.005) for _ in range(12)]
    batch = ev.evaluate(devices, extras=extras)
    for i in range(12):
        one = ev.evaluate(devices[i], extras=[extras[i]])
        assert one.latency_s[0] == pytest.approx(batch.latency_s[i], rel=1e-12)
        moved = replace(tg, tasks=[replace(t, device=int(d)) for t, d in zip(tg.tasks, devices[i])])
        moved.__dict__.pop("device", None)
        assert simulate(pr, moved, ONE, extras=extras[i]).unloaded_latency_s == pytest.approx(one.latency_s[0],
                                                                                                  rel=1e-9)
