"""The least energy per inference of a node-to-unit mapping, exactly, as a MILP (HiGHS).

Energy is linear in the mapping: ``sum_i e[i, d] x[i, d]`` for the layers plus, for every message
(``mapping_milp``'s ``z[p, a, b]``: payload p moved from a to b, once per destination device; the
input from the source, the outputs to the sink), ``bytes_p * energy_per_byte(a, b)``, charged to
the sender, as the estimator charges it. Memory rows as in the bottleneck MILP when memory can
bind; interchangeable devices labelled by their first layer (their energies are equal too).
"""

from __future__ import annotations

import time

import numpy as np

from hetsplit.search.mapping_milp import Builder, MilpResult, memory_could_bind, payloads_of, solve_milp
from hetsplit.search.node_mapping import NodeMapping


def solve_energy(nm: NodeMapping, time_limit_s: float) -> MilpResult:
    """The mapping of least energy per inference (every term modelled: the result is exact)."""
    t0 = time.perf_counter()
    if nm.evaluator.memory is not None:   # the memory model prices each plan as a whole
        return MilpResult(None, 0.0, False, False, False, False, False, time.perf_counter() - t0,
                          "not run: the devices keep weights off chip (the memory model costs each plan)")
    pr = nm.problem
    memory = memory_could_bind(nm)
    memories = pr.memory_bytes[np.isfinite(pr.memory_bytes)]
    b = Builder(nm, [[i] for i in range(nm.num_layers)], 1.0, float(memories.max()) if len(memories) else 1.0)
    b.symmetry()
    b.traffic(payloads_of(nm), links=False, memory=memory)
    energy = pr.costs.energy_j[:, pr.device_type]
    scale = float(np.where(nm.feasible, energy, 0.0).max()) or 1.0   # rows near 1 suit the solver
    c = np.zeros(b.m.n)
    for (i, d), k in b.x.items():
        c[k] += energy[i, d] / scale
    lk = pr.cluster.links
    for var, a, v, nbytes in b.sent:
        c[var] += lk.energy(a, v, nbytes) / scale
    res, devices, bound = solve_milp(b, c, time_limit_s)
    return MilpResult(devices, max(0.0, bound * scale), res.status == 0, res.status == 2, True, False, memory,
                      time.perf_counter() - t0, str(res.message))
