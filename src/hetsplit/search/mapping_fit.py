"""Why no node-to-unit mapping fits memory: the device and how far over, for the error a user sees."""

from __future__ import annotations

import numpy as np

from hetsplit.errors import HetsplitError
from hetsplit.plan.types import Metrics
from hetsplit.search.node_mapping import NodeMapping
from hetsplit.units import format_quantity


def no_fit_error(nm: NodeMapping, closest: Metrics | None = None, proven: bool = True) -> HetsplitError:
    """The error for a problem none of whose mappings fits (``proven``; else: none found that does): a
    layer too large for every device that can run it, else a model larger than the cluster's memory,
    else the most-overfull device of the closest mapping found (``closest``)."""
    pr = nm.problem
    g, names = pr.graph, pr.cluster.names
    mem = pr.costs.mem_bytes[:, pr.device_type]                       # L x D
    cap = pr.memory_bytes
    where = f"{g.name!r} on {pr.cluster.name!r}"
    over = np.where(nm.feasible, mem - cap[None, :], np.inf).min(axis=1)
    if (over > 0).any():
        i = int(np.argmax(over))
        d = int(np.argmin(np.where(nm.feasible[i], mem[i] - cap, np.inf)))
        return HetsplitError(f"no mapping of {where} fits memory: layer {g.names[i]!r} needs "
                             f"{format_quantity(mem[i, d], 'B')} on {names[d]!r}, the device with most room that can "
                             f"run it ({format_quantity(cap[d], 'B')}): {format_quantity(over[i], 'B')} over")
    least = float(np.where(nm.feasible, mem, np.inf).min(axis=1).sum())
    total = float(cap.sum())
    if least > total:
        return HetsplitError(f"no mapping of {where} fits memory: its layers need at least {format_quantity(least, 'B')}, "
                             f"the devices hold {format_quantity(total, 'B')} together: "
                             f"{format_quantity(least - total, 'B')} over")
    if closest is not None:
        worst = max(closest.memory_per_device_bytes, key=lambda n: closest.memory_per_device_bytes[n] -
                    cap[names.index(n)])
        used, room = closest.memory_per_device_bytes[worst], float(cap[names.index(worst)])
        what = "no mapping of" if proven else "no mapping found (within the time budget) of"
        return HetsplitError(f"{what} {where} fits memory: in the closest one found, {worst!r} holds "
                             f"{format_quantity(used, 'B')} of {format_quantity(room, 'B')}: "
                             f"{format_quantity(used - room, 'B')} over (layers, and the tensors it sends and receives)")
    return HetsplitError(f"no mapping of {where} fits memory")
