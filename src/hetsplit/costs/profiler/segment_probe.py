"""What a segment costs on a torch device beyond its layers, measured with the runtime's own call.

The runtime runs a GPU device's share of a plan as segments, one ``TorchInterpreter.call`` each per input
(``runtime.gpu``: inputs from host arrays, outputs back through page-locked memory, one sync). Here the
model is cut into k segments at layer boundaries (k = 1, 2, 4, 8 ..., equal node counts), each run as one
such call per input, the calls timed one by one (``repeats`` times, median); a segment's time less its
layers' profiled time is what the call added, and ``costs.segment_fit.fit_segments`` fits ``call_s +
byte_s x`` its boundary bytes to it over every segment of every cut. The host copy of a GPU's boundary
tensors is part of that call, so it is in ``byte_s`` (``host_byte_s`` stays 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsplit.costs.profiler.torch_cuda import Clock
from hetsplit.costs.segment import SegmentCost
from hetsplit.costs.segment_fit import fit_segments

CUTS = (1, 2, 4, 8)


def node_ranges(layers: np.ndarray, k: int) -> list[range]:
    """``k`` consecutive node ranges of about equal node counts, each starting where a layer starts
    (``layers``: the layer of each node in run order); fewer when the model has fewer layers."""
    starts = np.concatenate([[0], np.flatnonzero(np.diff(layers)) + 1])
    want = np.linspace(0, len(layers), k + 1)[1:-1]
    cuts = sorted({int(starts[np.argmin(np.abs(starts - w))]) for w in want} - {0})
    bounds = [0, *cuts, len(layers)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


def measure_segments(interp: Any, feeds: dict[str, Any], layers: np.ndarray, layer_s: np.ndarray,
                     marks: Clock, cuts: tuple[int, ...] = CUTS, repeats: int = 5) -> list[dict[str, Any]]:
    """Per segment of every cut: its boundary bytes, its median time per call (on ``marks``) and its
    layers' time (``layer_s``; ``layers``: the layer of each node in run order)."""
    host = {k: np.asarray(v) for k, v in feeds.items()}
    rows: list[dict[str, Any]] = []
    for k in cuts:
        ranges = node_ranges(layers, k)
        sides = [interp.boundary(r) for r in ranges]
        times = np.zeros((repeats, len(ranges)))
        nbytes = np.zeros(len(ranges))
        for rep in range(repeats):
            values = dict(host)
            for j, (r, (ins, outs)) in enumerate(zip(ranges, sides)):
                given = {name: values[name] for name in ins}
                t0 = marks.mark()
                got = interp.call(given, outs, nodes=r)
                t1 = marks.mark()
                marks.sync()
                times[rep, j] = marks.seconds(t0, t1)
                values.update(got)
                nbytes[j] = sum(a.nbytes for a in given.values()) + sum(a.nbytes for a in got.values())
        for j, r in enumerate(ranges):
            mine = np.unique(layers[r.start:r.stop])
            rows.append({"cut": k, "segment": j, "boundary_bytes": float(nbytes[j]),
                         "measured_s": float(np.median(times[:, j])), "layers_s": float(layer_s[mine].sum())})
    return rows


def segment_cost(rows: list[dict[str, Any]], where: str) -> SegmentCost:
    """The fitted ``SegmentCost`` of ``rows`` (``measure_segments``), its source saying how."""
    call_s, byte_s = fit_segments(rows)
    cuts = sorted({r["cut"] for r in rows})
    return SegmentCost(call_s, byte_s, 0.0, (
        f"measured: the model cut into {'/'.join(map(str, cuts))} segments at layer boundaries, each run as the "
        f"runtime's torch call on {where} ({len(rows)} segments), segment time less its layers' fitted as "
        f"call + bytes x its boundary bytes (host copies included)"))
