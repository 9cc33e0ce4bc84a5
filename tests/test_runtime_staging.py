"""Where a GPU device's tensors live between its segments, and the worker's per-call bookkeeping.

This machine has no GPU: the ``torch-cuda`` executor runs on CPU torch (its CUDA-only steps, page-locked
buffers and events, are the only parts not run). What is checked is the routing: which outputs are
copied to host memory and which stay device tensors, that a later segment of the device reads the
latter as they are, and that the outputs are those onnxruntime computes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from hetsplit.plan.types import Plan
from hetsplit.runtime import executor, split_model
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.executor import TORCH_CUDA, SegmentSpec, Staged, as_numpy
from hetsplit.runtime.gpu import TorchExecutor
from hetsplit.runtime.manifest import TensorSpec
from hetsplit.runtime.toy import toy_model
from hetsplit.runtime.wire import HostViews
from hetsplit.runtime.worker import BufferPool, dropped_after, output_routes, still_read

pytestmark = pytest.mark.timeout(180)


# the toy's layers: stem, b0_conv1, b0_conv2, b0_add (reads stem's), b1_conv1, b1_conv2, b1_add (reads stem's
# and b0_add's), pool, fc. Here gpu0 runs stem | b0_add | b1_add, pool: its later segments read what its
# earlier ones made (stem's and b0_add's outputs, also sent to cpu0), and pool's output leaves only.
GPU_KEEPS = ("gpu0", "cpu0", "cpu0", "gpu0", "cpu0", "cpu0", "gpu0", "gpu0", "cpu0")


def mapped(tmp_path, devices=GPU_KEEPS, name="split"):
    """The toy CNN with layer ``k`` on ``devices[k % len(devices)]``."""
    path = tmp_path / "toy.onnx"
    graph = toy_model(path)
    plan = Plan(graph.name, "local", "hand", assign={n: devices[k % len(devices)] for k, n in enumerate(graph.names)})
    return split_model(plan, graph, path, tmp_path / name)


class Recording(TorchExecutor):
    """The torch-cuda backend on the CPU, recording what it copies to the host and how its inputs came."""

    copied: list[str] = []
    fed: dict[str, str] = {}

    def __init__(self, path, spec: SegmentSpec):
        super().__init__(path, spec, "cpu")
        self.on_gpu = True

    def to_host(self, name, t):
        Recording.copied.append(name)
        return super().to_host(name, t)

    def call(self, local):
        for name in self.inputs:
            x = local[name]
            Recording.fed[name] = "device" if isinstance(x, torch.Tensor) or (isinstance(x, Staged) and
                                                                             x.device is not None) else "host"
        super().call(local)


def test_routes_keep_what_the_device_reads_and_copy_what_leaves_it(tmp_path):
    m = mapped(tmp_path)
    rank = next(w.rank for w in m.stages if w.device == "gpu0")
    device, host = output_routes(m, rank, lambda edge: False)
    read_here = {t.name for s in m.worker(rank).segments for t in s.inputs}
    sent = {t.source for msg in m.messages if msg.src_rank == rank for t in msg.tensors}
    outputs = {t.name for s in m.worker(rank).segments for t in s.outputs}
    assert outputs & read_here and outputs & sent        # both kinds occur, so the checks below can fail
    assert device == read_here and host == sent
    # every peer but the driver a GPU over NCCL: only what goes back to the driver leaves through the host
    nccl_device, nccl_host = output_routes(m, rank, lambda edge: edge.rank != 0)
    to_driver = {t.source for msg in m.messages if msg.src_rank == rank and msg.dst_rank == 0 for t in msg.tensors}
    to_peers = {t.source for msg in m.messages if msg.src_rank == rank and msg.dst_rank != 0 for t in msg.tensors}
    assert nccl_device == read_here | to_peers and nccl_host == to_driver


def test_torch_executor_keeps_device_outputs_and_stages_host_ones(tmp_path):
    m = mapped(tmp_path)
    w = next(w for w in m.stages if w.device == "gpu0")
    seg = w.segments[0]
    spec = SegmentSpec.of(w.device, seg)
    rng = np.random.default_rng(0)
    feed = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in seg.inputs}
    (out,) = spec.output_names
    ref = ort.InferenceSession(str(m.submodel_path(w.rank, 0)), providers=["CPUExecutionProvider"]).run([out], feed)[0]
    for device, host, kind in [({out}, set(), "device"), (set(), {out}, "host"), ({out}, {out}, "both"),
                               (set(), set(), "host")]:
        exe = TorchExecutor(m.submodel_path(w.rank, 0), spec, "cpu")
        copies = []
        exe.to_host = lambda name, t, real=exe.to_host: copies.append(name) or real(name, t)
        exe.route(device, host)
        local = dict(feed)
        exe.call(local)
        got = local[out]
        if kind == "device":
            assert isinstance(got, torch.Tensor) and copies == []
        else:
            assert isinstance(got, Staged) and copies == [out]
            assert (got.device is None) == (kind == "host")
            assert isinstance(got.host, np.ndarray)
        np.testing.assert_allclose(as_numpy(got), ref, rtol=1e-4, atol=1e-4)
        # a next segment of the device reads it as it is: the same result as from a host array
        again = TorchExecutor(m.submodel_path(w.rank, 0), spec, "cpu")
        np.testing.assert_allclose(again.run({seg.inputs[0].name: torch.from_numpy(feed[seg.inputs[0].name])})[out],
                                   ref, rtol=1e-4, atol=1e-4)


def test_a_staged_host_copy_waits_for_its_copy_once():
    waits = []
    s = Staged(None, np.zeros(3, np.float32), lambda: waits.append(1))
    assert waits == []                       # nothing waits until the host copy is read
    assert as_numpy(s) is s.host and waits == [1]


def test_a_gpu_device_keeps_its_tensors_between_its_segments(tmp_path, monkeypatch):
    """A run, driver and workers as threads over real gloo, gpu0 on the torch backend (on the CPU): what
    gpu0 copies to the host is exactly what leaves it, what a later segment of gpu0 reads never went to
    the host, and every output is verified against the whole model."""
    from test_runtime_executor import CUDA_TORCH_ONLY, run_in_threads

    from hetsplit.runtime import nccl

    m = mapped(tmp_path)
    Recording.copied, Recording.fed = [], {}
    monkeypatch.setitem(executor.BACKENDS, TORCH_CUDA, lambda path, spec, threads: Recording(path, spec))
    monkeypatch.setattr(nccl, "use_gpu_of", lambda rank: None)
    inputs = 3
    cfg = RunConfig(str(m.directory / "manifest.json"), inputs=inputs, latency_inputs=1, timeout_s=20,
                    startup_timeout_s=30, kinds={"cpu0": "cpu", "gpu0": "gpu"})
    docs = run_in_threads(m, cfg, tmp_path / "run", CUDA_TORCH_ONLY)
    assert docs[0]["verify"]["ok"] and docs[0]["verify"]["outputs_checked"] == inputs
    rank = next(w.rank for w in m.stages if w.device == "gpu0")
    assert docs[rank]["executor"] == TORCH_CUDA
    segs = m.worker(rank).segments
    outputs = [t.name for s in segs for t in s.outputs]
    sent = {t.source for msg in m.messages if msg.src_rank == rank for t in msg.tensors}
    made_here = set(outputs)
    # the load's warm-up copies every output once (unrouted); the stream then only what leaves
    per_input = sorted(n for n in outputs if n in sent)
    assert sorted(Recording.copied) == sorted(outputs + per_input * inputs)
    read_here = {t.name for s in segs for t in s.inputs} & made_here
    assert read_here and all(Recording.fed[n] == "device" for n in read_here)
    received = {t.name for s in segs for t in s.inputs} - made_here
    assert received and all(Recording.fed[n] == "host" for n in received)


def test_a_gpu_ranks_receive_buffers_wait_for_the_device_before_reuse():
    """With a fence (a GPU rank's: its copies from these buffers are asynchronous), a retired frame comes
    back only once the fence says the device is done with it; meanwhile the pool allocates another."""
    done = {"flag": False}
    pool = BufferPool(HostViews())
    pool.fence = lambda: (lambda: done["flag"])
    spec = TensorSpec("x", (2, 3), "float32")
    frame = pool.frame()
    a = pool.empty(spec)
    pool.retire(frame, 0)
    pool.recycle(0)                   # its sends are done, the device is not
    pool.frame()
    b = pool.empty(spec)
    assert b is not a
    done["flag"] = True
    pool.recycle(0)
    pool.frame()
    assert pool.empty(spec) is a


@pytest.mark.parametrize("devices", [GPU_KEEPS, ("cpu0", "gpu0"), ("a", "b", "c")])
def test_dropped_after_is_what_the_worker_used_to_work_out_each_step(tmp_path, devices):
    """The tensors dropped after each segment, worked out once at load, are those the worker dropped
    when it looked at each input's tensors after every step (all held, less what a later segment reads
    or sends)."""
    m = mapped(tmp_path, devices)
    for w in m.stages:
        needed = still_read(m, w.rank)
        held: set[str] = set()
        want = []
        for seg, keep in zip(w.segments, needed):
            held |= {t.spec.name for mid in seg.recv for t in m.message(mid).tensors}
            held |= {t.name for t in seg.outputs}
            want.append(tuple(sorted(x for x in held if x not in keep)))
            held = {x for x in held if x in keep}
        assert dropped_after(m, w.rank) == want
        assert any(want)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_consecutive_segments_of_a_device_always_have_a_message_between_them(tmp_path, seed):
    """A device's segment starts only where a task reads a tensor another device made at or after the
    current segment's first task (``TaskGraph.segments``), and that message is received there: so no two
    consecutive segments of one device could run as one call without a message between them."""
    path = tmp_path / "toy.onnx"
    graph = toy_model(path)
    rng = np.random.default_rng(seed)
    devices = ["d0", "d1", "d2"]
    plan = Plan(graph.name, "local", "random", assign={n: devices[int(rng.integers(3))] for n in graph.names})
    m = split_model(plan, graph, path, tmp_path / "split")
    cuts = 0
    for w in m.stages:
        for seg in w.segments[1:]:
            assert seg.recv, f"{w.device} segment {seg.index} receives nothing"
            cuts += 1
    assert cuts > 0 or all(len(w.segments) == 1 for w in m.stages)


def test_a_gpu_ranks_messages_read_the_host_copy_over_gloo_and_the_device_tensor_over_nccl():
    from hetsplit.runtime.worker import DeviceView, HostView

    dev, host = torch.ones(2), np.full(2, 1.0, np.float32)
    local = {"both": Staged(dev, host, None), "host": Staged(None, host, None), "dev": dev, "recv": host}
    over_gloo, over_nccl = HostView(local), DeviceView(local)
    assert over_gloo["both"] is host and over_gloo["host"] is host and over_gloo["recv"] is host
    assert isinstance(over_gloo["dev"], np.ndarray)
    assert over_nccl["both"] is dev and over_nccl["dev"] is dev and over_nccl["host"] is host
