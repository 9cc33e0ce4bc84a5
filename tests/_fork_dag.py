"""A small branching DAG for node-mapper tests: c0 forks into c1 and c2 (parallel branches), they
join in add, then c4 and pool; per-kind costs, one link medium."""

from __future__ import annotations

import numpy as np

from hetsplit.cluster import Cluster, Device
from hetsplit.costs import CostTable, SplitProblem
from hetsplit.graph import Graph, Layer, Tensor
from hetsplit.search.node_mapping import NodeMapping

INF = np.inf
# c0 forks into c1 and c2 (parallel branches), they join in add, then c4 and pool.
FORK_OPS = [("c0", "conv", 100), ("c1", "conv", 300), ("c2", "conv", 200), ("add", "eltwise", 0),
            ("c4", "conv", 50), ("pool", "pool", 0)]
FORK_EDGES = {0: (1, 2), 1: (3,), 2: (3,), 3: (4,), 4: (5,)}
#                 c0   c1   c2  add   c4  pool
IMC_TIME = [4.0, 3.0, 2.0, INF, 8.0, INF]
DPU_TIME = [10.0, 9.0, 8.0, 1.0, 12.0, 2.0]


def fork_graph() -> Graph:
    layers = [Layer(n, op, 1000, w, 64, onnx_ops=("X",)) for n, op, w in FORK_OPS]
    tensors = [Tensor("input", -1, 64, (0,))]
    for i in range(len(layers)):
        tensors.append(Tensor(f"t{i}", i, 64, FORK_EDGES.get(i, ()), is_output=(i == len(layers) - 1)))
    return Graph("fork", layers, tensors)


def fork_problem(units: list[tuple[str, str]], time: np.ndarray | None = None, latency_s: float = 0.0,
                 bandwidth: float = 1e18) -> SplitProblem:
    """``units``: (name, kind) with kind imc or dpu; costs per kind from IMC_TIME / DPU_TIME."""
    g = fork_graph()
    devices = [Device(name, kind, f"{kind}-type", 1e12, params={"kind": kind}) for name, kind in units]
    d = len(devices)
    bw = np.full((d, d), bandwidth)
    np.fill_diagonal(bw, np.inf)
    lat = np.full((d, d), latency_s)
    np.fill_diagonal(lat, 0.0)
    cl = Cluster("fork-units", devices, bw, lat, np.zeros((d, d)))
    if time is None:
        by_kind = {"imc": IMC_TIME, "dpu": DPU_TIME}
        time = np.array([by_kind[t.split("-")[0]] for t in cl.types]).T
    return SplitProblem(g, cl, CostTable(g.names, cl.types, time, np.ones_like(time), np.full(len(g.names), 10.0)))


TWO_IMC_ONE_DPU = [("i0", "imc"), ("i1", "imc"), ("p0", "dpu")]


def names(nm: NodeMapping, devices: np.ndarray) -> dict[str, str]:
    return {layer: nm.problem.cluster.names[d] for layer, d in zip(nm.problem.graph.names, devices)}
