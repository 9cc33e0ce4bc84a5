"""Plan and Metrics: a split of a model over a cluster, as data (JSON in, JSON out).

Two kinds of plan share one type (DESIGN.md, "General mappings"):

- a *pipeline* (``stages``): consecutive whole layers per stage, tensors relayed stage by stage
  (``routing: relay``); its metrics are exactly the pipeline semantics;
- a *mapping* (``assign``): every layer on a device, or split into shards (``Shard``) that cover
  one of its axes, with a ``Combine`` saying where shards meet; tensors go directly from the
  producing device to each consuming device (``routing: direct``).

Both are written as ``hetsplit.plan/2``; ``hetsplit.plan/1`` files (pipelines) still read.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Union

FORMAT = "hetsplit.plan/2"
FORMAT_V1 = "hetsplit.plan/1"
SET_FORMAT = "hetsplit.planset/1"

AXES = ("out", "in")          # out: output channels / columns; in: input channels / rows
COMBINE_KINDS = ("concat", "sum", "broadcast")
RELAY, DIRECT = "relay", "direct"


@dataclass(frozen=True)
class Shard:
    """A slice ``[start, stop)`` of one axis of a layer, run on ``device``.

    ``out`` slices output channels (conv) or columns (gemm), or heads (attention); ``in`` slices
    input channels or rows. Heads and the FFN dimension of a Transformer are out/in slices on head
    or F boundaries.
    """

    device: str
    axis: str
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "axis": self.axis, "start": self.start, "stop": self.stop}


@dataclass(frozen=True)
class Combine:
    """Where the shards of one layer meet: ``concat`` (out shards) or ``sum`` (in shards) on ``on``.

    ``tree = k > 1`` makes a sum hierarchical: shards reduce to the leader of their group of k, the
    leaders to ``on``, and the result goes back the same way to the devices that need it (the
    all-reduce of tensor-parallel Transformers). ``tree = 0`` is flat: every shard sends to ``on``.

    ``broadcast`` is for a layer that runs whole on ``on`` (a norm on one chip): its outputs reach
    the devices that read them through the same tree (``on`` sends to the leaders of the other
    groups of k, in cluster order, which pass them on); flat without a tree.
    """

    kind: str
    on: str
    tree: int = 0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "on": self.on}
        if self.tree:
            d["tree"] = self.tree
        return d


@dataclass(frozen=True)
class Collective:
    """A sum-combine whose result several devices need: an all-reduce over ``devices`` (shard
    order), rooted at ``root``, in groups of ``tree`` (0 = flat). Derived from a plan, not written."""

    layer: str
    devices: tuple[str, ...]
    root: str
    tree: int = 0

    def groups(self) -> list[tuple[str, ...]]:
        """The reduction groups: consecutive runs of ``tree`` shard devices (one group when flat)."""
        k = self.tree if self.tree > 1 else max(1, len(self.devices))
        return [self.devices[i:i + k] for i in range(0, len(self.devices), k)]


Placement = Union[str, tuple[Shard, ...]]


@dataclass
class Stage:
    """One pipeline stage: a device and the layers it runs, in topological order.

    Shards are not stages: a plan with shards is a mapping (``Plan.assign``).
    """

    device: str
    layers: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "layers": list(self.layers)}


ENERGY_FIELDS = frozenset({"energy_j", "energy_per_device_j", "edp", "comm_energy_j"})  # NaN: unknown


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
        """JSON-ready: an infinite or NaN figure (also per device) is written as null."""
        def out(v: Any) -> Any:
            if isinstance(v, dict):
                return {k: out(x) for k, x in v.items()}
            return None if isinstance(v, float) and not math.isfinite(v) else v
        return {k: out(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Metrics":
        """From ``to_dict``'s form: null reads back as unknown (NaN) for an energy figure, else infinite."""
        def back(v: Any, missing: float) -> Any:
            if isinstance(v, dict):
                return {k: back(x, missing) for k, x in v.items()}
            return missing if v is None else v
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: (v if k == "bottleneck" else back(v, math.nan if k in ENERGY_FIELDS else math.inf))
                      for k, v in d.items() if k in known})


@dataclass
class Plan:
    """Which device runs which layer (or shard), and how the plan was found.

    A pipeline plan has ``stages`` (and ``assign`` is derived from them); a mapping has ``assign``
    and ``combine`` and no stages. ``check_plan`` (plan/check.py) validates either against a graph
    and a cluster. ``order`` (optional) gives devices their run order: every task of the device
    (``TaskGraph`` task names: layers, ``layer@axis[a:b]`` shards, ``layer:concat`` ...) once;
    a device without one runs its ready tasks first-ready-first (docs/architecture.md).
    """

    model: str
    cluster: str
    algorithm: str
    stages: list[Stage] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    metrics: Metrics | None = None
    pareto: bool | None = None  # on the Pareto front of its plan set (None: not judged)
    assign: dict[str, Placement] = field(default_factory=dict)
    combine: dict[str, Combine] = field(default_factory=dict)
    cluster_file: str | None = None  # the cluster YAML the plan was made from (absolute), so run finds it
    order: dict[str, list[str]] = field(default_factory=dict)  # device -> its task names in run order
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # model input -> dims (--input-shape)

    def __post_init__(self) -> None:
        if self.stages and self.assign:
            raise _plan_error("a plan has either pipeline stages or an assign mapping, not both")

    @property
    def costed(self) -> Metrics:
        """``metrics`` of a plan known to be costed (a search's, an estimate's); PlanError when it has none."""
        if self.metrics is None:
            raise _plan_error(f"the {self.algorithm!r} plan of {self.model!r} has no metrics; cost it first "
                              "(estimate_plan)")
        return self.metrics

    @property
    def is_pipeline(self) -> bool:
        return bool(self.stages)

    @property
    def routing(self) -> str:
        return RELAY if self.is_pipeline else DIRECT

    @property
    def devices(self) -> list[str]:
        """Devices in first-use order (stage order for a pipeline)."""
        if self.stages:
            return [s.device for s in self.stages]
        seen: dict[str, None] = {}
        for place in self.assign.values():
            for dev in ([place] if isinstance(place, str) else [sh.device for sh in place]):
                seen.setdefault(dev, None)
        return list(seen)

    def work_by_device(self) -> list[Stage]:
        """What each device runs, for display: a pipeline's stages, or per device (first-use order)
        its whole layers and its shards (``layer@axis[start:stop]``)."""
        if self.stages:
            return list(self.stages)
        per: dict[str, list[str]] = {}
        for name, place in self.assign.items():
            if isinstance(place, str):
                per.setdefault(place, []).append(name)
            else:
                for sh in place:
                    per.setdefault(sh.device, []).append(f"{name}@{sh.axis}[{sh.start}:{sh.stop}]")
        return [Stage(dev, labels) for dev, labels in per.items()]

    def placements(self) -> dict[str, Placement]:
        """Every layer's placement: ``assign``, or the stages' layers on their devices."""
        if self.stages:
            return {name: st.device for st in self.stages for name in st.layers}
        return dict(self.assign)

    def to_dict(self) -> dict[str, Any]:
        params = {**self.params, "routing": self.routing}
        d: dict[str, Any] = {"format": FORMAT, "model": self.model, "cluster": self.cluster,
                             "algorithm": self.algorithm, "params": params}
        if self.cluster_file:
            d["cluster_file"] = self.cluster_file
        if self.input_shapes:
            d["input_shapes"] = {name: list(dims) for name, dims in self.input_shapes.items()}
        if self.stages:
            d["stages"] = [s.to_dict() for s in self.stages]
        d["assign"] = {name: (p if isinstance(p, str) else [sh.to_dict() for sh in p])
                       for name, p in self.placements().items()}
        if self.combine:
            d["combine"] = {name: c.to_dict() for name, c in self.combine.items()}
        if self.order:
            d["order"] = {dev: list(names) for dev, names in self.order.items()}
        if self.metrics is not None:
            d["metrics"] = self.metrics.to_dict()
        if self.pareto is not None:
            d["pareto"] = self.pareto
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "<plan>") -> "Plan":
        """Read a ``hetsplit.plan/2`` (or ``/1``) document; errors name the key that is wrong."""
        from hetsplit.plan.codec import plan_from_dict

        return plan_from_dict(cls, d, where)


def _plan_error(msg: str) -> Exception:
    from hetsplit.errors import PlanError

    return PlanError(msg)
