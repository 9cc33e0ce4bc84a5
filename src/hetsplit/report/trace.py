"""A simulated timeline as a Chrome / Perfetto trace (the JSON "traceEvents" format).

Open the file in https://ui.perfetto.dev or chrome://tracing. Every resource of the simulation (a
device, then a link ``u->v``) is one process (``pid``, named by a metadata event); every job of the
timeline is one complete event (``"ph": "X"``) with its start (``ts``) and duration (``dur``) in
microseconds, its task or payload as ``name``, ``cat`` "compute" or "transfer", and its input in
``args``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hetsplit.estimate.simulate import SimResult
from hetsplit.outpath import write_text

US = 1e6  # trace times are microseconds


def trace_document(result: SimResult, title: str = "") -> dict[str, Any]:
    """The trace of ``result.timeline``: metadata events naming each resource, then one "X" event per span."""
    pid = {name: k + 1 for k, name in enumerate(result.resources)}
    cat = {name: {"device": "compute", "memory": "memory"}.get(kind, "transfer")
           for name, kind in zip(result.resources, result.resource_kinds)}
    events: list[dict[str, Any]] = []
    for name, p in pid.items():
        events.append({"name": "process_name", "ph": "M", "pid": p, "tid": 0, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": p, "tid": 0, "args": {"sort_index": p}})
    events.extend({"name": s.label, "cat": cat[s.resource], "ph": "X", "ts": s.start * US,
                   "dur": (s.end - s.start) * US, "pid": pid[s.resource], "tid": 0, "args": {"input": s.input}}
                  for s in result.timeline)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"title": title, "inputs": result.inputs, "throughput": result.throughput,
                          "makespan_s": result.makespan_s}}


def write_trace(result: SimResult, path: str | Path, title: str = "") -> Path:
    """Write the trace JSON of ``result`` to ``path`` (parents created)."""
    return write_text(path, json.dumps(trace_document(result, title)))
