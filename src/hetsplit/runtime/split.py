"""Split an ONNX model along a plan: one sub-model per stage plus the manifest (``hetsplit split``).

Pipelines (``plan.stages``) are split here; mappings (``plan.assign``, shards and combines) by
``runtime.mapping_split`` into the ``hetsplit.manifest/2`` format. For a pipeline, each sub-model
holds exactly the ONNX nodes of its stage's layers (``Layer.nodes``), the initializers they read,
graph inputs for the tensors the stage receives and computes with, and graph outputs for the
tensors it produces and sends on. Nodes outside every layer (constants the importer left
ungrouped) are copied into each stage that needs them, provided they depend on nothing but
initializers and other such nodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper, shape_inference

from hetsplit.cluster.types import Cluster
from hetsplit.errors import ModelError, PlanError, RuntimeFailure
from hetsplit.graph.types import Graph
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Plan
from hetsplit.runtime.manifest import Manifest, TensorSpec, WorkerSpec, build_manifest, plan_cluster

if TYPE_CHECKING:
    from hetsplit.runtime.mapping_manifest import MappingManifest


def np_dtype(elem_type: int) -> str:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name


def tensor_specs(model: onnx.ModelProto, names: set[str]) -> dict[str, TensorSpec]:
    """Concrete shapes and dtypes of ``names``: from shape inference, else from one probe run."""
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - shape inference is best effort; the probe covers the rest
        inferred = model
    g = inferred.graph
    infos = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}
    specs: dict[str, TensorSpec] = {}
    unknown: list[str] = []
    for name in sorted(names):
        vi = infos.get(name)
        if vi is None or not vi.type.HasField("tensor_type"):
            unknown.append(name)
            continue
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims) or not vi.type.tensor_type.HasField("shape"):
            unknown.append(name)
            continue
        specs[name] = TensorSpec(name, tuple(int(d.dim_value) for d in dims), np_dtype(vi.type.tensor_type.elem_type))
    if unknown:
        specs.update(_probe(model, unknown))
    return specs


def input_specs(model: onnx.ModelProto) -> list[TensorSpec]:
    """Model inputs (initializers excluded) with symbolic dimensions set to 1."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = tuple(int(d.dim_value) if d.HasField("dim_value") else 1 for d in tt.shape.dim)
        out.append(TensorSpec(vi.name, shape, np_dtype(tt.elem_type)))
    return out


def _probe(model: onnx.ModelProto, names: list[str]) -> dict[str, TensorSpec]:
    """Run the whole model once on zeros, exposing ``names`` as outputs, to read their shapes."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    for name in names:
        if name not in have:
            probe.graph.output.append(helper.make_empty_tensor_value_info(name))
    inputs = input_specs(model)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {t.name: np.zeros(t.shape, dtype=t.dtype) for t in inputs}
    values = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
    specs = {t.name: t for t in inputs}
    for name in names:
        if name in specs:
            continue
        if name not in values:
            raise ModelError(f"tensor {name!r} is not produced by the ONNX model; the graph and the file disagree")
        v = np.asarray(values[name])
        specs[name] = TensorSpec(name, tuple(v.shape), v.dtype.name)
    return specs


def _node_inputs(node: onnx.NodeProto) -> list[str]:
    """Every tensor a node reads, including outer-scope names used inside its subgraphs."""
    names = [x for x in node.input if x]
    for attr in node.attribute:
        for sub in list(attr.graphs) + ([attr.g] if attr.HasField("g") else []):
            local = {o for n in sub.node for o in n.output} | {i.name for i in sub.input} | \
                    {i.name for i in sub.initializer}
            names += [x for n in sub.node for x in _node_inputs(n) if x not in local]
    return names


def extract_stage(model: onnx.ModelProto, node_names: list[str], inputs: list[TensorSpec],
                  outputs: list[TensorSpec], free_nodes: dict[str, onnx.NodeProto], where: str) -> onnx.ModelProto:
    """A sub-model of ``model`` with the given nodes, graph inputs and outputs."""
    by_name = {n.name: n for n in model.graph.node}
    missing = [n for n in node_names if n not in by_name]
    if missing:
        raise ModelError(f"{where}: ONNX nodes {missing[:5]} are not in the model")
    wanted = set(node_names)
    inits = {i.name: i for i in model.graph.initializer}
    fed = {t.name for t in inputs}
    produced: set[str] = {o for n in node_names for o in by_name[n].output}
    # pull in ungrouped constant nodes this stage reads (transitively)
    todo = [x for n in node_names for x in _node_inputs(by_name[n])]
    while todo:
        name = todo.pop()
        if name in produced or name in fed or name in inits:
            continue
        node = free_nodes.get(name)
        if node is None:
            raise ModelError(f"{where}: it reads tensor {name!r}, which is neither sent to it, made by its layers, "
                             "nor a constant; the layer grouping and the plan disagree")
        wanted.add(node.name)
        produced.update(node.output)
        todo += _node_inputs(node)
    nodes = [n for n in model.graph.node if n.name in wanted]  # keep the original topological order
    used = {x for n in nodes for x in _node_inputs(n)}
    not_made = [t.name for t in outputs if t.name not in produced]
    if not_made:
        raise ModelError(f"{where}: it must send {not_made[:5]} but its layers do not produce them")
    graph = helper.make_graph(
        nodes, f"{model.graph.name or 'model'}-{where}",
        [helper.make_tensor_value_info(t.name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), list(t.shape))
         for t in inputs],
        [helper.make_tensor_value_info(t.name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), list(t.shape))
         for t in outputs],
        initializer=[inits[x] for x in sorted(used) if x in inits and x not in fed])
    sub = helper.make_model(graph, opset_imports=list(model.opset_import), producer_name="hetsplit split")
    sub.ir_version = model.ir_version
    sub.functions.extend(model.functions)
    return sub


def free_nodes(model: onnx.ModelProto, graph: Graph) -> dict[str, onnx.NodeProto]:
    """Nodes outside every layer, by the tensors they produce."""
    grouped = {n for layer in graph.layers for n in layer.nodes}
    return {o: n for n in model.graph.node if n.name not in grouped for o in n.output}


_PREPARED: dict[tuple, onnx.ModelProto] = {}   # the last model prepared in this process (one entry)
_SPECS: dict[tuple, dict[str, TensorSpec]] = {}


def _file_key(path: Path) -> tuple:
    st = Path(path).stat()
    return str(Path(path).resolve()), st.st_mtime_ns, st.st_size


def load_prepared(path: Path) -> onnx.ModelProto:
    """The canonical form the Graph's node names refer to (``prepare_model``), with its weights.

    The last file prepared is kept (a search splits one model many times): a caller gets its own copy."""
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    from hetsplit.graph.onnx_prepare import prepare_model

    key = _file_key(path)
    if key not in _PREPARED:
        model = prepare_model(path)
        if any(uses_external_data(t) for t in model.graph.initializer):
            load_external_data_for_model(model, str(Path(path).parent))
        _PREPARED.clear()
        _PREPARED[key] = model
    copy = onnx.ModelProto()
    copy.CopyFrom(_PREPARED[key])
    return copy


def file_tensor_specs(path: Path, model: onnx.ModelProto, names: set[str]) -> dict[str, TensorSpec]:
    """``tensor_specs`` of the model prepared from ``path``, kept for the last file and set of names."""
    key = (_file_key(path), frozenset(names))
    if key not in _SPECS:
        _SPECS.clear()
        _SPECS[key] = tensor_specs(model, names)
    return dict(_SPECS[key])


def split_model(plan: Plan, graph: Graph, model_path: str | Path, out_dir: str | Path,
                check: bool = True, cluster: Cluster | None = None) -> Manifest | MappingManifest:
    """Write the sub-models and ``manifest.json`` into ``out_dir``; return the manifest.

    A pipeline gets one sub-model per stage (``hetsplit.manifest/1``); a mapping one sub-model per
    segment of each device (``hetsplit.manifest/2``, see ``runtime.mapping_manifest``). The plan is
    validated by ``check_plan`` against ``cluster`` (default: the devices the plan names), a device
    running at most one stage (the runtime starts one worker per device).
    """
    model_path, out = Path(model_path), Path(out_dir)
    if plan.model and plan.model != graph.name:
        raise RuntimeFailure(f"the plan is for model {plan.model!r}, but the model given is {graph.name!r}")
    for s, stage in enumerate(plan.stages):
        if getattr(stage, "shard", None) is not None:
            raise PlanError(f"stage {s} ({stage.device}) is a shard of a layer: shards in pipeline stages are not "
                            "supported by the runtime yet; write the plan as a mapping (plan/2 'assign' with shards "
                            "and 'combine')")
    if not plan.is_pipeline:
        from hetsplit.runtime.mapping_split import split_mapping

        return split_mapping(plan, graph, model_path, out, check=check, cluster=cluster)
    check_plan(graph, plan_cluster(plan, cluster), plan, one_worker_per_device=True)  # before any work
    require_nodes(graph)
    model = load_prepared(model_path)
    wire = {t.name for t in graph.tensors}
    specs = file_tensor_specs(model_path, model, wire)
    for t in input_specs(model):  # symbolic input dims were fixed to 1
        specs[t.name] = t
    out.mkdir(parents=True, exist_ok=True)
    files = [f"stage{s}-{safe_name(st.device)}.onnx" for s, st in enumerate(plan.stages)]
    manifest = build_manifest(graph, plan, specs, files, str(model_path), cluster)
    free = free_nodes(model, graph)
    for spec in manifest.stages:
        sub = _stage_model(model, graph, spec, free)
        path = out / str(spec.submodel)
        onnx.save(sub, str(path))
        if check:
            onnx.checker.check_model(str(path))
    manifest.directory = out
    manifest.save(out / "manifest.json")
    return manifest


def require_nodes(graph: Graph) -> None:
    """Fail unless every layer names its ONNX nodes (a graph imported from the file, not a profile)."""
    for layer in graph.layers:
        if not layer.nodes:
            raise ModelError(f"layer {layer.name!r} of {graph.name!r} names no ONNX nodes; split needs a graph "
                             "imported from the ONNX file (hetsplit.graph.load_onnx), not one read from a profile")


def _stage_model(model: onnx.ModelProto, graph: Graph, spec: WorkerSpec,
                 free: dict[str, onnx.NodeProto]) -> onnx.ModelProto:
    nodes = [n for name in spec.layers for n in graph.layers[graph.index(name)].nodes]
    received = {t.name: t for e in spec.recv for t in e.tensors}
    sent = {t.name: t for e in spec.send for t in e.tensors}
    where = f"stage {spec.stage} ({spec.device})"
    return extract_stage(model, nodes, [received[n] for n in spec.inputs], [sent[n] for n in spec.outputs], free,
                         where)


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
