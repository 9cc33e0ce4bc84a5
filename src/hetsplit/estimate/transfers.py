"""What a plan sends per inference: each TaskGraph message with its link's time and energy."""

from __future__ import annotations

from dataclasses import dataclass

from hetsplit.plan.tasks import TaskGraph


@dataclass(frozen=True)
class Transfer:
    """One payload sent once from device ``src`` to ``dst`` per inference, costed on their link."""

    payload: str
    src: str
    dst: str
    nbytes: float
    time_s: float
    energy_j: float


def plan_transfers(tg: TaskGraph) -> list[Transfer]:
    """Every message of ``tg`` (``TaskGraph.messages``, in edge order) with its transfer time and energy."""
    cl = tg.cluster
    return [Transfer(m.payload, cl.names[m.src], cl.names[m.dst], m.nbytes,
                     float(cl.transfer_time(m.src, m.dst, m.nbytes)), float(cl.transfer_energy(m.src, m.dst, m.nbytes)))
            for m in tg.messages()]
