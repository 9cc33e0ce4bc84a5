"""The ``hetsplit.manifest/1`` format: who runs which sub-model and which tensors move where.

A manifest is the contract between ``hetsplit split`` and the workers. Rank 0 is the *driver*: it
feeds the model inputs and collects the outputs. Stage ``s`` of the plan runs on rank ``s + 1``.
Every process lists its edges: the tensors it receives (from whom) and sends (to whom), with
shapes and dtypes, in wire order. Pipeline semantics follow the evaluator: a stage receives every
tensor live across its first cut and sends every tensor live across its last one, so a tensor
that skips several stages is relayed by each of them and moves over every cut it crosses.

Mappings (``plan.assign``: shards, combines, devices running layers that are not consecutive) have
their own format, ``hetsplit.manifest/2`` (``runtime.mapping_manifest``); ``load_manifest`` reads
either. Both kinds of plan are validated by ``check_plan`` (plan/check.py), the one validator.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hetsplit.cluster.types import Cluster, Device, Medium, uniform_links
from hetsplit.errors import RuntimeFailure
from hetsplit.graph.types import INPUT, Graph, Tensor
from hetsplit.jsonfile import read_json
from hetsplit.plan.check import stage_bounds
from hetsplit.plan.types import Plan

if TYPE_CHECKING:
    from hetsplit.runtime.mapping_manifest import MappingManifest

FORMAT = "hetsplit.manifest/1"
DRIVER = "driver"  # the name of rank 0 (feeds inputs, collects outputs)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor on the wire: exact ONNX name, concrete shape and numpy dtype name."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def empty(self) -> np.ndarray:
        return np.empty(self.shape, dtype=self.dtype)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "nbytes": self.nbytes}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TensorSpec":
        return cls(str(d["name"]), tuple(int(x) for x in d["shape"]), str(d["dtype"]))


@dataclass(frozen=True)
class Edge:
    """Tensors moving between this process and one peer, in wire order (slot i uses tag ``tag + i``).

    Pipelines use one edge per peer and direction (``tag`` 0); a mapping (manifest/2) one edge per
    message, each with tags of its own."""

    peer: str                      # device name, or "driver"
    rank: int
    tensors: tuple[TensorSpec, ...]
    tag: int = 0

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tensors]

    def signature(self) -> int:
        """A 31-bit checksum of names, shapes and dtypes: both ends of an edge must agree on it."""
        text = ";".join(f"{t.name}:{t.dtype}:{'x'.join(map(str, t.shape))}" for t in self.tensors)
        return zlib.crc32(text.encode()) & 0x7FFFFFFF

    def to_dict(self) -> dict[str, Any]:
        d = {"peer": self.peer, "rank": self.rank, "nbytes": self.nbytes,
             "tensors": [t.to_dict() for t in self.tensors]}
        if self.tag:
            d["tag"] = self.tag
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Edge":
        return cls(str(d["peer"]), int(d["rank"]), tuple(TensorSpec.from_dict(t) for t in d["tensors"]),
                   int(d.get("tag", 0)))


@dataclass
class WorkerSpec:
    """One process: its device, the sub-model it runs and its edges (the driver has no sub-model)."""

    rank: int
    device: str
    stage: int                      # plan stage index, -1 for the driver
    layers: list[str] = field(default_factory=list)
    submodel: str | None = None     # file name relative to the manifest
    inputs: list[str] = field(default_factory=list)    # sub-model inputs (fed from received tensors)
    outputs: list[str] = field(default_factory=list)   # sub-model outputs (sent on)
    recv: list[Edge] = field(default_factory=list)
    send: list[Edge] = field(default_factory=list)

    @property
    def relays(self) -> list[str]:
        """Tensors received and forwarded unchanged (they skip this stage)."""
        got = {t.name for e in self.recv for t in e.tensors}
        return [t.name for e in self.send for t in e.tensors if t.name in got]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["recv"] = [e.to_dict() for e in self.recv]
        d["send"] = [e.to_dict() for e in self.send]
        d["relays"] = self.relays
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WorkerSpec":
        return cls(int(d["rank"]), str(d["device"]), int(d["stage"]), list(d.get("layers", [])), d.get("submodel"),
                   list(d.get("inputs", [])), list(d.get("outputs", [])),
                   [Edge.from_dict(e) for e in d.get("recv", [])], [Edge.from_dict(e) for e in d.get("send", [])])


@dataclass
class Manifest:
    """Everything the processes of one run need to agree on."""

    model: str
    plan: dict[str, Any]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    workers: list[WorkerSpec]       # index == rank; rank 0 is the driver
    source_model: str = ""
    directory: Path | None = None   # where it was loaded from (sub-model paths are relative to it)

    @property
    def world_size(self) -> int:
        return len(self.workers)

    @property
    def driver(self) -> WorkerSpec:
        return self.workers[0]

    @property
    def stages(self) -> list[WorkerSpec]:
        return self.workers[1:]

    def worker(self, rank: int) -> WorkerSpec:
        return self.workers[rank]

    def submodel_path(self, rank: int) -> Path:
        spec = self.workers[rank]
        if spec.submodel is None:
            raise RuntimeFailure(f"rank {rank} ({spec.device}) runs no sub-model")
        return (self.directory or Path(".")) / spec.submodel

    @staticmethod
    def driver_arrays(feed: dict[str, np.ndarray], edge: Edge) -> list[np.ndarray]:
        """What the driver sends over ``edge`` for one input set: the model inputs it names."""
        return [feed[t.name] for t in edge.tensors]

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "model": self.model, "source_model": self.source_model,
                "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
                "workers": [w.to_dict() for w in self.workers], "plan": self.plan}

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=1))
        return p


def load_manifest(path: str | Path) -> Manifest | MappingManifest:
    """Read a manifest file (or the ``manifest.json`` in a split directory): a pipeline's ``Manifest``
    (``hetsplit.manifest/1``) or a mapping's ``MappingManifest`` (``hetsplit.manifest/2``)."""
    from hetsplit.runtime.mapping_manifest import FORMAT2, mapping_manifest_from_dict

    p = Path(path)
    if p.is_dir():
        p = p / "manifest.json"
    d = read_json(p, RuntimeFailure, "no manifest; make one with `hetsplit split PLAN MODEL --out DIR`")
    if not isinstance(d, dict):
        raise RuntimeFailure(f"{p}: a manifest is a JSON object, got {type(d).__name__}")
    if d.get("format") == FORMAT2:
        return mapping_manifest_from_dict(d, p)
    if d.get("format") != FORMAT:
        raise RuntimeFailure(f"{p}: 'format' is {d.get('format')!r}; expected {FORMAT!r} or {FORMAT2!r}")
    try:
        workers = [WorkerSpec.from_dict(w) for w in d["workers"]]
        return Manifest(str(d["model"]), dict(d.get("plan", {})), [TensorSpec.from_dict(t) for t in d["inputs"]],
                        [TensorSpec.from_dict(t) for t in d["outputs"]], workers, str(d.get("source_model", "")),
                        p.parent)
    except (KeyError, TypeError, ValueError) as exc:
        raise RuntimeFailure(f"{p}: malformed manifest ({exc!r})") from None


# ---- building a manifest from a plan --------------------------------------------------------------

def plan_cluster(plan: Plan, cluster: Cluster | None = None) -> Cluster:
    """The cluster the runtime checks a plan against (``check_plan``): ``cluster`` without its source and
    sink (the driver feeds the inputs and collects the outputs), or, when none is given, one CPU per
    device the plan names, in the plan's first-use order."""
    if cluster is not None:
        return replace(cluster, source=None, sink=None)
    names = list(dict.fromkeys(plan.devices))   # once each: check_plan names a device given two stages
    bw, lat, en, media = uniform_links(len(names), Medium("runtime", 1e9))
    devices = [Device(n, "cpu", "cpu", math.inf) for n in names]
    return Cluster(plan.cluster or "runtime", devices, bw, lat, en, media)


def live_tensors(graph: Graph, cut: int) -> list[Tensor]:
    """Tensors live across the cut before layer ``cut`` (exactly those ``Graph.cut_bytes`` counts)."""
    n = graph.num_layers
    out = []
    for t in graph.tensors:
        last = n if t.is_output else (max(t.consumers) if t.consumers else t.producer)
        if t.producer < cut <= last:
            out.append(t)
    return sorted(out, key=lambda t: (t.producer, t.name))


def build_manifest(graph: Graph, plan: Plan, specs: dict[str, TensorSpec], submodels: list[str],
                   source_model: str = "", cluster: Cluster | None = None) -> Manifest:
    """The manifest of ``plan`` on ``graph``; ``specs`` gives each wire tensor's concrete shape."""
    bounds, _ = stage_bounds(graph, plan_cluster(plan, cluster), plan)
    n_stages = len(plan.stages)
    names = ["driver"] + [s.device for s in plan.stages]

    def spec(t: Tensor) -> TensorSpec:
        if t.name not in specs:
            raise RuntimeFailure(f"no shape known for tensor {t.name!r} of model {graph.name!r}")
        return specs[t.name]

    cuts = [tuple(spec(t) for t in live_tensors(graph, k)) for k in bounds]
    inputs = [spec(t) for t in graph.tensors if t.producer == INPUT]
    outputs = [spec(t) for t in graph.tensors if t.is_output]
    driver = WorkerSpec(0, "driver", -1, send=_edges(names[1], 1, cuts[0]),
                        recv=_edges(names[n_stages], n_stages, cuts[n_stages]))
    workers = [driver]
    for s, stage in enumerate(plan.stages):
        lo, hi = bounds[s], bounds[s + 1]
        consumed = {t.name for t in graph.tensors if t.producer < lo and any(lo <= c < hi for c in t.consumers)}
        produced = {t.name for t in graph.tensors if lo <= t.producer < hi}
        prev, nxt = (0 if s == 0 else s), (0 if s == n_stages - 1 else s + 2)
        workers.append(WorkerSpec(
            rank=s + 1, device=stage.device, stage=s, layers=list(stage.layers), submodel=submodels[s],
            inputs=[t.name for t in cuts[s] if t.name in consumed],
            outputs=[t.name for t in cuts[s + 1] if t.name in produced],
            recv=_edges(names[prev], prev, cuts[s]), send=_edges(names[nxt], nxt, cuts[s + 1])))
    return Manifest(graph.name, plan.to_dict(), inputs, outputs, workers, source_model)


def _edges(peer: str, rank: int, tensors: tuple[TensorSpec, ...]) -> list[Edge]:
    return [Edge(peer, rank, tensors)] if tensors else []
