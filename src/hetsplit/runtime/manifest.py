"""The ``hetsplit.manifest/2`` format: the program of every rank of a run, as ``hetsplit split`` writes it
and the processes read it. Pipelines, mappings with shards and tensor-parallel plans are all one program.

Rank 0 is the driver (feeds the model inputs, collects and verifies the outputs); rank ``r >= 1`` is
the worker of the plan's ``r``-th device (first-use order). Everything that moves is a *message*: one
payload of ``check_plan(...).messages()`` sent once from one device to another per input (plus the
driver's: model inputs out, model outputs back). A pipeline is a relay-routed mapping: a stage is one
segment, a cut (every tensor live across it, relays included) one message. A worker runs its
*segments* in order; a segment is a run of the device's tasks (in the TaskGraph's topological order)
whose remote inputs are all produced by tasks before the segment's first task, so a segment waits only
for work that comes earlier in one global order, and the whole run is deadlock-free. Each segment with
work is one ONNX sub-model; a segment holding only a ``copy`` task (the relay of an all-reduce) has
none and just forwards what it received.

```json
{"format": "hetsplit.manifest/2", "model": "m", "source_model": "m.onnx", "plan": {...},
 "inputs":  [{"name": "x", "shape": [1, 8, 64], "dtype": "float32", "nbytes": 2048}],
 "outputs": [{"name": "y", ...}],
 "messages": [{"id": 0, "payload": "x", "src": "driver", "src_rank": 0, "dst": "d1", "dst_rank": 2,
               "tag": 0, "collective": null, "nbytes": 2048, "plan_nbytes": null,
               "tensors": [{"name": "x", "shape": [1, 8, 64], "dtype": "float32", "nbytes": 2048,
                            "source": "x", "take": null}]}],
 "collectives": [{"id": 0, "kind": "gather", "layer": "o/MatMul", "task": "o/MatMul:sum[g0]",
                  "root": "d0", "members": ["d0", "d1"], "ranks": [1, 2], "messages": [5]}],
 "workers": [{"rank": 0, "device": "driver", "send": [0, ...], "recv": [...]},
             {"rank": 1, "device": "d0", "tasks": ["q/MatMul@out[0:16]", ...], "collectives": [0, ...],
              "segments": [{"index": 0, "tasks": [...], "submodel": "d0-seg0.onnx",
                            "inputs": [TensorSpec...], "outputs": [TensorSpec...],
                            "recv": [message ids], "send": [message ids]}]}]}
```

- A message's ``tensors`` are named as the receiver knows them (``name``) and as the sender holds
  them (``source``); ``take`` is the cut a sender makes before sending, for an ``in`` shard's slice
  of its input (``t[in a:b/size]`` in check.py): view the tensor with ``shape`` (an order-preserving
  reshape), keep ``start:stop`` of ``axis``.
- Every message is a point-to-point send under tags ``tag``, ``tag + 1``, ... (one per tensor) of the
  run's gloo group, or NCCL between two GPU ends. ``collective`` names the gather or scatter of a sum
  combine it belongs to: partial sums gather to their group's leader and group sums to the root
  (members send straight to the root: exactly the TaskGraph's partial and group messages), the
  reduced result scatters from the root (or a leader's copy) to the devices that read it. That is a
  description: their messages move like any other. (Each once had a gloo subgroup of its own; a
  2-member gather cost 0.60 ms against 0.24 ms for a plain message of the same 137 KB, and a plan
  with collectives ran input by input: MobileBERT's tensor-parallel plan took 405 ms per input alone
  that way, 228 ms now.) A manifest written then marks their messages ``"via": "gather"`` or
  ``"scatter"`` with tag 0; they get tags of their own at load (``point_to_point``).
- A segment's ``recv`` are the messages it waits for before it runs, ``send`` the ones it posts
  after (asynchronously); ``inputs`` come from those messages and from earlier segments.

``hetsplit.manifest/1`` (the pipelines' format before) still reads: ``runtime.manifest_v1`` turns it
into this program at load.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.errors import RuntimeFailure
from hetsplit.jsonfile import read_json
from hetsplit.outpath import write_text

FORMAT = "hetsplit.manifest/2"
MANIFEST_FILE = "manifest.json"
SUBMODEL_SUFFIX = ".onnx"
DRIVER = "driver"  # the name of rank 0 (feeds inputs, collects outputs)
P2P, GATHER, SCATTER = "p2p", "gather", "scatter"


def check_submodel_name(name: object) -> str:
    """``name`` if it is a plain sub-model file name (letters, digits, ``-_.``, ending in ``.onnx``, not
    hidden, at most 255 bytes): never a path, never the manifest or a file a run writes itself (their names
    do not end in ``.onnx``); ValueError saying why not."""
    if not isinstance(name, str):
        raise ValueError(f"a sub-model is named by a string, not {type(name).__name__} {name!r:.40}")
    plain = all(c.isalnum() or c in "-_." for c in name) and not name.startswith(".")
    if not plain or not name.endswith(SUBMODEL_SUFFIX) or len(name.encode()) > 255 or name == SUBMODEL_SUFFIX:
        raise ValueError(f"sub-model {name!r:.80}: a sub-model is a plain file name ending in {SUBMODEL_SUFFIX} "
                         "(letters, digits, '-', '_', '.'; no folder, not hidden)")
    return name


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
    """One message as the transport sees it from one end: the peer, its rank, the tensors in wire order
    (slot i uses tag ``tag + i``)."""

    peer: str                      # device name, or "driver"
    rank: int
    tensors: tuple[TensorSpec, ...]
    tag: int = 0

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def signature(self) -> int:
        """A 31-bit checksum of names, shapes and dtypes: both ends of an edge must agree on it."""
        text = ";".join(f"{t.name}:{t.dtype}:{'x'.join(map(str, t.shape))}" for t in self.tensors)
        return zlib.crc32(text.encode()) & 0x7FFFFFFF


@dataclass(frozen=True)
class Take:
    """The slice a sender cuts from a whole tensor: view it as ``shape``, keep ``start:stop`` of ``axis``."""

    shape: tuple[int, ...]
    axis: int
    start: int
    stop: int

    def apply(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x).reshape(self.shape)
        index = [slice(None)] * x.ndim
        index[self.axis] = slice(self.start, self.stop)
        return np.ascontiguousarray(x[tuple(index)])

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "axis": self.axis, "start": self.start, "stop": self.stop}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "Take | None":
        if d is None:
            return None
        return cls(tuple(int(x) for x in d["shape"]), int(d["axis"]), int(d["start"]), int(d["stop"]))


@dataclass(frozen=True)
class WireTensor:
    """One tensor of a message: its spec at the receiver, its name at the sender, the sender's cut."""

    spec: TensorSpec
    source: str
    take: Take | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.spec.to_dict(), "source": self.source, "take": self.take.to_dict() if self.take else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WireTensor":
        return cls(TensorSpec.from_dict(d), str(d["source"]), Take.from_dict(d.get("take")))


@dataclass(frozen=True)
class Message:
    """One payload moving once from ``src`` to ``dst`` per input (a TaskGraph message, or the driver's)."""

    id: int
    payload: str
    src: str
    src_rank: int
    dst: str
    dst_rank: int
    tensors: tuple[WireTensor, ...]
    tag: int = 0
    collective: int | None = None        # the gather or scatter it belongs to (a description)
    plan_nbytes: float | None = None     # the TaskGraph's bytes for it (None: the driver's)

    @property
    def nbytes(self) -> int:
        return sum(t.spec.nbytes for t in self.tensors)

    def edge(self, at_sender: bool) -> Edge:
        """The message as a Wire edge seen from the sender (peer: the receiver) or the receiver."""
        peer, rank = (self.dst, self.dst_rank) if at_sender else (self.src, self.src_rank)
        return Edge(peer, rank, tuple(t.spec for t in self.tensors), self.tag)

    def arrays(self, local: Mapping[str, Any]) -> list[Any]:
        """What the sender puts on the wire, from the tensors it holds."""
        return [t.take.apply(local[t.source]) if t.take else local[t.source] for t in self.tensors]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "payload": self.payload, "src": self.src, "src_rank": self.src_rank, "dst": self.dst,
                "dst_rank": self.dst_rank, "tag": self.tag, "collective": self.collective,
                "nbytes": self.nbytes, "plan_nbytes": self.plan_nbytes, "tensors": [t.to_dict() for t in self.tensors]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Message":
        coll = d.get("collective")
        return cls(int(d["id"]), str(d["payload"]), str(d["src"]), int(d["src_rank"]), str(d["dst"]),
                   int(d["dst_rank"]), tuple(WireTensor.from_dict(t) for t in d["tensors"]), int(d.get("tag", 0)),
                   None if coll is None else int(coll),
                   None if d.get("plan_nbytes") is None else float(d["plan_nbytes"]))


@dataclass(frozen=True)
class Collective:
    """A gather (members send to ``root``) or a scatter (``root`` sends to members) of a sum combine
    among ``members`` (root first); ``messages`` are the ones it carries, each moving point to point."""

    id: int
    kind: str
    layer: str
    task: str
    root: str
    members: tuple[str, ...]
    ranks: tuple[int, ...]
    messages: tuple[int, ...]

    @property
    def root_rank(self) -> int:
        return self.ranks[self.members.index(self.root)]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "layer": self.layer, "task": self.task, "root": self.root,
                "members": list(self.members), "ranks": list(self.ranks), "messages": list(self.messages)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Collective":
        return cls(int(d["id"]), str(d["kind"]), str(d["layer"]), str(d["task"]), str(d["root"]),
                   tuple(str(x) for x in d["members"]), tuple(int(x) for x in d["ranks"]),
                   tuple(int(x) for x in d["messages"]))


@dataclass
class Segment:
    """A run of a device's tasks computed as one sub-model (``submodel`` None: nothing to compute)."""

    index: int
    tasks: list[str]
    submodel: str | None
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    recv: list[int] = field(default_factory=list)
    send: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "tasks": list(self.tasks), "submodel": self.submodel,
                "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
                "recv": list(self.recv), "send": list(self.send)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Segment":
        submodel = d.get("submodel")
        if submodel is not None:
            check_submodel_name(submodel)
        return cls(int(d["index"]), [str(x) for x in d["tasks"]], submodel,
                   [TensorSpec.from_dict(t) for t in d.get("inputs", [])],
                   [TensorSpec.from_dict(t) for t in d.get("outputs", [])],
                   [int(x) for x in d.get("recv", [])], [int(x) for x in d.get("send", [])])


@dataclass
class Worker:
    """One rank's program: its tasks, its segments in order and the collectives it joins. ``recv`` and
    ``send`` are its point-to-point edges (set by the manifest), for the handshake and the links."""

    rank: int
    device: str
    tasks: list[str] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    collectives: list[int] = field(default_factory=list)
    recv: list[Edge] = field(default_factory=list)
    send: list[Edge] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "device": self.device, "tasks": list(self.tasks),
                "collectives": list(self.collectives), "segments": [s.to_dict() for s in self.segments]}


@dataclass
class Manifest:
    """Everything the processes of one run agree on (see the module docstring)."""

    model: str
    plan: dict[str, Any]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    messages: list[Message]
    collectives: list[Collective]
    workers: list[Worker]                 # index == rank; rank 0 (the driver) has no segments
    source_model: str = ""
    directory: Path | None = None         # where it was loaded from (sub-model paths are relative to it)

    def __post_init__(self) -> None:
        for w in self.workers:
            w.send = sorted((m.edge(True) for m in self.messages if m.src_rank == w.rank), key=lambda e: e.tag)
            w.recv = sorted((m.edge(False) for m in self.messages if m.dst_rank == w.rank), key=lambda e: e.tag)

    @property
    def world_size(self) -> int:
        return len(self.workers)

    @property
    def driver(self) -> Worker:
        return self.workers[0]

    @property
    def stages(self) -> list[Worker]:
        """The workers of the plan's devices (every rank but the driver)."""
        return self.workers[1:]

    def worker(self, rank: int) -> Worker:
        return self.workers[rank]

    @property
    def names(self) -> list[str]:
        """Each rank's device name, by rank (rank 0: the driver)."""
        return [w.device for w in self.workers]

    def message(self, mid: int) -> Message:
        return self.messages[mid]

    def sent_by(self, rank: int) -> list[Message]:
        return [m for m in self.messages if m.src_rank == rank]

    def received_by(self, rank: int) -> list[Message]:
        return [m for m in self.messages if m.dst_rank == rank]

    def relays(self, rank: int) -> list[str]:
        """Tensors rank ``rank`` receives and sends on unchanged (a pipeline's skip connections)."""
        got = {t.spec.name for m in self.received_by(rank) for t in m.tensors}
        return [t.source for m in self.sent_by(rank) for t in m.tensors if t.take is None and t.source in got]

    def submodel_path(self, rank: int, segment: int) -> Path:
        """The sub-model's file: a plain name resolved inside the manifest's folder (never outside it)."""
        seg = self.workers[rank].segments[segment]
        if seg.submodel is None:
            raise RuntimeFailure(f"device {self.workers[rank].device}: segment {segment} computes nothing")
        folder = (self.directory or Path(".")).resolve()
        try:
            path = (folder / check_submodel_name(seg.submodel)).resolve()
        except ValueError as exc:
            raise RuntimeFailure(f"device {self.workers[rank].device}: {exc}") from None
        if path.parent != folder:
            raise RuntimeFailure(f"device {self.workers[rank].device}: sub-model {seg.submodel!r} resolves to {path}, "
                                 f"outside the manifest's folder {folder}; refused")
        return path

    def to_dict(self) -> dict[str, Any]:
        workers = [{"rank": 0, "device": DRIVER, "send": [m.id for m in self.sent_by(0)],
                    "recv": [m.id for m in self.received_by(0)]}]
        workers += [w.to_dict() for w in self.workers[1:]]
        return {"format": FORMAT, "model": self.model, "source_model": self.source_model,
                "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
                "messages": [m.to_dict() for m in self.messages],
                "collectives": [c.to_dict() for c in self.collectives], "workers": workers, "plan": self.plan}

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        write_text(p, json.dumps(self.to_dict(), indent=1))
        return p


def load_manifest(path: str | Path) -> Manifest:
    """Read a manifest file (or the ``manifest.json`` in a split directory); a ``hetsplit.manifest/1``
    file (a pipeline's, as written before) is turned into its ``/2`` program."""
    from hetsplit.runtime.manifest_v1 import FORMAT_V1, from_v1

    p = Path(path)
    if p.is_dir():
        p = p / "manifest.json"
    d = read_json(p, RuntimeFailure, "no manifest; make one with `hetsplit split PLAN MODEL --out DIR`")
    if not isinstance(d, dict):
        raise RuntimeFailure(f"{p}: a manifest is a JSON object, got {type(d).__name__}")
    if d.get("format") not in (FORMAT, FORMAT_V1):
        raise RuntimeFailure(f"{p}: 'format' is {d.get('format')!r}; expected {FORMAT!r} (or {FORMAT_V1!r})")
    try:
        return from_v1(d, p) if d["format"] == FORMAT_V1 else _from_dict(d, p)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise RuntimeFailure(f"{p}: malformed manifest ({exc!r:.300})") from None


def point_to_point(messages: list[dict[str, Any]]) -> list[Message]:
    """The messages of a manifest; those an older one moved in a gloo gather or scatter (``via`` not
    ``p2p``, all under tag 0) get tags of their own after every other message's, in the order listed,
    so every rank reading the file gives each the same."""
    out = [Message.from_dict(m) for m in messages]
    lowered = [k for k, m in enumerate(messages) if m.get("via", P2P) != P2P]
    tag = max((m.tag + len(m.tensors) for k, m in enumerate(out) if k not in lowered), default=0)
    for k in lowered:
        out[k] = replace(out[k], tag=tag)
        tag += len(out[k].tensors)
    return out


def _from_dict(d: dict[str, Any], path: Path) -> Manifest:
    workers = [Worker(int(w["rank"]), str(w["device"]), [str(x) for x in w.get("tasks", [])],
                      [Segment.from_dict(s) for s in w.get("segments", [])],
                      [int(x) for x in w.get("collectives", [])]) for w in d["workers"]]
    if [w.rank for w in workers] != list(range(len(workers))):
        raise ValueError("workers must be listed by rank, 0 (the driver) first")
    names = [s.submodel for w in workers for s in w.segments if s.submodel is not None]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"sub-models {twice} are named by more than one segment; each has a file of its own")
    messages = point_to_point(d["messages"])
    if [m.id for m in messages] != list(range(len(messages))):
        raise ValueError("messages must be listed by id from 0")
    return Manifest(str(d["model"]), dict(d.get("plan", {})), [TensorSpec.from_dict(t) for t in d["inputs"]],
                    [TensorSpec.from_dict(t) for t in d["outputs"]], messages,
                    [Collective.from_dict(c) for c in d.get("collectives", [])], workers,
                    str(d.get("source_model", "")), path.parent)
