"""Plan and Metrics: a split of a model over a cluster, as data (JSON in, JSON out)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT = "hetsplit.plan/1"
SET_FORMAT = "hetsplit.planset/1"


@dataclass
class Stage:
    """One pipeline stage: a device and the layers it runs, in topological order.

    ``shard`` is the seam for horizontal and tensor-parallel splits: None means whole layers.
    """

    device: str
    layers: list[str]
    shard: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"device": self.device, "layers": list(self.layers)}
        if self.shard is not None:
            d["shard"] = self.shard
        return d


@dataclass
class Metrics:
    """What a plan costs per inference (SI units)."""

    throughput: float                      # inferences per second (1 / bottleneck_s)
    bottleneck_s: float                    # slowest stage compute or cut transfer
    bottleneck: str                        # what it is: "stage gpu0" or "link gpu0->cpu0"
    latency_s: float                       # one input through every stage and transfer
    energy_j: float                        # compute + communication energy per inference
    energy_per_device_j: dict[str, float]  # compute energy + energy of what the device sends
    compute_s_per_device: dict[str, float]
    memory_per_device_bytes: dict[str, float]
    fits: bool                             # every device's memory holds its stages
    edp: float                             # energy x latency (J s)
    comm_energy_j: float = 0.0
    comm_time_s: float = 0.0               # sum of all transfer times (part of latency)

    @property
    def num_devices(self) -> int:
        return len(self.compute_s_per_device)

    @property
    def energy_per_participating_device_j(self) -> float:
        """DONNA's "average device energy": total energy over the participating devices."""
        return self.energy_j / max(1, self.num_devices)

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Metrics":
        known = {f for f in cls.__dataclass_fields__}
        vals = {k: (math.inf if v is None and k != "bottleneck" else v) for k, v in d.items() if k in known}
        return cls(**vals)


@dataclass
class Plan:
    """Which device runs which layers, in stage order, and how the plan was found."""

    model: str
    cluster: str
    algorithm: str
    stages: list[Stage]
    params: dict[str, Any] = field(default_factory=dict)
    metrics: Metrics | None = None
    pareto: bool | None = None  # on the Pareto front of its plan set (None: not judged)

    @property
    def devices(self) -> list[str]:
        return [s.device for s in self.stages]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": FORMAT, "model": self.model, "cluster": self.cluster,
                             "algorithm": self.algorithm, "params": self.params,
                             "stages": [s.to_dict() for s in self.stages]}
        if self.metrics is not None:
            d["metrics"] = self.metrics.to_dict()
        if self.pareto is not None:
            d["pareto"] = self.pareto
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "<plan>") -> "Plan":
        from hetsplit.errors import PlanError

        if d.get("format") != FORMAT:
            raise PlanError(f"{where}: 'format' is {d.get('format')!r}; expected {FORMAT!r}")
        try:
            stages = [Stage(str(s["device"]), [str(x) for x in s["layers"]], s.get("shard")) for s in d["stages"]]
            metrics = Metrics.from_dict(d["metrics"]) if d.get("metrics") else None
            return cls(str(d["model"]), str(d.get("cluster", "")), str(d.get("algorithm", "")), stages,
                       dict(d.get("params", {})), metrics, d.get("pareto"))
        except (KeyError, TypeError) as exc:
            raise PlanError(f"{where}: malformed plan ({exc!r}); expected stages of {{device, layers}}") from None
