"""Load Balance Longest Path (LBLP): Bougioukou & Antonakopoulos, Algorithm 1 (seed 001).

1. Find the longest path (LP): the chain of layers with the largest total time, each layer timed on
   its processing type (the type that runs it fastest: conv on an IMC unit, add on a DPU).
2. For each processing type: sort the LP layers of that type by time, longest first, and give each
   to the unit of that type with the least time assigned so far.
3. Then sort the other layers of that type the same way and assign them alike, keeping the
   parallel-branch constraint: a layer avoids units that hold a layer on a branch parallel to its own
   (neither depends on the other), when such a unit exists, so parallel branches run in parallel.
Ties go to the first unit in cluster order; equal times keep the layers' topological order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsplit.search.base import register_partitioner
from hetsplit.search.node_mapping import LoadBook, NodeMapping, OneMappingPartitioner


def lblp_assignment(nm: NodeMapping) -> np.ndarray:
    """LBLP's device per layer (an L-vector)."""
    times = nm.type_time
    on_lp = np.zeros(nm.num_layers, dtype=bool)
    on_lp[nm.longest_path(times)] = True
    book = LoadBook.empty(nm.num_layers, nm.num_devices)
    for kind in np.unique(nm.processing_type):
        units = nm.units_of_type(int(kind))
        mine = nm.processing_type == kind
        for group, keep_parallel_apart in ((mine & on_lp, False), (mine & ~on_lp, True)):
            layers = np.flatnonzero(group)
            for i in layers[np.argsort(-times[layers], kind="stable")]:
                nm.deadline.check("its mapping")          # once per placed layer
                candidates = units
                if keep_parallel_apart:
                    free = [u for u in units if not any(nm.parallel(int(i), int(j))
                                                        for j in np.flatnonzero(book.devices == u))]
                    candidates = np.array(free) if free else units
                book.put(int(i), book.least_loaded(candidates), float(times[i]))
    return book.devices


@register_partitioner("lblp")
@dataclass
class LoadBalanceLongestPath(OneMappingPartitioner):
    """LBLP (seed 001, Algorithm 1): one node-to-unit mapping."""

    name: str = "lblp"

    def assignment(self, nm: NodeMapping) -> tuple[np.ndarray, dict]:
        return lblp_assignment(nm), {}
