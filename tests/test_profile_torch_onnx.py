"""The GPU profiler times hetsplit's ONNX interpreter (what a GPU device's segments run with) layer by
layer; here it runs on the CPU through the same code (this machine has no GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from hetsplit.costs.profiler.run import load_for_profiling, profile_on_torch
from hetsplit.costs.profiler.torch_onnx import layer_of_nodes


def test_nodes_of_no_layer_join_the_layer_before():
    from hetsplit.graph import zoo

    graph = zoo.load("resnet8")
    first, second = graph.layers[0].nodes[0], graph.layers[1].nodes[0]
    got = layer_of_nodes(graph, [first, "folded-away", second, "also-none"])
    assert got.tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("model", ["resnet18", "mobilebert"])
def test_every_layer_is_timed_and_the_layers_add_up_to_the_model(model):
    graph, onnx_file, zoo_name = load_for_profiling(model)
    prof = profile_on_torch(graph, onnx_file, zoo_name, "cpu", "torch-cpu", warmup=1, repeats=5)
    t = prof.costs.time_s[:, 0]
    assert prof.costs.types == ["torch-cpu"] and t.shape == (graph.num_layers,)
    assert np.all(t > 0), [graph.names[i] for i in np.flatnonzero(t <= 0)][:5]
    # every node is inside some layer's span: the layers' sum is the whole run's time, give or take noise
    assert abs(prof.meta["gap"]) < 0.35, prof.meta["gap"]
    assert prof.meta["executor"] == "torch-interpreter" and "interpreter" in prof.costs.sources["torch-cpu"]
