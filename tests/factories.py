"""Small hand-made problems for tests: a chain graph with optional skips, a cluster, a cost table."""

from __future__ import annotations

import numpy as np

from hetsplit.cluster import Cluster, Device
from hetsplit.costs import CostTable, SplitProblem
from hetsplit.graph import Graph, Layer, Tensor


def chain_graph(out_bytes: list[int], input_bytes: int = 4, skips: dict[int, list[int]] | None = None,
                name: str = "toy") -> Graph:
    """Layers l0..l{n-1} in a chain; ``skips[i]`` lists extra later layers reading layer i's output."""
    n = len(out_bytes)
    skips = skips or {}
    layers = [Layer(f"l{i}", "conv", 100 * (i + 1), 10, out_bytes[i], onnx_ops=("Conv",)) for i in range(n)]
    tensors = [Tensor("input", -1, input_bytes, (0,))]
    for i in range(n):
        cons = sorted(set(([i + 1] if i + 1 < n else []) + skips.get(i, [])))
        tensors.append(Tensor(f"t{i}", i, out_bytes[i], tuple(cons), is_output=(i == n - 1)))
    return Graph(name, layers, tensors)


def cluster(types: list[str], bandwidth: np.ndarray | float = 1.0, energy_per_byte: np.ndarray | float = 0.0,
            latency_s: np.ndarray | float = 0.0, memory: list[float] | None = None,
            source: str | None = None, sink: str | None = None) -> Cluster:
    """Devices d0..d{D-1} of the given types, with uniform or per-pair links."""
    d = len(types)
    memory = memory or [1e12] * d
    devices = [Device(f"d{k}", "cpu", types[k], memory[k], params={"type": types[k]}) for k in range(d)]

    def matrix(v, diag):
        m = np.array(v, dtype=np.float64) * np.ones((d, d))
        np.fill_diagonal(m, diag)
        return m

    return Cluster("toy-cluster", devices, matrix(bandwidth, np.inf), matrix(latency_s, 0.0),
                   matrix(energy_per_byte, 0.0), source=source, sink=sink)


def problem(graph: Graph, cl: Cluster, time_s: np.ndarray, energy_j: np.ndarray,
            mem_bytes: np.ndarray | None = None) -> SplitProblem:
    """A SplitProblem with one cost column per distinct type of ``cl`` (in cl.types order)."""
    mem = graph.param_bytes + graph.out_bytes if mem_bytes is None else mem_bytes
    table = CostTable(graph.names, cl.types, np.asarray(time_s, float), np.asarray(energy_j, float), mem)
    return SplitProblem(graph, cl, table)
