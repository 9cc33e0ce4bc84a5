"""The mapping evaluator: against a plain per-plan reference, against the pipeline evaluator on
pipelines, batch against one plan at a time, and a mapping worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _instances import random_problem
from factories import chain_graph, cluster, problem
from hetsplit.graph import zoo
from hetsplit.costs.build import build_problem
from hetsplit.cluster.loader import load_cluster
from hetsplit.plan.check import check_plan
from hetsplit.estimate import evaluate, evaluate_pipelines, make_plan
from hetsplit.estimate.mapping import MappingEvaluator, evaluate_mappings
from hetsplit.estimate.segments import charged
from hetsplit.estimate.task_costs import task_costs
from hetsplit.plan.tasks import SINK, SOURCE
from hetsplit.plan.types import Combine, Plan, Shard


def reference(pr, tg, costs=None) -> dict:
    """The semantics of DESIGN.md written as plainly as possible, one plan at a time (task costs
    ``costs``, default ``task_costs``)."""
    cl, dev = pr.cluster, tg.device
    costs = task_costs(pr, tg) if costs is None else costs
    types = pr.device_type
    n_dev = pr.num_devices
    compute, energy, mem = np.zeros(n_dev), np.zeros(n_dev), np.zeros(n_dev)
    for t, task in enumerate(tg.tasks):
        d = task.device
        compute[d] += costs.time_s[t, types[d]]
        energy[d] += costs.energy_j[t, types[d]]
        mem[d] += costs.mem_bytes[t, types[d]]
    busy: dict[tuple[int, int], float] = {}
    comm_e = 0.0
    for m in tg.messages():
        busy[(m.src, m.dst)] = busy.get((m.src, m.dst), 0.0) + m.nbytes / cl.bandwidth[m.src, m.dst] + \
            cl.latency_s[m.src, m.dst]
        energy[m.src] += m.nbytes * cl.energy_per_byte[m.src, m.dst]
        comm_e += m.nbytes * cl.energy_per_byte[m.src, m.dst]
        mem[m.src] += m.nbytes if m.producer != SOURCE else 0.0
        mem[m.dst] += m.nbytes if SINK not in m.consumers else 0.0
    held: set[tuple[str, int]] = set()
    for e in range(len(tg.edge_src)):  # inputs fed and outputs delivered without a link are held too
        src, dst, nb, pay = tg.edge_src[e], tg.edge_dst[e], tg.edge_bytes[e], tg.payloads[tg.edge_payload[e]]
        if src == SOURCE and cl.source_index in (None, dev[dst]) and (pay, dev[dst]) not in held:
            held.add((pay, dev[dst]))
            mem[dev[dst]] += nb
        if dst == SINK and cl.sink_index in (None, dev[src]):
            mem[dev[src]] += nb
    bottleneck = max([compute.max()] + list(busy.values()))

    latency = one_input_latency(pr, tg, costs)
    return {"bottleneck_s": bottleneck, "latency_s": latency, "energy_j": energy.sum(), "comm_energy_j": comm_e,
            "compute": compute, "energy_dev": energy, "mem": mem}


def one_input_latency(pr, tg, costs) -> float:
    """One input alone, the rules of docs/architecture.md written plainly: at each instant every job
    whose inputs are there and whose resources (its device; its link, or both ports) are free starts,
    lowest index first, tasks before messages; then time jumps to the next completion."""
    cl, types = pr.cluster, pr.device_type
    msgs = tg.messages()
    n_t = tg.num_tasks
    dur = [float(costs.time_s[t, types[task.device]]) for t, task in enumerate(tg.tasks)] + \
        [float(cl.latency_s[m.src, m.dst] + m.nbytes / cl.bandwidth[m.src, m.dst]) for m in msgs]
    needs: list[set] = [set() for _ in range(n_t + len(msgs))]   # jobs each job waits for
    u, v = tg.endpoints(tg.device)
    carrier = {(m.payload, m.dst): n_t + k for k, m in enumerate(msgs)}
    for e in range(len(tg.edge_src)):
        s, d = int(tg.edge_src[e]), int(tg.edge_dst[e])
        if d < 0:
            continue
        if u[e] != v[e] and tg.edge_bytes[e] > 0:
            needs[d].add(carrier[(tg.payloads[tg.edge_payload[e]], int(v[e]))])
        elif s >= 0:
            needs[d].add(s)
    for a, b in tg.chain:
        needs[int(b)].add(int(a))
    for k, m in enumerate(msgs):
        if m.producer >= 0:
            needs[n_t + k].add(m.producer)
    shared = cl.ports == "shared"
    holds = [(("dev", task.device),) for task in tg.tasks] + \
        [(("port", m.src), ("port", m.dst)) if shared else (("link", m.src, m.dst),) for m in msgs]
    finish: dict[int, float] = {}
    running: dict[int, float] = {}
    now = 0.0
    while len(finish) < len(dur):
        in_use = {r for j in running for r in holds[j]}
        for j in range(len(dur)):
            if j in finish or j in running or not needs[j] <= finish.keys() or in_use & set(holds[j]):
                continue
            running[j] = now + dur[j]
            in_use |= set(holds[j])
        now = min(running.values())
        for j in [j for j, end in running.items() if end == now]:
            finish[j] = running.pop(j)
    return max(finish.values())


def assert_matches_reference(pr, tg, batch, row: int = 0, costs=None) -> None:
    ref = reference(pr, tg, costs)
    assert batch.bottleneck_s[row] == pytest.approx(ref["bottleneck_s"], rel=1e-9)
    assert batch.latency_s[row] == pytest.approx(ref["latency_s"], rel=1e-9)
    assert batch.energy_j[row] == pytest.approx(ref["energy_j"], rel=1e-9)
    assert batch.comm_energy_j[row] == pytest.approx(ref["comm_energy_j"], rel=1e-9, abs=1e-18)
    np.testing.assert_allclose(batch.compute_s_per_device[row], ref["compute"], rtol=1e-9)
    np.testing.assert_allclose(batch.energy_per_device_j[row], ref["energy_dev"], rtol=1e-9)
    np.testing.assert_allclose(batch.memory_per_device_bytes[row], ref["mem"], rtol=1e-9)


def random_mapping(pr, rng) -> Plan:
    names = pr.cluster.names
    assign = {layer: names[int(rng.integers(len(names)))] for layer in pr.graph.names}
    return Plan(pr.graph.name, pr.cluster.name, "random", assign=assign)


@pytest.mark.parametrize("seed", range(40))
def test_random_dag_mappings_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    pr = random_problem(seed, inf_prob=0.0)
    tg = check_plan(pr.graph, pr.cluster, random_mapping(pr, rng))
    assert_matches_reference(pr, tg, evaluate_mappings(pr, tg))


@pytest.fixture(scope="module")
def alexnet_nx():
    cl = load_cluster("jetson-xavier-nx-4")
    return build_problem(zoo.load("alexnet"), cl)


def random_sharded_plan(pr, rng) -> Plan:
    """Whole layers on random devices; convs and FCs sometimes split 2-4 ways by out (concat) or in (sum,
    flat or in a tree)."""
    names = pr.cluster.names
    assign, combine = {}, {}
    for layer in pr.graph.layers:
        if layer.op in ("conv", "gemm") and rng.random() < 0.6:
            k = int(rng.integers(2, 5))
            devs = rng.choice(len(names), size=k, replace=False)
            axis = "out" if rng.random() < 0.5 else "in"
            size = layer.attrs["c_out" if layer.op == "conv" else "n"] if axis == "out" else \
                layer.attrs["c_in" if layer.op == "conv" else "k"]
            k = min(k, size)
            devs = devs[:k]
            cuts = np.sort(rng.choice(np.arange(1, size), size=k - 1, replace=False))
            bounds = [0, *cuts.tolist(), size]
            assign[layer.name] = tuple(Shard(names[d], axis, bounds[i], bounds[i + 1]) for i, d in enumerate(devs))
            on = names[int(rng.integers(len(names)))]
            tree = int(rng.choice([0, 2])) if axis == "in" else 0
            combine[layer.name] = Combine("concat" if axis == "out" else "sum", on, tree)
        else:
            assign[layer.name] = names[int(rng.integers(len(names)))]
    return Plan(pr.graph.name, pr.cluster.name, "random", assign=assign, combine=combine)


@pytest.mark.parametrize("seed", range(15))
def test_sharded_mappings_match_the_reference(alexnet_nx, seed):
    rng = np.random.default_rng(seed)
    tg = check_plan(alexnet_nx.graph, alexnet_nx.cluster, random_sharded_plan(alexnet_nx, rng))
    # the Xavier NX presets charge segments: the reference's tasks carry them by the one rule
    assert_matches_reference(alexnet_nx, tg, evaluate_mappings(alexnet_nx, tg),
                             costs=charged(alexnet_nx, tg, task_costs(alexnet_nx, tg)))


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), repeat=st.booleans(), shared=st.booleans())
def test_a_pipeline_as_a_task_graph_has_exactly_the_pipeline_metrics(seed, repeat, shared):
    """Relay routing: stage tasks and one payload per cut give the pipeline evaluator's numbers, also
    when a device runs two stages (a link may then carry two cuts: busy for both in each), and when
    devices share one port each."""
    from dataclasses import replace

    rng = np.random.default_rng(seed)
    pr = random_problem(seed, inf_prob=0.0)
    if shared:
        pr = replace(pr, cluster=replace(pr.cluster, ports="shared"))
    n_layers, n_dev = pr.num_layers, pr.num_devices
    stages = int(rng.integers(1, min(n_layers, n_dev) + 1))
    cuts = np.sort(rng.choice(np.arange(1, n_layers), size=stages - 1, replace=False)) if stages > 1 else []
    bounds = [0, *list(cuts), n_layers]
    devices = rng.permutation(n_dev)[:stages]
    if repeat and n_dev > 2:  # a device may come back, never right after itself (that is one stage)
        for s in range(2, stages):
            if rng.random() < 0.5 and devices[s - 2] != devices[s - 1]:
                devices[s] = devices[s - 2]
    plan = make_plan(pr, bounds, devices, "random")
    tg = check_plan(pr.graph, pr.cluster, plan)
    batch = evaluate_mappings(pr, tg)
    ref = evaluate_pipelines(pr, np.array([bounds]), np.array([devices]))
    for field in ("throughput", "bottleneck_s", "latency_s", "energy_j", "comm_energy_j", "comm_time_s", "fits"):
        np.testing.assert_allclose(getattr(batch, field), getattr(ref, field), rtol=1e-12, err_msg=field)
    for field in ("compute_s_per_device", "energy_per_device_j", "memory_per_device_bytes", "participates"):
        np.testing.assert_allclose(getattr(batch, field), getattr(ref, field), rtol=1e-12, err_msg=field)


def test_batch_equals_one_plan_at_a_time(alexnet_nx):
    rng = np.random.default_rng(7)
    pr = alexnet_nx
    tg = check_plan(pr.graph, pr.cluster, random_sharded_plan(pr, rng))
    ev = MappingEvaluator(pr, tg)
    devices = rng.integers(0, pr.num_devices, size=(64, tg.num_tasks))
    batch = ev.evaluate(devices)
    for i in range(0, 64, 9):
        one = ev.evaluate(devices[i])
        for field in ("throughput", "latency_s", "energy_j", "memory_per_device_bytes", "energy_per_device_j"):
            np.testing.assert_allclose(getattr(batch, field)[i], getattr(one, field)[0], rtol=1e-12)


def test_a_branching_mapping_worked_by_hand():
    """l0 -> l1 and l0 -> l2 -> l3 (l3 also reads l1): l0, l3 on d0, l1 on d1, l2 on d2.

    Bandwidth 100 B/s, latency 0.5 s, 0.01 J/B. t0 = 8 B (read by l1 and l2: sent once to d1 and
    once to d2), t1 = 4 B (d1 -> d0), t2 = 6 B (d2 -> d0)."""
    g = chain_graph([8, 4, 6, 2], input_bytes=1, skips={0: [2]})
    # chain_graph makes l1 -> l2; rewire: l2 reads l0 (skip), l3 reads l1 and l2
    from hetsplit.graph import Graph, Tensor
    tensors = [Tensor("input", -1, 1, (0,)), Tensor("t0", 0, 8, (1, 2)), Tensor("t1", 1, 4, (3,)),
               Tensor("t2", 2, 6, (3,)), Tensor("t3", 3, 2, (), is_output=True)]
    g = Graph("branch", g.layers, tensors)
    cl = cluster(["a", "a", "a"], bandwidth=100.0, latency_s=0.5, energy_per_byte=0.01)
    time = np.array([[1.0], [2.0], [3.0], [0.5]])
    pr = problem(g, cl, time, time * 10)
    plan = Plan("branch", cl.name, "hand", assign={"l0": "d0", "l1": "d1", "l2": "d2", "l3": "d0"})
    m = evaluate(pr, plan)
    # links: d0->d1 0.5+0.08, d0->d2 0.5+0.08, d1->d0 0.5+0.04, d2->d0 0.5+0.06
    assert m.bottleneck_s == pytest.approx(3.0)            # d2 computes 3 s; d0 computes 1.5 s
    # latency: l0 ends 1; l1 starts 1.58, ends 3.58, t1 at d0 4.12; l2 starts 1.58 ends 4.58, t2 at d0 5.14
    assert m.latency_s == pytest.approx(5.14 + 0.5)
    assert m.energy_j == pytest.approx(65.0 + 0.01 * (8 + 8 + 4 + 6))
    assert m.energy_per_device_j["d0"] == pytest.approx(15.0 + 0.16)
    # memory: d0 holds l0 (10+8) and l3 (10+2), the input 1, receives 4+6, sends 8+8, delivers 2
    assert m.memory_per_device_bytes["d0"] == pytest.approx(18 + 12 + 1 + 10 + 16 + 2)
    assert m.bottleneck == "stage d2"


def test_shard_tasks_with_one_name_are_costed_each_by_its_own_slice():
    """task_costs builds a Graph of the tasks' work; tasks sharing a name must not share a cost."""
    from hetsplit.graph.shard import shard_layer
    from hetsplit.estimate.task_costs import task_costs
    from hetsplit.plan.tasks import Task, TaskGraphBuilder
    from hetsplit.workflow import load_problem

    problem = load_problem("alexnet", "jetson-xavier-nx-4")
    layer = problem.graph.layers[0]
    costs = []
    for names in (["same"] * 3, ["a", "b", "c"]):
        b = TaskGraphBuilder(problem.graph, problem.cluster, "direct")
        for name, (lo, hi) in zip(names, [(0, 16), (0, 32), (16, 64)]):
            b.task(Task(name, "shard", (0,), 0, shard_layer(layer, "out", lo, hi, 64), "out", lo, hi, 64))
        costs.append(task_costs(problem, b.build()).time_s)
    assert np.array_equal(costs[0], costs[1])      # the GPU's per-layer overhead was lost with one name
    assert (np.diff(costs[0], axis=0) > 0).all()


def test_a_large_batch_split_over_threads_equals_one_plan_at_a_time(alexnet_nx, monkeypatch):
    """Batches large enough to be split into ranges evaluated on parallel threads (four, whatever the
    machine's CPUs) give every plan the figures it gets alone."""
    from hetsplit.estimate import threads
    from hetsplit.estimate.threads import PARALLEL_MIN

    monkeypatch.setattr(threads, "thread_count", lambda: 4)
    rng = np.random.default_rng(11)
    pr = alexnet_nx
    tg = check_plan(pr.graph, pr.cluster, random_sharded_plan(pr, rng))
    ev = MappingEvaluator(pr, tg)
    devices = rng.integers(0, pr.num_devices, size=(4 * PARALLEL_MIN + 3, tg.num_tasks))
    assert threads.parallel_chunks(len(devices), tg.num_tasks + len(tg.edge_src)) == 4
    batch = ev.evaluate(devices)
    for i in range(0, len(devices), 97):
        one = ev.evaluate(devices[i])
        for field in ("throughput", "latency_s", "energy_j", "memory_per_device_bytes", "max_transfer_link"):
            np.testing.assert_array_equal(getattr(batch, field)[i], getattr(one, field)[0])
