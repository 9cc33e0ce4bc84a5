"""Every device preset says what a segment costs on it (each figure with its source, a 0 with its reason);
the cost table of a modelled type carries its device's figures, which a cluster file may override."""

from __future__ import annotations

import numpy as np
import pytest
from factories import chain_graph

from hetsplit.cluster import cluster_from_dict
from hetsplit.cluster.loader import SEGMENT_PARAMS, time_per_byte
from hetsplit.cluster.presets import device_preset_names, load_preset
from hetsplit.costs.build import build_cost_table, build_problem
from hetsplit.costs.models.base import segment_cost
from hetsplit.errors import HetsplitError

GRAPH = chain_graph([4000, 4000, 4000], input_bytes=4000)


@pytest.mark.parametrize("name", device_preset_names())
def test_every_device_preset_gives_its_segment_figures_with_sources(name):
    p = load_preset(name)
    for key in SEGMENT_PARAMS.values():
        assert key in p.params, f"{name}: no {key}"
        source = p.sources[f"params.{key}"]
        assert source
        if p.params[key] == 0:
            assert source.startswith("0:") and len(source) > 20, f"{name}.{key}: a 0 says why"


def table_of(devices: list[dict]):
    cl = cluster_from_dict({"devices": devices, "links": {"default": "pcie5"}})
    return cl, build_cost_table(GRAPH, cl)


def test_a_modelled_type_carries_its_presets_figures():
    _, t = table_of([{"name": "gpu0", "preset": "rtx3070ti"}, {"name": "cpu0", "preset": "xeon-w3323"}])
    gpu, cpu = t.segment_cost("rtx3070ti"), t.segment_cost("xeon-w3323")
    preset = load_preset("rtx3070ti")
    assert gpu.call_s == preset.params["segment_call_s"] == 0.35e-3
    assert gpu.byte_s == preset.params["segment_byte_s"] and gpu.host_byte_s == preset.params["segment_host_byte_s"]
    assert preset.sources["params.segment_host_byte_s"] in gpu.source
    assert cpu.call_s == 0.24e-3 and cpu.host_byte_s == 0.0
    assert t.charges_cuts


def test_fixed_dataflow_devices_charge_nothing_and_say_why():
    for preset in ("neurosim-rram", "imce-imc", "imce-dpu", "siracusa"):
        cl = cluster_from_dict({"devices": [{"name": "x", "preset": preset}]})
        seg = segment_cost(cl.devices[0])
        assert seg is not None and seg.is_zero and "0: " in seg.source
    assert "fixed dataflow" in segment_cost(cluster_from_dict({"devices": [{"name": "x", "preset": "neurosim-rram"}]})
                                            .devices[0]).source


def test_a_cluster_file_overrides_the_figures_and_zero_stays_zero():
    cl, t = table_of([{"name": "gpu2", "preset": "rtx3070ti"},
                      {"name": "gpu0", "preset": "rtx3070ti", "segment": {"call": "0.2ms", "byte": "0.1ns/B"}},
                      {"name": "gpu1", "preset": "rtx3070ti", "segment": {"call": 0, "byte": 0, "host_byte": 0}}])
    assert len(set(cl.types)) == 3   # different figures: different types
    seg = {d.name: t.segment_cost(d.type) for d in cl.devices}
    assert seg["gpu0"].call_s == pytest.approx(2e-4) and seg["gpu0"].byte_s == pytest.approx(1e-10)
    assert seg["gpu0"].host_byte_s == load_preset("rtx3070ti").params["segment_host_byte_s"]  # kept
    assert "given for device 'gpu0'" in seg["gpu0"].source
    assert seg["gpu1"].is_zero and seg["gpu1"] != t.segment_cost("missing")
    assert seg["gpu2"].call_s == 0.35e-3


def test_a_device_without_figures_is_charged_nothing():
    cl, t = table_of([{"name": "c", "kind": "cpu", "memory": "1GiB", "peak_macs": "1e10/s",
                       "mem_bandwidth": "10GB/s", "power_active": "10W"}])
    assert t.segment == {} and not t.charges_cuts


def test_the_problem_charges_a_stage_its_segment():
    cl = cluster_from_dict({"devices": [{"name": "gpu0", "preset": "rtx3070ti"}], "links": {"default": "pcie5"}})
    p = build_problem(GRAPH, cl)
    seg = p.costs.segment_cost("rtx3070ti")
    want = p.layers_time(0, 3, 0) + seg.call_s + seg.per_byte_s * (4000 + 4000)
    assert np.isclose(p.stage_time(0, 3, 0), want, rtol=1e-12)


@pytest.mark.parametrize("text, seconds", [("0.1ns/B", 1e-10), ("0.0125ns/b", 1e-10), ("1us/KiB", 1e-6 / 1024),
                                           (2e-10, 2e-10), ("0", 0.0)])
def test_time_per_byte(text, seconds):
    assert time_per_byte(text, "x") == pytest.approx(seconds, rel=1e-12, abs=0)


@pytest.mark.parametrize("segment, fragment", [({"call": "0.2ms", "bytes": 1}, "did you mean 'byte'"),
                                               ({"byte": "0.1ns/s"}, "0.1ns/s"),
                                               ({"call": "-1ms"}, "call"),
                                               ("0.2ms", "expected a mapping")])
def test_bad_segment_figures_are_refused_naming_the_key(segment, fragment):
    with pytest.raises(HetsplitError, match=fragment):
        cluster_from_dict({"devices": [{"name": "gpu0", "preset": "rtx3070ti", "segment": segment}]})
