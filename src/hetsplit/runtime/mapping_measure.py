"""Measurements of a mapping run (``hetsplit.manifest/2``), in the shape of a pipeline's RunReport.

Per device: compute time per input (the sum of its segments), idle time waiting for messages,
bytes received and sent per input (``*_workers_bytes``: between workers only, what the plan's
TaskGraph messages count), CPU time, peak memory, energy where a meter is readable. Per message
(``hops``): its wire time per input, ``recv done - max(send posted, recv posted)``, and its bytes
beside the TaskGraph's. Per link (``extra["links"]``): bytes per input and the messages on it. End
to end: latency unloaded and under load, throughput, as for pipelines.
"""

from __future__ import annotations

import numpy as np

from hetsplit.runtime.mapping_manifest import MappingManifest
from hetsplit.runtime.measure import RunReport, _med, compute_fields, stage_bound


def _logs(manifest: MappingManifest, docs: dict[int, dict], rank: int, key: str) -> dict[int, dict]:
    """A rank's send or recv logs by message id (the driver's are kept in edge order)."""
    doc = docs.get(rank)
    if doc is None:
        return {}
    if rank != 0:
        return {int(e["id"]): e for e in doc[key]}
    edges = manifest.driver.send if key == "send" else manifest.driver.recv
    out = {}
    for edge, log in zip(edges, doc[key]):
        mid = next(m.id for m in manifest.messages if m.tag == edge.tag and m.via == "p2p" and
                   ((m.src_rank, m.dst_rank) == (0, edge.rank) if key == "send" else
                    (m.src_rank, m.dst_rank) == (edge.rank, 0)))
        out[mid] = log
    return out


def summarize_mapping(manifest: MappingManifest, docs: dict[int, dict]) -> RunReport:
    drv = docs[0]
    n, k = len(drv["t_out"]), int(drv["latency_inputs"])
    steady = slice(k, n) if n - k >= 2 else slice(0, n)
    sends = {r: _logs(manifest, docs, r, "send") for r in range(manifest.world_size)}
    recvs = {r: _logs(manifest, docs, r, "recv") for r in range(manifest.world_size)}
    devices = []
    for w in manifest.stages:
        if w.rank not in docs:  # on another host
            continue
        d = docs[w.rank]
        comp = d["compute_s"]
        out_msgs = [m for m in manifest.messages if m.src_rank == w.rank]
        in_msgs = [m for m in manifest.messages if m.dst_rank == w.rank]
        send_s = [b - a for m in out_msgs for a, b in zip(sends[w.rank][m.id]["start"][steady],
                                                          sends[w.rank][m.id]["done"][steady])]
        devices.append({
            "device": w.device, "rank": w.rank, "stage": -1, "segments": len(w.segments),
            "threads": d.get("threads", 1), "kind": d.get("kind", "cpu"),
            **compute_fields(d, steady),
            "idle_s": float(np.sum(d["idle_s"][steady])) / max(1, len(d["idle_s"][steady])),
            "recv_bytes": sum(m.nbytes for m in in_msgs), "send_bytes": sum(m.nbytes for m in out_msgs),
            "recv_workers_bytes": sum(m.nbytes for m in in_msgs if m.src_rank != 0),
            "send_workers_bytes": sum(m.nbytes for m in out_msgs if m.dst_rank != 0),
            "send_s": _med(send_s), "peak_rss_bytes": d.get("peak_rss_bytes", 0),
            "energy_j": d["energy_j"] / len(comp) if d.get("energy_j") is not None and comp else None,
            "energy_meter": d.get("energy_meter")})
    hops = []
    for m in manifest.messages:
        snd, rcv = sends.get(m.src_rank, {}).get(m.id), recvs.get(m.dst_rank, {}).get(m.id)
        if snd is None or rcv is None:
            continue
        wire = [done - max(s0, r0) for s0, r0, done in zip(snd["start"], rcv["start"], rcv["done"])]
        hops.append({"from": m.src, "to": m.dst, "payload": m.payload, "via": m.via, "nbytes": m.nbytes,
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
    extra = {"mapping": True, "links": list(links.values()), "stage_bound_by": by}
    if drv.get("process_cpu_s") is not None and n:
        extra["driver_cpu_per_input_s"] = drv["process_cpu_s"] / n
    return RunReport(manifest.model, devices, hops, n, thr, _med(lat[:k]) if k else _med(lat), _med(lat[steady]),
                     lat, drv.get("verify", {}), bound, extra)
