"""Run a plan, measure it, predict it at the fidelity asked, compare: the one home of ``hetsplit run``.

- ``RunRequest``: how to run (the run's flags, checked when built, each bad value naming its flag);
  ``CompareOptions``: what to set the run beside (``plan``: the plan's own metrics; ``closed``: re-costed
  from a profile, with the simulator; ``here``: the processes that ran it, ``workflow.here``);
  ``RunJob``: a plan file, a model and both.
- ``run_job(job, hooks) -> RunOutcome``: load, split, run (``runtime.run_manifest``), compare;
  ``run_split`` runs a loaded plan, ``compare_report`` sets a finished run beside its prediction.
- ``run_here``, ``compare_run``, ``read_run_doc``, ``run_comparison``: the Python API (README) and the
  HTML report's reading of a run's JSON.

What a run measured is a ``runtime.report.RunReport``; what it is compared with, a
``workflow.comparison.Comparison``.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import tempfile
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hetsplit.cluster.types import Cluster
from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError, RuntimeFailure, UsageError
from hetsplit.graph.input_shapes import InputShapes
from hetsplit.graph.types import Graph
from hetsplit.plan.types import Metrics, Plan
from hetsplit.runtime.report import EmulatedRun, HopRun, RunReport
from hetsplit.workflow.comparison import Comparison, Row, Simulated

if TYPE_CHECKING:
    from hetsplit.runtime.device_emulation import DeviceEmulation
    from hetsplit.runtime.hosts import HostMap, WorkerCommand
    from hetsplit.runtime.manifest import Manifest


def _ignore(_: Any) -> None:
    return None


@dataclass(frozen=True)
class RunRequest:
    """How to run: ``inputs`` streamed, the first ``latency_inputs`` (default min(2, inputs)) one at a time;
    ``threads`` per device; ``hosts`` (``DEV=HOST,...``) run on other hosts, their workers started over ssh
    with ``ssh``; ``emulate_links`` / ``emulate_devices`` shape this machine's processes to the plan's cluster
    (``profile``: the costs of its devices for the latter); ``split_dir`` / ``run_dir`` keep the sub-models and
    the logs. Built once; every check runs before any work."""

    inputs: int = 16
    latency_inputs: int | None = None
    timeout_s: float = 60.0
    threads: int = 1
    port: int = 0
    pin: bool = False
    cpu_only: bool = False
    emulate_links: bool = False
    emulate_devices: bool = False
    hosts: str | None = None
    ssh: bool = False
    split_dir: Path | None = None
    run_dir: Path | None = None
    profile: str | None = None

    def __post_init__(self) -> None:
        from hetsplit.runtime.peer_config import MAX_INPUTS, MAX_THREADS, MAX_TIMEOUT_S
        from hetsplit.runtime.rendezvous import check_port

        if self.inputs > MAX_INPUTS:
            raise UsageError(f"--inputs {self.inputs}: give at most {MAX_INPUTS:,} inputs")
        if self.inputs < 1:
            raise UsageError(f"--inputs {self.inputs}: a run streams at least 1 input (with none, nothing is "
                             "measured or verified)")
        if self.latency_inputs is not None and self.latency_inputs < 0:
            raise UsageError(f"--latency-inputs {self.latency_inputs}: give 0 or more inputs sent one at a time")
        check_port(self.port)
        cores = len(os.sched_getaffinity(0))
        if self.threads > MAX_THREADS or (not self.hosts and self.threads > cores):
            most = MAX_THREADS if self.hosts else cores
            raise UsageError(f"--threads {self.threads}: give at most {most} compute threads per device"
                             + ("" if self.hosts else f" (this machine has {cores} cores)"))
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise UsageError(f"--timeout {self.timeout_s}: give a number of seconds > 0 and at most "
                             f"{MAX_TIMEOUT_S:g} (a week)")
        if self.latency_inputs is not None and self.latency_inputs > self.inputs >= 1:
            raise UsageError(f"--latency-inputs {self.latency_inputs}: give 0 to --inputs ({self.inputs}) of the "
                             "inputs to send one at a time")
        if self.latency_inputs is None:
            object.__setattr__(self, "latency_inputs", min(2, self.inputs))
        check_hosts(self.hosts, self.ssh, self.emulate_links, self.emulate_devices)   # before any work

    @property
    def first_alone(self) -> int:
        """The inputs sent one at a time."""
        return int(self.latency_inputs if self.latency_inputs is not None else min(2, self.inputs))


@dataclass(frozen=True)
class CompareOptions:
    """What a run is set beside: ``fidelity`` ``plan`` (the plan's own metrics), ``closed`` (re-costed on
    the plan's cluster with ``profile``'s costs, and simulated) or ``here`` (the processes that ran it, costs
    from the local-cpu ``profile`` or profiled now; ``recalibrate`` measures the runtime's costs anew)."""

    fidelity: str = "plan"
    profile: str | None = None
    recalibrate: bool = False

    def __post_init__(self) -> None:
        if self.fidelity not in ("plan", "closed", "here"):
            raise UsageError(f"compare at fidelity {self.fidelity!r}: give plan, closed or here")
        if self.fidelity == "closed" and not self.profile:
            raise UsageError("a closed-form comparison re-costs the plan from a profile: give --profile")


@dataclass(frozen=True)
class RunJob:
    """``hetsplit run``: the plan file (``index``: which plan of a set), the model, the cluster (default the
    plan's own), the input shapes, the run and what to compare it with (None: nothing)."""

    plan: str
    model: str
    run: RunRequest = field(default_factory=RunRequest)
    compare: CompareOptions | None = None
    index: int | None = None
    cluster: str | None = None
    input_shapes: InputShapes | None = None
    recalibrate: bool = False

    def __post_init__(self) -> None:
        if self.run.emulate_devices:
            from hetsplit.runtime.cpu_throttle import throttle_available

            here = self.compare is not None and self.compare.fidelity == "here"
            for flag, bad in (("--threads", self.run.threads != 1), ("--hosts", bool(self.run.hosts)),
                              ("--here", here)):
                if bad:
                    raise UsageError(f"--emulate-devices throttles one-thread workers on this machine and compares "
                                     f"with the plan's own cluster; it does not combine with {flag}")
            why = throttle_available()
            if why:
                raise UsageError(why)


@dataclass(frozen=True)
class RunHooks:
    """What the caller is told while a job goes: ``note`` (a line for the user), ``step`` (a context around a
    long step, named), ``emulating`` (the device emulation about to run), ``announce`` (each other host's
    worker command, once the run serves its rendezvous)."""

    note: Callable[[str], None] = _ignore
    step: Callable[[str], AbstractContextManager[Any]] = lambda _: nullcontext()
    emulating: Callable[["DeviceEmulation"], None] = _ignore
    announce: Callable[[list["WorkerCommand"]], None] = _ignore


@dataclass(frozen=True)
class RunOutcome:
    """A job's run and, when asked, its comparison; ``to_dict`` is what ``--out`` and ``--json`` write."""

    report: RunReport
    comparison: Comparison | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.comparison.to_dict() if self.comparison is not None else self.report.to_dict()


def unchecked_note(plan: Plan, cluster: Cluster | None) -> str | None:
    """The note for a plan whose devices cannot be checked: its cluster was not found and none was given."""
    if cluster is None and plan.cluster:
        return (f"the plan's cluster {plan.cluster!r} was not found; its devices are checked only against each "
                "other (give --cluster to check them)")
    return None


def run_job(job: RunJob, hooks: RunHooks = RunHooks()) -> RunOutcome:
    """Load the job's plan, cluster and model, run the plan (``run_split``) and, when asked, compare."""
    from hetsplit.outpath import output_dir
    from hetsplit.plan.io import load_plan
    from hetsplit.runtime import resolve_model
    from hetsplit.workflow import load_plan_cluster, plan_input_shapes

    output_dir(job.run.split_dir, "--split-dir")
    output_dir(job.run.run_dir, "--run-dir")
    plan = load_plan(job.plan, job.index)
    fidelity = job.compare.fidelity if job.compare is not None else None
    if fidelity == "plan" and plan.metrics is None:
        raise UsageError("--compare needs predictions: give --profile (with --cluster) or a plan with metrics")
    cluster = load_plan_cluster(plan, job.cluster, recalibrate=job.recalibrate, required=job.run.emulate_links
                                or job.run.emulate_devices or fidelity == "closed")
    if (note := unchecked_note(plan, cluster)) is not None:
        hooks.note(note)
    with hooks.step(f"loading {job.model}"):
        graph, path = resolve_model(job.model, plan_input_shapes(plan, job.input_shapes) or None)
    report = run_split(plan, graph, path, cluster, job.run, hooks)
    if job.compare is None:
        return RunOutcome(report)
    return RunOutcome(report, compare_report(report, plan, graph, cluster, job.compare, job.model, job.run))


def run_split(plan: Plan, graph: Graph, model_path: str | Path, cluster: Cluster | None, request: RunRequest,
              hooks: RunHooks = RunHooks()) -> RunReport:
    """Split ``plan`` (into ``request.split_dir``, else ``run_dir/split``, else a temporary folder) and run it
    as ``request`` says."""
    from hetsplit.runtime import LinkMatrix, RunOptions, run_manifest, split_model
    from hetsplit.runtime.hosts import HostMap
    from hetsplit.runtime.peer_config import check_inputs, steps_per_input
    from hetsplit.workflow import device_emulation

    if cluster is None and (request.emulate_links or request.emulate_devices):
        raise UsageError("--emulate-links and --emulate-devices shape the run to the plan's cluster: give --cluster")
    with contextlib.ExitStack() as stack:
        split_dir = request.split_dir or (request.run_dir / "split" if request.run_dir else None) or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="hetsplit-split-")))
        with hooks.step("splitting"):
            manifest = split_model(plan, graph, model_path, split_dir, cluster=cluster)
        check_inputs(request.inputs, steps_per_input(manifest, list(range(manifest.world_size))), "--inputs")
        kinds = device_kinds(cluster, manifest)
        if not request.cpu_only and not request.hosts and (note := no_cuda_note(kinds)):
            hooks.note(note)
        devices = None
        if request.emulate_devices and cluster is not None:
            with hooks.step("costing the plan's devices and this machine's"):
                devices = device_emulation(plan, graph, cluster, request.profile)
            hooks.emulating(devices)
        hosts = HostMap.parse(request.hosts) if request.hosts else None
        opts = RunOptions(inputs=request.inputs, latency_inputs=request.first_alone, timeout_s=request.timeout_s,
                          startup_timeout_s=request.timeout_s, port=request.port, run_dir=request.run_dir,
                          pin=request.pin, threads={w.device: request.threads for w in manifest.stages}, kinds=kinds,
                          cpu_only=request.cpu_only, devices=devices, hosts=hosts,
                          links=LinkMatrix.from_cluster(manifest, cluster) if request.emulate_links and cluster
                          else None,
                          announce=worker_announcer(hooks.announce, request.ssh, stack) if hosts else None)
        return run_manifest(manifest, opts)


def device_kinds(cluster: Cluster | None, manifest: "Manifest") -> dict[str, str]:
    """Each device's kind in the cluster (gpu or cpu): a gpu device computes on its host's GPU where the host
    has CUDA (each worker decides on its own host, ``runtime.executor``)."""
    if cluster is None:
        return {}
    return {w.device: "gpu" if w.device in cluster.names and cluster.device(w.device).kind == "gpu" else "cpu"
            for w in manifest.stages}


def check_hosts(hosts: str | None, ssh: bool, emulate_links: bool, emulate_devices: bool) -> "HostMap | None":
    """The devices ``--hosts`` puts on other hosts (None: all here), parsed; UsageError for a malformed one,
    ``--ssh`` without it, or an emulation of this machine's own processes beside it."""
    from hetsplit.runtime.hosts import HostMap

    if not hosts:
        if ssh:
            raise UsageError("--ssh starts the workers of --hosts; give --hosts DEV=HOST,...")
        return None
    for flag, on in (("--emulate-links", emulate_links), ("--emulate-devices", emulate_devices)):
        if on:
            raise UsageError(f"{flag} shapes this machine's own processes; it does not combine with --hosts")
    return HostMap.parse(hosts)


def no_cuda_note(kinds: dict[str, str]) -> str | None:
    """The note for gpu devices of a run on a host without CUDA (they compute on its CPU)."""
    from hetsplit.runtime.executor import Host

    gpus = [d for d, k in kinds.items() if k == "gpu"]
    if not gpus or Host.here().cuda:
        return None
    many = len(gpus) > 1
    return (f"no CUDA GPU here; {'devices' if many else 'device'} {', '.join(gpus)} "
            f"{'compute' if many else 'computes'} on the CPU")


def worker_announcer(tell: Callable[[list["WorkerCommand"]], None], ssh: bool, stack: contextlib.ExitStack
               ) -> Callable[[list["WorkerCommand"]], None]:
    """What the run does once it serves the rendezvous: ``tell`` each host's worker command, and with ``ssh``
    run it there (the ssh clients end with this stack; the workers end with the run)."""
    import sys

    from hetsplit.lifetime import die_with_parent

    def announce(commands: list["WorkerCommand"]) -> None:
        tell(commands)
        if ssh:
            for c in commands:      # the token goes on the remote shell's input, never on a command line
                p = subprocess.Popen(["ssh", "-o", "BatchMode=yes", c.host, c.remote_shell()], stdin=subprocess.PIPE,
                                     stdout=sys.stderr, preexec_fn=die_with_parent())   # stdout: the report
                assert p.stdin is not None
                p.stdin.write(f"{c.token}\n".encode())
                p.stdin.close()
                stack.callback(_end, p)

    return announce


def _end(p: subprocess.Popen) -> None:
    """An ssh client at the end of the run: its worker ends with the run and the client with it, so the
    run returns once its workers are gone; terminated when that takes over 5 s (a bounded wait)."""
    try:
        p.wait(timeout=5)
        return
    except subprocess.TimeoutExpired:
        p.terminate()
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


# ---- prediction beside measurement ------------------------------------------------------------------

def compare_report(report: RunReport, plan: Plan, graph: Graph, cluster: Cluster | None, options: CompareOptions,
                   model: str, request: RunRequest | None = None) -> Comparison:
    """A finished run of ``plan`` beside its prediction at ``options.fidelity`` (``model``: the zoo name or
    file the run split, for a profile taken now; ``request``: how it ran, for the notes; default: as
    ``RunRequest()``)."""
    from hetsplit.workflow.run_notes import overhead_note, profile_notes

    request = request or RunRequest()

    if options.fidelity == "here":
        from hetsplit.workflow.here import compare_run_here

        here = compare_run_here(report, plan, graph, model, options.profile, request.first_alone,
                                recalibrate=options.recalibrate)
        threads = [f"the run used {request.threads} threads per device; the prediction assumes 1"]
        return Comparison(report, here.rows(), here.notes + (threads if request.threads != 1 else []), "here",
                          here=here)
    notes: list[str] = []
    simulated = None
    if options.fidelity == "closed":
        from hetsplit.costs import load_profile

        if cluster is None:
            raise UsageError("a closed-form comparison costs the plan on its cluster: give --cluster")
        profile = load_profile(str(options.profile))
        predicted, simulated = predict(plan, graph, cluster, profile.costs, report.inputs)
        notes = profile_notes(profile.meta, sum(d.kind == "cpu" for d in report.devices), request.threads)
    elif plan.metrics is not None:
        predicted = plan.metrics
    else:
        raise RuntimeFailure("--compare needs predictions: give --profile (with --cluster) or a plan with metrics")
    rows = plan_rows(report, predicted, cluster, simulated)
    if report.emulated is not None:
        rows += emulated_rows(predicted, report.emulated)
    if (overhead := overhead_note(report, predicted_throughput=predicted.throughput)) is not None:
        notes.append(overhead)
    if cluster is not None and not request.hosts:
        from hetsplit.estimate.processes import runs_here

        if runs_here(cluster):
            notes.append("the plan's devices are this machine's cores: `--here` compares the run with a prediction "
                         "for the processes that ran it (sharing the cores, each message costing the runtime CPU)")
    return Comparison(report, rows, notes, options.fidelity, predicted, simulated)


def predict(plan: Plan, graph: Graph, cluster: Cluster, profile_costs: Any = None, inputs: int = 100
            ) -> tuple[Metrics, Simulated]:
    """``plan``'s metrics on ``cluster`` (costs from the profile where it has the device type) at the
    ``closed`` fidelity, and the ``simulated`` fidelity's steady-state throughput and one input's
    latency as the run streams ``inputs``."""
    from hetsplit.costs import build_problem
    from hetsplit.estimate import SimOptions, estimate_plan

    problem = build_problem(graph, cluster, profile_costs)
    sim = estimate_plan(problem, plan, "simulated", SimOptions(inputs=max(2, inputs), keep_timeline=False))
    return estimate_plan(problem, plan, "closed"), Simulated(sim.throughput, sim.latency_s, max(2, inputs))


def predicted_transfer_s(cluster: Cluster, hop: HopRun) -> float:
    """What ``cluster``'s link model predicts for ``hop``'s bytes: the comparison's one call of the link rule."""
    return float(cluster.transfer_time(cluster.index(hop.src), cluster.index(hop.dst), hop.nbytes))


def plan_rows(report: RunReport, predicted: Metrics, cluster: Cluster | None = None,
              simulated: Simulated | None = None) -> list[Row]:
    """Predicted (a plan's ``Metrics``) beside measured; ``simulated`` adds the simulator's throughput and
    latency; with ``cluster`` every hop between workers beside its link's predicted transfer time.

    A device that runs its layers in several segments per input also gets its compute beyond the
    prediction spread over its segments, against 0: ``closed`` and ``simulated`` charge a segment what its
    device type's ``SegmentCost`` says (``estimate.segments``), and the figure holds the whole excess,
    whatever else slowed the device too (other processes on its cores); on a 16-core H200 host ~0.24 ms per
    segment on a 4-thread onnxruntime CPU and ~0.3-0.4 ms on the GPU (``bench/data/h200-16c``)."""
    rows = [Row("throughput (1/s)", predicted.throughput, report.throughput)]
    if simulated is not None:
        rows.append(Row("throughput, simulated (1/s)", simulated.throughput, report.throughput))
    rows.append(Row("latency (s)", predicted.latency_s, report.latency_s))
    if simulated is not None:
        rows.append(Row("latency, simulated (s)", simulated.latency_s, report.latency_s))
    rows.append(Row("bottleneck (s)", predicted.bottleneck_s, 1.0 / report.throughput if report.throughput else None))
    comp = predicted.compute_s_per_device or {}
    rows += [Row(f"compute {d.device} (s)", comp.get(d.device), d.compute_s) for d in report.devices]
    for d in report.devices:
        pred = comp.get(d.device)
        if d.segments > 1 and pred is not None:
            rows.append(Row(f"compute {d.device} beyond the prediction, per segment ({d.segments} per input) (s)",
                            0.0, (d.compute_s - pred) / d.segments))
    if cluster is not None:
        rows += [Row(f"transfer {h.src}->{h.dst} (s)", predicted_transfer_s(cluster, h), h.wire_s)
                 for h in report.hops if "driver" not in (h.src, h.dst)]
    return rows


def emulated_rows(predicted: Metrics, emulated: EmulatedRun) -> list[Row]:
    """The plan's predictions beside a device-emulated run brought back to emulated time."""
    comp = predicted.compute_s_per_device or {}
    return [Row("throughput, emulated (1/s)", predicted.throughput, emulated.throughput),
            Row("latency, emulated (s)", predicted.latency_s, emulated.latency_s),
            *[Row(f"compute {d}, emulated (s)", comp.get(d), t) for d, t in emulated.compute_s.items()]]


# ---- the Python API ----------------------------------------------------------------------------------

def run_here(plan: Plan, problem: SplitProblem, model: str | Path | None = None, inputs: int = 8,
             split_dir: str | Path | None = None) -> RunReport:
    """Split ``plan`` into per-device ONNX sub-models and run them as processes on this machine (every
    output verified against the unsplit model); ``model``: the zoo name or .onnx file (default: the one
    ``problem`` was loaded from), at the input shapes the plan records."""
    from hetsplit.runtime import resolve_model
    from hetsplit.workflow import plan_input_shapes

    if model is None and problem.graph.meta.get("from_profile"):
        raise UsageError(f"the problem was loaded from the profile {problem.graph.source}, which holds no model to "
                         "split: give model= (the zoo name or .onnx file it was taken of)")
    spec = str(model) if model is not None else problem.graph.source.removeprefix("zoo:")
    graph, path = resolve_model(spec, plan_input_shapes(plan, None) or None)
    request = RunRequest(inputs=inputs, latency_inputs=min(2, inputs), timeout_s=60.0,
                         split_dir=Path(split_dir) if split_dir else None)
    return run_split(plan, graph, path, problem.cluster, request)


def compare_run(report: RunReport, plan: Plan, problem: SplitProblem) -> Comparison:
    """Measured beside the plan's predicted metrics (``Comparison.rows``: metric, predicted, measured)."""
    if plan.metrics is None:
        raise HetsplitError("the plan has no predicted metrics to compare with; give a plan from search_plans")
    return run_comparison(report, plan, problem.cluster)


def read_run_doc(path: str | Path) -> RunReport | Comparison:
    """A run's JSON (``hetsplit run --out``): a comparison (with ``--compare``) or a bare run report."""
    from hetsplit.jsonfile import read_json

    doc = read_json(path, HetsplitError, "no such run file")
    if isinstance(doc, dict) and "rows" in doc:
        return Comparison.from_dict(doc, str(path))
    return RunReport.from_dict(doc, str(path))


def run_comparison(run: RunReport | Comparison, plan: Plan, cluster: Cluster) -> Comparison:
    """Measured beside predicted: a comparison as it is, a bare run report set beside ``plan``'s metrics
    (with the run's own CPU and the stage bound's notes)."""
    from hetsplit.workflow.run_notes import overhead_note

    if isinstance(run, Comparison):
        return run
    if plan.metrics is None:
        raise HetsplitError("the run's JSON holds no predictions and the plan has no metrics to compare it with")
    notes = [overhead_note(run, predicted_throughput=plan.metrics.throughput), run.efficiency_note(),
             run.depth_note()]
    return Comparison(run, plan_rows(run, plan.metrics, cluster), [n for n in notes if n], "plan", plan.metrics)
