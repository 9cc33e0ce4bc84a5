"""plan/2 documents and check_plan: round trips, /1 compatibility, and every bad plan named."""

from __future__ import annotations

import json

import pytest

from hetsplit.cluster.loader import load_cluster
from hetsplit.costs.build import build_problem
from hetsplit.errors import PlanError
from hetsplit.graph import zoo
from hetsplit.graph.shard import axis_size, shard_layer
from hetsplit.plan.check import check_plan, collectives
from hetsplit.estimate.evaluate import evaluate, make_plan
from hetsplit.plan.io import load_plan
from hetsplit.plan.types import Combine, Plan, Shard, Stage


@pytest.fixture(scope="module")
def pr():
    return build_problem(zoo.load("alexnet"), load_cluster("jetson-xavier-nx-4"))


def whole(pr, device="nx0-cpu") -> dict:
    return {n: device for n in pr.graph.names}


def mapping(pr, assign, combine=None, algorithm="hand") -> Plan:
    return Plan("alexnet", pr.cluster.name, algorithm, assign=assign, combine=combine or {})


CONV2, FC1 = "features.3/Conv", "classifier.0/Gemm"


def test_plan2_round_trips_and_plan1_still_reads(pr, tmp_path):
    assign = whole(pr)
    assign[CONV2] = (Shard("nx0-cpu", "out", 0, 96), Shard("nx1-gpu", "out", 96, 192))
    plan = mapping(pr, assign, {CONV2: Combine("concat", "nx1-gpu")})
    doc = json.loads(json.dumps(plan.to_dict()))
    assert doc["format"] == "hetsplit.plan/2" and doc["params"]["routing"] == "direct"
    back = Plan.from_dict(doc)
    assert back.assign == plan.assign and back.combine == plan.combine and not back.is_pipeline
    v1 = {"format": "hetsplit.plan/1", "model": "alexnet", "cluster": pr.cluster.name, "algorithm": "x",
          "stages": [{"device": "nx0-cpu", "layers": pr.graph.names[:5]},
                     {"device": "nx1-cpu", "layers": pr.graph.names[5:]}]}
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(v1))
    old = load_plan(path)
    assert old.is_pipeline and old.routing == "relay" and [s.device for s in old.stages] == ["nx0-cpu", "nx1-cpu"]
    again = Plan.from_dict(json.loads(json.dumps(old.to_dict())))
    assert again.stages == old.stages and evaluate(pr, again).throughput == evaluate(pr, old).throughput


def test_relay_routing_over_an_assign_is_a_pipeline(pr):
    doc = {"format": "hetsplit.plan/2", "model": "alexnet", "params": {"routing": "relay"},
           "assign": {n: ("nx0-cpu" if i < 6 else "nx0-gpu") for i, n in enumerate(pr.graph.names)}}
    plan = Plan.from_dict(doc)
    assert plan.is_pipeline and [s.device for s in plan.stages] == ["nx0-cpu", "nx0-gpu"]
    ref = make_plan(pr, [0, 6, 12], [0, 1], "x")
    assert evaluate(pr, plan).latency_s == ref.metrics.latency_s


@pytest.mark.parametrize("doc, message", [
    ([1, 2], "must be a JSON object"),
    ({"format": "hetsplit.plan/3", "model": "m", "assign": {}}, "'format' is"),
    ({"format": "hetsplit.plan/2", "model": "m"}, "neither 'stages' nor 'assign'"),
    ({"format": "hetsplit.plan/2", "model": "m", "assign": {"a": 3}}, r"assign\['a'\] must be a device"),
    ({"format": "hetsplit.plan/2", "model": "m", "assign": {"a": [{"device": "d", "axis": "rows", "start": 0,
                                                                    "stop": 2}]}}, "axis 'rows'"),
    ({"format": "hetsplit.plan/2", "model": "m", "assign": {"a": [{"device": "d", "axis": "out", "start": 2,
                                                                    "stop": 2}]}}, "empty"),
    ({"format": "hetsplit.plan/2", "model": "m", "assign": {"a": "d"}, "combine": {"a": {"kind": "max", "on": "d"}}},
     "kind 'max'"),
    ({"format": "hetsplit.plan/2", "model": "m", "assign": {"a": "d"}, "stages": [{"device": "e", "layers": ["a"]}]},
     "disagree on layer 'a'"),
])
def test_malformed_documents_are_named(doc, message):
    with pytest.raises(PlanError, match=message):
        Plan.from_dict(doc, "plan.json")


def test_unknown_device_missing_and_unknown_layers(pr):
    assign = whole(pr)
    assign[CONV2] = "gpu9"
    with pytest.raises(PlanError, match=r"layer 'features.3/Conv': device 'gpu9' is not in cluster"):
        check_plan(pr.graph, pr.cluster, mapping(pr, assign))
    assign = whole(pr)
    del assign[FC1]
    with pytest.raises(PlanError, match=r"leaves 1 of 12 layers unplaced: \['classifier.0/Gemm'\]"):
        check_plan(pr.graph, pr.cluster, mapping(pr, assign))
    assign = whole(pr)
    assign["conv99"] = "nx0-cpu"
    with pytest.raises(PlanError, match="does not have"):
        check_plan(pr.graph, pr.cluster, mapping(pr, assign))


@pytest.mark.parametrize("shards, combine, message", [
    ((("nx0-cpu", "out", 0, 90), ("nx1-cpu", "out", 96, 192)), ("concat", "nx0-cpu"), "starts at 96, expected 90"),
    ((("nx0-cpu", "out", 0, 96), ("nx1-cpu", "out", 96, 190)), ("concat", "nx0-cpu"), "up to 190, but the axis has 192"),
    ((("nx0-cpu", "out", 0, 96), ("nx1-cpu", "in", 96, 192)), ("concat", "nx0-cpu"), "mix axes"),
    ((("nx0-cpu", "out", 0, 96), ("nx0-cpu", "out", 96, 192)), ("concat", "nx0-cpu"), "two shards on one device"),
    ((("nx0-cpu", "in", 0, 32), ("nx1-cpu", "in", 32, 64)), None, "give combine"),
    ((("nx0-cpu", "in", 0, 32), ("nx1-cpu", "in", 32, 64)), ("concat", "nx0-cpu"), "give combine"),
    ((("nx0-cpu", "out", 0, 96), ("nx1-cpu", "out", 96, 192)), ("sum", "nx0-cpu"), "meet in a concat"),
    ((("nx0-cpu", "out", 0, 96), ("nx1-cpu", "out", 96, 192)), None, "never meet"),
])
def test_bad_shards_are_named(pr, shards, combine, message):
    assign = whole(pr)
    assign[CONV2] = tuple(Shard(*s) for s in shards)
    comb = {CONV2: Combine(*combine)} if combine else {}
    with pytest.raises(PlanError, match=message):
        check_plan(pr.graph, pr.cluster, mapping(pr, assign, comb))


def test_layers_that_cannot_split_say_so(pr):
    pool = pr.graph.layers[1]
    with pytest.raises(Exception, match=r"'features.2/MaxPool' \(pool\) cannot be split along 'in'"):
        axis_size(pool, "in")
    assign = whole(pr)
    assign[pool.name] = (Shard("nx0-cpu", "out", 0, 1), Shard("nx1-cpu", "out", 1, 2))
    with pytest.raises(PlanError, match="no weights to split"):
        check_plan(pr.graph, pr.cluster, mapping(pr, assign, {pool.name: Combine("concat", "nx0-cpu")}))


def test_two_stages_on_one_device_only_where_the_algorithm_allows(pr):
    names = pr.graph.names
    stages = [Stage("nx0-cpu", names[:4]), Stage("nx1-cpu", names[4:8]), Stage("nx0-cpu", names[8:])]
    with pytest.raises(PlanError, match="stages 0 and 2 both run on device 'nx0-cpu'.*'exact'"):
        check_plan(pr.graph, pr.cluster, Plan("alexnet", pr.cluster.name, "exact", stages))
    tg = check_plan(pr.graph, pr.cluster, Plan("alexnet", pr.cluster.name, "hand", stages))
    assert [t.kind for t in tg.tasks] == ["stage"] * 3


def test_shard_layers_scale_exactly(pr):
    conv = pr.graph.layers[2]
    a, b = shard_layer(conv, "out", 0, 64, 192), shard_layer(conv, "out", 64, 192, 192)
    assert a.macs + b.macs == conv.macs and a.param_bytes + b.param_bytes == conv.param_bytes
    assert a.out_bytes + b.out_bytes == conv.out_bytes and a.attrs["c_out"] == 64
    i0, i1 = shard_layer(conv, "in", 0, 16, 64, first=True), shard_layer(conv, "in", 16, 64, 64, first=False)
    assert i0.macs + i1.macs == conv.macs and i0.param_bytes + i1.param_bytes == conv.param_bytes
    assert i0.out_bytes == conv.out_bytes and i0.in_bytes + i1.in_bytes == conv.in_bytes


def test_tree_sum_expands_into_groups_and_a_broadcast(pr):
    """FC1 split by rows over 4 devices, summed in groups of 2 on nx1-cpu; FC2 split by columns on the
    same 4 devices reads the sum: partials go to the 2 group leaders, the leaders to the root, the
    result back to the other leader, which hands it to its group."""
    devs = ["nx0-cpu", "nx1-cpu", "nx2-cpu", "nx3-cpu"]
    assign = whole(pr, "nx1-cpu")
    assign[FC1] = tuple(Shard(d, "in", 2304 * i, 2304 * (i + 1)) for i, d in enumerate(devs))
    fc2 = "classifier.2/Gemm"
    assign[fc2] = tuple(Shard(d, "out", 1024 * i, 1024 * (i + 1)) for i, d in enumerate(devs))
    plan = mapping(pr, assign, {FC1: Combine("sum", "nx1-cpu", tree=2), fc2: Combine("concat", "nx1-cpu")})
    tg = check_plan(pr.graph, pr.cluster, plan)
    kinds = [t.name for t in tg.tasks if t.layers == (pr.graph.index(FC1),) and t.kind != "shard"]
    assert kinds == [f"{FC1}:sum[g0]", f"{FC1}:sum[g1]", f"{FC1}:sum", f"{FC1}:bcast[g1]"]
    out = 4096 * 4
    msgs = {(pr.cluster.names[m.src], pr.cluster.names[m.dst], m.payload): m.nbytes for m in tg.messages()}
    assert msgs[("nx0-cpu", "nx1-cpu", f"{FC1}.partial[0]")] == out          # into group 0 (leader: the root)
    assert msgs[("nx3-cpu", "nx2-cpu", f"{FC1}.partial[3]")] == out          # into group 1's leader
    assert msgs[("nx2-cpu", "nx1-cpu", f"{FC1}.group[1]")] == out            # leader to root
    assert msgs[("nx1-cpu", "nx2-cpu", f"{FC1}.sum")] == out                 # root back to leader
    assert msgs[("nx2-cpu", "nx3-cpu", "/classifier/classifier.1/Relu_output_0@sum")] == out
    assert msgs[("nx1-cpu", "nx0-cpu", "/classifier/classifier.1/Relu_output_0@sum")] == out
    assert [c.groups() for c in collectives(pr.graph, plan)] == [[("nx0-cpu", "nx1-cpu"), ("nx2-cpu", "nx3-cpu")]]
    # each in-shard receives only its quarter of the flattened input
    sliced = [m for m in tg.messages() if "[in " in m.payload]
    assert sliced and all(m.nbytes == 9216 * 4 / 4 for m in sliced)
