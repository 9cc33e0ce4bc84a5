"""``run_plan``: split a plan, start the driver and one worker process per device (the same program for
every plan kind), stream inputs, measure and verify."""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hetsplit.cluster.types import Cluster
from hetsplit.errors import UsageError
from hetsplit.graph.types import Graph
from hetsplit.plan.types import Plan
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.device_emulation import DeviceEmulation, emulated_metrics
from hetsplit.runtime.hosts import DEFAULT_PORT, HostMap
from hetsplit.runtime.launch import Launcher
from hetsplit.runtime.manifest import Manifest, load_manifest
from hetsplit.runtime.measure import RunReport, summarize
from hetsplit.runtime.split import split_model


@dataclass
class RunOptions:
    """How to run (the CLI's flags); ``links`` turns on link emulation (see ``runtime.netem``); ``kinds``
    (device -> cpu | gpu) lets a GPU device compute on its host's GPU, unless ``cpu_only``."""

    inputs: int = 8
    latency_inputs: int = 2
    timeout_s: float = 60.0
    startup_timeout_s: float = 120.0
    port: int = 0
    seed: int = 0
    depth: int = 2
    threads: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    cpu_only: bool = False
    run_dir: Path | None = None
    links: object | None = None          # runtime.netem.LinkMatrix for emulated links
    verify: bool = True
    hosts: HostMap | None = None         # multi-host: where each device runs ...
    node: str = ""                       # ... and which host this command is
    faults: dict[str, dict] = field(default_factory=dict)  # rank -> {"kind": die|stall, "after": k} (rehearsal)
    pin: bool = False                    # pin each worker to its own CPUs (as many as its threads)
    devices: DeviceEmulation | None = None   # throttle each worker to its device's speed (runtime.device_emulation)

    def __post_init__(self) -> None:
        if not self.inputs >= 1:
            raise UsageError(f"--inputs {self.inputs}: a run streams at least 1 input (with none, nothing is "
                             "measured or verified)")
        if not self.latency_inputs >= 0:
            raise UsageError(f"--latency-inputs {self.latency_inputs}: give 0 or more inputs sent one at a time")
        if not self.timeout_s > 0:
            raise UsageError(f"--timeout {self.timeout_s}: give a number of seconds > 0")


def make_config(manifest_path: Path, opts: RunOptions) -> RunConfig:
    return RunConfig(str(manifest_path), inputs=opts.inputs, latency_inputs=opts.latency_inputs,
                     timeout_s=opts.timeout_s, startup_timeout_s=opts.startup_timeout_s, master_port=opts.port,
                     seed=opts.seed, depth=opts.depth, threads=dict(opts.threads), kinds=dict(opts.kinds),
                     cpu_only=opts.cpu_only, verify=opts.verify, faults=dict(opts.faults))


def pin_cpus(manifest: Manifest, threads: dict[str, int]) -> dict[str, list[int]]:
    """Give each device's worker its own CPUs of this process's affinity, in rank order (cyclic when
    there are fewer CPUs than threads); the driver, mostly idle, is not pinned."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    out, k = {}, 0
    for w in manifest.stages:
        n = max(1, int(threads.get(w.device, 1)))
        out[str(w.rank)] = sorted({cpus[(k + j) % len(cpus)] for j in range(n)})
        k += n
    return out


def run_manifest(manifest: Manifest, opts: RunOptions) -> RunReport | None:
    """Run an already split plan (its manifest) on this host; raises RuntimeFailure on any fault.

    In a multi-host run (``opts.hosts``) this starts only the ranks placed on ``opts.node`` and
    returns the report on the host running the driver, None on the others.
    """
    with contextlib.ExitStack() as stack:
        run_dir = opts.run_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hetsplit-run-")))
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg = make_config(Path(manifest.directory or ".") / "manifest.json", opts)
        if opts.pin:
            cfg.cpus = pin_cpus(manifest, cfg.threads)
        wraps = []
        throttle = None
        if opts.devices is not None:
            throttle = stack.enter_context(_throttle(manifest, opts.devices))
            cfg.cgroups = throttle.procs_files()
        if opts.links is not None:
            from hetsplit.runtime.netem import Emulation

            links = opts.links.dilated(opts.devices.dilation) if opts.devices is not None else opts.links
            emu = stack.enter_context(Emulation(manifest, links))
            cfg.master_addr = emu.addr(0)
            cfg.addrs = {str(r): emu.addr(r) for r in range(manifest.world_size)}
            cfg.delays_s = emu.in_process_delays()
            wraps.append(emu.wrap)
        wrap = (lambda rank: [w for f in wraps for w in f(rank)]) if wraps else None
        ranks = None
        if opts.hosts is not None:  # one host of a multi-host run: its own ranks, the shared rendezvous
            ranks = opts.hosts.ranks_on(manifest, opts.node)
            cfg.master_addr, cfg.addrs = opts.hosts.master, opts.hosts.addrs(manifest)
            cfg.master_port = opts.port or DEFAULT_PORT
        docs = Launcher(manifest, cfg, run_dir, ranks=ranks, wrap=wrap).run()
        if 0 not in docs:
            return None
        report = summarize(manifest, docs)
        report.extra["run_dir"] = str(run_dir) if opts.run_dir else None
        if opts.links is not None:
            report.extra["emulation"] = emu.describe()
        if throttle is not None and opts.devices is not None:
            report.extra["device_emulation"] = {**opts.devices.describe(), **throttle.describe()}
            report.extra["emulated"] = emulated_metrics(report.to_dict(), opts.devices.dilation)
        return report


def _throttle(manifest: Manifest, devices: DeviceEmulation):
    """The CPU throttle of a run's worker ranks (never the driver's) at their devices' shares."""
    from hetsplit.runtime.cpu_throttle import CpuThrottle

    shares = {w.rank: devices.shares[w.device] for w in manifest.stages
              if w.rank != 0 and w.device in devices.shares}
    return CpuThrottle(shares)


def run_plan(plan: Plan, graph: Graph, model_path: str | Path, opts: RunOptions | None = None,
             split_dir: str | Path | None = None, cluster: Cluster | None = None) -> RunReport | None:
    """Split ``plan`` (into ``split_dir`` or a temporary directory; its devices checked against
    ``cluster`` when given) and run it on this host."""
    opts = opts or RunOptions()
    with contextlib.ExitStack() as stack:
        out = Path(split_dir) if split_dir else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="hetsplit-split-")))
        split_model(plan, graph, model_path, out, cluster=cluster)
        return run_manifest(load_manifest(out), opts)


def resolve_model(spec: str) -> tuple[Graph, Path]:
    """The Graph and the full ONNX file (with weights) of a zoo name or an .onnx path."""
    from hetsplit.errors import ModelError
    from hetsplit.graph import zoo
    from hetsplit.graph.onnx_import import load_onnx

    path = Path(spec)
    if path.is_file():
        return load_onnx(path), path
    if spec in zoo.names():
        full = zoo.onnx_path(spec)
        return load_onnx(full, name=spec), full
    raise ModelError(f"{spec!r} is neither an ONNX file nor a zoo model; zoo models are {', '.join(zoo.names())}")

