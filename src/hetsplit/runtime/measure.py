"""Turning the per-process logs of a run into measurements: one ``RunReport`` (``runtime.report``) for
every plan kind; the comparison with a prediction is ``workflow.run``'s.

Per device: compute time per input, idle time, bytes and time sent / received, peak memory, and the process's CPU time per input (compute plus its transfer threads;
the driver's too: on a machine whose cores all run stages, the driver's CPU time is taken from theirs).
Per message (a hop u -> v): the wire time of each input, ``recv done at v - max(send posted at u, recv
posted at v, the link's previous transfer done)``: the time the transfer took once both ends were ready
and the link was free (``wire_times``). End to end: unloaded latency (the
first inputs go one at a time), latency under load, and throughput over the streamed inputs.
Energy per input comes from the device's meter (RAPL, NVML) where one is readable, else null.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.runtime.manifest import Manifest
from hetsplit.runtime.report import DeviceRun, HopRun, LinkRun, RunReport, Verification
from hetsplit.runtime.rounds import in_flight

__all__ = ["RunReport", "read_driver_doc", "stage_bound", "stream_rate", "stream_throughput", "summarize",
           "wire_times"]


def _med(xs) -> float:
    return float(np.median(xs)) if len(xs) else 0.0


def compute_fields(doc: dict[str, Any], steady: slice) -> dict[str, Any]:
    """A worker's compute and CPU per input from its record: ``compute_s`` (median wall time of its
    steady inputs), ``compute_mean_s``, ``cpu_per_input_s`` (its process, every thread, per streamed
    input: the latency inputs sent alone first carry the stream's one-time costs, and a quota caps CPU
    per period of wall time they are not part of; over every input in a record without the stream's
    count) and, with one compute thread, ``compute_cpu_per_input_s`` (the CPU inside its sub-models, per
    streamed input too: the rest of the process's CPU is the runtime's own)."""
    comp = doc["compute_s"]
    n = len(comp)
    one_thread = doc.get("threads", 1) == 1 and doc.get("kind", "cpu") == "cpu"
    streamed = doc.get("stream_inputs") if doc.get("stream_cpu_s") is not None else None
    if streamed:
        cpu, inside = doc["stream_cpu_s"] / streamed, doc.get("stream_compute_cpu_s")
        inside = inside / streamed if inside is not None else None
    else:
        cpu = doc["process_cpu_s"] / n if doc.get("process_cpu_s") is not None and n else None
        inside = doc["compute_cpu_s"] / n if n and doc.get("compute_cpu_s") is not None else None
    return {"cpu_per_input_s": cpu, "compute_cpu_per_input_s": inside if one_thread else None,
            "compute_s": _med(comp[steady]), "compute_mean_s": float(np.mean(comp[steady])) if n else 0.0}


def stage_bound(devices: list[DeviceRun], links: dict[tuple[str, str], float]) -> tuple[float, str]:
    """The throughput the measured mean compute per input of ``devices`` and mean wire time per input of
    ``links`` ((from, to) -> seconds; links to or from the driver left out) allow, and what sets it."""
    spans = {f"stage {d.device}": d.compute_mean_s for d in devices}
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
    (``hops``): its wire time per input and its bytes beside the TaskGraph's. Per link (``links``): bytes
    per input and the messages on it."""
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
        devices.append(DeviceRun(
            device=w.device, rank=w.rank, segments=len(w.segments), threads=d.get("threads", 1),
            kind=d.get("kind", "cpu"), executor=d.get("executor"), **compute_fields(d, steady),
            idle_s=float(np.sum(d["idle_s"][steady])) / max(1, len(d["idle_s"][steady])),
            recv_bytes=sum(m.nbytes for m in in_msgs), send_bytes=sum(m.nbytes for m in out_msgs),
            recv_workers_bytes=sum(m.nbytes for m in in_msgs if m.src_rank != 0),
            send_workers_bytes=sum(m.nbytes for m in out_msgs if m.dst_rank != 0),
            send_s=_med(send_s), peak_rss_bytes=d.get("peak_rss_bytes", 0),
            energy_j=d["energy_j"] / len(comp) if d.get("energy_j") is not None and comp else None,
            energy_meter=d.get("energy_meter")))
    hops = []
    wires = wire_times(manifest, sends, recvs)
    for m in manifest.messages:
        if m.id not in wires:
            continue
        wire = wires[m.id]
        kind = None if m.collective is None else manifest.collectives[m.collective].kind   # gather, scatter
        hops.append(HopRun(src=m.src, dst=m.dst, payload=m.payload, collective=kind, nbytes=m.nbytes,
                           plan_nbytes=m.plan_nbytes, tensors=[t.spec.name for t in m.tensors],
                           wire_s=_med(wire[steady]), wire_all_s=wire))
    links: dict[tuple[str, str], LinkRun] = {}
    for h in hops:
        old = links.get((h.src, h.dst), LinkRun(h.src, h.dst, 0, 0, 0.0))
        links[(h.src, h.dst)] = LinkRun(h.src, h.dst, old.nbytes + h.nbytes, old.messages + 1, old.wire_mean_s + (
            float(np.mean(h.wire_all_s[steady])) if h.wire_all_s else 0.0))
    lat = [b - a for a, b in zip(drv["t_in"], drv["t_out"])]
    t_out = drv["t_out"][steady]
    thr = (len(t_out) - 1) / (t_out[-1] - t_out[0]) if len(t_out) >= 2 and t_out[-1] > t_out[0] else 0.0
    bound, by = stage_bound(devices, {pair: link.wire_mean_s for pair, link in links.items()})
    # the first input sent alone warms the run up (pooled buffers allocated, first calls: 18 ms against 4 ms
    # after it for a small tensor-parallel plan here, 240 ms at an emulated share of 0.1): with two or more
    # sent alone, the unloaded latency is the median of the others
    alone = lat[1:k] if k >= 2 else lat[:k]
    return RunReport(manifest.model, devices, hops, n, thr, _med(alone) if k else _med(lat), _med(lat[steady]),
                     lat, Verification.from_dict(drv.get("verify") or {}, "the driver's verification"), bound,
                     plan_kind="pipeline" if manifest.plan.get("stages") else "mapping", stage_bound_by=by,
                     links=list(links.values()), stream_throughput=stream_rate(drv), in_flight=in_flight(manifest),
                     driver_cpu_per_input_s=drv["process_cpu_s"] / n if drv.get("process_cpu_s") is not None and n
                     else None)


def stream_throughput(report: RunReport, latency_inputs: int) -> float:
    """Inputs per second over the streamed inputs (all but the first ``latency_inputs``): their count /
    (last output - first streamed input sent). Unlike the spacing of the outputs (``report.throughput``)
    it does not grow when outputs reach the driver in bursts, as they do when the driver waits for a
    core. Exact from the driver's record (``report.stream_throughput``, set by ``summarize``); without it
    (a report read from an older file) the streamed inputs, all posted at once, are taken to leave
    together: the time is their longest latency."""
    if report.stream_throughput is not None:
        return report.stream_throughput
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


