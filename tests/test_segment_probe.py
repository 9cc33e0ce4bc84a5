"""The GPU profiler's segment cost: the model cut into segments, each run as the runtime's torch call, on
CPU torch here (no GPU on this machine) with a clock that charges each call a known cost."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from hetsplit.costs.profiler.ort_timing import random_feeds
from hetsplit.costs.profiler.run import load_for_profiling, runnable_onnx
from hetsplit.costs.profiler.segment_probe import measure_segments, node_ranges, segment_cost
from hetsplit.costs.profiler.torch_onnx import layer_of_nodes
from hetsplit.graph.torch_interpreter import TorchInterpreter


class TickClock:
    """Time that only the test advances."""

    cuda = False

    def __init__(self) -> None:
        self.now = 0.0

    def mark(self) -> float:
        return self.now

    def sync(self) -> None:
        pass

    def seconds(self, a: float, b: float) -> float:
        return b - a

    def where(self) -> str:
        return "ticks"


@pytest.fixture(scope="module")
def resnet8():
    graph, onnx_file, zoo_name = load_for_profiling("resnet8")
    with runnable_onnx(graph, onnx_file, zoo_name) as path:
        model = onnx.load(str(path))
    interp = TorchInterpreter(model, "cpu")
    feeds = random_feeds([(i.name, onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type),
                           [d.dim_value for d in i.type.tensor_type.shape.dim])
                          for i in model.graph.input if i.name not in interp.consts])
    return graph, interp, feeds


def test_node_ranges_cover_the_model_in_order_and_start_at_layers():
    layers = np.array([0, 0, 1, 2, 2, 2, 3, 4, 4, 5])
    for k in (1, 2, 3, 4, 8):
        ranges = node_ranges(layers, k)
        assert ranges[0].start == 0 and ranges[-1].stop == len(layers)
        assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:]))
        assert all(r.start == 0 or layers[r.start] != layers[r.start - 1] for r in ranges)
        assert len(ranges) <= min(k, 6)


def test_segments_run_as_calls_give_the_whole_models_output(resnet8):
    graph, interp, feeds = resnet8
    whole = interp.call(feeds, interp.outputs)
    layers = layer_of_nodes(graph, [n.name for n in interp.nodes])
    values = dict(feeds)
    for r in node_ranges(layers, 4):
        ins, outs = interp.boundary(r)
        values.update(interp.call({n: values[n] for n in ins}, outs, nodes=r))
    for name in interp.outputs:
        np.testing.assert_allclose(values[name], whole[name], rtol=1e-5, atol=1e-6)


def test_the_probe_recovers_a_known_call_and_byte_cost(resnet8, monkeypatch):
    graph, interp, feeds = resnet8
    clock = TickClock()
    call_s, byte_s, node_s = 2e-4, 3e-10, 1e-5
    real = TorchInterpreter.call

    def costed(self, given, outputs, keep=frozenset(), nodes=None):
        got = real(self, given, outputs, keep, nodes)
        n = len(self.nodes) if nodes is None else len(nodes)
        moved = sum(np.asarray(v).nbytes for v in given.values()) + sum(v.nbytes for v in got.values())
        clock.now += call_s + byte_s * moved + node_s * n
        return got

    monkeypatch.setattr(TorchInterpreter, "call", costed)
    layers = layer_of_nodes(graph, [n.name for n in interp.nodes])
    layer_s = np.bincount(layers, minlength=graph.num_layers) * node_s
    rows = measure_segments(interp, feeds, layers, layer_s, clock, repeats=2)
    assert sorted({r["cut"] for r in rows}) == [1, 2, 4, 8]
    seg = segment_cost(rows, clock.where())
    assert seg.call_s == pytest.approx(call_s, rel=1e-6) and seg.byte_s == pytest.approx(byte_s, rel=1e-6)
    assert seg.host_byte_s == 0 and "runtime's torch call" in seg.source


def test_the_torch_profile_carries_its_measured_segment_cost_through_its_file():
    import json

    from hetsplit.costs.profile import profile_from_dict, profile_to_dict
    from hetsplit.costs.profiler.run import profile_on_torch

    graph, onnx_file, zoo_name = load_for_profiling("resnet8")
    prof = profile_on_torch(graph, onnx_file, zoo_name, "cpu", "torch-cpu", warmup=1, repeats=3)
    seg = prof.costs.segment["torch-cpu"]
    assert seg.source.startswith("measured:") and seg.call_s >= 0 and seg.byte_s >= 0
    assert {r["cut"] for r in prof.meta["segment_rows"]} == {1, 2, 4, 8}
    back = profile_from_dict(json.loads(json.dumps(profile_to_dict(prof))))
    assert back.costs.segment["torch-cpu"] == seg
