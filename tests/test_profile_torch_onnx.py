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


# A CNN and a token-input Transformer: tinyllama-42m runs every op MobileBERT does that resnet18 does not
# (Gather, Slice, Softmax, ...; and Pow, ReduceMean, Sqrt, Sigmoid besides), at 1/3 of its interpreter time.
@pytest.mark.parametrize("model", ["resnet18", "tinyllama-42m"])
def test_every_node_is_timed_in_its_layer_and_the_layers_add_up_to_the_model(model, monkeypatch):
    """On a clock that ticks once per node run, each layer's time is its node count and the layers add
    up to the whole model exactly (deterministic: no wall clock)."""
    from hetsplit.costs.profiler import torch_cuda
    from hetsplit.graph.torch_interpreter import TorchInterpreter

    ticks = [0.0]
    step = TorchInterpreter.step

    def counted(env, node):
        ticks[0] += 1.0
        step(env, node)

    monkeypatch.setattr(TorchInterpreter, "step", staticmethod(counted))
    monkeypatch.setattr(torch_cuda.time, "perf_counter", lambda: ticks[0])
    from hetsplit.costs.profiler import torch_onnx
    segments = torch_onnx.measure_segments          # the segment probe (tested on its own) cut in 1 and 2 only:
    monkeypatch.setattr(torch_onnx, "measure_segments",       # its 1/2/4/8 cuts ran tinyllama 45 more times
                        lambda *a, **k: segments(*a[:5], cuts=(1, 2), repeats=1))
    graph, onnx_file, zoo_name = load_for_profiling(model)
    prof = profile_on_torch(graph, onnx_file, zoo_name, "cpu", "torch-cpu", warmup=0, repeats=2)
    t = prof.costs.time_s[:, 0]
    assert prof.costs.types == ["torch-cpu"] and t.shape == (graph.num_layers,)
    import onnx

    from hetsplit.costs.profiler.run import runnable_onnx

    with runnable_onnx(graph, onnx_file, zoo_name) as path:
        nodes = [n.name for n in onnx.load(str(path), load_external_data=False).graph.node]
    expected = np.bincount(layer_of_nodes(graph, nodes), minlength=graph.num_layers)
    assert np.all(expected > 0)
    np.testing.assert_array_equal(t, expected)
    assert prof.meta["whole_model"]["time_s"] == len(nodes) and prof.meta["gap"] == 0.0
    assert prof.meta["executor"] == "torch-interpreter" and "interpreter" in prof.costs.sources["torch-cpu"]


class FakeMeter:
    """An energy counter that reads ``joules`` over any window (0: it did not tick)."""

    name, reason, available = "fake", "", True

    def __init__(self, joules: float) -> None:
        self.joules = joules

    def start(self) -> None:
        pass

    def stop(self) -> float:
        return self.joules


def test_a_meter_is_read_over_a_long_enough_window_and_zero_joules_is_no_reading(monkeypatch):
    import torch

    from hetsplit.costs.profiler import torch_cuda
    from hetsplit.costs.profiler.torch_cuda import DeviceClock, whole_model_runs

    monkeypatch.setattr(torch_cuda, "ENERGY_WINDOW_S", 0.05)
    now = [0.0]
    monkeypatch.setattr(torch_cuda.time, "perf_counter", lambda: now[0])

    def run():                                               # each run takes 10 ms on the fake clock
        now[0] += 0.01

    clock = DeviceClock(torch, "cpu")
    whole, joules = whole_model_runs(run, clock, 3, FakeMeter(2.0))
    assert len(whole) == 5                                   # ran on until the window was 50 ms long
    assert joules == pytest.approx(2.0 / 5)                  # joules per run
    assert len(whole_model_runs(run, clock, 3)[0]) == 3      # no meter: just the repeats
    _, none = whole_model_runs(run, clock, 3, FakeMeter(0.0))
    assert none is None                                      # a counter that did not tick is not "0 J"


def test_a_meter_that_read_nothing_is_no_reading_and_a_power_figure_estimates_instead(monkeypatch):
    from hetsplit.costs.profiler import torch_onnx

    monkeypatch.setattr("hetsplit.costs.profiler.torch_cuda.ENERGY_WINDOW_S", 0.01)
    graph, onnx_file, zoo_name = load_for_profiling("resnet8")
    from hetsplit.costs.profiler.run import runnable_onnx

    with runnable_onnx(graph, onnx_file, zoo_name) as path:
        silent = torch_onnx.profile_onnx_torch(graph, path, device="cpu", device_type="torch-cpu", warmup=0,
                                               repeats=2, meter=FakeMeter(0.0))
        metered = torch_onnx.profile_onnx_torch(graph, path, device="cpu", device_type="torch-cpu", warmup=0,
                                                repeats=2, meter=FakeMeter(1.0))
        powered = torch_onnx.profile_onnx_torch(graph, path, device="cpu", device_type="torch-cpu", warmup=0,
                                                repeats=2, meter=FakeMeter(0.0), power_w=50.0)
    assert silent.meta["energy"]["status"] == "unavailable" and "read no energy" in silent.meta["energy"]["meter"]
    assert not silent.costs.energy_j.any()
    assert metered.meta["energy"]["status"] == "measured"
    assert metered.costs.energy_j[:, 0].sum() > 0
    assert powered.meta["energy"]["status"] == "estimated"            # no reading: power x time, said so
    np.testing.assert_allclose(powered.costs.energy_j[:, 0], 50.0 * powered.costs.time_s[:, 0])
