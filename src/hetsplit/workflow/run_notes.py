"""The notes a comparison of a run with its prediction carries: where the profile behind the prediction was
measured under other conditions than the run (``profile_notes``), and the run's own CPU that no profile holds
(``overhead_note``), each measurement worded by the sign of its gap (``versus``)."""

from __future__ import annotations

from typing import Any

from hetsplit.runtime.report import RunReport


def profile_notes(meta: dict[str, Any], workers: int, threads: int = 1, cores: int | None = None) -> list[str]:
    """Where a local-cpu profile behind a prediction was measured under other conditions than a run.

    ``workers``: the run's stages computing on this machine's CPUs, ``threads`` each; ``cores``:
    usable here (default: this process's). Stages that compute at once share the L3 cache and memory
    bandwidth, so each runs slower than it did alone; a profile taken with ``--co-load K`` had K
    other cores running the model meanwhile: the load a stage meets beside K others.
    """
    import os

    if meta.get("device") != "local-cpu" or "whole_model" not in meta:
        return []                                      # not measured on this machine's CPU
    cores = cores or len(os.sched_getaffinity(0))
    co_load = int(meta.get("co_load", 0))
    busy = min(workers, max(1, cores // max(1, threads)))    # stages computing at once on cores of their own
    notes = []
    if co_load != busy - 1:
        how = "slower" if co_load < busy - 1 else "faster"
        notes.append(f"the profile was measured with co-load {co_load} (other cores running the model meanwhile) "
                     f"but {busy} stages computed at once here, so stage compute tends to run {how} than "
                     f"predicted; profile for this run with: hetsplit profile {meta.get('model', 'MODEL')} "
                     f"--device local-cpu --threads {threads} --co-load {busy - 1}")
    if workers * threads > cores:
        notes.append(f"{workers} stages x {threads} thread(s) share {cores} core(s): stages time-share cores, which "
                     "no profile captures; use a plan with at most as many devices as cores")
    if meta.get("threads") not in (None, threads):
        notes.append(f"the profile used {meta['threads']} thread(s) per device, this run {threads}")
    return notes


def versus(measured: float, predicted: float, tolerance: float = 0.02) -> str:
    """How a measurement stands to its prediction, worded by the sign of the difference:
    "0.50x the prediction (below it)", "2.05x ... (above it)", "1.01x ... (matches it within 2%)"."""
    ratio = measured / predicted
    if abs(ratio - 1.0) <= tolerance:
        return f"{ratio:.2f}x the prediction (matches it within {tolerance:.0%})"
    return f"{ratio:.2f}x the prediction ({'above' if ratio > 1.0 else 'below'} it)"


def overhead_note(report: RunReport, cores: int | None = None, share: float = 0.05,
                  predicted_throughput: float | None = None) -> str | None:
    """A note when the run's own CPU per input (the driver, and each stage's transfer threads) takes more
    than ``share`` of the slowest stage's compute on a machine with no core to spare for it.

    No profile holds this time: every stage's core also serves its transfers, and the driver, feeding
    inputs and collecting outputs, takes its CPU time from the stages' cores when they fill the machine.
    With ``predicted_throughput`` the note sets the measured throughput beside it, above or below by its sign.
    """
    import os

    cpu = [(d, d.cpu_per_input_s) for d in report.devices if d.kind == "cpu" and d.cpu_per_input_s is not None]
    driver = report.driver_cpu_per_input_s
    cores = cores or len(os.sched_getaffinity(0))
    if not cpu or driver is None or sum(d.threads for d, _ in cpu) < cores:
        return None
    transfer = [max(0.0, (c or 0.0) - d.compute_mean_s) for d, c in cpu]
    slowest = max(d.compute_mean_s for d, _ in cpu)
    total = driver + sum(transfer)
    if slowest <= 0 or total / len(cpu) <= share * slowest:
        return None
    per = ", ".join(f"{d.device} {t * 1e3:.2f} ms" for (d, _), t in zip(cpu, transfer))
    note = (f"the run's own CPU per input, which no profile holds, shares the stages' cores: driver {driver * 1e3:.2f} "
            f"ms, transfer threads {per}; spread over {len(cpu)} core(s) that is {total / len(cpu) / slowest:.0%} of "
            f"the slowest stage's compute ({slowest * 1e3:.2f} ms), which slows the stream by about that much against "
            "compute alone; stages of a few ms feel it most")
    if not predicted_throughput or report.throughput <= 0:
        return note
    where = versus(report.throughput, predicted_throughput)
    if report.throughput < predicted_throughput:
        return f"{note}. Measured throughput is {where}: this overhead is part of that gap"
    return (f"{note}. Measured throughput is nonetheless {where}: the predicted costs are higher than this "
            "machine's by more than this overhead takes")
