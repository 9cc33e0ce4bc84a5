"""ONNX import: a prepared model, grouped into layers, becomes a ``Graph``.

``load_onnx(path_or_proto)`` is the entry point. Costs per layer:
  macs         Conv / ConvTranspose (groups and depthwise included), Gemm, MatMul (batched
               attention matmuls included); every other op counts 0 MACs
  param_bytes  initializers (and Constant tensors) the layer reads, each counted once, in the
               first layer that reads it
  out_bytes    bytes of the tensors the layer sends to other layers or to the model outputs (a
               constant, e.g. split sizes folded from shapes, is never sent: each reader makes its own)
  in_bytes     bytes of the tensors it receives from other layers or the model inputs
  nodes        every ONNX node of the layer, constants included (the runtime cuts by these)
  onnx_ops     the op types of its computing nodes, in order (constant-only nodes left out)
  attrs        see ``Layer``; plus, on layers holding an embedding table of which one inference
               reads only the looked-up rows: ``param_bytes_read`` (the parameter bytes one inference
               reads: param_bytes minus the rows it does not look up) and ``lookup_bytes`` (the bytes
               of the rows it looks up, part of param_bytes_read)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from hetsplit.errors import ModelError
from hetsplit.graph.input_shapes import BARE
from hetsplit.graph.grouping import NodeGroup, group_nodes, view_only
from hetsplit.graph.onnx_ops import (ANCHOR, ANCHOR_OPS, AnchorInfo, activation_name, conv_info, gemm_info,
                                     matmul_info, node_attrs, pool_attrs)
from hetsplit.graph.onnx_prepare import dtype_name, elem_size, prepare_model, value_types
from hetsplit.graph.types import INPUT, Graph, Layer, Tensor

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}


def load_onnx(model: str | Path | onnx.ModelProto, name: str | None = None,
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import any ONNX model (opset >= 11; a symbolic batch becomes 1; other symbolic input dims fixed by
    ``input_shapes``, see ``graph.input_shapes``) as a Graph.

    Layer ``nodes`` and tensor names refer to ``prepare_model(model, input_shapes=input_shapes)``, the
    canonical form the runtime cuts sub-models from; the shapes given are recorded in
    ``graph.meta["input_shapes"]`` (input name -> dims), so plans and profiles can carry them.
    """
    where = str(model) if not isinstance(model, onnx.ModelProto) else (name or model.graph.name or "<model>")
    proto = prepare_model(model, where, input_shapes)
    if name is None:
        name = Path(str(model)).stem if not isinstance(model, onnx.ModelProto) else (model.graph.name or "model")
    graph = graph_from_prepared(proto, name, source=where)
    if input_shapes:
        inputs = graph.meta["inputs"]
        graph.meta["input_shapes"] = {n: list(d) for n, d in inputs.items() if n in input_shapes or BARE in input_shapes}
    return graph


def compact_name(node_name: str) -> str:
    """A readable layer name from a scoped node name: '/layer/layer.0/conv1/Conv' -> 'layer.0/conv1/Conv'."""
    parts = [p for p in node_name.split("/") if p]
    if len(parts) <= 1:
        return parts[0] if parts else node_name
    keep = [p for i, p in enumerate(parts[:-1]) if not parts[i + 1].startswith(p + ".")]
    return "/".join(keep + [parts[-1]])


class _Model:
    """Indexes over a prepared model: shapes, producers, consumers, constant values."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        g = proto.graph
        self.proto = proto
        self.nodes = list(g.node)
        self.types = value_types(proto)
        self.inits = {i.name: i for i in g.initializer}
        self.consts = {n.output[0]: next(a.t for a in n.attribute if a.name == "value")
                       for n in self.nodes if n.op_type == "Constant" and any(a.name == "value" for a in n.attribute)}
        self.graph_inputs = [i.name for i in g.input if i.name not in self.inits]
        self.graph_outputs = [o.name for o in g.output]
        self.producer = {t: i for i, n in enumerate(self.nodes) for t in n.output if t}
        self.opset = next((int(o.version) for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)

    def shape(self, t: str) -> tuple[int, ...]:
        shape = self.types.get(t, (None, 0))[0]
        if shape is None:
            raise ModelError(f"tensor {t!r} has no static shape")
        return shape

    def nbytes(self, t: str) -> int:
        shape, etype = self.types[t]
        return math.prod(shape) * elem_size(etype) if shape is not None else 0

    def is_const(self, t: str) -> bool:
        return t in self.inits or t in self.consts

    def const_value(self, t: str) -> np.ndarray | None:
        proto = self.inits.get(t) or self.consts.get(t)
        if proto is None:
            return None
        try:
            return numpy_helper.to_array(proto)
        except Exception:  # a stripped (shapes-only) initializer has no data
            return None


def _anchor_info(m: _Model, node: onnx.NodeProto, static: set[str]) -> AnchorInfo:
    op = node.op_type
    ins = [t for t in node.input]
    if op in ("Conv", "ConvTranspose"):
        return conv_info(node, m.shape(ins[0]), m.shape(ins[1]), m.shape(node.output[0]))
    if op == "Gemm":
        return gemm_info(node, m.shape(ins[0]), m.shape(ins[1]), ins[1] in static)
    return matmul_info(node, m.shape(ins[0]), m.shape(ins[1]), ins[0] in static, ins[1] in static)


def _static_tensors(m: _Model) -> set[str]:
    static = set(m.inits)
    for n in m.nodes:
        if all((not t) or t in static for t in n.input):
            static.update(t for t in n.output if t)
    return static


def _lookups(m: _Model, nodes: list[onnx.NodeProto]) -> tuple[int, int]:
    """(bytes of embedding tables a layer holds but does not read, bytes of the rows it looks up):
    a Gather of an initializer reads only the rows it looks up."""
    saved = rows = 0
    for n in nodes:
        if n.op_type == "Gather" and n.input[0] in m.inits:
            read = min(m.nbytes(n.input[0]), m.nbytes(n.output[0]))
            saved += m.nbytes(n.input[0]) - read
            rows += read
    return saved, rows


def graph_from_prepared(proto: onnx.ModelProto, name: str, source: str = "") -> Graph:
    """Group a prepared model (see ``prepare_model``) and cost every layer."""
    m = _Model(proto)
    groups = group_nodes(proto)
    static = _static_tensors(m)
    group_of = {n: gi for gi, grp in enumerate(groups) for n in grp.nodes}

    # tensors crossing layer boundaries (model inputs and outputs included)
    outputs = set(m.graph_outputs)
    consumers: dict[str, set[int]] = {}
    for gi, grp in enumerate(groups):
        for n in grp.nodes:
            for t in m.nodes[n].input:
                if t and t not in m.inits:
                    consumers.setdefault(t, set()).add(gi)
    tensors: list[Tensor] = []
    for t in m.graph_inputs:
        shape, etype = m.types[t]
        tensors.append(Tensor(t, INPUT, m.nbytes(t), tuple(sorted(consumers.get(t, ()))), t in outputs,
                              tuple(shape or ()), dtype_name(etype)))
    for i, node in enumerate(m.nodes):
        for t in node.output:
            if not t:
                continue
            pg = group_of[i]
            cons = tuple(sorted(c for c in consumers.get(t, ()) if c != pg))
            if t in static and t not in outputs:
                continue   # a constant: every layer reading it computes it itself, nothing is sent
            if cons or t in outputs:
                shape, etype = m.types[t]
                tensors.append(Tensor(t, pg, m.nbytes(t), cons, t in outputs, tuple(shape or ()), dtype_name(etype)))

    # parameters: each initializer / Constant tensor counted once, in the first layer reading it
    owner: dict[str, int] = {}
    for gi, grp in enumerate(groups):
        for n in grp.nodes:
            node = m.nodes[n]
            for t in node.input:
                if t in m.inits and t not in owner:
                    owner[t] = gi
            if node.op_type == "Constant" and node.output[0] in m.consts:
                owner.setdefault(node.output[0], gi)
    param_bytes = [0] * len(groups)
    num_params = 0
    for t, gi in owner.items():
        proto_t = m.inits.get(t) or m.consts[t]
        count = math.prod(proto_t.dims)
        param_bytes[gi] += count * elem_size(proto_t.data_type)
        if proto_t.data_type in FLOAT_TYPES and count > 1:
            num_params += count

    out_bytes = [0] * len(groups)
    in_bytes = [0] * len(groups)
    out_elems = [0] * len(groups)
    for t in tensors:
        if t.producer >= 0:
            out_bytes[t.producer] += t.nbytes
            out_elems[t.producer] += math.prod(t.shape) if t.shape else 0
        for c in t.consumers:
            in_bytes[c] += t.nbytes

    layers: list[Layer] = []
    used_names: set[str] = set()
    for gi, grp in enumerate(groups):
        layers.append(_layer(m, grp, gi, static, param_bytes[gi], out_bytes[gi], in_bytes[gi], out_elems[gi],
                             used_names))
    meta: dict[str, Any] = {
        "num_params": num_params,
        "onnx_nodes": len(m.nodes),
        "opset": m.opset,
        "inputs": {t: list(m.types[t][0] or ()) for t in m.graph_inputs},
        "outputs": {t: list(m.types[t][0] or ()) for t in m.graph_outputs},
    }
    return Graph(name=name, layers=layers, tensors=tensors, source=source, meta=meta)


def _layer(m: _Model, grp: NodeGroup, gi: int, static: set[str], params: int, out_b: int, in_b: int,
           out_elems: int, used: set[str]) -> Layer:
    nodes = [m.nodes[n] for n in grp.nodes]
    active = [n for n in nodes if not all((not t) or t in static for t in n.input)] or nodes
    anchor = next((n for n in nodes if n.op_type in ANCHOR_OPS and grp.start == ANCHOR), None)
    attrs: dict[str, Any] = {}
    macs = 0
    if anchor is not None:
        info = _anchor_info(m, anchor, static)
        kind, macs, attrs = info.kind, info.macs, dict(info.attrs)
        epilogue = [n for n in active if n is not anchor]
        attrs["activation"] = activation_name(epilogue, m.const_value)
        main = anchor.output[0]
        head = anchor
    else:
        kind = grp.kind
        if kind == "eltwise" and view_only(nodes):
            kind = "reshape"
        head = active[0]
        main = active[-1].output[0]
        if kind == "pool":
            attrs = pool_attrs(head, m.shape(head.input[0]), m.shape(head.output[0]))
        attrs["elements"] = out_elems or int(np.prod(m.shape(main), dtype=np.int64))
        if kind in ("eltwise", "norm"):
            attrs["activation"] = activation_name(active, m.const_value)
        if kind == "softmax":  # the reduced axis (non-negative) and the length of each softmax row
            shape = m.shape(head.input[0])
            axis = int(node_attrs(head).get("axis", -1 if m.opset >= 13 else 1)) % max(1, len(shape))
            attrs["axis"], attrs["row"] = axis, int(shape[axis]) if shape else 1
    attrs["elem_bytes"] = elem_size(m.types[main][1])
    saved, rows = _lookups(m, nodes)
    if saved:
        attrs["param_bytes_read"] = max(0, params - saved)
        attrs["lookup_bytes"] = rows
    name = compact_name(head.name) or f"layer{gi}"
    base, k = name, 1
    while name in used:
        k += 1
        name = f"{base}_{k}"
    used.add(name)
    return Layer(name=name, op=kind, macs=int(macs), param_bytes=int(params), out_bytes=int(out_b),
                 in_bytes=int(in_b), onnx_ops=tuple(n.op_type for n in active), nodes=tuple(n.name for n in nodes),
                 attrs=attrs, splittable=kind in ("conv", "dwconv", "gemm", "matmul"))
