"""TaskGraph: a plan expanded into the tasks devices run and the payloads links carry.

Every consumer of a plan — the closed-form evaluator, the discrete-event simulator, the runtime's
manifest — reads this one expansion, so they agree on what runs where and what moves.

- A *task* runs on one device: a whole layer (``layer``), a slice of one (``shard``), a pipeline
  stage of consecutive layers (``stage``), or the meeting of shards (``concat``, ``sum``; ``copy``
  forwards a reduced result down a broadcast tree).
- An *edge* says a task needs a payload from another task. ``SOURCE`` as producer is the model
  input (it arrives at the cluster's source device, or where it is consumed when there is none);
  ``SINK`` as consumer is the model output leaving the cluster (to the sink device, if any).
- A *message* is one payload moving once from one device to another: edges with the same payload
  and the same destination device share it (a tensor is sent once per device pair).

Tasks are in topological order. Devices are per task (``device``); the batch evaluator can also
take other device assignments of the same structure. ``chain`` holds the plan's run order, if any:
pairs of tasks on one device where the first must finish before the second starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from hetsplit.cluster.types import Cluster
from hetsplit.graph.types import Graph, Layer

SOURCE = -1  # producer of the model inputs
SINK = -2    # consumer of the model outputs

TASK_KINDS = ("layer", "shard", "stage", "concat", "sum", "copy")


@dataclass(frozen=True)
class Task:
    """Work one device does per input. ``layers`` are the graph layers it computes (a stage: its
    range; a shard or a combine: its layer). ``work`` is the Layer a device model costs for shards
    and combines (None: the layers' own cost-table rows)."""

    name: str
    kind: str
    layers: tuple[int, ...]
    device: int
    work: Layer | None = None
    axis: str = ""
    start: int = 0
    stop: int = 0
    size: int = 0

    @property
    def fraction(self) -> float:
        """Share of its layer's work (1 for whole layers and stages)."""
        return (self.stop - self.start) / self.size if self.size else 1.0


@dataclass(frozen=True)
class Message:
    """One payload sent once from device ``src`` to device ``dst`` per input."""

    payload: str
    nbytes: float
    src: int
    dst: int
    producer: int                # task index (SOURCE for model inputs)
    consumers: tuple[int, ...]   # task indices (SINK for model outputs)


@dataclass
class TaskGraph:
    """The tasks and payload edges of one plan on one graph and cluster."""

    graph: Graph
    cluster: Cluster
    routing: str
    tasks: list[Task]
    edge_src: np.ndarray          # E producer task (SOURCE for model inputs)
    edge_dst: np.ndarray          # E consumer task (SINK for model outputs)
    edge_bytes: np.ndarray        # E
    edge_payload: np.ndarray      # E payload id: edges of one payload to one device share a message
    payloads: list[str] = field(default_factory=list)
    chain: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    # K x 2 (before, after): consecutive tasks of a device's run order (the plan's ``order``)

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    @cached_property
    def device(self) -> np.ndarray:
        """T device indices: the plan's own assignment."""
        return np.array([t.device for t in self.tasks], dtype=np.int64)

    def endpoints(self, devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Source and destination device of every edge under ``devices``: a T vector gives two E
        vectors, a task-major T x N array (one column per assignment) two E x N arrays.

        A model input with no cluster source arrives where it is consumed; a model output with no
        sink stays where it is made (both then cost nothing)."""
        dev = np.asarray(devices)
        u = dev[np.where(self.edge_src >= 0, self.edge_src, 0)]
        v = dev[np.where(self.edge_dst >= 0, self.edge_dst, 0)]
        source, sink = self.cluster.source_index, self.cluster.sink_index
        from_source = np.flatnonzero(self.edge_src == SOURCE)
        to_sink = np.flatnonzero(self.edge_dst == SINK)
        u[from_source] = v[from_source] if source is None else source
        v[to_sink] = u[to_sink] if sink is None else sink
        return u, v

    def messages(self, devices: np.ndarray | None = None) -> list[Message]:
        """The messages of one assignment (default: the plan's), in edge order."""
        dev = self.device if devices is None else np.asarray(devices)
        u, v = self.endpoints(dev)
        found: dict[tuple[int, int], int] = {}
        out: list[Message] = []
        consumers: list[list[int]] = []
        for e in range(len(self.edge_src)):
            if u[e] == v[e] or self.edge_bytes[e] <= 0:
                continue
            key = (int(self.edge_payload[e]), int(v[e]))
            if key not in found:
                found[key] = len(out)
                out.append(Message(self.payloads[key[0]], float(self.edge_bytes[e]), int(u[e]), int(v[e]),
                                   int(self.edge_src[e]), ()))
                consumers.append([])
            consumers[found[key]].append(int(self.edge_dst[e]))
        return [Message(m.payload, m.nbytes, m.src, m.dst, m.producer, tuple(c)) for m, c in zip(out, consumers)]

    def sums_across_devices(self) -> bool:
        """Whether a sum combine gathers partial sums from another device or sends its result (or a
        ``copy`` of it) to one: tensor-parallel plans and mappings with ``in`` shards. The runtime
        moves these messages as its gathers and scatters and runs such a plan input by input
        (``runtime.rounds``); ``estimate.here`` simulates it so."""
        kinds = [t.kind for t in self.tasks]
        for m in self.messages():
            if m.producer < 0 or any(c < 0 for c in m.consumers):
                continue      # the model's inputs and outputs go to and from the driver
            if (len(m.consumers) == 1 and kinds[m.consumers[0]] == "sum") or kinds[m.producer] in ("sum", "copy"):
                return True
        return False

    @cached_property
    def segments(self) -> dict[int, list[list[int]]]:
        """Each device's tasks, in task (topological) order, cut wherever a task reads a tensor made on
        another device by a task at or after the current segment's first task: the runtime's units (one
        sub-model, one executor call per input each). A segment thus waits only for tasks earlier in one
        global order, which makes a run deadlock-free whatever each device does."""
        remote: list[list[int]] = [[] for _ in self.tasks]
        for e in range(len(self.edge_src)):
            p, q = int(self.edge_src[e]), int(self.edge_dst[e])
            if p >= 0 and q >= 0 and self.tasks[p].device != self.tasks[q].device:
                remote[q].append(p)
        out: dict[int, list[list[int]]] = {}
        for n, t in enumerate(self.tasks):
            segs = out.setdefault(t.device, [])
            if not segs or any(p >= segs[-1][0] for p in remote[n]):
                segs.append([n])
            else:
                segs[-1].append(n)
        return out

    def segment_boundary_bytes(self) -> list[tuple[int, float]]:
        """Per segment (device by device, in ``segments`` order): its device and the bytes that cross its
        boundary per input, each tensor once: what it reads from outside it (the model input, another
        device, an earlier segment) and what it makes that is read outside it (another device, a later
        segment, the model output)."""
        seg_of = {n: (d, k) for d, segs in self.segments.items() for k, seg in enumerate(segs) for n in seg}
        crossing: dict[tuple[int, int], dict[tuple[str, int, int], float]] = {}
        for e in range(len(self.edge_src)):
            p, q = int(self.edge_src[e]), int(self.edge_dst[e])
            if self.edge_bytes[e] <= 0 or (p >= 0 and q >= 0 and seg_of[p] == seg_of[q]):
                continue
            key = (int(self.edge_payload[e]), p)
            if q >= 0:
                crossing.setdefault(seg_of[q], {})[("in", *key)] = float(self.edge_bytes[e])
            if p >= 0:
                crossing.setdefault(seg_of[p], {})[("out", *key)] = float(self.edge_bytes[e])
        return [(d, sum(crossing.get((d, k), {}).values())) for d, segs in self.segments.items()
                for k in range(len(segs))]

    def describe(self) -> list[str]:
        """One line per task: ``name on device``."""
        names = self.cluster.names
        return [f"{t.name} on {names[t.device]}" for t in self.tasks]


class TaskGraphBuilder:
    """Accumulates tasks and edges in topological order (used by ``check_plan`` and by encodings
    that build a fixed structure for many device assignments)."""

    def __init__(self, graph: Graph, cluster: Cluster, routing: str):
        self.graph, self.cluster, self.routing = graph, cluster, routing
        self.tasks: list[Task] = []
        self._edges: list[tuple[int, int, float, int]] = []
        self._payload_ids: dict[str, int] = {}

    def task(self, task: Task) -> int:
        self.tasks.append(task)
        return len(self.tasks) - 1

    def edge(self, src: int, dst: int, payload: str, nbytes: float) -> None:
        pid = self._payload_ids.setdefault(payload, len(self._payload_ids))
        self._edges.append((src, dst, float(nbytes), pid))

    def build(self) -> TaskGraph:
        e = np.array(self._edges, dtype=np.float64).reshape(-1, 4)
        return TaskGraph(self.graph, self.cluster, self.routing, self.tasks, e[:, 0].astype(np.int64),
                         e[:, 1].astype(np.int64), e[:, 2].copy(), e[:, 3].astype(np.int64),
                         list(self._payload_ids))
