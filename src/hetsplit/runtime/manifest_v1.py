"""Reading ``hetsplit.manifest/1`` (pipelines, as ``hetsplit split`` wrote them before ``/2`` held every
plan) into the ``/2`` program: each edge a message, each stage one segment.

A ``/1`` worker lists its ``recv`` and ``send`` edges (``peer``, ``rank``, ``tensors``), the sub-model
it runs (``submodel``, ``inputs``, ``outputs``: tensor names) and its ``layers``. The driver's sends
are the model inputs, its receives the outputs; a stage's send edge carries what it made and what it
relays. Message ids and tags follow the workers' send edges in rank order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetsplit.runtime.manifest import DRIVER, Manifest, Message, Segment, TensorSpec, WireTensor, Worker

FORMAT_V1 = "hetsplit.manifest/1"


def from_v1(d: dict[str, Any], path: Path) -> Manifest:
    """The ``/2`` program of a ``/1`` document read from ``path``."""
    workers = sorted(d["workers"], key=lambda w: int(w["rank"]))
    if [int(w["rank"]) for w in workers] != list(range(len(workers))):
        raise ValueError("workers must be ranks 0 (the driver), 1, 2, ...")
    names = [str(w["device"]) for w in workers]
    messages: list[Message] = []
    tag = 0
    for w in workers:
        src = int(w["rank"])
        for e in w.get("send", []):
            dst = int(e["rank"])
            specs = tuple(TensorSpec.from_dict(t) for t in e["tensors"])
            plan_nbytes = None if 0 in (src, dst) else float(sum(t.nbytes for t in specs))
            messages.append(Message(len(messages), f"{names[src]}->{names[dst]}", names[src], src, names[dst], dst,
                                    tuple(WireTensor(t, t.name) for t in specs), tag, plan_nbytes=plan_nbytes))
            tag += len(specs)
    programs = [Worker(0, DRIVER)]
    for w in workers[1:]:
        rank = int(w["rank"])
        got = [m for m in messages if m.dst_rank == rank]
        sent = [m for m in messages if m.src_rank == rank]
        by_name = {t.spec.name: t.spec for m in got + sent for t in m.tensors}
        seg = Segment(0, [str(x) for x in w.get("layers", [])], w.get("submodel"),
                      [by_name[str(n)] for n in w.get("inputs", [])], [by_name[str(n)] for n in w.get("outputs", [])],
                      [m.id for m in got], [m.id for m in sent])
        programs.append(Worker(rank, names[rank], list(seg.tasks), [seg]))
    return Manifest(str(d["model"]), dict(d.get("plan", {})), [TensorSpec.from_dict(t) for t in d["inputs"]],
                    [TensorSpec.from_dict(t) for t in d["outputs"]], messages, [], programs,
                    str(d.get("source_model", "")), path.parent)
