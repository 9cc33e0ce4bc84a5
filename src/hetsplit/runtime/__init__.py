"""Runtime: split a plan into per-device ONNX sub-models, run them as processes, measure, verify.

- ``split_model(plan, graph, model_path, out_dir) -> Manifest`` (``hetsplit split``): a pipeline's
  ``hetsplit.manifest/1``, or a mapping's ``MappingManifest`` (``hetsplit.manifest/2``: segments per
  device, messages, collectives; see ``runtime.mapping_manifest``)
- ``run_plan(plan, graph, model_path, RunOptions) -> RunReport`` and ``run_manifest`` (``hetsplit run``)
- ``compare(report, predicted_metrics, cluster)``: predicted beside measured
- ``LinkMatrix`` / ``emulation_available()``: links shaped with namespaces, veth and tc
- ``calibration.runtime_costs()``: the runtime's own per-message costs on this machine (toy runs,
  cached when trusted), which the ``here`` fidelity charges

See docs/architecture.md.
"""

from hetsplit.runtime.manifest import FORMAT, Edge, Manifest, TensorSpec, WorkerSpec, load_manifest
from hetsplit.runtime.mapping_manifest import FORMAT2, MappingManifest
from hetsplit.runtime.measure import RunReport, compare, summarize
from hetsplit.runtime.netem import LinkMatrix, emulation_available
from hetsplit.runtime.run import RunOptions, resolve_model, run_manifest, run_plan
from hetsplit.runtime.split import split_model

__all__ = ["FORMAT", "FORMAT2", "Edge", "LinkMatrix", "Manifest", "MappingManifest", "RunOptions", "RunReport",
           "TensorSpec", "WorkerSpec", "compare", "emulation_available", "load_manifest", "resolve_model",
           "run_manifest", "run_plan", "split_model", "summarize"]
