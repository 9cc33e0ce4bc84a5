"""What cutting a model costs on a device type, beyond its layers' profiled times.

The runtime runs each device's share of a plan as segments (``plan.TaskGraph.segments``: one sub-model,
one executor call per input each). A profile's per-layer times come from one whole-model run, where
the executor keeps every tensor inside one session and fuses ops across layers; a segment pays what that
run did not:

- ``call_s``: the executor call itself (handing inputs over, taking outputs back, the session's own
  per-call work): ~0.045 ms for onnxruntime on one thread here, ~0.24 ms with 4 threads and ~0.3-0.4 ms
  for the torch GPU executor on the 16-core H200 host (``bench/data/h200-16c``);
- ``byte_s``: per byte crossing the segment's boundary (each tensor it reads from or makes for outside
  it, once), written and read once more where the whole model kept it in cache;
- ``host_byte_s``: per boundary byte, what an accelerator that computes off host memory pays to copy it
  between host and device memory (0 for a CPU);
- a layer cut off from the layer before it, where the whole model's executor fused the two (a residual
  Add into its conv), pays its standalone time: ``CostTable.unfused_s`` holds the extra seconds.

A pipeline stage is one segment: it pays ``call_s + (byte_s + host_byte_s) x (cut_bytes[i] +
cut_bytes[j])`` plus its first layer's unfused extra (``costs.problem.SplitProblem.stage_time``). Every
estimate and every solver charges these figures by that one rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hetsplit.errors import ProfileError

FIELDS = ("call_s", "byte_s", "host_byte_s")


@dataclass(frozen=True)
class SegmentCost:
    """Seconds one segment costs per input beyond its layers on one device type (SI units)."""

    call_s: float = 0.0        # per executor call
    byte_s: float = 0.0        # per byte crossing the segment's boundary
    host_byte_s: float = 0.0   # per boundary byte copied between host and device memory (an accelerator)
    source: str = ""           # where the figures come from, or why they are 0

    def __post_init__(self) -> None:
        for name in FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not (math.isfinite(value) and value >= 0):
                raise ProfileError(f"segment cost {name} = {value!r}: a segment's cost is a finite number >= 0 "
                                   "(seconds, or seconds per byte)")

    @property
    def per_byte_s(self) -> float:
        """Seconds per boundary byte, the executor's and the host copy's together."""
        return self.byte_s + self.host_byte_s

    @property
    def is_zero(self) -> bool:
        return self.call_s == 0 and self.per_byte_s == 0

    def seconds(self, boundary_bytes: float) -> float:
        """What one segment whose boundary carries ``boundary_bytes`` costs per input."""
        return self.call_s + self.per_byte_s * float(boundary_bytes)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {name: float(getattr(self, name)) for name in FIELDS}
        if self.source:
            doc["source"] = self.source
        return doc


NO_SEGMENT_COST = SegmentCost(source="not given: segments are charged nothing beyond their layers")


def segment_cost_from_dict(doc: Any, where: str) -> SegmentCost:
    """A ``{"call_s", "byte_s", "host_byte_s", "source"}`` object (each number optional, default 0) as a
    ``SegmentCost``; errors name ``where``."""
    if not isinstance(doc, dict):
        raise ProfileError(f"{where} must be an object with call_s, byte_s and host_byte_s (seconds, seconds "
                           f"per byte), got {type(doc).__name__}")
    unknown = sorted(set(doc) - set(FIELDS) - {"source"})
    if unknown:
        raise ProfileError(f"{where} has unknown keys {unknown}; it takes {list(FIELDS)} and 'source'")
    values: dict[str, float] = {}
    for name in FIELDS:
        value = doc.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not (math.isfinite(float(value)) and value >= 0):
            raise ProfileError(f"{where}.{name} is {value!r}; give a finite number >= 0")
        values[name] = float(value)
    source = doc.get("source", "")
    if not isinstance(source, str):
        raise ProfileError(f"{where}.source must be text")
    return SegmentCost(values["call_s"], values["byte_s"], values["host_byte_s"], source)
