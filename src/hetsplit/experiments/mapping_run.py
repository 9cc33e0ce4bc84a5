"""A node-to-unit mapping run for real on this machine, beside the simulator costed for the same processes.

A mapping made for an IMC cluster (``imce-N``: layers on IMC and DPU units) runs as one worker process per
unit on this machine's CPU (onnxruntime, one thread each), and is set beside the ``here`` fidelity's
prediction for those processes (``workflow.here``, what ``hetsplit run --here`` shows): ``run_mapping``
profiles (or loads) the model's costs, predicts, runs and compares in one call.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hetsplit.cluster.examples import usable_cores
from hetsplit.cluster.local import local_cluster
from hetsplit.costs.profile import Profile
from hetsplit.estimate.runtime_costs import RuntimeCosts
from hetsplit.plan.types import Plan
from hetsplit.workflow.here import HereComparison, compare_here, prediction_here


@dataclass
class MappingRunOptions:
    """How to run: ``inputs`` in all, the first ``latency_inputs`` one at a time (their median is the
    unloaded latency; the first input of a run also pays every process's first-use costs), the rest
    streamed; ``profile``: a
    ``hetsplit.profile/1`` with local-cpu costs (path or Profile), None to measure one now
    (``profile_repeats`` runs, ``co_load`` default ``min(units, cores) - 1``); ``cores``: shared by the
    processes (default: this process's); ``runtime``: the runtime's own costs (default: this
    machine's, measured on first use); ``fill``: stream at least this many times the inputs the plan keeps
    in flight (``runtime.rounds.in_flight``: the rounds its last segment lags its first, plus one) after the latency
    inputs, so that the stream reaches the steady state the throughput figures describe (a mapping that
    hands each input back and forth 62 times keeps ~124 inputs in flight: 40 inputs measured 0.72x its
    steady figure, 60 0.91x); 0: ``inputs`` as given."""

    inputs: int = 200
    latency_inputs: int = 5
    timeout_s: float = 60.0
    profile: str | Path | Profile | None = None
    profile_repeats: int = 20
    co_load: int | None = None
    cores: int | None = None
    runtime: RuntimeCosts | None = None
    sim_inputs: int = 200
    pin: bool = False
    split_dir: Path | None = None
    run_dir: Path | None = None
    fill: int = 0


def run_mapping(model: str, plan: Plan | str | Path, options: MappingRunOptions | None = None) -> HereComparison:
    """Profile (or load) ``model``'s costs here, simulate ``plan`` for its worker processes, run it
    for real (one process per unit, every output verified) and set the two side by side."""
    from hetsplit.plan.io import load_plan
    from hetsplit.runtime import RunOptions, resolve_model, run_manifest, split_model
    from hetsplit.runtime.rounds import in_flight

    opts = options or MappingRunOptions()
    if not isinstance(plan, Plan):
        plan = load_plan(plan)
    from hetsplit.runtime.calibration import runtime_costs

    graph, path = resolve_model(model)
    prediction = prediction_here(model, plan, graph, opts.profile, opts.cores or usable_cores(),
                                 opts.runtime or runtime_costs(), opts.profile_repeats, opts.co_load, opts.sim_inputs)
    with contextlib.ExitStack() as stack:
        split_dir = opts.split_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hetsplit-split-")))
        manifest = split_model(plan, graph, path, Path(split_dir), cluster=local_cluster(plan.devices))
        inputs = max(opts.inputs, opts.latency_inputs + opts.fill * in_flight(manifest)) if opts.fill else opts.inputs
        report = run_manifest(manifest, RunOptions(inputs=inputs, latency_inputs=opts.latency_inputs,
                                                   timeout_s=opts.timeout_s, run_dir=opts.run_dir, pin=opts.pin))
    result = compare_here(report, prediction, opts.latency_inputs)
    if len(manifest.messages) != prediction.messages:
        result.notes.append(f"the run moved {len(manifest.messages)} messages per input, the prediction counted "
                            f"{prediction.messages}")
    return result
