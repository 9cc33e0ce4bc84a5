"""Turning the per-process logs of a run into measurements, and setting them beside predictions.

Every plan kind gives one ``RunReport``. Per device: compute time per input, idle time, bytes and time
sent / received, peak memory, and the process's CPU time per input (compute plus its transfer threads;
the driver's too: on a machine whose cores all run stages, the driver's CPU time is taken from theirs).
Per message (a hop u -> v): the wire time of each input, ``recv done at v - max(send posted at u, recv
posted at v, the link's previous transfer done)``: the time the transfer took once both ends were ready
and the link was free (``wire_times``). End to end: unloaded latency (the
first inputs go one at a time), latency under load, and throughput over the streamed inputs.
Energy per input comes from the device's meter (RAPL, NVML) where one is readable, else null.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.manifest import Manifest


def _med(xs) -> float:
    return float(np.median(xs)) if len(xs) else 0.0


def compute_fields(doc: dict[str, Any], steady: slice) -> dict[str, Any]:
    """A worker's compute and CPU per input from its record: ``compute_s`` (median wall time of its
    steady inputs), ``compute_mean_s``, ``cpu_per_input_s`` (its process, every thread) and, with one
    compute thread, ``compute_cpu_per_input_s`` (the CPU inside its sub-models: the rest of the
    process's CPU is the runtime's own)."""
    comp = doc["compute_s"]
    n = len(comp)
    one_thread = doc.get("threads", 1) == 1 and doc.get("kind", "cpu") == "cpu"
    return {"cpu_per_input_s": doc["process_cpu_s"] / n if doc.get("process_cpu_s") is not None and n else None,
            "compute_cpu_per_input_s": doc["compute_cpu_s"] / n if one_thread and n and
            doc.get("compute_cpu_s") is not None else None,
            "compute_s": _med(comp[steady]), "compute_mean_s": float(np.mean(comp[steady])) if n else 0.0}


@dataclass
class RunReport:
    """What one run measured (SI units), plus the verification result."""

    model: str
    devices: list[dict[str, Any]]
    hops: list[dict[str, Any]]
    inputs: int
    throughput: float                 # inferences/s over the streamed inputs
    latency_s: float                  # median unloaded latency
    latency_loaded_s: float           # median latency while streaming
    latencies_s: list[float]
    verify: dict[str, Any]
    stage_bound_throughput: float     # 1 / max(mean stage compute, mean hop wire time) while streaming
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def over_stage_bound(self) -> float:
        """Measured throughput / the stage bound, uncapped (0 without a bound)."""
        return self.throughput / self.stage_bound_throughput if self.stage_bound_throughput > 0 else 0.0

    @property
    def pipeline_efficiency(self) -> float:
        """How close the stream came to the stage bound, at most 1: a throughput above the bound means
        the bound under-counts the pipeline (``efficiency_note`` says why), not an efficiency above 100%."""
        return min(1.0, self.over_stage_bound)

    def efficiency_note(self) -> str | None:
        """Why the pipeline efficiency is capped, when measured throughput exceeds the stage bound: outputs
        that came in a burst (the whole stream, first input sent to last output, kept within the bound), or
        spans that overlap."""
        if self.over_stage_bound <= 1.0:
            return None
        by = self.extra.get("stage_bound_by", "the slowest stage or hop")
        head = (f"measured throughput {self.throughput:.4g}/s is {self.over_stage_bound:.2f}x the stage bound "
                f"{self.stage_bound_throughput:.4g}/s (1 / mean time per input of {by}), so pipeline efficiency "
                "shows 100%: ")
        stream = self.extra.get("stream_throughput")
        if stream is not None and stream <= self.stage_bound_throughput:
            return head + (f"the outputs reached the driver in a burst, so their spacing overstates the rate. Over "
                           f"the whole stream (first streamed input sent to last output) it ran at {stream:.4g}/s: "
                           f"{self.inputs} inputs are too few for a steady state of this plan; stream more (-n)")
        return head + ("the bound averages each input's span, and spans that overlap (several transfers in "
                       "flight on one link, or a wire time that includes waiting for its peer) add up to more than "
                       "the time the resource was busy")

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "inputs": self.inputs, "throughput": self.throughput,
                "latency_s": self.latency_s, "latency_loaded_s": self.latency_loaded_s,
                "latencies_s": self.latencies_s, "stage_bound_throughput": self.stage_bound_throughput,
                "pipeline_efficiency": self.pipeline_efficiency, "over_stage_bound": self.over_stage_bound,
                "efficiency_note": self.efficiency_note(), "verify": self.verify, "devices": self.devices,
                "hops": self.hops, **self.extra}

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = "the run's JSON") -> "RunReport":
        """A report back from ``to_dict`` (a run's ``--out`` JSON without ``--compare``); ``where`` names
        the document in errors."""
        own = ("model", "devices", "hops", "inputs", "throughput", "latency_s", "latency_loaded_s", "latencies_s",
               "verify", "stage_bound_throughput")
        derived = ("pipeline_efficiency", "over_stage_bound", "efficiency_note")
        missing = [k for k in own if k not in doc] if isinstance(doc, dict) else list(own)
        if missing:
            raise RuntimeFailure(f"{where}: not a run report of `hetsplit run --out` (it lacks "
                                 f"{', '.join(missing)}); give that file")
        return cls(**{k: doc[k] for k in own},
                   extra={k: v for k, v in doc.items() if k not in own and k not in derived})


def stage_bound(devices: list[dict[str, Any]], links: dict[tuple[str, str], float]) -> tuple[float, str]:
    """The throughput the measured mean compute per input of ``devices`` and mean wire time per input of
    ``links`` ((from, to) -> seconds; links to or from the driver left out) allow, and what sets it."""
    spans = {f"stage {d['device']}": d["compute_mean_s"] for d in devices}
    spans.update({f"link {u}->{v}": t for (u, v), t in links.items() if "driver" not in (u, v)})
    by, worst = max(spans.items(), key=lambda kv: kv[1], default=("", 0.0))
    return (1.0 / worst, by) if worst > 0 else (0.0, "")


def wire_times(manifest: Manifest, sends: dict[int, dict[int, dict]], recvs: dict[int, dict[int, dict]]
               ) -> dict[int, list[float]]:
    """Per message (both ends measured), the time each input's transfer took once both ends were ready and
    its link was free: ``recv done - max(send posted, recv posted, the link's previous transfer done)``.
    A link (u -> v) carries one transfer at a time, in the order the sends were posted; receives posted
    ahead would otherwise count the wait behind earlier transfers as wire time."""
    by_link: dict[tuple[int, int], list[tuple[float, int, int, float, float]]] = {}
    out: dict[int, list[float]] = {}
    for m in manifest.messages:
        snd, rcv = sends.get(m.src_rank, {}).get(m.id), recvs.get(m.dst_rank, {}).get(m.id)
        if snd is None or rcv is None:
            continue
        out[m.id] = [0.0] * len(rcv["done"])
        link = by_link.setdefault((m.src_rank, m.dst_rank), [])
        link += [(s0, m.id, i, r0, done) for i, (s0, r0, done) in enumerate(zip(snd["start"], rcv["start"],
                                                                                 rcv["done"]))]
    for transfers in by_link.values():
        free = float("-inf")
        for s0, mid, i, r0, done in sorted(transfers):
            out[mid][i] = max(0.0, done - max(s0, r0, free))
            free = max(free, done)
    return out


def summarize(manifest: Manifest, docs: dict[int, dict]) -> RunReport:
    """Measurements of a finished run from the rank documents (ranks on other hosts are left out).

    Per device: compute time per input (the sum of its segments), idle time waiting for messages,
    bytes received and sent per input (``*_workers_bytes``: between workers only, what the plan's
    TaskGraph messages count), CPU time, peak memory, energy where a meter is readable. Per message
    (``hops``): its wire time per input and its bytes beside the TaskGraph's. Per link
    (``extra["links"]``): bytes per input and the messages on it."""
    drv = docs[0]
    n, k = len(drv["t_out"]), int(drv["latency_inputs"])
    steady = slice(k, n) if n - k >= 2 else slice(0, n)
    sends = {r: {int(e["id"]): e for e in d["send"]} for r, d in docs.items()}
    recvs = {r: {int(e["id"]): e for e in d["recv"]} for r, d in docs.items()}
    devices = []
    for w in manifest.stages:
        if w.rank not in docs:  # on another host
            continue
        d = docs[w.rank]
        out_msgs, in_msgs = manifest.sent_by(w.rank), manifest.received_by(w.rank)
        send_s = [b - a for m in out_msgs for a, b in zip(sends[w.rank][m.id]["start"][steady],
                                                          sends[w.rank][m.id]["done"][steady])]
        comp = d["compute_s"]
        devices.append({
            "device": w.device, "rank": w.rank, "segments": len(w.segments), "threads": d.get("threads", 1),
            "kind": d.get("kind", "cpu"), "executor": d.get("executor"),
            **compute_fields(d, steady),
            "idle_s": float(np.sum(d["idle_s"][steady])) / max(1, len(d["idle_s"][steady])),
            "recv_bytes": sum(m.nbytes for m in in_msgs), "send_bytes": sum(m.nbytes for m in out_msgs),
            "recv_workers_bytes": sum(m.nbytes for m in in_msgs if m.src_rank != 0),
            "send_workers_bytes": sum(m.nbytes for m in out_msgs if m.dst_rank != 0),
            "send_s": _med(send_s), "peak_rss_bytes": d.get("peak_rss_bytes", 0),
            "energy_j": d["energy_j"] / len(comp) if d.get("energy_j") is not None and comp else None,
            "energy_meter": d.get("energy_meter")})
    hops = []
    wires = wire_times(manifest, sends, recvs)
    for m in manifest.messages:
        if m.id not in wires:
            continue
        wire = wires[m.id]
        kind = None if m.collective is None else manifest.collectives[m.collective].kind   # gather, scatter
        hops.append({"from": m.src, "to": m.dst, "payload": m.payload, "collective": kind, "nbytes": m.nbytes,
                     "plan_nbytes": m.plan_nbytes, "tensors": [t.spec.name for t in m.tensors],
                     "wire_s": _med(wire[steady]), "wire_all_s": wire})
    links: dict[tuple[str, str], dict] = {}
    for h in hops:
        link = links.setdefault((h["from"], h["to"]), {"from": h["from"], "to": h["to"], "nbytes": 0, "messages": 0,
                                                       "wire_mean_s": 0.0})
        link["nbytes"] += h["nbytes"]
        link["messages"] += 1
        link["wire_mean_s"] += float(np.mean(h["wire_all_s"][steady])) if h["wire_all_s"] else 0.0
    lat = [b - a for a, b in zip(drv["t_in"], drv["t_out"])]
    t_out = drv["t_out"][steady]
    thr = (len(t_out) - 1) / (t_out[-1] - t_out[0]) if len(t_out) >= 2 and t_out[-1] > t_out[0] else 0.0
    bound, by = stage_bound(devices, {pair: link["wire_mean_s"] for pair, link in links.items()})
    extra: dict[str, Any] = {"plan_kind": "pipeline" if manifest.plan.get("stages") else "mapping",
                             "links": list(links.values()), "stage_bound_by": by}
    if drv.get("process_cpu_s") is not None and n:
        extra["driver_cpu_per_input_s"] = drv["process_cpu_s"] / n
    if (stream := stream_rate(drv)) is not None:
        extra["stream_throughput"] = stream
    return RunReport(manifest.model, devices, hops, n, thr, _med(lat[:k]) if k else _med(lat), _med(lat[steady]),
                     lat, drv.get("verify", {}), bound, extra)


def compare(report: RunReport, predicted: Any, cluster: Any = None, cut_bytes: dict | None = None,
            simulated: dict | None = None) -> dict:
    """Predicted (plan.types.Metrics) beside measured, with measured/predicted ratios; ``simulated``
    (the second value of ``predict``) adds the discrete-event simulator's throughput and latency.

    A device that runs its layers in several segments per input also gets its compute beyond the
    prediction spread over its segments, against 0: the ``closed`` and ``simulated`` estimates charge a
    segment nothing beyond its layers, while each is one executor call (inputs handed in, outputs handed
    back; on a GPU, copies and a sync). Only ``here`` charges them (``estimate.segments``, measured on
    this machine's CPU by the runtime calibration; ``run --here`` compares through
    ``experiments.mapping_run``). The figure holds the whole excess, whatever else slowed the device too
    (other processes on its cores); on a 16-core H200 host ~0.24 ms per segment on a 4-thread onnxruntime
    CPU and ~0.3-0.4 ms on the GPU (``bench/data/h200-16c``)."""
    p = predicted.to_dict() if hasattr(predicted, "to_dict") else dict(predicted)
    rows = [{"metric": "throughput (1/s)", "predicted": p.get("throughput"), "measured": report.throughput}]
    if simulated:
        rows.append({"metric": "throughput, simulated (1/s)", "predicted": simulated["throughput"],
                     "measured": report.throughput})
    rows += [{"metric": "latency (s)", "predicted": p.get("latency_s"), "measured": report.latency_s}]
    if simulated:
        rows.append({"metric": "latency, simulated (s)", "predicted": simulated["latency_s"],
                     "measured": report.latency_s})
    rows.append({"metric": "bottleneck (s)", "predicted": p.get("bottleneck_s"),
                 "measured": 1.0 / report.throughput if report.throughput else None})
    comp = p.get("compute_s_per_device", {}) or {}
    for d in report.devices:
        rows.append({"metric": f"compute {d['device']} (s)", "predicted": comp.get(d["device"]),
                     "measured": d["compute_s"]})
    for d in report.devices:
        k, pred = d.get("segments", 1), comp.get(d["device"])
        if k > 1 and pred is not None:
            rows.append({"metric": f"compute {d['device']} beyond the prediction, per segment ({k} per input) (s)",
                         "predicted": 0.0, "measured": (d["compute_s"] - pred) / k})
    if cluster is not None:
        for h in report.hops:
            if "driver" in (h["from"], h["to"]):
                continue
            u, v = cluster.index(h["from"]), cluster.index(h["to"])
            rows.append({"metric": f"transfer {h['from']}->{h['to']} (s)",
                         "predicted": float(cluster.transfer_time(u, v, h["nbytes"])), "measured": h["wire_s"]})
    for r in rows:
        pr, me = r["predicted"], r["measured"]
        r["ratio"] = (me / pr) if pr and me is not None else None
    doc = {"predicted": p, "measured": report.to_dict(), "rows": rows}
    if simulated:
        doc["simulated"] = simulated
    return doc


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

    cpu = [d for d in report.devices if d.get("kind", "cpu") == "cpu" and d.get("cpu_per_input_s") is not None]
    driver = report.extra.get("driver_cpu_per_input_s")
    cores = cores or len(os.sched_getaffinity(0))
    if not cpu or driver is None or sum(d["threads"] for d in cpu) < cores:
        return None
    transfer = [max(0.0, d["cpu_per_input_s"] - d["compute_mean_s"]) for d in cpu]
    slowest = max(d["compute_mean_s"] for d in cpu)
    total = driver + sum(transfer)
    if slowest <= 0 or total / len(cpu) <= share * slowest:
        return None
    per = ", ".join(f"{d['device']} {t * 1e3:.2f} ms" for d, t in zip(cpu, transfer))
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


def stream_throughput(report: RunReport, latency_inputs: int, driver_doc: dict | None = None) -> float:
    """Inputs per second over the streamed inputs (all but the first ``latency_inputs``): their count /
    (last output - first streamed input sent). Unlike the spacing of the outputs (``report.throughput``)
    it does not grow when outputs reach the driver in bursts, as they do when the driver waits for a
    core. Exact with the driver's record (``rank0.json`` of the run directory); without it the streamed
    inputs, all posted at once, are taken to leave together: the time is their longest latency."""
    if driver_doc is not None and (rate := stream_rate(driver_doc)) is not None:
        return rate
    lat = list(report.latencies_s)
    streamed = lat[latency_inputs:] if len(lat) > latency_inputs else lat
    span = max(streamed) if streamed else 0.0
    return len(streamed) / span if span > 0 else 0.0


def stream_rate(driver_doc: dict) -> float | None:
    """The streamed inputs' count / (last output - first streamed input sent), from the driver's record;
    None when no streamed input came back."""
    t_in, t_out, k = driver_doc["t_in"], driver_doc["t_out"], int(driver_doc["latency_inputs"])
    return (len(t_out) - k) / (t_out[-1] - t_in[k]) if len(t_out) > k and t_out[-1] > t_in[k] else None


def read_driver_doc(run_dir: str | Path | None) -> dict | None:
    """The driver's record of a run (``rank0.json`` in its run directory), or None."""
    if run_dir is None:
        return None
    path = Path(run_dir) / "rank0.json"
    return json.loads(path.read_text()) if path.is_file() else None


def predict(plan: Any, graph: Any, cluster: Any, profile_costs: Any = None, inputs: int = 100) -> tuple[Any, dict]:
    """``plan``'s metrics on ``cluster`` (costs from the profile where it has the device type) at the
    ``closed`` fidelity, and the ``simulated`` fidelity's steady-state throughput and one input's
    latency as the run streams ``inputs``."""
    from hetsplit.costs import build_problem
    from hetsplit.estimate import SimOptions, estimate_plan

    problem = build_problem(graph, cluster, profile_costs)
    sim = estimate_plan(problem, plan, "simulated", SimOptions(inputs=max(2, inputs), keep_timeline=False))
    return (estimate_plan(problem, plan, "closed"),
            {"throughput": sim.throughput, "latency_s": sim.latency_s, "inputs": max(2, inputs)})
