"""SplitProblem: everything numeric a partitioner or evaluator needs, in one place.

It joins the graph's cut sizes, the cost table (one column per device type) and the cluster's link
matrices. Stage and cut costs are defined here once, with the pipeline semantics of DESIGN.md, so
every solver and the evaluator agree to the last bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hetsplit.cluster.types import Cluster
from hetsplit.costs.table import Broadcast, CostTable, Index
from hetsplit.errors import ProfileError
from hetsplit.graph.types import Graph
from hetsplit.units import format_bytes


@dataclass(frozen=True)
class ModelScope:
    """What the graph stands for: ``model_blocks`` Transformer blocks of a whole model, when the graph
    is some of them (a reproduction costs one block of an 8-block model); None: the graph is the
    whole model. Memory models judge what fits on a chip by its share of the whole model."""

    model_blocks: int | None = None

    def __post_init__(self) -> None:
        if self.model_blocks is not None and self.model_blocks < 1:
            raise ProfileError(f"a model has at least one block, got model_blocks={self.model_blocks}")


@dataclass
class SplitProblem:
    """A model's costs on a cluster. Layers 0..L-1, devices 0..D-1, cuts 0..L; ``scope``: the whole
    model the graph is part of."""

    graph: Graph
    cluster: Cluster
    costs: CostTable
    scope: ModelScope = ModelScope()

    def __post_init__(self) -> None:
        if self.costs.layer_names != self.graph.names:
            raise ProfileError(f"cost table layers do not match model {self.graph.name!r}")
        missing = [t for t in self.cluster.types if t not in self.costs.types]
        if missing:
            raise ProfileError(f"no costs for device types {missing}; the table has {self.costs.types}")
        if self.costs.types != self.cluster.types:
            self.costs = self.costs.select(self.cluster.types)

    # ---- sizes ----------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return self.graph.num_layers

    @property
    def num_devices(self) -> int:
        return self.cluster.num_devices

    @cached_property
    def cut_bytes(self) -> np.ndarray:
        return self.graph.cut_bytes

    @cached_property
    def device_type(self) -> np.ndarray:
        """Cost-table column of each device."""
        return self.cluster.type_index

    @cached_property
    def memory_bytes(self) -> np.ndarray:
        return self.cluster.memory_bytes

    # ---- stage costs (vectorized: i, j, d broadcast) --------------------------------------------
    def stage_time(self, i: Index, j: Index, d: Index) -> Broadcast:
        """Compute seconds of layers i..j-1 on device d as one segment: the layers' times plus what the
        segment costs beyond them (``segment_time``) and its messages' ends (``message_end_time``)."""
        return (self.costs.range_time(i, j, self.device_type[d]) + self.segment_time(i, j, d)
                + self.message_end_time(i, j, d))

    def message_end_time(self, i, j, d):
        """CPU a stage of layers i..j-1 on device d spends on its messages' ends (``cluster.links``):
        receiving cut i and sending cut j (``receive_end_time``, ``send_end_time``). 0 for an empty stage."""
        i_arr, j_arr = np.asarray(i), np.asarray(j)
        t = np.where(j_arr > i_arr, self.receive_end_time(i_arr, d) + self.send_end_time(j_arr, d), 0.0)
        return t if np.ndim(t) else float(t)

    def receive_end_time(self, k, d):
        """CPU device d spends receiving cut k as a stage's first cut: from the stage before (k > 0, on
        another device) or the model input from the cluster's source when that is another device."""
        src = self.cluster.source_index
        k, d = np.asarray(k), np.asarray(d)
        moves = (k > 0) | ((d != src) if src is not None else False)
        return moves * self.cluster.links.end(d, self.cut_bytes[k])

    def send_end_time(self, k, d):
        """CPU device d spends sending cut k as a stage's last cut: to the stage after (k < L) or the
        outputs to the cluster's sink when that is another device."""
        snk = self.cluster.sink_index
        k, d = np.asarray(k), np.asarray(d)
        moves = (k < self.num_layers) | ((d != snk) if snk is not None else False)
        return moves * self.cluster.links.end(d, self.cut_bytes[k])

    def layers_time(self, i: Index, j: Index, d: Index) -> Broadcast:
        """Seconds of layers i..j-1 on device d as the whole model's run times them (no cut charged)."""
        return self.costs.range_time(i, j, self.device_type[d])

    def segment_time(self, i: Index, j: Index, d: Index) -> Broadcast:
        """What a stage of layers i..j-1 on device d costs beyond its layers (``costs.segment``): one
        executor call, the bytes crossing its boundary (``cut_bytes[i] + cut_bytes[j]``: what it receives
        and sends, the model input and outputs included) and, unless it starts the model, its first
        layer's unfused extra. 0 for an empty stage (i == j)."""
        t = self.device_type[d]
        c = self.costs
        assert c.unfused_s is not None
        i_arr, j_arr = np.asarray(i), np.asarray(j)
        boundary = self.cut_bytes[i_arr] + self.cut_bytes[j_arr]
        first = np.minimum(i_arr, self.num_layers - 1)
        unfused = np.where((i_arr > 0) & (i_arr < self.num_layers), c.unfused_s[first, t], 0.0)
        seconds = np.where(j_arr > i_arr, c.segment_call_s[t] + c.segment_byte_s[t] * boundary + unfused, 0.0)
        return seconds if np.ndim(seconds) else float(seconds)

    def stage_energy(self, i: Index, j: Index, d: Index) -> Broadcast:
        return self.costs.range_energy(i, j, self.device_type[d])

    def stage_mem(self, i: Index, j: Index, d: Index) -> Broadcast:
        """Bytes a stage needs: its layers' memory plus what it receives (cut i) and sends (cut j)."""
        return self.costs.range_mem(i, j, self.device_type[d]) + self.cut_bytes[i] + self.cut_bytes[j]

    # ---- communication -------------------------------------------------------------------------
    def cut_time(self, k: Index, u: Index, v: Index) -> Broadcast:
        """Seconds to move the tensors live across cut k from device u to v (0 if u == v)."""
        return self.cluster.links.time(u, v, self.cut_bytes[k])

    def cut_energy(self, k: Index, u: Index, v: Index) -> Broadcast:
        return self.cluster.links.energy(u, v, self.cut_bytes[k])

    def fits(self, i: Index, j: Index, d: Index) -> Broadcast:
        return self.stage_mem(i, j, d) <= self.memory_bytes[d]

    def why_unplaceable(self, layer: int) -> str | None:
        """Why no device can take ``layer`` alone (no time on any device type, or too little memory); None if one can."""
        name = self.graph.layers[layer].name
        devs = np.arange(self.num_devices)
        runnable = np.isfinite(self.stage_time(layer, layer + 1, devs))
        if not runnable.any():
            sources = "; ".join(dict.fromkeys(s for t in self.cluster.types if (s := self.costs.sources.get(t))))
            return (f"layer {name!r} has no time on any device type of cluster {self.cluster.name!r} "
                    f"({', '.join(self.cluster.types)}{f'; costs from {sources}' if sources else ''}): the costs "
                    "give none (null in a profile), so no device can run it; give its time, or add a device type "
                    "that runs it")
        need = self.stage_mem(layer, layer + 1, devs[runnable])
        if (need <= self.memory_bytes[runnable]).any():
            return None
        return (f"layer {name!r} fits on no device that runs it: it needs {format_bytes(float(need.min()))} (its "
                f"memory, inputs and outputs), the largest such device has "
                f"{format_bytes(float(self.memory_bytes[runnable].max()))}")
