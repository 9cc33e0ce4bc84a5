"""Bring any ONNX model into the canonical form hetsplit plans on.

``prepare_model`` is deterministic and idempotent; the runtime cuts sub-models out of the model it
returns, so node and tensor names in a ``Graph`` always refer to that model:

- opset 11 to the newest the installed onnx knows, of the default domain, is required;
- ``input_shapes`` (the user's ``--input-shape``) fix input dims first; then a symbolic or unknown batch
  dimension (``dim_param``, 0 or -1 in the first axis of a graph input) becomes 1, and any other
  symbolic dimension is an error naming each input, its symbolic axes and the flag;
- unnamed nodes get the stable name ``<OpType>_<index>`` (unique against existing names);
- ONNX shape inference runs (strict, with data propagation); every value must end with a static
  shape, else the error names the node that produced it;
- ``Shape`` / ``Size`` of a statically shaped tensor becomes a ``Constant`` node of the same name
  and output, so shape arithmetic no longer reads activations; small nodes computing only from
  constants (the Gather / Concat / Div of that arithmetic) are evaluated into ``Constant`` nodes
  too, in rounds, until every shape is static (dynamic-batch exports of torch need this).

``strip_weights`` drops the data of large initializers but keeps their dims and types: enough for
shape inference and for parameter bytes, tiny on disk ("shapes-only" model).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hetsplit.errors import ModelError
from hetsplit.graph.external_data import check_external_data
from hetsplit.graph.input_shapes import fix_input_shapes, require_static_inputs
from hetsplit.jsonfile import ONNX_MAX_BYTES, check_input
from hetsplit.graph.onnx_ops import role

MIN_OPSET = 11
MAX_TENSOR_ELEMENTS = 2**48     # a petabyte of float32; byte counts stay exact in a float64
STRIP_MIN_BYTES = 256           # initializers larger than this lose their data in a shapes-only model
STRIPPED_KEY = "hetsplit.shapes_only"


def read_model(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    """A ModelProto from a path (external data left on disk) or a copy of the given proto."""
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    path = Path(model)
    check_input(path, ModelError, "no such ONNX file; give a path to a .onnx model or a zoo name", ONNX_MAX_BYTES)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise ModelError(f"{path}: not a readable ONNX model ({exc})") from None
    _check_names(model, path)
    check_external_data(model, path)
    return model


def _check_names(model: onnx.ModelProto, path: Path) -> None:
    """Every name in the graph is text: protobuf hands damaged (non-UTF-8) strings over as bytes."""
    g = model.graph
    values = list(g.input) + list(g.output) + list(g.value_info) + list(g.initializer)
    names = [v.name for v in values] + [g.name] + [o.domain for o in model.opset_import] + \
        [s for n in g.node for s in (n.name, n.op_type, n.domain, *n.input, *n.output, *(a.name for a in n.attribute))]
    if not all(isinstance(s, str) for s in names):
        raise ModelError(f"{path}: a node or tensor name is not UTF-8 text; the file is damaged, export it again")


def is_shapes_only(model: onnx.ModelProto) -> bool:
    """True for a model whose large initializers carry no data (see ``strip_weights``)."""
    return any(p.key == STRIPPED_KEY for p in model.metadata_props)


def strip_weights(model: onnx.ModelProto, min_bytes: int = STRIP_MIN_BYTES) -> onnx.ModelProto:
    """A copy without the data of initializers over ``min_bytes`` (dims and dtype kept)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.ByteSize() > min_bytes:
            dims, dtype, name = list(init.dims), init.data_type, init.name
            init.Clear()
            init.name, init.data_type = name, dtype
            init.dims.extend(dims)
    if not is_shapes_only(out):
        out.metadata_props.add(key=STRIPPED_KEY, value="1")
    return out


def _opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0


def _fix_batch_dims(model: onnx.ModelProto, where: str) -> None:
    """A symbolic or unknown batch axis (axis 0) becomes 1; any other symbolic axis is an error naming
    every input that has one (``input_shapes.require_static_inputs``)."""
    inits = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits or not inp.type.HasField("tensor_type"):
            continue
        if not inp.type.tensor_type.HasField("shape"):
            raise ModelError(f"{where}: model input {inp.name!r} has no shape; give it with --input-shape "
                             f"{inp.name}:D0,D1,...")
    require_static_inputs(model, where)
    for inp in model.graph.input:
        if inp.name in inits or not inp.type.HasField("tensor_type"):
            continue
        dims = inp.type.tensor_type.shape.dim
        if dims and (dims[0].HasField("dim_param") or not dims[0].HasField("dim_value") or dims[0].dim_value <= 0):
            dims[0].Clear()
            dims[0].dim_value = 1


def _name_nodes(model: onnx.ModelProto) -> None:
    taken = {n.name for n in model.graph.node if n.name}
    seen: set[str] = set()
    for i, node in enumerate(model.graph.node):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = f"{node.op_type}_{i}" if not node.name else f"{node.name}_{i}"
        name, k = base, 0
        while name in taken or name in seen:
            k += 1
            name = f"{base}_{k}"
        node.name = name
        seen.add(name)


def _check_graph(model: onnx.ModelProto, where: str) -> None:
    g = model.graph
    for sub in ("If", "Loop", "Scan"):
        for node in g.node:
            if node.op_type == sub:
                raise ModelError(f"{where}: node {node.name!r} is a {sub} (control flow), which hetsplit does not "
                                 "support; export the model with static control flow")
    known = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    for node in g.node:
        try:
            role(node)  # unsupported operators are named before any shape work
        except ModelError as exc:
            raise ModelError(f"{where}: {exc}") from None
        for name in node.input:
            if name not in known:
                raise ModelError(f"{where}: node {node.name!r} ({node.op_type}) reads {name!r}, which no earlier node "
                                 "produces and which is neither an input nor an initializer (is the graph sorted?)")
        known.update(node.output)
    for out in g.output:
        if out.name not in known:
            raise ModelError(f"{where}: model output {out.name!r} is produced by no node")


def _infer(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    light = strip_weights(model) if not is_shapes_only(model) else model
    try:
        return onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"{where}: ONNX shape inference failed: {msg}") from None


ValueTypes = dict[str, tuple[tuple[int, ...] | None, int]]   # tensor name -> (static shape or None, ONNX type)


def value_types(model: onnx.ModelProto) -> ValueTypes:
    """Name -> (static shape or None, ONNX elem type) for every typed value of an inferred model."""
    out: dict[str, tuple[tuple[int, ...] | None, int]] = {}
    g = model.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        shape: tuple[int, ...] | None = None
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
            shape = tuple(dims) if all(d >= 0 for d in dims) else None
        out[vi.name] = (shape, tt.elem_type)
    for init in g.initializer:
        out[init.name] = (tuple(init.dims), init.data_type)
    for node in g.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    out[node.output[0]] = (tuple(attr.t.dims), attr.t.data_type)
    return out


def _sized_types(model: onnx.ModelProto, where: str) -> ValueTypes:
    """``value_types``, refusing a tensor larger than any device could hold (before any count of it)."""
    types = value_types(model)
    for t, (shape, _) in types.items():
        if shape is not None and math.prod(shape) > MAX_TENSOR_ELEMENTS:
            dims = " x ".join(f"{d:,}" for d in shape)
            raise ModelError(f"{where}: tensor {t!r} of {dims} has {math.prod(shape):,} elements, over the "
                             f"{MAX_TENSOR_ELEMENTS:,} (2^48) hetsplit models; give the model smaller input sizes")
    return types


def _check_static(model: onnx.ModelProto, types: ValueTypes, where: str) -> None:
    used = {t for n in model.graph.node for t in n.input} | {o.name for o in model.graph.output}
    for node in model.graph.node:
        for t in node.output:
            if not t or t not in used:
                continue
            shape, _ = types.get(t, (None, 0))
            if shape is None:
                raise ModelError(f"{where}: node {node.name!r} ({node.op_type}): the shape of its output {t!r} could not "
                                 "be inferred statically; hetsplit needs static shapes (export with fixed input sizes, "
                                 "or run onnxsim / onnx shape inference with the input shapes set)")


def _fold_shape_ops(model: onnx.ModelProto, types: ValueTypes) -> bool:
    """Replace Shape/Size of a statically shaped tensor by a Constant (same node name and output).

    Returns True when any node was replaced; a Shape whose input is not static yet is left for a
    later round (its input may become static once upstream shape arithmetic is folded).
    """
    changed = False
    for i, node in enumerate(model.graph.node):
        if node.op_type not in ("Shape", "Size"):
            continue
        shape, _ = types.get(node.input[0], (None, 0))
        if shape is None:
            continue
        if node.op_type == "Size":
            value = np.array(int(np.prod(shape)), dtype=np.int64)
        else:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            rank = len(shape)
            start = attrs.get("start", 0)
            end = attrs.get("end", rank)
            start, end = (start + rank if start < 0 else start), (end + rank if end < 0 else end)
            value = np.array(shape[max(0, start):min(rank, end)], dtype=np.int64)
        const = helper.make_node("Constant", [], [node.output[0]], name=node.name,
                                 value=numpy_helper.from_array(value, name=node.output[0]))
        model.graph.node[i].CopyFrom(const)
        changed = True
    return changed


FOLD_MAX_ELEMENTS = 4096   # constant subgraphs up to this size are evaluated (shape arithmetic)


def _small_initializer_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Values of the small initializers that carry data (shape constants, scalars)."""
    values: dict[str, np.ndarray] = {}
    for init in model.graph.initializer:
        if init.ByteSize() <= STRIP_MIN_BYTES and (init.raw_data or init.int64_data or init.int32_data
                                                   or init.float_data or not init.dims):
            try:
                values[init.name] = numpy_helper.to_array(init)
            except Exception:
                pass
    return values


def _fold_constants(model: onnx.ModelProto, init_values: dict[str, np.ndarray]) -> bool:
    """Evaluate small nodes whose inputs are all known constants; True when any was folded.

    Exporters compute split sizes and reshape targets from ``Shape``; once those are constants the
    arithmetic behind them is too, and ONNX shape inference needs the values.
    """
    from onnx.reference import ReferenceEvaluator

    values = dict(init_values)
    folded = False
    for i, node in enumerate(model.graph.node):
        if node.op_type == "Constant":
            attr = next((a for a in node.attribute if a.name == "value"), None)
            if attr is not None:
                values[node.output[0]] = numpy_helper.to_array(attr.t)
            continue
        ins = [t for t in node.input if t]
        if not ins or any(t not in values for t in ins) or any(values[t].size > FOLD_MAX_ELEMENTS for t in ins):
            continue
        if node.domain not in ("", "ai.onnx") or node.op_type in ("RandomNormal", "RandomUniform", "RandomNormalLike",
                                                                    "RandomUniformLike", "Multinomial"):
            continue
        try:
            single = helper.make_model(
                helper.make_graph([node], "fold", [helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(
                    values[t].dtype), values[t].shape) for t in dict.fromkeys(ins)],
                    [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output if o]),
                opset_imports=list(model.opset_import))
            outs = ReferenceEvaluator(single).run(None, {t: values[t] for t in dict.fromkeys(ins)})
        except Exception:
            continue
        assert isinstance(outs, list)       # a list without intermediate=True
        produced = [o for o in node.output if o]
        if len(produced) != 1 or np.asarray(outs[0]).size > FOLD_MAX_ELEMENTS:
            continue
        value = np.asarray(outs[0])
        values[produced[0]] = value
        const = helper.make_node("Constant", [], [produced[0]], name=node.name,
                                 value=numpy_helper.from_array(value, name=produced[0]))
        model.graph.node[i].CopyFrom(const)
        folded = True
    return folded


def prepare_model(model: str | Path | onnx.ModelProto, where: str | None = None,
                  input_shapes: Mapping[str, Sequence[int]] | None = None) -> onnx.ModelProto:
    """The canonical, shape-inferred copy of ``model`` (see the module docstring); ``input_shapes`` fix
    its inputs' dims first (``input_shapes.fix_input_shapes``: symbolic ones, checked against static ones)."""
    if where is None:
        where = str(model) if not isinstance(model, onnx.ModelProto) else (model.graph.name or "<model>")
    proto = read_model(model)
    if not proto.graph.node:
        raise ModelError(f"{where}: no ONNX graph in it (an empty file, or not an ONNX model); "
                         "give a .onnx model exported with its nodes")
    opset = _opset(proto)
    if opset < MIN_OPSET:
        raise ModelError(f"{where}: default-domain opset {opset or 'missing'} is below {MIN_OPSET}; "
                         "re-export the model with opset_version >= 11 or convert it with onnx.version_converter")
    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        raise ModelError(f"{where}: default-domain opset {opset} is newer than the {newest} this onnx knows; "
                         f"re-export the model with opset_version <= {newest}")
    _name_nodes(proto)  # before any check, so that messages name every node
    _check_graph(proto, where)
    if input_shapes:
        fix_input_shapes(proto, input_shapes, where)
    _fix_batch_dims(proto, where)
    # all shape work runs on a copy without weight data; only its nodes come back
    light = proto if is_shapes_only(proto) else strip_weights(proto)
    inferred = _infer(light, where)
    types = _sized_types(inferred, where)
    # fold shape arithmetic until shapes stop changing: each round may make more shapes static
    changed = False
    init_values = _small_initializer_values(light)
    for _ in range(len(light.graph.node)):   # every round folds a node, or ends the loop
        folded = _fold_shape_ops(light, types)
        folded |= _fold_constants(light, init_values)
        if not folded:
            break
        changed = True
        inferred = _infer(light, where)
        types = _sized_types(inferred, where)
    _check_static(light, types, where)
    if changed and light is not proto:
        del proto.graph.node[:]
        proto.graph.node.extend(light.graph.node)
    # keep the inferred value_info on the returned model (weights untouched)
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(inferred.graph.value_info)
    for out, inf_out in zip(proto.graph.output, inferred.graph.output):
        out.CopyFrom(inf_out)
    return proto


def elem_size(onnx_type: int) -> int:
    """Bytes per element of an ONNX tensor type (strings count 1)."""
    if onnx_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return 1
    return int(np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type)).itemsize)


def dtype_name(onnx_type: int) -> str:
    if onnx_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return "string" if onnx_type == TensorProto.STRING else "undefined"
    return str(np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type)))
