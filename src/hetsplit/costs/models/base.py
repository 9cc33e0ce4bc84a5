"""The seam for device models: anything that turns (graph, device) into per-layer costs.

A device model is a class registered under a name (``roofline``, ``cim``, ``mcu``, ``imc``,
``dpu``, ``calibrated``...). A device's ``model`` field picks it, its ``params`` configure it.
Register a new one with ``@register_model("name")``; every planner sees it through the CostTable.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

import numpy as np

from hetsplit.cluster.loader import SEGMENT_PARAMS
from hetsplit.cluster.presets import load_preset
from hetsplit.cluster.types import Device
from hetsplit.costs.segment import FIELDS, SegmentCost
from hetsplit.errors import ClusterError
from hetsplit.graph.types import Graph
from hetsplit.registry import Registry


@dataclass
class LayerCosts:
    """One device type's costs for every layer of a graph (inf where it cannot run a layer)."""

    time_s: np.ndarray
    energy_j: np.ndarray
    mem_bytes: np.ndarray
    source: str = ""  # e.g. "roofline model, preset xeon-w3323"


class DeviceModel(Protocol):
    """Estimates per-layer costs of a graph on one device (type)."""

    def layer_costs(self, graph: Graph) -> LayerCosts: ...


ModelFactory = Callable[[Device], DeviceModel]
MODELS: Registry[ModelFactory] = Registry("device model", "hetsplit.costs.models")   # the package registers its models
register_model = MODELS.register      # class decorator: make a device model available under a name
model_names = MODELS.names


def device_model(device: Device) -> DeviceModel:
    """The device model a device asks for, configured by its params (less its segment figures, which
    no model reads: ``segment_cost``)."""
    factory = MODELS.lookup(device.model, ClusterError, f"device {device.name!r}")
    if set(SEGMENT_PARAMS.values()) & set(device.params):
        device = replace(device, params=model_params(device.params))
    return factory(device)


def model_params(params: dict[str, Any]) -> dict[str, Any]:
    """A device's params less its segment figures (``segment_cost`` reads those; no model does)."""
    return {k: v for k, v in params.items() if k not in SEGMENT_PARAMS.values()}


def segment_cost(device: Device) -> SegmentCost | None:
    """What one segment costs on ``device`` beyond its layers (``costs.segment``), from its params
    ``segment_call_s``, ``segment_byte_s``, ``segment_host_byte_s`` (its preset's, or the cluster
    file's ``segment:``), each figure with its source; None when it gives none (charged nothing)."""
    keys = dict(zip(FIELDS, SEGMENT_PARAMS.values()))    # call_s -> segment_call_s ...
    if not set(keys.values()) & set(device.params):
        return None
    preset = None
    if device.preset:
        try:
            preset = load_preset(device.preset)
        except ClusterError:
            pass   # a preset file outside the built-ins: its figures are named as given
    values, parts = {}, []
    for field, key in keys.items():
        if key not in device.params:
            parts.append(f"{field}: not given, 0")
            continue
        try:
            values[field] = float(device.params[key])
        except (TypeError, ValueError):
            raise ClusterError(f"device {device.name!r}: {key} must be a number, got {device.params[key]!r}") from None
        if preset is not None and preset.params.get(key) == device.params[key]:
            parts.append(f"{field}: {preset.sources.get('params.' + key, 'preset ' + preset.name)}")
        else:
            parts.append(f"{field}: given for device {device.name!r}")
    return SegmentCost(**values, source="; ".join(parts))


def element_bytes(device: Device) -> float | None:
    """Bytes per tensor element the device keeps and sends (its model's ``element_bytes``: 1 for an
    int8 MCU), None when its model declares none (it runs the model's own sizes; such a model is not
    even built, so a device costed from a profile needs no model parameters)."""
    if not hasattr(MODELS.get(device.model), "element_bytes"):
        return None
    return device_model(device).element_bytes  # type: ignore[attr-defined]


class ParamsParser(Protocol):
    """A parameter dataclass: ``from_params(params, where)`` builds it from a device's params."""

    def from_params(self, params: dict[str, Any], where: str) -> Any: ...


class Costing(Protocol):
    """An analytical model built from its parameters: ``costs(graph)``."""

    def costs(self, graph: Graph) -> LayerCosts: ...


class AnalyticalDeviceModel:
    """A device model made of a parameter dataclass (``from_params(params, where)``) and a model class
    (``Model(params, label)`` with ``costs(graph)``): subclasses name the two."""

    params_type: ParamsParser
    model_type: Callable[[Any, str], Costing]

    def __init__(self, device: Device) -> None:
        self.device = device
        params = self.params_type.from_params(device.params, f"device {device.name!r}")
        self.model = self.model_type(params, device.preset or device.name)

    def layer_costs(self, graph: Graph) -> LayerCosts:
        return self.model.costs(graph)


def default_mem_bytes(graph: Graph) -> np.ndarray:
    """What a layer keeps resident by default: its weights and its output buffer."""
    return graph.param_bytes + graph.out_bytes

