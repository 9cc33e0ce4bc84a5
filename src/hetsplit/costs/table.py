"""CostTable: per-(layer, device type) time, energy and memory, with O(1) range sums."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from hetsplit.costs.segment import NO_SEGMENT_COST, SegmentCost
from hetsplit.errors import ProfileError

Index = Any          # an int or an integer array: the range functions broadcast like numpy
Broadcast = Any      # what they return: a float for int indices, an ndarray for arrays


@dataclass
class CostTable:
    """Per-layer costs for each device type.

    ``time_s[l, t]`` and ``energy_j[l, t]`` are the cost of layer l on device type t; ``inf`` marks
    a layer the type cannot run. ``mem_bytes[l, t]`` is what the layer keeps resident on a device of
    that type (weights plus its output buffer by default). Prefix sums give any contiguous range in
    O(1); infeasible layers are counted separately so a range containing one is ``inf``, never nan.

    What cutting the model costs on each type (``costs.segment``): ``segment[type]``, per executor call
    and boundary byte (types not named there are charged nothing), and ``unfused_s[l, t]``, the seconds
    layer l pays beyond ``time_s`` when a cut separates it from layer l-1 that the whole model's executor
    fused it with (0 by default; row 0 is never charged).

    ``energy_known[t]`` is False for a type whose energy nobody measured or estimated (a profile whose
    energy status is ``unavailable``): its ``energy_j`` zeros are no figure, and the estimate reports the
    energy of any plan using such a type as unknown (``estimate.energy_known``).
    """

    layer_names: list[str]
    types: list[str]
    time_s: np.ndarray
    energy_j: np.ndarray
    mem_bytes: np.ndarray
    sources: dict[str, str] = field(default_factory=dict)  # type -> where its numbers come from
    segment: dict[str, SegmentCost] = field(default_factory=dict)  # type -> what a segment costs beyond its layers
    unfused_s: np.ndarray | None = None    # L x T extra seconds of a layer cut off from the layer before it
    energy_known: np.ndarray | None = None  # T: False where the type's energy is unknown (None: all known)

    def __post_init__(self) -> None:
        n, t = len(self.layer_names), len(self.types)
        self.time_s = np.asarray(self.time_s, dtype=np.float64).reshape(n, t)
        self.energy_j = np.asarray(self.energy_j, dtype=np.float64).reshape(n, t)
        mem = np.asarray(self.mem_bytes, dtype=np.float64)
        self.mem_bytes = np.broadcast_to(mem.reshape(n, -1), (n, t)).copy()
        for label, arr in (("time_s", self.time_s), ("energy_j", self.energy_j), ("mem_bytes", self.mem_bytes)):
            if np.isnan(arr).any() or (arr < 0).any():
                bad = np.argwhere(np.isnan(arr) | (arr < 0))[0]
                raise ProfileError(
                    f"cost {label} of layer {self.layer_names[bad[0]]!r} on type {self.types[bad[1]]!r} "
                    f"is {arr[tuple(bad)]}; costs must be >= 0 (inf marks a layer the type cannot run)")
        if np.isinf(self.mem_bytes).any():
            raise ProfileError("mem_bytes must be finite")
        unknown = sorted(set(self.segment) - set(self.types))
        if unknown:
            raise ProfileError(f"segment costs for device types {unknown} the table does not have ({self.types})")
        unfused = np.zeros((n, t)) if self.unfused_s is None else np.asarray(self.unfused_s, dtype=np.float64)
        self.unfused_s = unfused.reshape(n, t)
        if not np.isfinite(self.unfused_s).all() or (self.unfused_s < 0).any():
            bad = np.argwhere(~np.isfinite(self.unfused_s) | (self.unfused_s < 0))[0]
            raise ProfileError(f"unfused extra time of layer {self.layer_names[bad[0]]!r} on type "
                               f"{self.types[bad[1]]!r} is {self.unfused_s[tuple(bad)]}; give a finite number >= 0")
        known = np.ones(t, dtype=bool) if self.energy_known is None else np.asarray(self.energy_known, dtype=bool)
        if known.shape != (t,):
            raise ProfileError(f"energy_known has {known.size} entries for {t} device types {self.types}")
        self.energy_known = known

    @property
    def num_layers(self) -> int:
        return len(self.layer_names)

    def type_index(self, type_name: str) -> int:
        try:
            return self.types.index(type_name)
        except ValueError:
            raise ProfileError(f"no costs for device type {type_name!r}; the table has {self.types}") from None

    # ---- cutting costs --------------------------------------------------------------------------
    def segment_cost(self, type_name: str) -> SegmentCost:
        """What a segment on ``type_name`` costs beyond its layers (nothing where the table has no figure)."""
        return self.segment.get(type_name, NO_SEGMENT_COST)

    @cached_property
    def segment_call_s(self) -> np.ndarray:
        """T: seconds per segment (executor call) on each type."""
        return np.array([self.segment_cost(t).call_s for t in self.types], dtype=np.float64)

    @cached_property
    def segment_byte_s(self) -> np.ndarray:
        """T: seconds per byte crossing a segment's boundary on each type (host copies included)."""
        return np.array([self.segment_cost(t).per_byte_s for t in self.types], dtype=np.float64)

    @property
    def unknown_energy_types(self) -> list[str]:
        """The types whose energy is unknown (``energy_known`` False)."""
        assert self.energy_known is not None
        return [t for t, known in zip(self.types, self.energy_known) if not known]

    @property
    def charges_cuts(self) -> bool:
        """Whether cutting the model costs anything on any type."""
        assert self.unfused_s is not None
        return bool(self.segment_call_s.any() or self.segment_byte_s.any() or self.unfused_s[1:].any())

    # ---- prefix sums ----------------------------------------------------------------------------
    @staticmethod
    def _prefix(values: np.ndarray) -> np.ndarray:
        finite = np.where(np.isfinite(values), values, 0.0)
        out = np.zeros((values.shape[0] + 1, values.shape[1]), dtype=np.float64)
        np.cumsum(finite, axis=0, out=out[1:])
        return out

    @cached_property
    def time_prefix(self) -> np.ndarray:
        """(L+1) x T: time_prefix[j, t] - time_prefix[i, t] = time of layers i..j-1 on type t."""
        return self._prefix(self.time_s)

    @cached_property
    def energy_prefix(self) -> np.ndarray:
        return self._prefix(self.energy_j)

    @cached_property
    def mem_prefix(self) -> np.ndarray:
        return self._prefix(self.mem_bytes)

    @cached_property
    def infeasible_prefix(self) -> np.ndarray:
        """(L+1) x T count of layers a type cannot run (inf time or energy) up to each position."""
        bad = (~np.isfinite(self.time_s) | ~np.isfinite(self.energy_j)).astype(np.float64)
        return self._prefix(bad)

    def range_time(self, i: Index, j: Index, t: Index) -> Broadcast:
        """Time of layers i..j-1 on type t (arrays broadcast); inf if any layer is infeasible."""
        return self._range(self.time_prefix, i, j, t)

    def range_energy(self, i: Index, j: Index, t: Index) -> Broadcast:
        return self._range(self.energy_prefix, i, j, t)

    def range_mem(self, i: Index, j: Index, t: Index) -> Broadcast:
        return self.mem_prefix[j, t] - self.mem_prefix[i, t]

    def _range(self, prefix: np.ndarray, i: Index, j: Index, t: Index) -> Broadcast:
        value = prefix[j, t] - prefix[i, t]
        bad = self.infeasible_prefix[j, t] - self.infeasible_prefix[i, t]
        return np.where(bad > 0, np.inf, value) if np.ndim(value) else (np.inf if bad > 0 else float(value))

    # ---- derived tables -------------------------------------------------------------------------
    def select(self, types: list[str]) -> "CostTable":
        """A table with only (and in the order of) ``types``."""
        idx = [self.type_index(t) for t in types]
        assert self.unfused_s is not None and self.energy_known is not None
        return CostTable(self.layer_names, list(types), self.time_s[:, idx], self.energy_j[:, idx],
                         self.mem_bytes[:, idx], {t: self.sources.get(t, "") for t in types},
                         {t: self.segment[t] for t in types if t in self.segment}, self.unfused_s[:, idx],
                         self.energy_known[idx])

    @staticmethod
    def concat(tables: list["CostTable"]) -> "CostTable":
        """Join tables over the same layers side by side (columns of every table, in order)."""
        first = tables[0]
        for tab in tables[1:]:
            if tab.layer_names != first.layer_names:
                raise ProfileError("cannot join cost tables of different layer lists")
        types = [t for tab in tables for t in tab.types]
        if len(set(types)) != len(types):
            raise ProfileError(f"device types appear twice when joining cost tables: {types}")
        sources: dict[str, str] = {}
        segment: dict[str, SegmentCost] = {}
        for tab in tables:
            sources.update(tab.sources)
            segment.update(tab.segment)
        return CostTable(first.layer_names, types,
                         np.concatenate([t.time_s for t in tables], axis=1),
                         np.concatenate([t.energy_j for t in tables], axis=1),
                         np.concatenate([t.mem_bytes for t in tables], axis=1), sources, segment,
                         np.concatenate([t.unfused_s for t in tables if t.unfused_s is not None], axis=1),
                         np.concatenate([t.energy_known for t in tables if t.energy_known is not None]))
