"""Executors behind one interface: which backend a device gets on which host, and a GPU device's worker
running through that interface (a fake ``torch-cuda`` backend computing on the CPU: this machine has no
GPU), driver and workers as threads of this process over real gloo, every output verified."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest

from hetsplit.errors import RuntimeFailure
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime import executor, split_model
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.driver import run_driver
from hetsplit.runtime.executor import ORT_CPU, ORT_CUDA, TORCH_CUDA, Host, SegmentSpec, choose_backend
from hetsplit.runtime.gpu import TorchExecutor
from hetsplit.runtime.toy import toy_model
from hetsplit.runtime.worker import run_worker

pytestmark = pytest.mark.timeout(120)
CPU_HOST = Host(False, ("CPUExecutionProvider",))
CUDA_TORCH_ONLY = Host(True, ("CPUExecutionProvider",))
CUDA_ORT = Host(True, ("CUDAExecutionProvider", "CPUExecutionProvider"))


@pytest.mark.parametrize("kind, host, cpu_only, backend", [
    ("cpu", CUDA_ORT, False, ORT_CPU),          # a CPU device stays on the CPU, whatever the host has
    ("gpu", CUDA_ORT, False, ORT_CUDA),         # onnxruntime's CUDA provider where installed
    ("gpu", CUDA_TORCH_ONLY, False, TORCH_CUDA),  # else the PyTorch interpreter on CUDA
    ("gpu", CPU_HOST, False, ORT_CPU),          # no CUDA on this host: the CPU
    ("gpu", CUDA_ORT, True, ORT_CPU),           # --cpu-only
    ("gpu", CUDA_TORCH_ONLY, True, ORT_CPU),
])
def test_a_device_gets_its_backend_by_kind_host_and_cpu_only(kind, host, cpu_only, backend):
    assert choose_backend(kind, host, cpu_only) == backend
    assert backend in executor.BACKENDS


class FakeCuda(TorchExecutor):
    """The torch-cuda backend as the worker sees it (on_gpu, keep), computing on the CPU; records its devices."""

    made: list[str] = []

    def __init__(self, path, spec: SegmentSpec):
        super().__init__(path, spec, "cpu")
        self.on_gpu = True
        FakeCuda.made.append(spec.device)


@pytest.fixture()
def split(tmp_path):
    path = tmp_path / "toy.onnx"
    graph = toy_model(path)
    n = graph.names
    plan = Plan(graph.name, "local", "hand", [Stage("cpu0", n[:4]), Stage("gpu0", n[4:])])
    return split_model(plan, graph, path, tmp_path / "split")


def run_in_threads(manifest, cfg: RunConfig, run_dir, host: Host) -> dict[int, dict]:
    """The driver and every worker as threads of this process (``host``: what the workers find on it)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    docs: dict[int, dict] = {}
    errors: list[BaseException] = []

    def go(rank: int, cfg: RunConfig) -> None:
        try:
            docs[rank] = run_driver(cfg, manifest, run_dir) if rank == 0 else \
                run_worker(cfg, manifest, rank, run_dir, host)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(0, cfg), daemon=True)]
    threads[0].start()
    port = run_dir / "port.txt"
    while not port.exists() and threads[0].is_alive():
        time.sleep(0.02)
    joined = replace(cfg, master_port=int(port.read_text()))
    threads += [threading.Thread(target=go, args=(r, joined), daemon=True) for r in range(1, manifest.world_size)]
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(90)
    if errors:
        raise errors[0]
    return docs


@pytest.mark.parametrize("cpu_only", [False, True])
def test_a_gpu_device_computes_through_the_gpu_backend_unless_cpu_only(split, tmp_path, monkeypatch, cpu_only):
    from hetsplit.runtime import nccl

    FakeCuda.made = []
    monkeypatch.setitem(executor.BACKENDS, TORCH_CUDA, lambda path, spec, threads: FakeCuda(path, spec))
    monkeypatch.setattr(nccl, "use_gpu_of", lambda rank: None)     # no CUDA device to make current here
    cfg = RunConfig(str(split.directory / "manifest.json"), inputs=4, latency_inputs=1, timeout_s=20,
                    startup_timeout_s=30, kinds={"cpu0": "cpu", "gpu0": "gpu"}, cpu_only=cpu_only)
    docs = run_in_threads(split, cfg, tmp_path / "run", CUDA_TORCH_ONLY)
    assert docs[0]["verify"]["ok"] and docs[0]["verify"]["outputs_checked"] == 4
    assert (docs[1]["executor"], docs[1]["kind"]) == (ORT_CPU, "cpu")
    if cpu_only:
        assert (docs[2]["executor"], docs[2]["kind"]) == (ORT_CPU, "cpu") and FakeCuda.made == []
    else:
        assert (docs[2]["executor"], docs[2]["kind"]) == (TORCH_CUDA, "gpu") and FakeCuda.made == ["gpu0"]


def test_a_gpu_device_on_a_host_without_cuda_computes_on_the_cpu(split, tmp_path):
    cfg = RunConfig(str(split.directory / "manifest.json"), inputs=2, latency_inputs=1, timeout_s=20,
                    startup_timeout_s=30, kinds={"gpu0": "gpu"})
    docs = run_in_threads(split, cfg, tmp_path / "run", CPU_HOST)
    assert docs[0]["verify"]["ok"] and (docs[2]["executor"], docs[2]["kind"]) == (ORT_CPU, "cpu")


def test_a_sub_model_from_another_split_is_refused_by_every_backend(split):
    w = split.worker(2)
    wrong = SegmentSpec.of(w.device, split.worker(1).segments[0])
    for make in (lambda: executor.OrtExecutor(split.submodel_path(2, 0), wrong),
                 lambda: TorchExecutor(split.submodel_path(2, 0), wrong, "cpu")):
        with pytest.raises(RuntimeFailure, match="gpu0: sub-model .* does not match the manifest"):
            make()


def test_cli_run_passes_each_devices_kind_and_cpu_only_to_the_workers(tmp_path, capsys):
    from hetsplit.cli.main import main
    from hetsplit.plan.io import save_plan

    path = tmp_path / "toy.onnx"
    graph = toy_model(path)
    (tmp_path / "c.yaml").write_text(
        "name: mixed\ndevices:\n"
        "  - {name: cpu0, type: cpu, kind: cpu, memory: 8GiB, peak_macs: 1e10/s}\n"
        "  - {name: gpu0, type: gpu, kind: gpu, memory: 8GiB, peak_macs: 1e12/s}\n"
        "links:\n  default: {bandwidth: 1GB/s}\n")
    n = graph.names
    save_plan(Plan(graph.name, "mixed", "hand", [Stage("cpu0", n[:4]), Stage("gpu0", n[4:])]), tmp_path / "p.json")
    for flags in ([], ["--cpu-only"]):
        run_dir = tmp_path / f"run{len(flags)}"
        assert main(["run", str(tmp_path / "p.json"), str(path), "--cluster", str(tmp_path / "c.yaml"), "-n", "2",
                     "--timeout", "20", "--run-dir", str(run_dir)] + flags) == 0
        cfg = json.loads((run_dir / "config.json").read_text())
        assert cfg["kinds"] == {"cpu0": "cpu", "gpu0": "gpu"} and cfg["cpu_only"] == bool(flags)
        gpu = json.loads((run_dir / "rank2.json").read_text())
        backend = choose_backend("gpu", Host.here(), bool(flags))          # ORT_CPU where no CUDA is visible
        on_gpu = backend != ORT_CPU
        assert (gpu["executor"], gpu["kind"]) == (backend, "gpu" if on_gpu else "cpu")
        err = capsys.readouterr().err
        assert ("no CUDA GPU here; device gpu0 computes on the CPU" in err) == (not flags and not on_gpu)
