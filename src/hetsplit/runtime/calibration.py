"""What the runtime itself costs on this machine, per message: measured on first use and cached.

A message of the runtime costs CPU at both of its ends, beyond the gloo transfer itself: a worker's
threads and gloo's loop thread wake, hand the tensors over and record times (an idle worker waits
for its transfers itself, a busy one hands them to its receiver and sender threads,
``runtime.inflight``); the driver posts from its one thread. On a 2-core VM a worker's end costs ~0.2 ms and the driver's
~0.08 ms (mostly gloo and the kernel, not the Python threads), more than a small CNN stage's share
of the work, so a prediction that leaves them out (or takes them from the loopback link's latency)
over-predicts the throughput of small models.

The calibration runs the toy CNN (``runtime.toy``) split in two stages of about equal work for
real (driver and two workers, ``CalibrationRun`` sizes: small and large tensors), and fits, from
every process's CPU time per input beyond its compute:

- ``worker_end_s + worker_byte_s x bytes``: a worker's CPU per message end it handles,
- ``driver_end_s + driver_byte_s x bytes``: the driver's per message end,
- ``message_latency_s``: what one message adds to an input sent through the idle pipeline (wall:
  each input's latency less its stages' compute for that input, the median, over the messages);
- ``end_wait_s``: with more processes than cores, what a stage waits per message end beyond all CPU:
  its period (1 / the streamed throughput) less its process's CPU per input, over its ends (from the
  run with the small tensors, as the latency). With no spare core, the wake-ups that hand a tensor
  between a stage's threads wait for its compute to yield. The toy runs are confined to two cores
  (three processes) so that they measure this;
- ``segment_s + segment_byte_s x`` boundary bytes: what a segment's executor call costs beyond its
  layers, from the toy mapped layer by layer (``SEGMENT_RUNS``, ``runtime.segment_calibration``).

The toy's stages compute ~1 ms each, as a small CNN's do: a message end costs more CPU when its
threads sleep longer between inputs (measured on a 2-core VM: 0.15 ms per end with 0.06 ms stages,
0.19 with 0.26 ms, 0.23-0.26 with 0.9 ms; ResNet-18's 1.8 ms stages spend 0.26), so toy stages
much shorter than the plans' under-charge them.

Each size is run ``rounds`` times and keeps its least CPU (other work only adds time). The figures
(``estimate.runtime_costs.RuntimeCosts``) are cached in ``cache_root()/runtime-calibration/`` keyed
like the local calibration (CPU model, cores, onnxruntime) plus torch (gloo) and ``VERSION``, by
``costs.calibration_store``: only when the machine was quiet while calibrating (rounds within
``BUSY_SPREAD`` of each other, no other process using the CPU), checked at use by a short probe
(``machine_probe.message_probe_s``) and measured again when the machine has changed.
``$HETSPLIT_LOCAL_CALIBRATION=off`` turns it off, and then (or when it cannot run)
``RuntimeCosts.fallback`` takes the built-in loopback link's latency as every end's cost.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hetsplit.costs import calibration_store, machine_probe
from hetsplit.errors import HetsplitError
from hetsplit.estimate.runtime_costs import RuntimeCosts
from hetsplit.runtime.report import DeviceRun

VERSION = 9                    # bump when the recipe or the worker changes: old cache entries are ignored
FOLDER = "runtime-calibration"
CUT = 2                        # the toy's stages: stem and b0_conv1 | b0_conv2, add, pool, fc
LATENCY_INPUTS = 20            # the toy's inputs sent one at a time first (latency), then streamed
TOY_CORES = 2                  # the toy's three processes share two cores: oversubscribed, as measured


@dataclass(frozen=True)
class CalibrationRun:
    """One toy run: its width and image size (each tensor crossing the cut is ``channels x size^2`` float32)."""

    channels: int
    size: int
    inputs: int


# stages of ~1 ms each (see above); cut 2 x 64 KB / 2 x 1 MB, input 0.8 / 196 KB
RUNS = (CalibrationRun(256, 8, 400), CalibrationRun(16, 128, 300))
# the toy mapped layer by layer (``runtime.segment_calibration``): 64 KB, 1 MB and 4 MB tensors, ~1-8 ms an input
SEGMENT_RUNS = (CalibrationRun(256, 8, 200), CalibrationRun(16, 128, 150), CalibrationRun(16, 256, 60))


def runtime_key() -> dict[str, Any]:
    """What a runtime calibration holds for: the machine, onnxruntime, torch (gloo), ``VERSION``."""
    from importlib.metadata import PackageNotFoundError, version

    from hetsplit.costs.local_calibration import machine_key

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "absent"
    return {**machine_key(), "version": VERSION, "torch": torch_version}


# ---- one toy run ------------------------------------------------------------------------------------

def own_compute_cpu(device: DeviceRun) -> float:
    """A worker's CPU per input inside its sub-model: measured (one compute thread), else its mean wall time."""
    cpu = device.compute_cpu_per_input_s
    return float(device.compute_mean_s if cpu is None else cpu)


def measure_run(run: CalibrationRun, workdir: Path) -> dict[str, Any]:
    """Run the toy split in two stages of about equal work (after its first block's first conv: two
    tensors cross, the stem's output relayed for the skip connection) and return the CPU beyond compute of the
    workers and of the driver per input, with their message ends and bytes, the unloaded latency
    beyond compute per message, and the busier stage's wait per end beyond its CPU."""
    from hetsplit.plan.types import Plan, Stage
    from hetsplit.runtime import RunOptions, run_manifest, split_model
    from hetsplit.runtime.measure import stream_throughput
    from hetsplit.runtime.toy import toy_model

    here = workdir / f"toy-{run.channels}x{run.size}"
    model = here / "toy.onnx"
    model.parent.mkdir(parents=True, exist_ok=True)
    graph = toy_model(model, channels=run.channels, size=run.size, blocks=1)
    plan = Plan(graph.name, "local", "runtime calibration", [Stage("local-cpu0", graph.names[:CUT]),
                                                                Stage("local-cpu1", graph.names[CUT:])])
    manifest = split_model(plan, graph, model, here / "split")
    report = run_manifest(manifest, RunOptions(inputs=run.inputs, latency_inputs=LATENCY_INPUTS, timeout_s=60,
                                               run_dir=here / "run"))
    if report is None:
        raise HetsplitError("the runtime calibration's toy run returned no measurements")
    worker_ends = [t.nbytes for w in manifest.stages for e in w.recv + w.send for t in e.tensors]
    driver_ends = [t.nbytes for e in manifest.driver.recv + manifest.driver.send for t in e.tensors]
    devices = report.devices
    cpu = {d.device: d.cpu_per_input_s for d in devices}
    driver_cpu = report.driver_cpu_per_input_s
    if driver_cpu is None or any(c is None for c in cpu.values()):
        raise HetsplitError("the runtime calibration's toy run did not measure its processes' CPU time")
    beyond = sum(max(0.0, float(cpu[d.device] or 0.0) - own_compute_cpu(d)) for d in devices)
    throughput = stream_throughput(report, LATENCY_INPUTS)
    busiest = max(cpu, key=lambda d: float(cpu[d] or 0.0))
    ends = {w.device: sum(len(e.tensors) for e in w.recv + w.send) for w in manifest.stages}
    wait = (max(0.0, 1.0 / throughput - float(cpu[busiest] or 0.0)) / ends[busiest]
            if throughput > 0 else 0.0)
    return {"channels": run.channels, "size": run.size, "inputs": run.inputs,
            "worker_ends": len(worker_ends), "worker_bytes": float(sum(worker_ends)),
            "worker_cpu_beyond_compute_s": beyond,
            "driver_ends": len(driver_ends), "driver_bytes": float(sum(driver_ends)),
            "driver_cpu_s": float(driver_cpu),
            "latency_beyond_compute_s": latency_beyond_compute(report.latencies_s, here / "run",
                                                              [w.rank for w in manifest.stages]),
            "messages_on_path": len(manifest.driver.recv) + len(manifest.driver.send) + len(manifest.stages) - 1,
            "end_wait_s": wait}


def latency_beyond_compute(latencies_s: list[float], run_dir: Path, ranks: list[int]) -> float:
    """Median over the inputs sent alone (the first, paying first use, left out) of each one's latency
    less its stages' compute for that very input: the time its messages and hand-overs add."""
    computes = [json.loads((run_dir / f"rank{r}.json").read_text())["compute_s"] for r in ranks]
    beyond = [latencies_s[i] - sum(c[i] for c in computes) for i in range(1, LATENCY_INPUTS)]
    return max(0.0, statistics.median(beyond))


def per_end_and_byte(runs: list[tuple[int, float, float]]) -> tuple[float, float]:
    """``(per_end, per_byte)`` with ``ends x per_end + bytes x per_byte = cpu`` over ``(ends, bytes,
    cpu)`` runs: per_byte from the runs with the fewest and most bytes per end (0 when they do not
    differ, never below 0), per_end the mean of what each run leaves after its bytes (never below 0)."""
    lo, hi = min(runs, key=lambda r: r[1] / r[0]), max(runs, key=lambda r: r[1] / r[0])
    det = lo[0] * hi[1] - hi[0] * lo[1]
    per_byte = max(0.0, (lo[0] * hi[2] - hi[0] * lo[2]) / det) if det > 0 else 0.0
    return statistics.mean(max(0.0, (c - per_byte * b) / n) for n, b, c in runs), per_byte


def fit(measured: list[dict[str, Any]]) -> tuple[float, float, float, float, float, float]:
    """``(worker_end_s, driver_end_s, worker_byte_s, driver_byte_s, message_latency_s, end_wait_s)``
    from the toy runs: the workers' CPU beyond compute and the driver's CPU, each solved over the
    runs for a cost per end and per byte; the latency (per message on the input's path) and the
    wait per end are the run's with the fewest bytes."""
    worker_end, worker_byte = per_end_and_byte([(m["worker_ends"], m["worker_bytes"], m["worker_cpu_beyond_compute_s"])
                                                for m in measured])
    driver_end, driver_byte = per_end_and_byte([(m["driver_ends"], m["driver_bytes"], m["driver_cpu_s"])
                                                for m in measured])
    small = min(measured, key=lambda m: m["worker_bytes"])
    latency = small["latency_beyond_compute_s"] / max(1, small["messages_on_path"])
    return worker_end, driver_end, worker_byte, driver_byte, latency, small["end_wait_s"]


@contextlib.contextmanager
def confined_to(cores: int) -> Iterator[None]:
    """This process (and the processes it starts meanwhile) on its first ``cores`` CPUs only."""
    try:
        mine = sorted(os.sched_getaffinity(0))
    except AttributeError:                                  # not Linux: nothing to confine
        yield
        return
    os.sched_setaffinity(0, mine[:max(1, cores)])
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


def calibrate(runs: tuple[CalibrationRun, ...] = RUNS, rounds: int = 2,
              segment_runs: tuple[CalibrationRun, ...] = SEGMENT_RUNS) -> tuple[RuntimeCosts, float]:
    """Run the toy runs here, on two cores (``rounds`` each, the least CPU kept), and fit the
    runtime's costs; with the rounds' spread (the largest relative difference of one run's CPU). The
    ``segment_runs`` (once each) measure what a segment's call costs beyond its layers."""
    from hetsplit.runtime import segment_calibration

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hetsplit-runtime-calibration-") as tmp, confined_to(TOY_CORES):
        measured, spreads = [], []
        for i, run in enumerate(runs):
            tries = [measure_run(run, Path(tmp) / f"{i}-{r}") for r in range(max(1, rounds))]
            cpu = [m["worker_cpu_beyond_compute_s"] + m["driver_cpu_s"] for m in tries]
            measured.append(tries[cpu.index(min(cpu))])
            spreads.append(max(cpu) / max(min(cpu), 1e-30) - 1.0)
        segments = [row for run in segment_runs for row in segment_calibration.measure_segments(
            run.channels, run.size, run.inputs, min(LATENCY_INPUTS, run.inputs // 4), Path(tmp))]
    worker_end, driver_end, worker_byte, driver_byte, latency, wait = fit(measured)
    segment_s, segment_byte_s = segment_calibration.fit_segments(segments)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    source = (f"runtime measured on this machine {when} (toy runs, {time.monotonic() - t0:.0f} s): a worker's "
              f"message end {worker_end * 1e3:.3f} ms CPU + {worker_byte * 1e9:.2f} ns/B, the driver's "
              f"{driver_end * 1e3:.3f} ms + {driver_byte * 1e9:.2f} ns/B; {latency * 1e3:.3f} ms per message to an "
              f"input alone; a stage on a shared core waits {wait * 1e3:.3f} ms per end; "
              f"{segment_calibration.describe(segment_s, segment_byte_s, segments)}")
    return RuntimeCosts(worker_end, driver_end, worker_byte, driver_byte, latency, source, end_wait_s=wait,
                        segment_s=segment_s, segment_byte_s=segment_byte_s,
                        measured=measured, measured_segments=segments), max(spreads)


def runtime_costs(recalibrate: bool = False) -> RuntimeCosts:
    """This machine's runtime costs, one a process: cached (checked by a short probe), else measured now
    (cached when the machine was quiet; ``costs.calibration_store``); ``recalibrate`` measures anew.
    ``RuntimeCosts.fallback`` when turned off or when the toy runs fail."""
    from hetsplit.costs.local_calibration import ENV, calibration_off

    if calibration_off():
        return RuntimeCosts.fallback(f"turned off by ${ENV}")
    recipe = calibration_store.Recipe(FOLDER, "hetsplit.runtime-calibration/2", runtime_key(), lambda: calibrate(),
                                      RuntimeCosts.to_dict, RuntimeCosts.from_dict,
                                      lambda: machine_probe.message_probe_s())
    try:
        got = calibration_store.trusted(recipe, recalibrate)
    except (HetsplitError, OSError) as exc:
        return RuntimeCosts.fallback(f"the toy runs failed: {exc}")
    return replace(got.value, source=f"{got.value.source}; {got.describe()}")
