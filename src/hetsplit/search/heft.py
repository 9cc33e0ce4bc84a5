"""HEFT: Heterogeneous Earliest Finish Time (Topcuoglu, Hariri, Wu, IEEE TPDS 2002).

1. Upward rank: ``rank(i) = mean_w(i) + max over successors j of (mean_c(i, j) + rank(j))``, where
   mean_w is the layer's mean time over the devices that can run it and mean_c the mean over device
   pairs of moving the tensors from i to j (the link's message time, ``cluster.links``).
2. Layers in decreasing rank (a topological order) each go to the device giving the earliest finish
   time, with insertion: a layer may fill an idle gap between layers already on the device.
The textbook assumptions and how the plan reports the schedule: ``search/list_scheduling.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsplit.search.base import register_partitioner
from hetsplit.search.list_scheduling import ListSchedule, ListSchedulerMapper, PartialSchedule, upward_ranks
from hetsplit.search.node_mapping import NodeMapping


def heft(nm: NodeMapping) -> ListSchedule:
    """HEFT's schedule of one input."""
    ps = PartialSchedule(nm)
    rank = upward_ranks(nm, ps.edge_bytes)
    for i in sorted(range(nm.num_layers), key=lambda i: (-rank[i], i)):
        ps.place(i, *ps.best_device(i))
    return ps.result()


def heft_schedule(nm: NodeMapping) -> tuple[np.ndarray, np.ndarray, float]:
    """HEFT's device and start time per layer, and its one-input makespan estimate."""
    s = heft(nm)
    return s.device, s.start, s.makespan


@register_partitioner("heft")
@dataclass
class Heft(ListSchedulerMapper):
    """HEFT (Topcuoglu et al. 2002): the field's standard list scheduler, as a node-to-unit mapper."""

    name: str = "heft"

    def schedule(self, nm: NodeMapping) -> ListSchedule:
        return heft(nm)
