"""``run_plan``: split a plan, start the driver and one worker process per device (the same program for
every plan kind), stream inputs, measure and verify."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from hetsplit.cluster.types import Cluster
from hetsplit.errors import RuntimeFailure, UsageError
from hetsplit.graph.types import Graph
from hetsplit.plan.types import Plan
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.device_emulation import DeviceEmulation
from hetsplit.runtime.hosts import HostMap, Hosted, WorkerCommand, mapping_handout
from hetsplit.runtime.rendezvous import check_port
from hetsplit.runtime.launch import Launcher
from hetsplit.runtime.leftovers import remove_leftovers
from hetsplit.runtime.manifest import Manifest, load_manifest
from hetsplit.runtime.measure import summarize
from hetsplit.runtime.report import EmulatedRun, RunReport
from hetsplit.runtime.split import split_model

if TYPE_CHECKING:     # imported where used: netem needs Linux network tools, the pool is optional
    from hetsplit.runtime.netem import LinkMatrix
    from hetsplit.runtime.pool import WorkerPool


@dataclass(frozen=True)
class RunOptions:
    """How to run (the CLI's flags), built once; ``links`` turns on link emulation (see ``runtime.netem``);
    ``kinds`` (device -> cpu | gpu) lets a GPU device compute on its host's GPU, unless ``cpu_only``;
    ``run_dir`` keeps the processes' logs and records (without it they go to a temporary folder, removed
    after a run that succeeds and kept after one that fails, whose message names its logs)."""

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
    links: LinkMatrix | None = None      # emulated links
    verify: bool = True
    hosts: HostMap | None = None         # devices run by `hetsplit worker` on other hosts (runtime.hosts) ...
    announce: Callable[[list[WorkerCommand]], None] | None = None   # ... told their commands once served
    faults: dict[str, dict] = field(default_factory=dict)  # rank -> {"kind": die|stall, "after": k} (rehearsal)
    pin: bool = False                    # pin each worker to its own CPUs (as many as its threads)
    devices: DeviceEmulation | None = None   # throttle each worker to its device's speed (runtime.device_emulation)
    pool: WorkerPool | None = None       # run the ranks in its warm processes

    def __post_init__(self) -> None:
        if not self.inputs >= 1:
            raise UsageError(f"--inputs {self.inputs}: a run streams at least 1 input (with none, nothing is "
                             "measured or verified)")
        if not self.latency_inputs >= 0:
            raise UsageError(f"--latency-inputs {self.latency_inputs}: give 0 or more inputs sent one at a time")
        if not self.timeout_s > 0:
            raise UsageError(f"--timeout {self.timeout_s}: give a number of seconds > 0")
        check_port(self.port)
        if self.hosts is not None and (self.links is not None or self.devices is not None):
            raise UsageError("--hosts runs devices on other machines; --emulate-links and --emulate-devices shape "
                             "this machine's own processes and do not combine with it")


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


def run_manifest(manifest: Manifest, opts: RunOptions) -> RunReport:
    """Run an already split plan (its manifest); raises RuntimeFailure on any fault. With ``opts.hosts`` the
    devices it names run on other hosts (``runtime.hosts``: one ``hetsplit worker`` each), the rest here."""
    removed = remove_leftovers()   # what earlier runs of this tool, killed, left (their own names only)
    run_dir = Path(opts.run_dir) if opts.run_dir else Path(tempfile.mkdtemp(prefix="hetsplit-run-"))
    try:
        report = _run(manifest, opts, run_dir)
    except BaseException as exc:
        if opts.run_dir is None and not (isinstance(exc, RuntimeFailure) and str(run_dir) in str(exc)):
            shutil.rmtree(run_dir, ignore_errors=True)     # kept when the message names a log in it
        raise
    if opts.run_dir is None:
        shutil.rmtree(run_dir, ignore_errors=True)
    return replace(report, run_dir=str(run_dir) if opts.run_dir else None, removed_leftovers=removed)


def _run(manifest: Manifest, opts: RunOptions, run_dir: Path) -> RunReport:
    """``run_manifest`` in ``run_dir``: its logs and records."""
    with contextlib.ExitStack() as stack:
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg = make_config(Path(manifest.directory or ".") / "manifest.json", opts)
        if opts.pin:
            cfg.cpus = pin_cpus(manifest, cfg.threads)
        wraps = []
        throttle = None
        if opts.devices is not None:
            throttle = stack.enter_context(_throttle(manifest, opts.devices))
            cfg.cgroups = throttle.procs_files()
        emu = None
        if opts.links is not None:
            from hetsplit.runtime.netem import Emulation

            links = opts.links.dilated(opts.devices.dilation) if opts.devices is not None else opts.links
            emu = stack.enter_context(Emulation(manifest, links))
            wraps.append(emu.apply(cfg))
        wrap = (lambda rank: [w for f in wraps for w in f(rank)]) if wraps else None
        ranks, peers = None, None
        if opts.hosts is not None:
            if opts.pool is not None:
                raise UsageError("a pooled run keeps its warm processes on this host; run across hosts without the pool")
            opts.hosts.check(manifest)
            remote = sorted(opts.hosts.remote_ranks(manifest))
            peers = Hosted(manifest, opts.hosts, mapping_handout(manifest, Path(cfg.manifest), remote), opts.announce)
            ranks = [r for r in range(manifest.world_size) if r not in peers.remote]
        launcher: Launcher
        if opts.pool is not None:
            launcher = opts.pool.launcher(manifest, cfg, run_dir, ranks=ranks, wrap=wrap)
        else:
            launcher = Launcher(manifest, cfg, run_dir, ranks=ranks, wrap=wrap, peers=peers)
        report = summarize(manifest, launcher.run())
        if emu is not None:
            report = replace(report, emulation=emu.describe())
        if throttle is not None and opts.devices is not None:
            report = replace(report, device_emulation=opts.devices.describe(throttle),
                             emulated=EmulatedRun.of(report, opts.devices.dilation))
        return report


def _throttle(manifest: Manifest, devices: DeviceEmulation):
    """The CPU throttle of a run's worker ranks (never the driver's) at their devices' shares."""
    return devices.throttle({w.rank: w.device for w in manifest.stages if w.rank != 0})


def run_plan(plan: Plan, graph: Graph, model_path: str | Path, opts: RunOptions | None = None,
             split_dir: str | Path | None = None, cluster: Cluster | None = None) -> RunReport:
    """Split ``plan`` (into ``split_dir`` or a temporary directory; its devices checked against
    ``cluster`` when given) and run it on this host."""
    opts = opts or RunOptions()
    with contextlib.ExitStack() as stack:
        out = Path(split_dir) if split_dir else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="hetsplit-split-")))
        split_model(plan, graph, model_path, out, cluster=cluster)
        return run_manifest(load_manifest(out), opts)


def resolve_model(spec: str, input_shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[Graph, Path]:
    """The Graph and the full ONNX file (with weights) of a zoo name or an .onnx path; ``input_shapes``
    fix its symbolic input dims (``graph.input_shapes``)."""
    from hetsplit.errors import ModelError
    from hetsplit.graph import zoo
    from hetsplit.graph.onnx_import import load_onnx

    path = Path(spec)
    if path.is_file():
        return load_onnx(path, input_shapes=input_shapes), path
    if spec in zoo.names():
        full = zoo.onnx_path(spec)
        return load_onnx(full, name=spec, input_shapes=input_shapes), full
    raise ModelError(f"{spec!r} is neither an ONNX file nor a zoo model; zoo models are {', '.join(zoo.names())}")

