"""The estimated profile of a modelled device (any preset): the device model's per-layer costs."""

from __future__ import annotations

from hetsplit.cluster.types import Device
from hetsplit.costs.models import device_model
from hetsplit.costs.profile import Profile
from hetsplit.costs.table import CostTable
from hetsplit.graph.types import Graph


def modelled_profile(graph: Graph, device: Device) -> Profile:
    """A ``hetsplit.profile/1`` Profile whose only column is ``device``'s model estimate."""
    lc = device_model(device).layer_costs(graph)
    table = CostTable(graph.names, [device.type], lc.time_s[:, None], lc.energy_j[:, None],
                      lc.mem_bytes[:, None], {device.type: lc.source})
    finite = lc.time_s[lc.time_s < float("inf")]
    meta = {"source": f"modelled: {lc.source}", "device": device.name, "model": device.model,
            "preset": device.preset, "whole_model": {"time_s": float(finite.sum()),
                                                      "energy_j": float(lc.energy_j[lc.energy_j < float('inf')].sum()),
                                                      "layers_it_cannot_run": int((lc.time_s == float("inf")).sum())}}
    return Profile(graph, table, meta)
