"""Runtime: compile a plan into one program per rank, run it as processes (or on hosts), measure, verify.

- ``split_model(plan, graph, model_path, out_dir) -> Manifest`` (``hetsplit split``): every plan's
  ``hetsplit.manifest/2``: per device its segments (sub-models), the messages (point to point) between
  them (see ``runtime.manifest``; ``/1`` files still read)
- ``run_plan(plan, graph, model_path, RunOptions) -> RunReport`` and ``run_manifest`` (``hetsplit run``):
  one driver (``runtime.driver``) and one worker program (``runtime.worker``) for every plan kind
- ``RunReport`` (``runtime.report``): what a run measured, typed; ``hetsplit.run.report/1`` its JSON
- ``LinkMatrix`` / ``emulation_available()``: links shaped with namespaces, veth and tc
- ``calibration.runtime_costs()``: the runtime's own per-message costs on this machine (toy runs,
  cached when trusted), which the ``here`` fidelity charges

See docs/architecture.md. The names load on first use (PEP 562): importing one module of the runtime
(``runtime.report`` for a typed report, ``runtime.process`` for a rank) does not import torch.distributed and
every other module with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hetsplit.runtime.manifest import FORMAT, Edge, Manifest, TensorSpec, Worker, load_manifest
    from hetsplit.runtime.measure import summarize
    from hetsplit.runtime.netem import LinkMatrix, emulation_available
    from hetsplit.runtime.report import DeviceRun, HopRun, LinkRun, RunReport
    from hetsplit.runtime.run import RunOptions, resolve_model, run_manifest, run_plan
    from hetsplit.runtime.split import split_model

_HOME = {**dict.fromkeys(("FORMAT", "Edge", "Manifest", "TensorSpec", "Worker", "load_manifest"), "manifest"),
         "summarize": "measure", "LinkMatrix": "netem", "emulation_available": "netem",
         **dict.fromkeys(("DeviceRun", "HopRun", "LinkRun", "RunReport"), "report"),
         **dict.fromkeys(("RunOptions", "resolve_model", "run_manifest", "run_plan"), "run"),
         "split_model": "split"}

__all__ = ["FORMAT", "DeviceRun", "Edge", "HopRun", "LinkMatrix", "LinkRun", "Manifest", "RunOptions", "RunReport",
           "TensorSpec", "Worker", "emulation_available", "load_manifest", "resolve_model", "run_manifest", "run_plan",
           "split_model", "summarize"]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
