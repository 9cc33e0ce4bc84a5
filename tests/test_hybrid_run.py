"""The best hybrid plans of an exploration (LOP-split conv and FC layers) run for real on local workers:
one process per worker, every output verified against the unsplit model, the prediction for this
machine beside the measurement (experiments.hybrid_run). No timing is asserted, only that both sides
are filled and describe the run that happened.
"""

from __future__ import annotations

import math
import warnings

import pytest

from hetsplit.costs.build import build_cost_table
from hetsplit.costs.profile import Profile
from hetsplit.experiments.hybrid_run import HybridRunOptions, run_best_hybrid_plans, worker_names
from hetsplit.cluster.local import local_cluster
from hetsplit.runtime import resolve_model

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


class ConvFC(nn.Module):
    """Two convolutions and two fully connected layers: the kinds the hybrid chromosomes split."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1)
        self.f1, self.f2 = nn.Linear(32 * 4 * 4, 256), nn.Linear(256, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(torch.flatten(x, 1))))


def _export(path) -> str:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ConvFC().eval(), (torch.randn(1, 3, 16, 16),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    return str(path)


def _roofline_profile(model: str) -> Profile:
    """The local-cpu device model's costs: deterministic, so the seeded exploration finds the same plans
    every time (a profile measured here is noisy, and the plans would vary with it)."""
    graph, _ = resolve_model(model)
    return Profile(graph, build_cost_table(graph, local_cluster(worker_names(1))), {"source": "local-cpu roofline"})


def _positive(x) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def test_best_hybrid_plans_with_split_conv_and_fc_run_verified_on_local_workers(tmp_path):
    model = _export(tmp_path / "convfc.onnx")
    opts = HybridRunOptions(model=model, workers=3, encodings=("advanced",), splits=(2,), pop_size=32,
                            generations=10, seed=0, inputs=8, latency_inputs=2, profile=_roofline_profile(model),
                            baseline_rss=False)
    rows = run_best_hybrid_plans(opts)

    assert rows and all(r.encoding == "advanced p=2" for r in rows)
    assert {o for r in rows for o in r.best} == {"energy-per-device", "memory-per-device", "latency"}
    split = [r for r in rows if r.split_layers]
    hybrid = [r for r in split if {"Conv", "Gemm"} <= {name.split("/")[-1] for name in r.split_layers}]
    assert hybrid, [r.split_layers for r in rows]     # one plan splits a conv and an FC layer
    for r in split:                     # LOP: output-channel shards on distinct workers, joined by a concat
        for name in r.split_layers:
            shards = r.plan.assign[name]
            assert {s.axis for s in shards} == {"out"} and len({s.device for s in shards}) >= 2
            assert r.plan.combine[name].kind == "concat"
    for r in rows:
        assert len(r.plan.devices) <= 3
        assert r.outputs_checked == opts.inputs and 0.0 <= r.max_abs_err < 1e-4
        assert _positive(r.predicted_latency_s) and _positive(r.simulated_latency_s)
        assert _positive(r.measured_latency_s)
        assert _positive(r.predicted_throughput) and _positive(r.measured_throughput)
        assert _positive(r.predicted_memory_per_device_bytes) and _positive(r.measured_memory_per_device_bytes)
        assert r.memory_baseline_bytes is None
        assert (r.measured_energy_per_device_j is None) == any(n.startswith("energy: not measured") for n in r.notes)
        assert r.predicted_latency_s == pytest.approx(r.plan.metrics.latency_s)
