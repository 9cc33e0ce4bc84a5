"""``split_model``: any plan cut into per-device segment sub-models plus its ``hetsplit.manifest/2``
(``hetsplit split``).

The plan is validated and expanded by ``check_plan`` (a pipeline giving each device one stage: the
runtime starts one worker per device); ``runtime.compile`` reads the TaskGraph (local names, messages,
collectives, segments); ``runtime.shard_onnx`` builds each task's ONNX fragment and infers its shapes;
here the fragments of each segment become one sub-model, probed once on zeros, and the manifest is
written. A pipeline's stage is one segment, so one sub-model per stage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import onnx

from hetsplit.cluster.types import Cluster
from hetsplit.errors import ModelError, PlanError, RuntimeFailure
from hetsplit.graph.types import Graph
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Plan
from hetsplit.runtime.compile import DRIVER_DEV, Layout, layout, plan_cluster
from hetsplit.runtime.manifest import (DRIVER, Collective, Manifest, Message, Segment, TensorSpec, WireTensor,
                                       Worker)
from hetsplit.runtime.shard_onnx import Fragment, ShardSurgeon, np_dtype, probe
from hetsplit.outpath import replacing


def split_model(plan: Plan, graph: Graph, model_path: str | Path, out_dir: str | Path, check: bool = True,
                cluster: Cluster | None = None) -> Manifest:
    """Write every device's segment sub-models and ``manifest.json`` into ``out_dir``; return the manifest.

    The plan is validated by ``check_plan`` against ``cluster`` (default: the devices the plan names)."""
    if plan.model and plan.model != graph.name:
        raise RuntimeFailure(f"the plan is for model {plan.model!r}, but the model given is {graph.name!r}")
    for s, stage in enumerate(plan.stages):
        if getattr(stage, "shard", None) is not None:
            raise PlanError(f"stage {s} ({stage.device}) is a shard of a layer: shards in pipeline stages are not "
                            "supported by the runtime yet; write the plan as a mapping (plan/2 'assign' with shards "
                            "and 'combine')")
    cl = plan_cluster(plan, cluster)
    tg = check_plan(graph, cl, plan, one_worker_per_device=True)
    require_nodes(graph)
    model = load_prepared(Path(model_path), graph.meta.get("input_shapes"))
    lay = layout(graph, plan, tg)
    surgeon = ShardSurgeon(model, graph, lay)
    for t in input_specs(model):   # symbolic input dims were fixed (--input-shape, a batch to 1)
        surgeon.specs[t.name] = t
    takes = _takes(lay, surgeon)
    frags = []
    for n in range(len(lay.tasks)):
        frag = surgeon.fragment(n)
        surgeon.infer(frag)
        frags.append(frag)
    used = [cl.index(name) for name in dict.fromkeys(plan.devices)]
    rank = {d: r + 1 for r, d in enumerate(used)}
    rank[DRIVER_DEV] = 0
    names = {d: cl.names[d] for d in used}
    names[DRIVER_DEV] = DRIVER
    messages, tag = [], 0
    for mid, m in enumerate(lay.messages):
        tensors = tuple(WireTensor(_named(surgeon.specs[c.name] if c.slice_of < 0 else takes[c.name][1], c.name),
                                   c.source, takes[c.name][0] if c.slice_of >= 0 else None) for c in m.tensors)
        plan_bytes = None if DRIVER_DEV in (m.src, m.dst) else m.plan_nbytes
        messages.append(Message(mid, m.payload, names[m.src], rank[m.src], names[m.dst], rank[m.dst], tensors,
                                tag, m.collective, plan_bytes))
        tag += len(tensors)
    colls = [Collective(cid, c.kind, graph.layers[c.layer].name, lay.tasks[c.task].name, names[c.root],
                        tuple(names[d] for d in c.members), tuple(rank[d] for d in c.members), tuple(c.messages))
             for cid, c in enumerate(lay.collectives)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    workers = [Worker(0, DRIVER)]
    for d in used:
        segs = _segments(lay, d, frags, surgeon, out, names[d], check)
        workers.append(Worker(rank[d], names[d], [t.name for t in lay.tasks if t.device == d], segs,
                              [c.id for c in colls if names[d] in c.members]))
    inputs = [surgeon.specs[t.name] for t in graph.tensors if t.producer == -1]
    outputs = [surgeon.specs[t.name] for t in graph.tensors if t.is_output]
    manifest = Manifest(graph.name, plan.to_dict(), inputs, outputs, messages, colls, workers, str(model_path), out)
    manifest.save(out / "manifest.json")
    return manifest


def _named(spec: TensorSpec, name: str) -> TensorSpec:
    return TensorSpec(name, spec.shape, spec.dtype)


def _takes(lay: Layout, surgeon: ShardSurgeon) -> dict:
    """Local name of every slice a sender cuts -> (Take, its spec); one cut per name."""
    out: dict = {}
    for m in lay.messages:
        for c in m.tensors:
            if c.slice_of < 0:
                continue
            take = surgeon.take(c.slice_of, c.start, c.stop, c.size)
            if c.name in out and out[c.name][0] != take:
                raise ModelError(f"layers {surgeon.graph.layers[c.slice_of].name!r} and another one read different "
                                 f"slices named {c.name!r} (their inputs reach their weights through different "
                                 "reshapes); split one of them differently")
            out[c.name] = (take, surgeon.slice_spec(c.name, c.source, take))
            surgeon.specs[c.name] = out[c.name][1]
    return out


def _segments(lay: Layout, d: int, frags: list[Fragment], surgeon: ShardSurgeon, out: Path, device: str,
              check: bool) -> list[Segment]:
    """Device ``d``'s segments: inputs, outputs, messages waited for and posted, one sub-model each."""
    seg_tasks = lay.segments.get(d, [])
    seg_of = {n: s for s, seg in enumerate(seg_tasks) for n in seg}
    recv: list[list[int]] = [[] for _ in seg_tasks]
    send: list[list[int]] = [[] for _ in seg_tasks]
    for mid, m in enumerate(lay.messages):
        if m.dst == d:
            recv[seg_of[lay.recv_at[mid]]].append(mid)
        if m.src == d:
            send[seg_of[m.producer]].append(mid)
    have: set[str] = set()
    ins: list[list[str]] = []
    made: list[list[str]] = []
    for s, seg in enumerate(seg_tasks):
        have.update(c.name for mid in recv[s] for c in lay.messages[mid].tensors)
        inside: list[str] = []
        needs: list[str] = []
        for n in seg:
            needs += [r for r in frags[n].reads if r not in inside and r not in needs and frags[n].nodes]
            inside += [x for x in frags[n].makes if frags[n].nodes]
        missing = [r for r in needs if r not in have]
        if missing:
            raise RuntimeFailure(f"device {device}: segment {s} reads {missing[:3]}, which nothing before it makes "
                                 "or sends here (internal error: the layout and the fragments disagree)")
        ins.append(needs)
        made.append(inside)
        have.update(inside)
    segs = []
    for s, seg in enumerate(seg_tasks):
        later = {x for t in ins[s + 1:] for x in t}
        sent = {c.source for mid in send[s] for c in lay.messages[mid].tensors}
        outs = [x for x in made[s] if x in later or x in sent]
        where = f"device {device} segment {s} ({_tasks_named(lay, seg)})"
        inputs = [surgeon.specs[x] for x in ins[s]]
        outputs = [surgeon.specs[x] for x in outs]
        submodel = None
        if outputs:
            submodel = f"{safe_name(device)}-seg{s}.onnx"
            sub = surgeon.assemble([frags[n] for n in seg], inputs, outputs, where)
            with replacing(out / submodel) as tmp:
                onnx.save(sub, str(tmp))
            if check:
                onnx.checker.check_model(str(out / submodel))
                got = probe(sub, inputs, [t.name for t in outputs], where)
                for t in outputs:
                    if tuple(got[t.name].shape) != t.shape:
                        raise ModelError(f"{where}: {t.name!r} comes out {list(got[t.name].shape)}, its task "
                                         f"alone made {list(t.shape)}")
        segs.append(Segment(s, [lay.tasks[n].name for n in seg], submodel, inputs, outputs, recv[s], send[s]))
    return segs


def _tasks_named(lay: Layout, seg: list[int]) -> str:
    names = [lay.tasks[n].name for n in seg]
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])} ... {names[-1]}"


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


_PREPARED: dict[tuple, onnx.ModelProto] = {}   # the last model prepared in this process (one entry)


def _file_key(path: Path) -> tuple:
    st = Path(path).stat()
    return str(Path(path).resolve()), st.st_mtime_ns, st.st_size


def load_prepared(path: Path, input_shapes: Mapping[str, Sequence[int]] | None = None) -> onnx.ModelProto:
    """The canonical form the Graph's node names refer to (``prepare_model``, its inputs fixed to
    ``input_shapes``), with its weights (external data read from beside the file).

    The last file prepared is kept (a search splits one model many times): a caller gets its own copy."""
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    from hetsplit.graph.onnx_prepare import prepare_model

    key = _file_key(path) + (repr(sorted((input_shapes or {}).items())),)
    if key not in _PREPARED:
        model = prepare_model(path, input_shapes=input_shapes)
        if any(uses_external_data(t) for t in model.graph.initializer):
            load_external_data_for_model(model, str(Path(path).parent))
        _PREPARED.clear()
        _PREPARED[key] = model
    copy = onnx.ModelProto()
    copy.CopyFrom(_PREPARED[key])
    return copy


def require_nodes(graph: Graph) -> None:
    """Fail unless every layer names its ONNX nodes (a graph imported from the file, not a profile)."""
    for layer in graph.layers:
        if not layer.nodes:
            raise ModelError(f"layer {layer.name!r} of {graph.name!r} names no ONNX nodes; split needs a graph "
                             "imported from the ONNX file (hetsplit.graph.load_onnx), not one read from a profile")


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
