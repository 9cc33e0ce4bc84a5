"""This machine's cores (the ``local`` cluster): the calibrated model with this machine's calibration
(``costs.local_calibration``, measured on first use and cached), the roofline figures as a fallback.

Parameters: the roofline ones (``peak_macs``, ``mem_bandwidth``, ``power_active``) for the fallback;
``power_active`` also prices the calibrated times' energy.
"""

from __future__ import annotations

from dataclasses import replace

from hetsplit.cluster.types import Device
from hetsplit.costs.models.base import LayerCosts, register_model
from hetsplit.costs.models.calibrated import CalibratedModel
from hetsplit.costs.models.roofline import RooflineModel
from hetsplit.graph.types import Graph


@register_model("local")
class LocalModel:
    """A core of this machine, costed by its cached calibration (or the roofline fallback)."""

    def __init__(self, device: Device) -> None:
        self.device = device

    def layer_costs(self, graph: Graph) -> LayerCosts:
        from hetsplit.costs.local_calibration import local_costs

        costs = local_costs()
        if costs.calibration is None:
            lc = RooflineModel(replace(self.device, model="roofline")).layer_costs(graph)
        else:
            params = {**costs.calibration.params, "power_active": self.device.params.get("power_active", 0.0)}
            lc = CalibratedModel(replace(self.device, model="calibrated", params=params)).layer_costs(graph)
        lc.source = costs.source
        return lc
