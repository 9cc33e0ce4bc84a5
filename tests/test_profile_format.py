"""The hetsplit.profile/1 format: round trip, DAG inputs, and errors that name the key."""

import json

import numpy as np
import pytest

from hetsplit.costs import CostTable, Profile, build_problem, load_profile, save_profile
from hetsplit.costs.profile import profile_from_dict
from hetsplit.errors import ProfileError
from hetsplit.estimate import evaluate
from hetsplit.plan import Plan, Stage

from factories import chain_graph, cluster

DOC = {
    "format": "hetsplit.profile/1", "model": "tiny", "input_bytes": 100,
    "layers": [
        {"name": "conv1", "out_bytes": 400, "param_bytes": 40, "mem_bytes": 1000, "inputs": ["input"]},
        {"name": "conv2", "out_bytes": 200, "param_bytes": 80},
        {"name": "add", "out_bytes": 200, "inputs": ["conv1", "conv2"]},
    ],
    "device_types": {"gpu": {"time_s": [1e-3, 2e-3, 1e-4], "energy_j": [0.1, 0.2, 0.01]},
                     "cim": {"time_s": [5e-3, 4e-3, None], "energy_j": [1e-3, 1e-3, None]}},
}


def test_reads_layers_inputs_and_costs():
    prof = profile_from_dict(DOC)
    g = prof.graph
    assert g.names == ["conv1", "conv2", "add"]
    assert g.predecessors == [(-1,), (0,), (0, 1)]
    # conv1's output skips over conv2 to the add: cut 2 carries it and conv2's output
    assert list(g.cut_bytes) == [100, 400, 600, 200]
    assert prof.costs.types == ["gpu", "cim"]
    assert np.isinf(prof.costs.time_s[2, 1])          # null = the type cannot run the layer
    assert prof.costs.mem_bytes[0, 0] == 1000 and prof.costs.mem_bytes[1, 0] == 280


def test_round_trip_keeps_every_number(tmp_path):
    prof = profile_from_dict(DOC)
    path = save_profile(prof, tmp_path / "p.json")
    again = load_profile(path)
    assert again.graph.names == prof.graph.names
    assert list(again.graph.cut_bytes) == list(prof.graph.cut_bytes)
    np.testing.assert_array_equal(again.costs.time_s, prof.costs.time_s)
    np.testing.assert_array_equal(again.costs.energy_j, prof.costs.energy_j)
    np.testing.assert_array_equal(again.costs.mem_bytes, prof.costs.mem_bytes)


def test_a_profile_plans_without_the_model(tmp_path):
    prof = profile_from_dict(DOC)
    cl = cluster(["gpu", "cim"], bandwidth=1e6)
    p = build_problem(prof.graph, cl, prof.costs)
    m = evaluate(p, Plan("tiny", "", "x", [Stage("d1", ["conv1", "conv2"]), Stage("d0", ["add"])]))
    assert m.bottleneck_s == pytest.approx(max(9e-3, 600 / 1e6, 1e-4))


def test_missing_type_in_profile_is_named():
    prof = profile_from_dict(DOC)
    with pytest.raises(ProfileError, match="no costs for device type 'npu'"):
        build_problem(prof.graph, cluster(["gpu", "npu"]), prof.costs)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(format="x"), "'format'"),
    (lambda d: d["layers"][2].update(inputs=["nope"]), "reads 'nope'"),
    (lambda d: d["layers"][0].update(inputs=["add"]), "comes after it"),
    (lambda d: d["device_types"]["gpu"].update(time_s=[1]), "device_types.gpu.time_s must list 3"),
    (lambda d: d["layers"][1].pop("out_bytes"), "no 'out_bytes'"),
    (lambda d: d["device_types"]["gpu"].update(time_s=[-1, 1, 1]), ">= 0"),
])
def test_errors_name_the_problem(mutate, message):
    doc = json.loads(json.dumps(DOC))
    mutate(doc)
    with pytest.raises(ProfileError, match=message):
        profile_from_dict(doc)


def test_cost_table_ranges_use_prefix_sums_and_inf():
    t = np.array([[1.0, 2.0], [np.inf, 3.0], [4.0, 5.0]])
    table = CostTable(["a", "b", "c"], ["x", "y"], t, t, np.ones(3))
    assert table.range_time(0, 1, 0) == 1.0
    assert np.isinf(table.range_time(0, 2, 0)) and table.range_time(2, 3, 0) == 4.0
    assert table.range_time(0, 3, 1) == 10.0
    np.testing.assert_array_equal(table.range_time(np.array([0, 2]), np.array([3, 3]), np.array([1, 0])), [10.0, 4.0])


def test_profile_from_graph_and_costs_exports(tmp_path):
    g = chain_graph([8, 8])
    table = CostTable(g.names, ["a"], np.ones((2, 1)), np.ones((2, 1)), np.ones(2))
    path = save_profile(Profile(g, table, {"source": "unit test"}), tmp_path / "x.json")
    doc = json.loads(path.read_text())
    assert doc["format"] == "hetsplit.profile/1" and doc["source"] == "unit test"
    assert doc["layers"][1]["inputs"] == ["l0"]


def test_attrs_survive_a_round_trip_so_device_models_can_cost_a_profile(tmp_path):
    from hetsplit.cluster import load_cluster
    from hetsplit.graph import load_model

    g = load_model("resnet8")
    cl = load_cluster("donna-2cpu-1gpu-1cim-hb-wcc")
    direct = build_problem(g, cl)
    path = save_profile(Profile(g, direct.costs), tmp_path / "r8.json")
    again = load_profile(path)
    assert again.graph.layers[0].attrs["kernel"] == list(g.layers[0].attrs["kernel"])
    assert [layer.in_bytes for layer in again.graph.layers] == [layer.in_bytes for layer in g.layers]
    from hetsplit.costs.models import device_model

    recosted = device_model(cl.device("cim0")).layer_costs(again.graph)
    np.testing.assert_allclose(recosted.time_s, direct.costs.time_s[:, direct.costs.type_index("neurosim-rram")])


def test_a_profile_without_energy_says_its_zeros_are_not_a_measurement(tmp_path):
    """A profile whose energy status is 'unavailable' (no meter, no power figure) has zeros for energy:
    every column's source says so (it reaches `plan`'s cost notes), once, across a save and a load; a
    profile with measured energy says nothing of the kind."""
    silent = profile_from_dict({**DOC, "energy": {"status": "unavailable", "meter": "none"}})
    for source in silent.costs.sources.values():
        assert "energy: none measured or estimated" in source and "no energy figure" in source
    assert silent.costs.unknown_energy_types == ["gpu", "cim"]
    again = load_profile(save_profile(silent, tmp_path / "p.json"))
    assert again.costs.sources["gpu"].count("energy: none measured") == 1
    assert again.costs.unknown_energy_types == ["gpu", "cim"]
    measured = profile_from_dict({**DOC, "energy": {"status": "measured", "per_inference_j": 0.3}})
    assert "energy: none" not in measured.costs.sources["gpu"] and measured.costs.unknown_energy_types == []
