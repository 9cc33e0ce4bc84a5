"""The PyTorch backend (used for GPU devices) computes what onnxruntime computes; run here on the CPU."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from hetsplit.errors import RuntimeFailure
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime import split_model
from hetsplit.runtime.executor import SegmentSpec
from hetsplit.runtime.gpu import TorchCudaExecutor, TorchExecutor
from hetsplit.runtime.toy import toy_model


def sub_models(tmp_path, graph, path, bounds):
    plan = Plan(graph.name, "t", "hand", [Stage(f"gpu{i}", graph.names[a:b])
                                         for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))])
    return split_model(plan, graph, path, tmp_path / "split")


@pytest.mark.parametrize("model", ["toy", "resnet18"])
def test_torch_backend_matches_onnxruntime(tmp_path, model):
    if model == "toy":
        path = tmp_path / "toy.onnx"
        graph = toy_model(path)
    else:
        from hetsplit.runtime import resolve_model

        graph, path = resolve_model(model)
    half = graph.num_layers // 2
    m = sub_models(tmp_path, graph, path, [0, half, graph.num_layers])
    rng = np.random.default_rng(0)
    for w in m.stages:
        (seg,) = w.segments
        spec = SegmentSpec.of(w.device, seg)
        feed = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in seg.inputs}
        ref = ort.InferenceSession(str(m.submodel_path(w.rank, 0)), providers=["CPUExecutionProvider"]).run(
            spec.output_names, feed)
        out = TorchExecutor(m.submodel_path(w.rank, 0), spec, "cpu").run(feed)
        for name, r in zip(spec.output_names, ref):
            np.testing.assert_allclose(out[name], r, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_gpu_device_without_cuda_is_a_clear_failure(tmp_path):
    path = tmp_path / "toy.onnx"
    graph = toy_model(path)
    m = sub_models(tmp_path, graph, path, [0, graph.num_layers])
    with pytest.raises(RuntimeFailure, match="gpu0 is a GPU but this host has no CUDA"):
        TorchCudaExecutor(m.submodel_path(1, 0), SegmentSpec.of("gpu0", m.stages[0].segments[0]))


def test_a_gpu_ranks_receive_buffers_come_from_its_allocator():
    """A GPU rank's pool allocates page-locked buffers where CUDA is (``host_allocator``), plain ones
    without; each buffer is allocated once and reused."""
    from hetsplit.runtime.gpu import host_allocator, pinned_empty
    from hetsplit.runtime.manifest import TensorSpec
    from hetsplit.runtime.wire import HostViews
    from hetsplit.runtime.worker import BufferPool

    assert host_allocator() is (pinned_empty if torch.cuda.is_available() else TensorSpec.empty)
    made = []

    def allocate(spec):
        made.append(spec)
        return spec.empty()

    pool = BufferPool(HostViews(), allocate)
    spec = TensorSpec("x", (4, 8), "float32")
    frame = pool.frame()
    a = pool.empty(spec)
    pool.retire(frame, 0)
    pool.recycle(0)
    pool.frame()
    assert pool.empty(spec) is a and made == [spec]
