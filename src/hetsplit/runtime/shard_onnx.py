"""ONNX surgery: each task of a TaskGraph as a fragment of ONNX nodes, and a device's segment of tasks
as one sub-model.

Per task kind (the local names are those of ``runtime.compile``):

- ``layer``: the layer's nodes as they are; ``stage`` (a pipeline's): the nodes of all its layers;
- ``shard``, axis ``out``, of a conv / fully connected layer: its nodes on the whole input with the
  weight cut (conv weight axis 0; Gemm / MatMul weight columns, minding ``transB``), the bias and the
  epilogue's per-channel constants cut alike (bias Add, BatchNormalization, PRelu...); a depthwise
  convolution also cuts its input channels (or reads them cut, behind a chain). Every tensor it makes
  is renamed ``name[k]``;
- ``shard``, axis ``out``, of any other layer (a chain follower: activations, softmax, attention
  matmuls by heads...): its nodes unchanged, on the slices ``T[k]`` it reads;
- ``shard``, axis ``in``: the anchor node alone (conv weight axis 1; Gemm / MatMul weight rows),
  on the slice it receives, the bias only on shard 0, making ``L.partial[k]``; behind a chain it
  also runs the views between its input and the anchor on its slice;
- ``sum``: a Sum of the partials; the top one then runs the rest of the layer (the fused epilogue:
  bias, activation, views) so it applies once, after the sum;
- ``concat``: a Concat of the shards' outputs along the axis they were cut;
- ``copy``: nothing (the relay of an all-reduce forwards what it received).

Shapes of every local tensor come from one probe run of each fragment on zeros (onnxruntime); a
fragment that cannot run as cut raises a ModelError naming the layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hetsplit.errors import ModelError
from hetsplit.graph.onnx_ops import ANCHOR_OPS, EW_OPS, VIEW_OPS
from hetsplit.graph.onnx_prepare import value_types
from hetsplit.graph.types import CONV, DWCONV, GEMM, Graph
from hetsplit.plan.tasks import Task
from hetsplit.runtime.compile import Layout, outputs_of
from hetsplit.runtime.manifest import Take, TensorSpec

MOVERS = {"Concat", "Split", "Slice", "Pad", "Resize", "Upsample", "Tile", "Expand", "Gather", "GatherElements",
          "GatherND", "ScatterND", "ScatterElements", "DepthToSpace", "SpaceToDepth", "Trilu", "OneHot"}
ELEMENTWISE = EW_OPS - VIEW_OPS - MOVERS                   # ops that keep a channel where it is
ORDER_VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}   # keep element order


def np_dtype(elem_type: int) -> str:
    """The numpy dtype name of an ONNX element type."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """Every tensor a node reads, including outer-scope names used inside its subgraphs."""
    names = [x for x in node.input if x]
    for attr in node.attribute:
        for sub in list(attr.graphs) + ([attr.g] if attr.HasField("g") else []):
            local = {o for n in sub.node for o in n.output} | {i.name for i in sub.input} | \
                    {i.name for i in sub.initializer}
            names += [x for n in sub.node for x in node_inputs(n) if x not in local]
    return names


def free_nodes(model: onnx.ModelProto, graph: Graph) -> dict[str, onnx.NodeProto]:
    """Nodes outside every layer, by the tensors they produce."""
    grouped = {n for layer in graph.layers for n in layer.nodes}
    return {o: n for n in model.graph.node if n.name not in grouped for o in n.output}


@dataclass
class Fragment:
    """One task's ONNX nodes (renamed), the initializers it adds, what it reads and makes."""

    task: int
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    makes: list[str] = field(default_factory=list)


@dataclass
class Parts:
    """A layer's nodes: constant-only ones, the anchor (None: no weights), before and after it."""

    static: list[onnx.NodeProto]
    anchor: onnx.NodeProto | None
    pre: list[onnx.NodeProto]
    post: list[onnx.NodeProto]


class ShardSurgeon:
    """Builds the fragments of one TaskGraph's tasks from the prepared model and infers their shapes."""

    def __init__(self, model: onnx.ModelProto, graph: Graph, lay: Layout):
        self.model, self.graph, self.lay = model, graph, lay
        self.by_name = {n.name: n for n in model.graph.node}
        self.inits = {i.name: i for i in model.graph.initializer}
        self.consts = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"
                       and any(a.name == "value" for a in n.attribute)}
        self.types = value_types(model)
        self.free = free_nodes(model, graph)
        static = set(self.inits)
        for n in model.graph.node:
            if all((not t) or t in static for t in n.input):
                static.update(t for t in n.output if t)
        self.static = static
        self.constant_nodes = {o: n for n in model.graph.node if self.is_static(n) for o in n.output if o}
        self.specs: dict[str, TensorSpec] = {}
        for t in graph.tensors:
            self.specs[t.name] = self.whole_spec(t.name)

    # ---- model facts ------------------------------------------------------------------------------
    def whole_spec(self, name: str) -> TensorSpec:
        shape, etype = self.types.get(name, (None, 0))
        if shape is None:
            raise ModelError(f"tensor {name!r} of {self.graph.name!r} has no static shape")
        return TensorSpec(name, tuple(int(d) for d in shape), np_dtype(etype))

    def value(self, name: str, where: str) -> np.ndarray:
        """The value of a constant tensor (an initializer or a Constant node)."""
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        if name in self.consts:
            attr = next(a for a in self.consts[name].attribute if a.name == "value")
            return numpy_helper.to_array(attr.t)
        raise ModelError(f"{where}: its constant {name!r} is computed by nodes, not stored, so it cannot be cut; "
                         "export the model with constant folding")

    def is_static(self, node: onnx.NodeProto) -> bool:
        return all((not t) or t in self.static for t in node.input)

    def parts(self, i: int) -> Parts:
        layer = self.graph.layers[i]
        nodes = [self.by_name[n] for n in layer.nodes]
        static = [n for n in nodes if self.is_static(n)]
        active = [n for n in nodes if not self.is_static(n)]
        anchor = next((n for n in active if n.op_type in ANCHOR_OPS), None) \
            if layer.op in (CONV, DWCONV, GEMM) else None
        if anchor is None:
            return Parts(static, None, [], active)
        at = active.index(anchor)
        return Parts(static, anchor, active[:at], active[at + 1:])

    def act_input(self, anchor: onnx.NodeProto, where: str) -> int:
        """Which input of the anchor is the activation (the other carries the weight)."""
        if anchor.op_type == "MatMul" and anchor.input[0] in self.static:
            raise ModelError(f"{where}: its MatMul has the weight on the left; only x @ W layers can be sharded")
        return 0

    # ---- in slices ----------------------------------------------------------------------------------
    def take(self, i: int, start: int, stop: int, size: int) -> Take:
        """How the holder of layer ``i``'s whole input cuts the slice an ``in`` shard reads."""
        layer = self.graph.layers[i]
        where = f"layer {layer.name!r}"
        parts = self.parts(i)
        anchor = parts.anchor
        if anchor is None:
            raise ModelError(f"{where} has no weight node to split by input")
        bad = [n for n in parts.pre if n.op_type not in ORDER_VIEWS]
        if bad:
            raise ModelError(f"{where}: 'in' shards need the layer's input to reach its {anchor.op_type} through "
                             f"reshapes only, but {bad[0].name!r} ({bad[0].op_type}) is in between")
        x = anchor.input[self.act_input(anchor, where)]
        shape = self.whole_spec(x).shape
        attrs = {a.name: helper.get_attribute_value(a) for a in anchor.attribute}
        if anchor.op_type == "Conv":
            axis = 1
        elif anchor.op_type == "Gemm":
            axis = 0 if attrs.get("transA", 0) else 1
        else:
            axis = len(shape) - 1
        if shape[axis] != size:
            raise ModelError(f"{where}: its {anchor.op_type} input has {shape[axis]} along the split axis, the plan "
                             f"splits {size}")
        return Take(shape, axis, start, stop)

    def slice_spec(self, name: str, source: str, take: Take) -> TensorSpec:
        shape = list(take.shape)
        shape[take.axis] = take.stop - take.start
        return TensorSpec(name, tuple(shape), self.specs[source].dtype)

    # ---- fragments ----------------------------------------------------------------------------------
    def fragment(self, n: int) -> Fragment:
        task = self.lay.tasks[n]
        i = task.layers[0]
        layer = self.graph.layers[i]
        frag = Fragment(n, reads=list(self.lay.reads[n]), makes=list(self.lay.makes[n]))
        if task.kind == "layer":
            frag.nodes = [self.by_name[x] for x in layer.nodes]
        elif task.kind == "stage":
            frag.nodes = [self.by_name[x] for j in task.layers for x in self.graph.layers[j].nodes]
        elif task.kind == "shard" and task.axis == "out":
            self._out_shard(frag, task, i)
        elif task.kind == "shard":
            self._in_shard(frag, task, i)
        elif task.kind == "concat":
            self._concat(frag, i)
        elif task.kind == "sum":
            self._sum(frag, i)
        return frag

    def _inputs(self, i: int, k: int, reads: list[str]) -> dict[str, str]:
        """Original name -> local name of the tensors layer ``i`` reads (whole, or shard ``k``'s slice)."""
        out = {}
        for t in self.graph.tensors:
            if i in t.consumers:
                out[t.name] = f"{t.name}[{k}]" if f"{t.name}[{k}]" in reads else t.name
        return out

    def _cut(self, frag: Fragment, name: str, axis: int, a: int, b: int, tag: str, where: str) -> str:
        """A new initializer: ``name`` cut to ``a:b`` along ``axis``."""
        v = self.value(name, where)
        index = [slice(None)] * v.ndim
        index[axis] = slice(a, b)
        new = f"{name}{tag}"
        frag.initializers.append(numpy_helper.from_array(np.ascontiguousarray(v[tuple(index)]), new))
        return new

    def _out_shard(self, frag: Fragment, task: Task, i: int) -> None:
        layer = self.graph.layers[i]
        k = self.lay.shard_index[frag.task]
        where = f"layer {layer.name!r} (shard {k} on {self.lay.tasks[frag.task].device})"
        a, b, size = task.start, task.stop, task.size
        sfx, tag = f"[{k}]", f"[{k}]@{i}"
        parts = self.parts(i)
        names = self._inputs(i, k, frag.reads)
        chained = any(v != o for o, v in names.items())
        track: dict[str, int] = {}
        nodes = list(parts.static)
        for node in [*parts.pre, *(x for x in [parts.anchor] if x is not None), *parts.post]:
            nn = onnx.NodeProto()
            nn.CopyFrom(node)
            nn.name = node.name + sfx
            ins = [names.get(x, x) for x in node.input]
            if node is parts.anchor:
                ins = self._cut_anchor_out(frag, nn, ins, a, b, size, tag, chained, where, nodes)
                rank = len(self.whole_spec(node.output[0]).shape)
                track[node.output[0]] = -(rank - 1) if node.op_type == "Conv" else -1
            elif parts.anchor is not None:
                ins = self._cut_epilogue(frag, node, ins, track, a, b, size, tag, where)
            _wire(nn, node, ins, sfx, names)
            nodes.append(nn)
        frag.nodes = nodes

    def _cut_anchor_out(self, frag: Fragment, nn: onnx.NodeProto, ins: list[str], a: int, b: int, size: int,
                        tag: str, chained: bool, where: str, nodes: list[onnx.NodeProto]) -> list[str]:
        op = nn.op_type
        attrs = {x.name: helper.get_attribute_value(x) for x in nn.attribute}
        if op == "Conv":
            groups = int(attrs.get("group", 1))
            w = self.value(ins[1], where) if groups > 1 else None
            depthwise = w is not None and w.shape[1] == 1 and groups == w.shape[0]
            if groups > 1 and not depthwise:
                raise ModelError(f"{where}: a grouped convolution ({groups} groups) is split only when depthwise")
            ins[1] = self._cut(frag, ins[1], 0, a, b, tag, where)
            if len(ins) > 2 and ins[2]:
                ins[2] = self._cut(frag, ins[2], 0, a, b, tag, where)
            if depthwise:
                for x in nn.attribute:
                    if x.name == "group":
                        x.i = b - a
                if not chained:   # the whole input: keep its channels a:b
                    cut = f"{ins[0]}[ch {a}:{b}]"
                    consts = [numpy_helper.from_array(np.array(v, dtype=np.int64), f"{cut}.{key}{tag}")
                              for key, v in (("starts", [a]), ("ends", [b]), ("axes", [1]))]
                    frag.initializers += consts
                    nodes.append(helper.make_node("Slice", [ins[0]] + [c.name for c in consts], [cut],
                                                  name=f"{nn.name}.in"))
                    ins[0] = cut
        elif op == "Gemm":
            ins[1] = self._cut(frag, ins[1], 0 if attrs.get("transB", 0) else 1, a, b, tag, where)
            if len(ins) > 2 and ins[2]:
                c = self.value(ins[2], where)
                if c.ndim >= 1 and c.shape[-1] == size:
                    ins[2] = self._cut(frag, ins[2], c.ndim - 1, a, b, tag, where)
        else:  # MatMul x @ W
            self.act_input(nn, where)
            w = self.value(ins[1], where)
            ins[1] = self._cut(frag, ins[1], w.ndim - 1, a, b, tag, where)
        return ins

    def _cut_epilogue(self, frag: Fragment, node: onnx.NodeProto, ins: list[str], track: dict[str, int], a: int,
                      b: int, size: int, tag: str, where: str) -> list[str]:
        """Cut the per-channel constants an out shard's fused epilogue applies to its channels."""
        axes = {track[x] for x in node.input if x in track}
        if len(axes) != 1:
            return ins
        ax = axes.pop()
        if node.op_type == "BatchNormalization":
            if node.input[0] in track:
                ins = [ins[0]] + [self._cut(frag, x, 0, a, b, tag, where) for x in node.input[1:5]] + ins[5:]
                track[node.output[0]] = ax
            return ins
        if node.op_type not in ELEMENTWISE:
            return ins
        for s, x in enumerate(node.input):
            shape = self.types.get(x, (None, 0))[0] if x and x not in track and x in self.static else None
            if shape is not None and len(shape) >= -ax and shape[ax] == size:
                ins[s] = self._cut(frag, x, len(shape) + ax, a, b, tag, where)
        for o in node.output:
            if o:
                track[o] = ax
        return ins

    def _in_shard(self, frag: Fragment, task: Task, i: int) -> None:
        layer = self.graph.layers[i]
        k = self.lay.shard_index[frag.task]
        where = f"layer {layer.name!r} (shard {k} on {self.lay.tasks[frag.task].device})"
        parts = self.parts(i)
        anchor = parts.anchor
        if anchor is None:
            raise ModelError(f"{where}: 'in' shards need a conv or fully connected layer")
        a, b, sfx, tag = task.start, task.stop, f"[{k}]", f"[{k}]@{i}"
        names = self._inputs(i, k, frag.reads)
        chained = any(v != o for o, v in names.items())
        whole = not chained and all(r in names for r in frag.reads)   # the slice is cut here, not received
        nodes = list(parts.static)
        if chained or whole:   # run the views between the input and the anchor here
            for node in parts.pre:
                nn = onnx.NodeProto()
                nn.CopyFrom(node)
                nn.name = node.name + sfx
                _wire(nn, node, [names.get(x, x) for x in node.input], sfx, names)
                nodes.append(nn)
        nn = onnx.NodeProto()
        nn.CopyFrom(anchor)
        nn.name = anchor.name + sfx
        ins = [names.get(x, x) for x in anchor.input]
        act = self.act_input(anchor, where)
        if whole:
            take = self.take(i, a, b, task.size)
            cut = f"{ins[act]}[in {a}:{b}]"
            consts = [numpy_helper.from_array(np.array(v, dtype=np.int64), f"{cut}.{key}{tag}")
                      for key, v in (("starts", [a]), ("ends", [b]), ("axes", [take.axis]))]
            frag.initializers += consts
            nodes.append(helper.make_node("Slice", [ins[act]] + [c.name for c in consts], [cut], name=f"{nn.name}.in"))
            ins[act] = cut
        elif not chained:
            if len(frag.reads) != 1:
                raise ModelError(f"{where}: an 'in' shard reads one tensor, this layer reads {len(frag.reads)}")
            ins[act] = frag.reads[0]
        attrs = {x.name: helper.get_attribute_value(x) for x in anchor.attribute}
        if anchor.op_type == "Conv":
            if int(attrs.get("group", 1)) != 1:
                raise ModelError(f"{where}: a grouped convolution cannot be split by input channels")
            ins[1] = self._cut(frag, ins[1], 1, a, b, tag, where)
        elif anchor.op_type == "Gemm":
            ins[1] = self._cut(frag, ins[1], 1 if attrs.get("transB", 0) else 0, a, b, tag, where)
        else:
            w = self.value(ins[1], where)
            ins[1] = self._cut(frag, ins[1], w.ndim - 2, a, b, tag, where)
        if k > 0 and anchor.op_type in ("Conv", "Gemm"):
            ins = ins[:2]   # the bias is added once, by shard 0
        del nn.input[:]
        nn.input.extend(ins)
        del nn.output[:]
        nn.output.append(frag.makes[0])
        nodes.append(nn)
        frag.nodes = nodes

    def _sum(self, frag: Fragment, i: int) -> None:
        layer = self.graph.layers[i]
        if len(frag.makes) == 1 and frag.makes[0].startswith(f"{layer.name}.group["):   # a group's sum
            frag.nodes = [helper.make_node("Sum", frag.reads, frag.makes, name=f"{layer.name}:{frag.makes[0]}")]
            return
        parts = self.parts(i)
        if parts.anchor is None:
            raise ModelError(f"layer {layer.name!r}: a sum combine needs a conv or fully connected layer")
        frag.nodes = [*parts.static, helper.make_node("Sum", frag.reads, [parts.anchor.output[0]],
                                                      name=f"{layer.name}:sum"), *parts.post]

    def _concat(self, frag: Fragment, i: int) -> None:
        layer = self.graph.layers[i]
        shards = [n for n in range(len(self.lay.tasks)) if self.lay.tasks[n].kind == "shard"
                  and self.lay.tasks[n].layers[0] == i]
        nodes = []
        for t in outputs_of(self.graph, i):
            whole = self.specs[t].shape
            parts = [self.specs[f"{t}[{self.lay.shard_index[s]}]"].shape for s in shards]
            diff = sorted({d for p in parts for d in range(len(whole)) if len(p) == len(whole) and p[d] != whole[d]})
            axis = diff[0] if diff else 0
            if len(diff) > 1 or any(len(p) != len(whole) for p in parts) or \
                    (diff and sum(p[axis] for p in parts) != whole[axis]):
                raise ModelError(f"layer {layer.name!r}: its out shards make {t!r} in shapes {parts}, which do not "
                                 f"concatenate into {list(whole)}")
            nodes.append(helper.make_node("Concat", [f"{t}[{self.lay.shard_index[s]}]" for s in shards], [t],
                                          name=f"{layer.name}:concat:{t}", axis=axis))
        frag.nodes = nodes

    # ---- shapes ---------------------------------------------------------------------------------------
    def infer(self, frag: Fragment) -> None:
        """Record the specs of what ``frag`` makes, from one probe run of the fragment on zeros (which also
        proves the cut layer runs: a Reshape to fixed sizes that no longer fit fails here, named)."""
        if not frag.nodes or all(m in self.specs for m in frag.makes):
            return   # a whole layer, a concat or a sum makes tensors of the model: their shapes are known
        task = self.lay.tasks[frag.task]
        where = f"layer {self.graph.layers[task.layers[0]].name!r} (task {task.name!r})"
        inputs = [self.specs[r] for r in frag.reads]
        model = self.assemble([frag], inputs, [TensorSpec(m, (), "float32") for m in frag.makes], where, typed=False)
        values = probe(model, inputs, frag.makes, where)
        self.specs.update((m, TensorSpec(m, tuple(v.shape), v.dtype.name)) for m, v in values.items())

    def assemble(self, frags: list[Fragment], inputs: list[TensorSpec], outputs: list[TensorSpec], where: str,
                 typed: bool = True) -> onnx.ModelProto:
        """One sub-model of ``frags`` (in order) with the given inputs and outputs; unused nodes dropped,
        constant nodes outside every layer pulled in where read."""
        nodes: list[onnx.NodeProto] = []
        made: set[str] = set()
        seen: set[str] = set()
        for f in frags:
            for n in f.nodes:
                outs = [o for o in n.output if o]
                if n.name in seen:
                    continue   # a constant node two fragments share
                clash = [o for o in outs if o in made]
                if clash:
                    raise ModelError(f"{where}: two of its tasks make {clash[0]!r}")
                nodes.append(n)
                seen.add(n.name)
                made.update(outs)
        added = {i.name: i for f in frags for i in f.initializers}
        fed = {t.name for t in inputs}
        todo = [x for n in nodes for x in node_inputs(n)]
        pulled: list[onnx.NodeProto] = []
        while todo:
            x = todo.pop()
            if x in made or x in fed or x in self.inits or x in added:
                continue
            node = self.free.get(x) or self.constant_nodes.get(x)
            if node is None:
                raise ModelError(f"{where}: it reads {x!r}, which is neither received, made on the device nor a "
                                 "constant; the layer grouping and the plan disagree")
            pulled.append(node)
            made.update(o for o in node.output if o)
            todo += node_inputs(node)
        order = {id(n): k for k, n in enumerate(self.model.graph.node)}
        nodes = sorted(pulled, key=lambda n: order.get(id(n), 0)) + nodes
        need = {t.name for t in outputs}
        kept = []
        for n in reversed(nodes):
            if any(o in need for o in n.output):
                kept.append(n)
                need.update(node_inputs(n))
        kept.reverse()
        missing = [t.name for t in outputs if t.name not in made and t.name not in fed]
        if missing:
            raise ModelError(f"{where}: it must make {missing[:5]} but its nodes do not")

        def info(t: TensorSpec):
            dtype = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
            return helper.make_tensor_value_info(t.name, dtype, list(t.shape)) if typed else \
                helper.make_empty_tensor_value_info(t.name)

        inits = [self.inits[x] for x in sorted(need) if x in self.inits and x not in fed]
        inits += [added[x] for x in sorted(need) if x in added]
        g = helper.make_graph(kept, f"{self.model.graph.name or 'model'}-{where}"[:200],
                              [helper.make_tensor_value_info(t.name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)),
                                                             list(t.shape)) for t in inputs],
                              [info(t) for t in outputs], initializer=inits)
        sub = helper.make_model(g, opset_imports=list(self.model.opset_import), producer_name="hetsplit split")
        sub.ir_version = self.model.ir_version
        sub.functions.extend(self.model.functions)
        return sub


def probe(model: onnx.ModelProto, inputs: list[TensorSpec], outputs: list[str], where: str) -> dict[str, np.ndarray]:
    """Run ``model`` once on zeros; a ModelError naming ``where`` if onnxruntime cannot."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4   # the failure is reported below, naming the layer
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        values = sess.run(outputs, {t.name: np.zeros(t.shape, dtype=t.dtype) for t in inputs}, quiet)
    except Exception as exc:  # noqa: BLE001
        text = str(exc).strip().splitlines()
        raise ModelError(f"{where}: its sub-model fails a probe run on zeros "
                         f"({text[-1][:300] if text else type(exc).__name__}); a shard of it cannot run as cut "
                         "(a Reshape to fixed sizes needs -1 where the split axis goes)") from None
    return {name: np.asarray(v) for name, v in zip(outputs, values)}


def _wire(nn: onnx.NodeProto, node: onnx.NodeProto, inputs: list[str], sfx: str, names: dict[str, str]) -> None:
    """Give the copy ``nn`` of ``node`` these inputs and ``node``'s outputs with ``sfx``, recorded in ``names``."""
    del nn.input[:]
    nn.input.extend(inputs)
    del nn.output[:]
    nn.output.extend(f"{o}{sfx}" if o else o for o in node.output)
    for o in node.output:
        if o:
            names[o] = f"{o}{sfx}"
