"""The discrete-event simulator: pipelines against the pipeline evaluator, a sharded DAG worked out
by hand, invariants on random mappings, the trace and Gantt files, and ``hetsplit simulate``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from factories import chain_graph, cluster, problem
from test_mapping_eval import random_sharded_plan
from hetsplit.cli.main import main
from hetsplit.cluster.loader import load_cluster
from hetsplit.costs.build import build_problem
from hetsplit.errors import HetsplitError
from hetsplit.graph import Graph, Layer, Tensor, zoo
from hetsplit.plan.check import check_plan
from hetsplit.estimate.evaluate import make_plan
from hetsplit.plan.io import save_plan
from hetsplit.estimate.mapping import evaluate_mappings
from hetsplit.estimate.simulate import SimOptions, Span, simulate, simulate_plan, steady_throughput
from hetsplit.estimate.task_costs import TaskCosts
from hetsplit.plan.tasks import SOURCE
from hetsplit.report.trace import trace_document, write_trace
from hetsplit.plan.types import Combine, Plan, Shard
from hetsplit.report.gantt import gantt_plot


@pytest.fixture(scope="module")
def alexnet_nx():
    """Alexnet on 8 Jetson units; inputs arrive at nx0-cpu (a source link when stage 0 is elsewhere)."""
    return build_problem(zoo.load("alexnet"), load_cluster("jetson-xavier-nx-4"))


@pytest.fixture(scope="module")
def resnet8_donna():
    """Resnet8 (skip connections cross cuts) on CPUs, a GPU and a CIM unit, no source or sink."""
    return build_problem(zoo.load("resnet8"), load_cluster("donna-2cpu-1gpu-1cim-hb-wcc"))


def random_pipeline(pr, rng) -> Plan:
    """Random stage bounds on distinct devices (one stage per device, one cut per link)."""
    n_layers, n_dev = pr.num_layers, pr.num_devices
    stages = int(rng.integers(1, min(n_layers, n_dev) + 1))
    cuts = sorted(rng.choice(np.arange(1, n_layers), size=stages - 1, replace=False).tolist())
    return make_plan(pr, [0, *cuts, n_layers], rng.permutation(n_dev)[:stages], "random")


# ---- pipelines: the simulator agrees with the closed form ------------------------------------------

@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("which", ["alexnet_nx", "resnet8_donna"])
def test_a_pipeline_streams_at_the_pipeline_evaluators_throughput_and_latency(which, seed, request):
    pr = request.getfixturevalue(which)
    plan = random_pipeline(pr, np.random.default_rng(seed))
    m = plan.metrics
    r = simulate_plan(pr, plan, SimOptions(inputs=200, keep_timeline=False))
    assert r.throughput == pytest.approx(m.throughput, rel=1e-6)
    assert r.unloaded_latency_s == pytest.approx(m.latency_s, rel=1e-9)
    assert r.energy_j == pytest.approx(m.energy_j, rel=1e-9)
    assert r.energy_per_device_j == pytest.approx(m.energy_per_device_j, rel=1e-9)
    # a tandem line: input i is done at exactly L1 + i * bottleneck, and the bottleneck is never idle
    np.testing.assert_allclose(r.done_s, m.latency_s + np.arange(200) * m.bottleneck_s, rtol=1e-9)
    assert max(r.busy_s.values()) == pytest.approx(200 * m.bottleneck_s, rel=1e-9)


def test_inputs_slower_than_the_bottleneck_never_queue(alexnet_nx):
    plan = random_pipeline(alexnet_nx, np.random.default_rng(3))
    interval = 1.5 * plan.metrics.bottleneck_s
    r = simulate_plan(alexnet_nx, plan, SimOptions(inputs=50, interval_s=interval))
    np.testing.assert_allclose(r.latency_s, plan.metrics.latency_s, rtol=1e-9)
    np.testing.assert_allclose(r.arrival_s, np.arange(50) * interval)
    assert r.throughput == pytest.approx(1 / interval, rel=1e-9)
    assert r.latency_percentile(99) == pytest.approx(r.unloaded_latency_s, rel=1e-9)


def test_steady_throughput_discounts_the_first_inputs_fill_and_drain():
    assert steady_throughput(5, 10.0, 2.0) == 4 / 8.0
    assert steady_throughput(1, 4.0, 4.0) == 0.25            # one input: N / makespan


# ---- a sharded DAG, event by event -----------------------------------------------------------------

def hand_problem():
    """a (conv) on d0; b (conv) out-sharded on d1 [0:2] and d2 [2:4], concat on d0; c (gemm) in-sharded
    on d1 and d2, summed on d0. Links: 100 B/s, 0.5 s latency, 0.01 J/B."""
    layers = [Layer("a", "conv", 10, 10, 100, attrs={"c_in": 2, "c_out": 4}),
              Layer("b", "conv", 10, 10, 200, attrs={"c_in": 4, "c_out": 4}),
              Layer("c", "gemm", 10, 10, 40, attrs={"k": 4, "n": 10})]
    tensors = [Tensor("x", SOURCE, 8, (0,)), Tensor("ta", 0, 100, (1,)), Tensor("tb", 1, 200, (2,)),
               Tensor("tc", 2, 40, (), is_output=True)]
    g = Graph("hand", layers, tensors)
    cl = cluster(["a"] * 3, bandwidth=100.0, latency_s=0.5, energy_per_byte=0.01)
    pr = problem(g, cl, np.ones((3, 1)), np.ones((3, 1)))
    plan = Plan("hand", cl.name, "hand", assign={
        "a": "d0", "b": (Shard("d1", "out", 0, 2), Shard("d2", "out", 2, 4)),
        "c": (Shard("d1", "in", 0, 2), Shard("d2", "in", 2, 4))},
        combine={"b": Combine("concat", "d0"), "c": Combine("sum", "d0")})
    tg = check_plan(g, cl, plan)
    # tasks: a, b@out[0:2], b@out[2:4], b:concat, c@in[0:2], c@in[2:4], c:sum
    time = np.array([[1.0], [2.0], [3.0], [0.5], [1.0], [1.5], [0.25]])
    return pr, tg, TaskCosts(time, 2 * time, time)


def test_a_sharded_dag_worked_by_hand():
    """Two inputs at t = 0, in the free order (a device may start a later input's ready task while it
    waits; the runtime runs this plan input by input, the next test). Transfers: 100 B take 0.5 + 1 =
    1.5 s, a 40 B partial sum 0.9 s.

    a(0) runs 0-1 and a(1) 1-2 on d0. ta goes to d1 and d2 once each: input 0 at 1-2.5; input 1 is
    ready at 2 but waits for the links until 2.5 (-4). The b shards of input 0 run 2.5-4.5 (d1) and
    2.5-5.5 (d2); input 1's are ready at 4 and wait for their devices (4.5-6.5, 5.5-8.5). Their
    halves reach d0 at 6 and 7 (input 0) and 8 and 10 (input 1), so the concats run 7-7.5 and
    10-10.5; tb slices go out 7.5-9 and 10.5-12; the c shards run 9-10 / 9-10.5 and 12-13 / 12-13.5;
    the partials arrive at 10.9 / 11.4 and 13.9 / 14.4; the sums end at 11.65 and 14.65."""
    pr, tg, costs = hand_problem()
    r = simulate(pr, tg, SimOptions(inputs=2, inputs_in_order=False), costs)
    expected = [
        ("d0", "a", 0, 0.0, 1.0), ("d0", "a", 1, 1.0, 2.0),
        ("d0->d1", "ta", 0, 1.0, 2.5), ("d0->d2", "ta", 0, 1.0, 2.5),
        ("d0->d1", "ta", 1, 2.5, 4.0), ("d0->d2", "ta", 1, 2.5, 4.0),
        ("d1", "b@out[0:2]", 0, 2.5, 4.5), ("d2", "b@out[2:4]", 0, 2.5, 5.5),
        ("d1", "b@out[0:2]", 1, 4.5, 6.5), ("d2", "b@out[2:4]", 1, 5.5, 8.5),
        ("d1->d0", "b.out[0:2]", 0, 4.5, 6.0), ("d2->d0", "b.out[2:4]", 0, 5.5, 7.0),
        ("d1->d0", "b.out[0:2]", 1, 6.5, 8.0), ("d2->d0", "b.out[2:4]", 1, 8.5, 10.0),
        ("d0", "b:concat", 0, 7.0, 7.5), ("d0", "b:concat", 1, 10.0, 10.5),
        ("d0->d1", "tb[in 0:2/4]", 0, 7.5, 9.0), ("d0->d2", "tb[in 2:4/4]", 0, 7.5, 9.0),
        ("d0->d1", "tb[in 0:2/4]", 1, 10.5, 12.0), ("d0->d2", "tb[in 2:4/4]", 1, 10.5, 12.0),
        ("d1", "c@in[0:2]", 0, 9.0, 10.0), ("d2", "c@in[2:4]", 0, 9.0, 10.5),
        ("d1", "c@in[0:2]", 1, 12.0, 13.0), ("d2", "c@in[2:4]", 1, 12.0, 13.5),
        ("d1->d0", "c.partial[0]", 0, 10.0, 10.9), ("d2->d0", "c.partial[1]", 0, 10.5, 11.4),
        ("d1->d0", "c.partial[0]", 1, 13.0, 13.9), ("d2->d0", "c.partial[1]", 1, 13.5, 14.4),
        ("d0", "c:sum", 0, 11.4, 11.65), ("d0", "c:sum", 1, 14.4, 14.65)]
    got = sorted(r.timeline, key=lambda s: (s.resource, s.input, s.start))
    want = sorted((Span(*e) for e in expected), key=lambda s: (s.resource, s.input, s.start))
    assert [(s.resource, s.label, s.input) for s in got] == [(s.resource, s.label, s.input) for s in want]
    np.testing.assert_allclose([(s.start, s.end) for s in got], [(s.start, s.end) for s in want], rtol=1e-12)
    np.testing.assert_allclose(r.done_s, [11.65, 14.65])
    assert r.unloaded_latency_s == pytest.approx(11.65)
    assert r.unloaded_latency_s == pytest.approx(evaluate_mappings(pr, tg, costs=costs).latency_s[0])
    # (2 - 1) / (14.65 - 11.65) = 1/3 would outrun d2, busy 4.5 s per input: capped at 2 / 9 s
    assert r.throughput == pytest.approx(2 / 9.0)
    assert r.energy_j == pytest.approx(2 * 9.25 + 0.01 * (6 * 100 + 2 * 40))
    assert r.busy_s["d2"] == pytest.approx(2 * 4.5) and r.utilization["d2"] == pytest.approx(9 / 14.65)
    assert r.events == 2 + 2 * (7 + 8)                       # arrivals + every task and message


def test_inputs_in_order_keep_each_device_on_one_input_worked_by_hand():
    """The hand DAG's two inputs in order, by default (the runtime runs a plan whose sum crosses devices
    input by input): d0 starts a(1) only once its sum of input 0 ends at 11.65, so input 1 runs alone
    after it (done at 2 x 11.65), where in the free order a(1) ran at 1-2 and input 1 was done at 14.65."""
    pr, tg, costs = hand_problem()
    assert tg.sums_across_devices()
    r = simulate(pr, tg, SimOptions(inputs=2), costs)
    np.testing.assert_allclose(r.done_s, [11.65, 23.3])
    assert [(s.label, s.start) for s in r.timeline if s.resource == "d0" and s.input == 1][0] == \
        ("a", pytest.approx(11.65))
    assert simulate(pr, tg, SimOptions(inputs=2, inputs_in_order=True), costs).done_s.tolist() == r.done_s.tolist()
    free = simulate(pr, tg, SimOptions(inputs=2, inputs_in_order=False), costs)
    np.testing.assert_allclose(free.done_s, [11.65, 14.65])
    assert r.unloaded_latency_s == free.unloaded_latency_s and r.energy_j == free.energy_j


@pytest.mark.parametrize("seed", range(4))
def test_random_sharded_mappings_in_input_order_keep_the_invariants(alexnet_nx, seed):
    """Every device ends each input's tasks before it starts the next input's; dependencies hold; every
    task and message runs once per input."""
    pr, n = alexnet_nx, 12
    tg = check_plan(pr.graph, pr.cluster, random_sharded_plan(pr, np.random.default_rng(seed)))
    r = simulate(pr, tg, SimOptions(inputs=n, inputs_in_order=True))
    assert r.events == n * (1 + tg.num_tasks + len(tg.messages()))
    dependencies_hold(tg, r.timeline)
    for d in pr.cluster.names:
        spans = sorted((s for s in r.timeline if s.resource == d), key=lambda s: s.start)
        assert [s.input for s in spans] == sorted(s.input for s in spans)


def test_a_device_starts_the_lowest_input_first():
    """l0 (1 s) -> l1 (2 s) on one device, three inputs at t = 0: at t = 1 both l0 of input 1 and l1
    of input 0 are ready, and input 0 goes first."""
    pr = problem(chain_graph([4, 4]), cluster(["a"]), np.array([[1.0], [2.0]]), np.ones((2, 1)))
    r = simulate_plan(pr, Plan("toy", "toy-cluster", "hand", assign={"l0": "d0", "l1": "d0"}),
                      SimOptions(inputs=3))
    assert [(s.label, s.input, s.start, s.end) for s in r.timeline] == [
        ("l0", 0, 0.0, 1.0), ("l1", 0, 1.0, 3.0), ("l0", 1, 3.0, 4.0), ("l1", 1, 4.0, 6.0),
        ("l0", 2, 6.0, 7.0), ("l1", 2, 7.0, 9.0)]
    assert r.throughput == pytest.approx(1 / 3.0) and r.utilization == {"d0": 1.0}


@pytest.mark.parametrize("link_order, link_spans, done", [
    # FIFO: the model inputs, all ready at t = 0, go first; t1 of input 0 (ready at 1) waits until 3
    ("fifo", [("x", 0, 0, 1), ("x", 1, 1, 2), ("x", 2, 2, 3), ("t1", 0, 3, 4), ("t1", 1, 4, 5), ("t1", 2, 5, 6)],
     [5, 6, 7]),
    # by input: at t = 1 the link holds x of inputs 1, 2 and t1 of input 0, and sends input 0's first
    ("input", [("x", 0, 0, 1), ("t1", 0, 1, 2), ("x", 1, 2, 3), ("t1", 1, 3, 4), ("x", 2, 4, 5), ("t1", 2, 5, 6)],
     [3, 5, 7]),
])
def test_a_link_orders_its_messages_by_ready_time_or_by_input(link_order, link_spans, done):
    """The model input x arrives at d0 (the source) and feeds l0 on d1 and l1 on d0; l2 on d1 reads
    both. Link d0->d1 carries x and t1 (1 s each); every layer takes 1 s; three inputs at t = 0."""
    layers = [Layer(f"l{i}", "conv", 1, 1, 100) for i in range(3)]
    tensors = [Tensor("x", SOURCE, 100, (0, 1)), Tensor("t0", 0, 100, (2,)), Tensor("t1", 1, 100, (2,)),
               Tensor("t2", 2, 4, (), is_output=True)]
    cl = cluster(["a", "a"], bandwidth=100.0, source="d0")
    pr = problem(Graph("fork", layers, tensors), cl, np.ones((3, 1)), np.ones((3, 1)))
    plan = Plan("fork", cl.name, "hand", assign={"l0": "d1", "l1": "d0", "l2": "d1"})
    r = simulate_plan(pr, plan, SimOptions(inputs=3, link_order=link_order))
    assert [(s.label, s.input, s.start, s.end) for s in r.timeline if s.resource == "d0->d1"] == link_spans
    assert r.done_s.tolist() == done


# ---- random mappings: invariants -------------------------------------------------------------------

def dependencies_hold(tg, timeline) -> None:
    """Every task starts after its inputs: same-device producers done, messages delivered."""
    names = tg.cluster.names
    end = {(s.resource, s.label, s.input): s.end for s in timeline}
    start = {(s.resource, s.label, s.input): s.start for s in timeline}
    link = {(m.payload, m.dst): f"{names[m.src]}->{names[m.dst]}" for m in tg.messages()}
    inputs = {s.input for s in timeline}
    for e in range(len(tg.edge_src)):
        t, p = int(tg.edge_dst[e]), int(tg.edge_src[e])
        if t < 0:
            continue
        task = tg.tasks[t]
        key = (tg.payloads[tg.edge_payload[e]], task.device)
        for i in inputs:
            began = start[(names[task.device], task.name, i)]
            if key in link:
                assert end[(link[key], key[0], i)] <= began
            elif p >= 0:
                assert end[(names[tg.tasks[p].device], tg.tasks[p].name, i)] <= began


@pytest.mark.parametrize("link_order", ["fifo", "input"])
@pytest.mark.parametrize("seed", range(6))
def test_random_sharded_mappings_keep_the_invariants(alexnet_nx, seed, link_order):
    pr, n = alexnet_nx, 40
    tg = check_plan(pr.graph, pr.cluster, random_sharded_plan(pr, np.random.default_rng(seed)))
    closed = evaluate_mappings(pr, tg)
    r = simulate(pr, tg, SimOptions(inputs=n, link_order=link_order))
    assert r.events == n * (1 + tg.num_tasks + len(tg.messages())) == n + len(r.timeline)
    assert r.energy_j == pytest.approx(closed.energy_j[0], rel=1e-9)
    for d, busy in enumerate(closed.compute_s_per_device[0]):
        assert r.busy_s.get(pr.cluster.names[d], 0.0) == pytest.approx(n * busy, rel=1e-9)
    assert n / r.makespan_s <= closed.throughput[0] * (1 + 1e-12)   # the busiest resource bounds any stream
    assert max(r.utilization.values()) <= 1 + 1e-12
    per_resource: dict[str, list[Span]] = {}
    for s in r.timeline:
        per_resource.setdefault(s.resource, []).append(s)
    for spans in per_resource.values():                              # one job at a time per resource
        spans.sort(key=lambda s: s.start)
        assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))
    dependencies_hold(tg, r.timeline)
    last = {}
    for s in r.timeline:
        last[s.input] = max(last.get(s.input, 0.0), s.end)
    np.testing.assert_allclose(r.done_s, [last[i] for i in range(n)])


def test_bad_options_and_impossible_tasks_are_named():
    with pytest.raises(HetsplitError, match="at least 1 input"):
        SimOptions(inputs=0)
    with pytest.raises(HetsplitError, match="interval_s"):
        SimOptions(interval_s=-1.0)
    with pytest.raises(HetsplitError, match="link_order"):
        SimOptions(link_order="lifo")
    pr, tg, costs = hand_problem()
    costs.time_s[4, 0] = np.inf
    with pytest.raises(HetsplitError, match=r"'c@in\[0:2\]' cannot run on device 'd1'"):
        simulate(pr, tg, SimOptions(inputs=2), costs)


# ---- trace and Gantt -------------------------------------------------------------------------------

def test_the_trace_has_one_event_per_span_and_the_gantt_is_drawn(tmp_path):
    pr, tg, costs = hand_problem()
    r = simulate(pr, tg, SimOptions(inputs=3), costs)
    path = write_trace(r, tmp_path / "t" / "trace.json", "hand")
    doc = json.loads(path.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(r.timeline) == 3 * 15
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert sorted(names.values()) == sorted(r.resources) and len(names) == 7
    first = min(spans, key=lambda e: (e["ts"], e["pid"]))
    assert (names[first["pid"]], first["name"], first["dur"], first["args"]["input"]) == ("d0", "a", 1e6, 0)
    assert {e["cat"] for e in spans} == {"compute", "transfer"}
    assert trace_document(r)["traceEvents"] == doc["traceEvents"]
    png = gantt_plot(r, tmp_path / "g" / "gantt.png", "hand")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000


# ---- the command ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan_file(alexnet_nx, tmp_path_factory):
    plan = random_pipeline(alexnet_nx, np.random.default_rng(5))
    return plan, save_plan(plan, tmp_path_factory.mktemp("plans") / "plan.json")


def test_simulate_prints_a_table_and_writes_trace_and_gantt(alexnet_nx, plan_file, tmp_path, capsys):
    plan, path = plan_file
    out = tmp_path / "sim"
    assert main(["simulate", str(path), "-n", "30", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "throughput (steady state)" in text and "utilization" in text and "closed form" in text
    doc = json.loads((out / "trace.json").read_text())
    tg = check_plan(alexnet_nx.graph, alexnet_nx.cluster, plan)
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "X") == 30 * (tg.num_tasks + len(tg.messages()))
    assert (out / "gantt.png").stat().st_size > 5_000


def test_simulate_json_matches_the_plans_metrics(plan_file, capsys):
    plan, path = plan_file
    assert main(["simulate", str(path), "--model", "alexnet", "--cluster", "jetson-xavier-nx-4", "-n", "200",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "alexnet" and doc["inputs"] == 200
    assert doc["throughput"] == pytest.approx(plan.metrics.throughput, rel=1e-6)
    assert doc["unloaded_latency_s"] == pytest.approx(doc["closed_form"]["latency_s"], rel=1e-9)


def test_simulate_takes_the_cluster_when_the_plan_names_none(plan_file, tmp_path, capsys):
    plan, path = plan_file
    doc = json.loads(path.read_text())
    del doc["cluster"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc))
    assert main(["simulate", str(bare), "-n", "5"]) == 2
    assert "names no cluster; give one with --cluster" in capsys.readouterr().err
    assert main(["simulate", str(bare), "-c", "jetson-xavier-nx-4", "-n", "5", "--json"]) == 0


@pytest.mark.parametrize("content, args, message", [
    (None, [], "no such plan file"),
    ("[1, 2]", [], "a plan must be a JSON object"),
    ("3", [], "a plan must be a JSON object"),
    ("{not json", [], "not valid JSON"),
])
def test_simulate_bad_input_exits_2_with_a_clear_message(tmp_path, capsys, content, args, message):
    path = tmp_path / "plan.json"
    if content is not None:
        path.write_text(content)
    assert main(["simulate", str(path), *args]) == 2
    assert message in capsys.readouterr().err


def test_simulate_rejects_zero_inputs(plan_file, capsys):
    assert main(["simulate", str(plan_file[1]), "-n", "0"]) == 2
    assert "at least 1 input" in capsys.readouterr().err
