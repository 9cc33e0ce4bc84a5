"""Seeded random SplitProblems for solver tests and benchmarks (no ONNX needed).

Graphs are chains with random skip connections (a tensor read several layers later, so it is live
across several cuts); clusters have per-pair random links, optional source/sink, and memories that
bind; some instances repeat devices (same type, memory and links) so classes collapse.
"""

from __future__ import annotations

import numpy as np

from hetsplit.cluster import Cluster, Device
from hetsplit.costs import CostTable, SplitProblem
from hetsplit.graph import Graph, Layer, Tensor


def random_graph(rng: np.random.Generator, n_layers: int, skip_prob: float = 0.3, name: str = "rand") -> Graph:
    out = rng.integers(1, 1000, size=n_layers) * 1000
    layers = [Layer(f"l{i}", "conv", int(rng.integers(1, 10**6)), int(rng.integers(0, 10**6)), int(out[i]))
              for i in range(n_layers)]
    tensors = [Tensor("input", -1, int(rng.integers(1, 1000) * 1000), (0,) + (
        (int(rng.integers(1, n_layers)),) if n_layers > 1 and rng.random() < skip_prob else ()))]
    for i in range(n_layers):
        cons = {i + 1} if i + 1 < n_layers else set()
        if i + 2 < n_layers and rng.random() < skip_prob:
            cons.add(int(rng.integers(i + 2, n_layers)))
        tensors.append(Tensor(f"t{i}", i, int(out[i]), tuple(sorted(cons)), is_output=(i == n_layers - 1)))
    tensors[0] = Tensor("input", -1, tensors[0].nbytes, tuple(sorted(set(tensors[0].consumers))))
    return Graph(name, layers, tensors)


def random_cluster(rng: np.random.Generator, n_dev: int, n_types: int, memory: np.ndarray,
                   uniform_links: bool = False, repeat: bool = False, source: bool = False,
                   sink: bool = False) -> Cluster:
    """``repeat``: devices of one type share memory and links (so they collapse into one class)."""
    types = rng.integers(0, n_types, size=n_dev)
    if repeat:
        memory = memory[types]
    devices = [Device(f"d{k}", "cpu", f"t{types[k]}", float(memory[k]), params={"t": int(types[k])})
               for k in range(n_dev)]

    def links(lo: float, hi: float, diag: float) -> np.ndarray:
        if uniform_links:
            m = np.full((n_dev, n_dev), rng.uniform(lo, hi))
        elif repeat:
            per = rng.uniform(lo, hi, size=(n_types, n_types))
            per = (per + per.T) / 2
            m = per[types][:, types]
        else:
            m = rng.uniform(lo, hi, size=(n_dev, n_dev))
        np.fill_diagonal(m, diag)
        return m

    bw = links(1e6, 1e8, np.inf)
    lat = links(0.0, 1e-3, 0.0)
    en = links(0.0, 1e-8, 0.0)
    names = [d.name for d in devices]
    return Cluster("rand-cluster", devices, bw, lat, en,
                   source=names[int(rng.integers(n_dev))] if source else None,
                   sink=names[int(rng.integers(n_dev))] if sink else None)


def random_problem(seed: int, n_layers: int | None = None, n_dev: int | None = None, n_types: int | None = None,
                   mem_slack: float | None = None, inf_prob: float = 0.05, uniform_links: bool = False,
                   repeat: bool | None = None, source: bool | None = None, sink: bool | None = None) -> SplitProblem:
    """A small random instance; every choice left None is drawn from the seed."""
    rng = np.random.default_rng(seed)
    L = int(n_layers if n_layers is not None else rng.integers(1, 9))
    D = int(n_dev if n_dev is not None else rng.integers(1, 6))
    T = int(n_types if n_types is not None else rng.integers(1, D + 1))
    g = random_graph(rng, L)
    layer_mem = g.param_bytes + g.out_bytes
    slack = mem_slack if mem_slack is not None else rng.uniform(0.5, 2.0)
    memory = (layer_mem.sum() + 2 * g.cut_bytes.max()) * slack * rng.uniform(0.3, 1.0, size=max(D, T))
    cl = random_cluster(rng, D, T, memory,
                        uniform_links=uniform_links,
                        repeat=bool(rng.random() < 0.3) if repeat is None else repeat,
                        source=bool(rng.random() < 0.5) if source is None else source,
                        sink=bool(rng.random() < 0.3) if sink is None else sink)
    nt = len(cl.types)
    time = rng.uniform(1e-4, 1e-2, size=(L, nt))
    energy = rng.uniform(1e-4, 1e-2, size=(L, nt))
    time[rng.random((L, nt)) < inf_prob] = np.inf
    table = CostTable(g.names, cl.types, time, energy, layer_mem)
    return SplitProblem(g, cl, table)


def big_problem(seed: int, n_layers: int, n_dev: int, n_types: int | None = None,
                mem_slack: float = 3.0) -> SplitProblem:
    """Benchmark-sized instance: all-different devices (n_types None) or typed with uniform links.

    Per-layer costs scale with a device speed drawn per type (so devices differ by a factor of
    about 10), memories bind loosely (each device holds about mem_slack / n_dev of the model).
    """
    rng = np.random.default_rng(seed)
    g = random_graph(rng, n_layers, skip_prob=0.2, name=f"rand{n_layers}")
    layer_mem = g.param_bytes + g.out_bytes
    typed = n_types is not None
    nt = n_types if typed else n_dev
    per_dev_mem = (layer_mem.sum() * mem_slack / n_dev + 2 * g.cut_bytes.max()) * rng.uniform(0.7, 1.3, size=nt)
    if typed:
        types = np.repeat(np.arange(nt), -(-n_dev // nt))[:n_dev]
        devices = [Device(f"d{k}", "cpu", f"t{types[k]}", float(per_dev_mem[types[k]]), params={"t": int(types[k])})
                   for k in range(n_dev)]
        bw = np.full((n_dev, n_dev), 1e8)
        lat = np.full((n_dev, n_dev), 1e-4)
        en = np.full((n_dev, n_dev), 1e-9)
    else:
        devices = [Device(f"d{k}", "cpu", f"t{k}", float(per_dev_mem[k]), params={"t": k}) for k in range(n_dev)]
        bw = rng.uniform(5e7, 5e8, size=(n_dev, n_dev))
        lat = rng.uniform(0, 1e-4, size=(n_dev, n_dev))
        en = rng.uniform(1e-10, 1e-9, size=(n_dev, n_dev))
    for m, d in ((bw, np.inf), (lat, 0.0), (en, 0.0)):
        np.fill_diagonal(m, d)
    cl = Cluster(f"rand-{n_dev}{'-typed' if typed else '-distinct'}", devices, bw, lat, en)
    speed = rng.uniform(1.0, 10.0, size=nt)
    work = g.macs / 1e9
    time = work[:, None] / speed[None, :] * rng.uniform(0.8, 1.2, size=(n_layers, nt))
    energy = work[:, None] * rng.uniform(0.5, 2.0, size=nt)[None, :]
    table = CostTable(g.names, cl.types, time, energy, layer_mem)
    return SplitProblem(g, cl, table)


def board_problem(seed: int, n_boards: int | None = None, n_layers: int | None = None,
                  source: bool | None = None, sink: bool | None = None, perturb: bool = False,
                  pes: int = 2) -> SplitProblem:
    """Boards of ``pes`` PEs (types "cpu", "gpu", "npu"), like the Jetson clusters: one link per
    (PE, PE) pair inside a board and one between boards (not necessarily symmetric), memories that
    bind, skips.

    ``source``/``sink``: on board 0 (which breaks its symmetry with the others). ``perturb``: one
    link between boards 0 and 1 differs, so no two boards are interchangeable any more.
    """
    rng = np.random.default_rng(seed)
    B = int(n_boards if n_boards is not None else rng.integers(2, 5))
    L = int(n_layers if n_layers is not None else rng.integers(1, 8 if B < 4 else 6))
    g = random_graph(rng, L, skip_prob=0.4, name="board-rand")
    layer_mem = g.param_bytes + g.out_bytes
    mem = (layer_mem.sum() + 2 * g.cut_bytes.max()) * rng.uniform(0.3, 1.2, size=pes)
    n = pes * B
    pos = np.tile(np.arange(pes), B)
    board = np.repeat(np.arange(B), pes)
    kinds = ("cpu", "gpu", "npu")
    devices = [Device(f"b{board[k]}-{kinds[pos[k]]}", "cpu", kinds[pos[k]], float(mem[pos[k]]), params={})
               for k in range(n)]
    same = board[:, None] == board[None, :]

    def links(lo: float, hi: float, diag: float) -> np.ndarray:
        inner, outer = rng.uniform(lo, hi, size=(pes, pes)), rng.uniform(lo, hi, size=(pes, pes))
        m = np.where(same, inner[pos][:, pos], outer[pos][:, pos])
        np.fill_diagonal(m, diag)
        return m

    bw, lat, en = links(1e6, 1e8, np.inf), links(0.0, 1e-3, 0.0), links(0.0, 1e-8, 0.0)
    if perturb:
        bw[0, pes + 1] *= 1.5
    names = [d.name for d in devices]
    src = bool(rng.random() < 0.4) if source is None else source
    snk = bool(rng.random() < 0.2) if sink is None else sink
    cl = Cluster(f"boards-{B}", devices, bw, lat, en, source=names[0] if src else None,
                 sink=names[int(rng.integers(2))] if snk else None)
    time = rng.uniform(1e-4, 1e-2, size=(L, pes))
    energy = rng.uniform(1e-4, 1e-2, size=(L, pes))
    time[rng.random((L, pes)) < 0.05] = np.inf
    return SplitProblem(g, cl, CostTable(g.names, cl.types, time, energy, layer_mem))


def synthetic_on_cluster(seed: int, n_layers: int, cluster: Cluster, model_memories: float = 2.5) -> SplitProblem:
    """A random ``n_layers`` chain with skips on a real cluster: per type a speed and an energy per
    unit of work (about a factor 10 apart; the whole model takes 1 to 10 s on one device, so compute
    and transfers both matter), layer memory scaled so the model needs about ``model_memories``
    times the largest device memory (stages must split to fit)."""
    rng = np.random.default_rng(seed)
    g = random_graph(rng, n_layers, skip_prob=0.2, name=f"synth{n_layers}")
    layer_mem = (g.param_bytes + g.out_bytes).astype(np.float64)
    layer_mem *= model_memories * float(cluster.memory_bytes.max()) / layer_mem.sum()
    nt = len(cluster.types)
    work = g.macs / g.macs.sum() * 10.0
    speed = rng.uniform(1.0, 10.0, size=nt)
    time = work[:, None] / speed[None, :] * rng.uniform(0.8, 1.2, size=(n_layers, nt))
    energy = work[:, None] * rng.uniform(0.5, 2.0, size=nt)[None, :] * rng.uniform(0.8, 1.2, size=(n_layers, nt))
    return SplitProblem(g, cluster, CostTable(g.names, cluster.types, time, energy, layer_mem))


def coupled_problem(seed: int) -> SplitProblem:
    """Source d0 and sink d1 whose link often carries both the input and the output in the best plans:
    the first half of the layers is fast on d1, the second half on d0 (so d1 | d0, first stage on the
    sink and last on the source, is a strong plan), and each of the two transfers over d0 -> d1 takes
    45-95 % of such a stage; every other device and link is random. 2-6 layers, 2-4 devices."""
    rng = np.random.default_rng(seed)
    L, D = int(rng.integers(2, 7)), int(rng.integers(2, 5))
    g = random_graph(rng, L)
    cb = g.cut_bytes.astype(np.float64)
    layer_mem = g.param_bytes + g.out_bytes
    memory = (layer_mem.sum() + 2 * cb.max()) * rng.uniform(0.6, 2.0, size=D)
    devices = [Device(f"d{k}", "cpu", f"t{k}", float(memory[k]), params={"t": k}) for k in range(D)]
    half = L // 2
    time = rng.uniform(1.0, 3.0, size=(L, D))
    time[:half, 1] = rng.uniform(0.2, 0.6, size=half)
    time[half:, 0] = rng.uniform(0.2, 0.6, size=L - half)
    stage = max(time[:half, 1].sum(), time[half:, 0].sum())
    bw = cb.max() / (stage * rng.uniform(0.05, 0.5, size=(D, D)))
    bw[0, 1] = max(cb[0], cb[L]) / (stage * rng.uniform(0.45, 0.95))
    lat = np.zeros((D, D))
    en = rng.uniform(0.0, 1e-7, size=(D, D))
    for m, diag in ((bw, np.inf), (en, 0.0)):
        np.fill_diagonal(m, diag)
    cl = Cluster("coupled", devices, bw, lat, en, source="d0", sink="d1")
    energy = rng.uniform(0.5, 2.0, size=(L, D))
    return SplitProblem(g, cl, CostTable(g.names, cl.types, time, energy, layer_mem))



def with_cut_costs(problem: SplitProblem, seed: int, zero_type: bool = True, messages: bool = False) -> SplitProblem:
    """``problem`` with what cutting costs on each type (``_cut_costs.with_cut_costs``: call, executor and
    host bytes, unfused extras, on the scale of its layers) drawn from ``seed``, about half the unfused
    extras 0 and, with ``zero_type``, the first of several types charged nothing (explicit zeros); with
    ``messages``, every link's message ends cost CPU too (``_cut_costs.with_message_costs``)."""
    from dataclasses import replace

    from _cut_costs import with_cut_costs as random_cut_costs
    from _cut_costs import with_message_costs

    from hetsplit.costs.segment import SegmentCost

    rng = np.random.default_rng(10_000 + seed)
    pr = random_cut_costs(problem, rng)
    if messages:
        pr = with_message_costs(pr, rng)
    c = pr.costs
    assert c.unfused_s is not None
    segment = dict(c.segment)
    if zero_type and len(c.types) > 1:
        segment[c.types[0]] = SegmentCost(source="explicit zero")
    unfused = c.unfused_s * (rng.random(c.unfused_s.shape) < 0.5)
    return replace(pr, costs=replace(c, segment=segment, unfused_s=unfused))
