"""The GPU profiler times every layer inside one whole-model pass, through an injectable clock: run here on
CPU torch with a fake clock (no GPU on this machine), so the logic is checked without a wall clock."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hetsplit.costs.profiler.run import load_for_profiling, runnable_onnx
from hetsplit.costs.profiler.torch_onnx import layer_of_nodes, profile_onnx_torch, unmarked


class PassClock:
    """A clock that ticks ``per_node`` for every node run and ``per_mark`` for every mark (what marks cost a
    launch-bound GPU), and refuses to measure between stamps of two passes (a pass ends at ``sync``)."""

    cuda = False

    def __init__(self, per_node: float, per_mark: float) -> None:
        self.now, self.per_node, self.per_mark = 0.0, per_node, per_mark
        self.passes = 0
        self.marks_in_pass: list[int] = [0]

    def mark(self) -> tuple[int, float]:
        self.now += self.per_mark
        self.marks_in_pass[-1] += 1
        return self.passes, self.now

    def sync(self) -> None:
        self.passes += 1
        self.marks_in_pass.append(0)

    def seconds(self, a: tuple[int, float], b: tuple[int, float]) -> float:
        assert a[0] == b[0], "a layer's time was taken across two passes"
        return b[1] - a[1]

    def where(self) -> str:
        return "fake"


def run_counted(monkeypatch, clock: PassClock) -> None:
    from hetsplit.graph.torch_interpreter import TorchInterpreter

    step = TorchInterpreter.step

    def counted(env: dict[str, Any], node: Any) -> None:
        clock.now += clock.per_node
        step(env, node)

    monkeypatch.setattr(TorchInterpreter, "step", staticmethod(counted))


@pytest.mark.parametrize("model", ["resnet8"])
def test_layers_come_from_one_pass_each_and_add_up_to_the_unmarked_whole(model, monkeypatch):
    import onnx

    clock = PassClock(per_node=1.0, per_mark=0.5)
    run_counted(monkeypatch, clock)
    graph, onnx_file, zoo_name = load_for_profiling(model)
    repeats = 3
    with runnable_onnx(graph, onnx_file, zoo_name) as path:
        prof = profile_onnx_torch(graph, path, device="cpu", device_type="torch-cpu", warmup=1,
                                  repeats=repeats, clock=clock)
        nodes = [n.name for n in onnx.load(str(path), load_external_data=False).graph.node]
    counts = np.bincount(layer_of_nodes(graph, nodes), minlength=graph.num_layers).astype(float)
    # each layered pass: one mark at the start and one per layer, all in one pass (PassClock checks it)
    assert clock.marks_in_pass[1:1 + repeats] == [graph.num_layers + 1] * repeats
    # between its two stamps the unmarked model takes one tick per node and the closing mark; a marked
    # pass also takes one mark per layer boundary
    whole = len(nodes) + 0.5
    marked = len(nodes) + graph.num_layers * 0.5
    meta = prof.meta["marks"]
    assert meta["marked_pass_s"] == pytest.approx(marked) and meta["unmarked_whole_s"] == pytest.approx(whole)
    t = prof.costs.time_s[:, 0]
    # each layer: its nodes plus the mark that closes it, scaled to the unmarked whole
    np.testing.assert_allclose(t, (counts + 0.5) * whole / marked)
    assert t.sum() == pytest.approx(prof.meta["whole_model"]["time_s"])
    assert abs(prof.meta["gap"]) < 1e-9
    assert "inside the whole-model pass" in prof.costs.sources["torch-cpu"]


def test_torch_is_timed_on_a_ranks_threads_and_given_back_its_own(monkeypatch):
    """The runtime's GPU worker runs the interpreter with torch on one thread (``torch_threads``); a
    launch-bound model's small host ops pay a thread pool's wake-ups, so the profiler times it the same way."""
    import torch

    from hetsplit.graph.torch_interpreter import TorchInterpreter

    seen: set[int] = set()
    step = TorchInterpreter.step

    def counted(env: dict[str, Any], node: Any) -> None:
        seen.add(torch.get_num_threads())
        step(env, node)

    monkeypatch.setattr(TorchInterpreter, "step", staticmethod(counted))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        graph, onnx_file, zoo_name = load_for_profiling("resnet8")
        with runnable_onnx(graph, onnx_file, zoo_name) as path:
            prof = profile_onnx_torch(graph, path, device="cpu", device_type="torch-cpu", warmup=1, repeats=2,
                                      clock=PassClock(per_node=1.0, per_mark=0.5))
        assert seen == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert prof.meta["torch_threads"] == 1 and "torch on 1 thread as a rank" in prof.costs.sources["torch-cpu"]


def test_unmarked_scales_by_the_median_pass_and_leaves_a_clean_pass_alone():
    per_run = np.array([[1.0, 3.0], [2.0, 2.0], [1.0, 5.0]])     # passes of 4, 4 and 6 s
    scaled, meta = unmarked(per_run, [2.0, 2.0, 3.0])
    assert meta["layer_scale"] == pytest.approx(0.5)
    np.testing.assert_allclose(scaled, per_run * 0.5)
    same, meta = unmarked(per_run, [4.0])
    assert meta["layer_scale"] == 1.0
    np.testing.assert_array_equal(same, per_run)


def test_the_device_clock_reuses_its_events_after_each_pass():
    from hetsplit.costs.profiler.torch_cuda import DeviceClock

    made: list[object] = []

    class FakeEvent:
        def __init__(self, enable_timing: bool) -> None:
            made.append(self)

        def record(self) -> None:
            pass

    class FakeCuda:
        Event = FakeEvent

        @staticmethod
        def synchronize() -> None:
            pass

    class FakeTorch:
        cuda = FakeCuda

    clock = DeviceClock(FakeTorch, "cuda")
    for _ in range(3):
        stamps = [clock.mark() for _ in range(5)]
        clock.sync()
        assert len(set(map(id, stamps))) == 5
    assert len(made) == 5
