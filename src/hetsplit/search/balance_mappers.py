"""The IMC paper's rival mappers (Bougioukou & Antonakopoulos, seed 001, Sec. IV).

- Weights Balance (WB, Algorithm 2): layers of a weight-stationary type (IMC, CIM), largest weights
  first, each to the unit of its type with the least weight so far; the other layers, longest first,
  each to the unit of its type with the least time so far.
- Round-Robin (RR): layers in topological order (ascending ids), each to the next unit of its
  processing type, cycling.
- Random (RD, seeded): per processing type, as many randomly chosen layers as there are units go one
  to each unit (so every unit works); the rest go to random units of their type.
Each layer stays on its processing type (the type that runs it fastest), as the paper's IMC/DPU split
puts conv on IMC units and everything else on DPUs. Ties go to the first unit in cluster order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsplit.search.base import register_partitioner
from hetsplit.search.node_mapping import LoadBook, NodeMapping, OneMappingPartitioner


def weights_balance_assignment(nm: NodeMapping) -> np.ndarray:
    """WB's device per layer."""
    weights = nm.problem.graph.param_bytes.astype(float)
    book = LoadBook.empty(nm.num_layers, nm.num_devices)
    for kind in np.unique(nm.processing_type):
        units = nm.units_of_type(int(kind))
        layers = np.flatnonzero(nm.processing_type == kind)
        amount = weights if nm.weight_stationary(int(kind)) else nm.type_time
        for i in layers[np.argsort(-amount[layers], kind="stable")]:
            nm.deadline.check("its mapping")              # once per placed layer
            book.put(int(i), book.least_loaded(units), float(amount[i]))
    return book.devices


def round_robin_assignment(nm: NodeMapping) -> np.ndarray:
    """RR's device per layer."""
    out = np.empty(nm.num_layers, dtype=np.int64)
    for kind in np.unique(nm.processing_type):
        units = nm.units_of_type(int(kind))
        layers = np.flatnonzero(nm.processing_type == kind)   # ascending ids: a topological order
        out[layers] = units[np.arange(len(layers)) % len(units)]
    return out


def random_assignment(nm: NodeMapping, rng: np.random.Generator) -> np.ndarray:
    """RD's device per layer."""
    out = np.empty(nm.num_layers, dtype=np.int64)
    for kind in np.unique(nm.processing_type):
        units = nm.units_of_type(int(kind))
        layers = rng.permutation(np.flatnonzero(nm.processing_type == kind))
        first = min(len(units), len(layers))
        out[layers[:first]] = rng.permutation(units)[:first]
        out[layers[first:]] = rng.choice(units, size=len(layers) - first)
    return out


@register_partitioner("wb")
@dataclass
class WeightsBalance(OneMappingPartitioner):
    """Weights Balance (seed 001, Algorithm 2)."""

    name: str = "wb"

    def assignment(self, nm: NodeMapping) -> tuple[np.ndarray, dict]:
        return weights_balance_assignment(nm), {}


@register_partitioner("rr")
@dataclass
class RoundRobin(OneMappingPartitioner):
    """Round-Robin over the units of each processing type (seed 001, Sec. IV)."""

    name: str = "rr"

    def assignment(self, nm: NodeMapping) -> tuple[np.ndarray, dict]:
        return round_robin_assignment(nm), {}


@register_partitioner("rd")
@dataclass
class RandomMapping(OneMappingPartitioner):
    """Random mapping, every unit used (seed 001, Sec. IV); reproducible by ``seed``."""

    seed: int = 0
    name: str = "rd"

    def assignment(self, nm: NodeMapping) -> tuple[np.ndarray, dict]:
        return random_assignment(nm, np.random.default_rng(self.seed)), {"seed": self.seed}
