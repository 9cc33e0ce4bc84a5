"""What hetsplit knows about each ONNX operator: its role in grouping, its MACs and attributes.

Roles:
  anchor   Conv, ConvTranspose, Gemm, MatMul: the multiply-accumulate work; each starts a layer
  pool     pooling (starts a layer)
  softmax  Softmax / LogSoftmax / Hardmax (starts a layer)
  norm     normalisations with their own op (BatchNormalization folds into a preceding conv/gemm)
  reduce   reductions (a decomposed LayerNorm / RMSNorm is built from them): make a layer "norm"
  ew       elementwise arithmetic, activations, data movement and views: fused into a neighbour
  static   produce constants only (Constant, ConstantOfShape, Range...): join their consumer
An operator of the default domain that is in no table, or any operator of another domain, is
unsupported: the importer names the node instead of guessing its cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from onnx import NodeProto, helper

from hetsplit.errors import ModelError

ANCHOR_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
POOL_OPS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool"}
SOFTMAX_OPS = {"Softmax", "LogSoftmax", "Hardmax"}
NORM_OPS = {"BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
            "LpNormalization", "MeanVarianceNormalization", "RMSNormalization"}
REDUCE_OPS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum", "TopK"}
ACTIVATION_OPS = {"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "Elu", "Selu",
                  "Celu", "Gelu", "Softplus", "Softsign", "Mish", "PRelu", "ThresholdedRelu", "Erf"}
EW_OPS = ACTIVATION_OPS | {
    # arithmetic and logic
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Mod", "Neg", "Abs", "Reciprocal", "Sqrt",
    "Exp", "Log", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
    "Not", "And", "Or", "Xor", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Where", "IsNaN",
    "IsInf", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Einsum_unused",
    # data movement
    "Concat", "Split", "Slice", "Pad", "Resize", "Upsample", "Tile", "Expand", "Gather", "GatherElements",
    "GatherND", "ScatterND", "ScatterElements", "DepthToSpace", "SpaceToDepth", "Trilu", "OneHot",
    # views and type changes
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Cast", "CastLike", "Dropout",
} - {"Einsum_unused"}
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Cast", "CastLike", "Dropout"}
STATIC_OPS = {"Constant", "ConstantOfShape", "Range", "Shape", "Size", "EyeLike", "RandomNormal",
              "RandomUniform", "RandomNormalLike", "RandomUniformLike"}
UNSUPPORTED_HINT = {
    "LSTM": "recurrent layers", "GRU": "recurrent layers", "RNN": "recurrent layers",
    "NonZero": "data-dependent output shapes", "NonMaxSuppression": "data-dependent output shapes",
    "Einsum": "Einsum (rewrite it as MatMul)", "If": "control flow", "Loop": "control flow", "Scan": "control flow",
}

ANCHOR, POOL, SOFTMAX, NORM, REDUCE, EW, STATIC = "anchor", "pool", "softmax", "norm", "reduce", "ew", "static"


def role(node: NodeProto) -> str:
    """The grouping role of a node; ModelError for operators hetsplit cannot cost."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        raise ModelError(f"node {node.name!r}: operator {node.domain}::{op} is outside the ONNX default domain and "
                         "unsupported; export the model with standard ONNX operators")
    for ops, name in ((ANCHOR_OPS, ANCHOR), (POOL_OPS, POOL), (SOFTMAX_OPS, SOFTMAX), (NORM_OPS, NORM),
                      (REDUCE_OPS, REDUCE), (EW_OPS, EW), (STATIC_OPS, STATIC)):
        if op in ops:
            return name
    why = UNSUPPORTED_HINT.get(op, "an operator hetsplit has no cost model for")
    raise ModelError(f"node {node.name!r}: unsupported ONNX operator {op!r} ({why})")


def node_attrs(node: NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


Shape = tuple[int, ...]


@dataclass(frozen=True)
class AnchorInfo:
    """MACs and the device-model attributes of an anchor node."""

    kind: str            # conv | dwconv | gemm | matmul
    macs: int
    attrs: dict[str, Any]


def _hw(dims: Shape) -> tuple[int, ...]:
    """Spatial dims as a tuple, 1-D convs padded to (1, w)."""
    return (1, *dims) if len(dims) == 1 else tuple(dims)


def conv_info(node: NodeProto, x: Shape, w: Shape, y: Shape) -> AnchorInfo:
    a = node_attrs(node)
    if len(x) < 3 or len(w) != len(x):
        raise ModelError(f"node {node.name!r} ({node.op_type}): input rank {len(x)} and weight rank {len(w)} "
                         "do not form a convolution")
    groups = int(a.get("group", 1))
    spatial = len(x) - 2
    kernel = tuple(int(k) for k in w[2:])
    transposed = node.op_type == "ConvTranspose"
    if transposed:
        c_in, c_out = int(w[0]), int(w[1]) * groups
        macs = int(np.prod(x)) * (c_out // groups) * int(np.prod(kernel))
    else:
        c_out, c_in = int(w[0]), int(w[1]) * groups
        macs = int(np.prod(y)) * (c_in // groups) * int(np.prod(kernel))
    if int(x[1]) != c_in:
        raise ModelError(f"node {node.name!r} ({node.op_type}): input has {x[1]} channels but the weight "
                         f"{tuple(w)} with group={groups} expects {c_in}")
    depthwise = groups > 1 and groups == c_in and not transposed
    attrs: dict[str, Any] = {
        "c_in": c_in, "c_out": c_out, "kernel": _hw(kernel),
        "stride": _hw(tuple(int(s) for s in a.get("strides", [1] * spatial))),
        "pads": tuple(int(p) for p in a.get("pads", [0] * 2 * spatial)),
        "dilations": _hw(tuple(int(d) for d in a.get("dilations", [1] * spatial))),
        "groups": groups, "in_hw": _hw(tuple(x[2:])), "out_hw": _hw(tuple(y[2:])), "batch": int(x[0]),
    }
    if transposed:
        attrs["transposed"] = True
    return AnchorInfo("dwconv" if depthwise else "conv", macs, attrs)


def gemm_info(node: NodeProto, a_shape: Shape, b_shape: Shape, b_static: bool) -> AnchorInfo:
    at = node_attrs(node)
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ModelError(f"node {node.name!r} (Gemm): operands must be 2-D, got {a_shape} and {b_shape}")
    m, k = (a_shape[1], a_shape[0]) if at.get("transA", 0) else a_shape
    k2, n = (b_shape[1], b_shape[0]) if at.get("transB", 0) else b_shape
    if k != k2:
        raise ModelError(f"node {node.name!r} (Gemm): inner dimensions differ ({a_shape} x {b_shape})")
    attrs = {"m": int(m), "k": int(k), "n": int(n)}
    if not b_static:
        attrs["batch"] = 1
    return AnchorInfo("gemm" if b_static else "matmul", int(m * k * n), attrs)


def matmul_info(node: NodeProto, a_shape: Shape, b_shape: Shape, a_static: bool, b_static: bool) -> AnchorInfo:
    a = (1, *a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b = (*b_shape, 1) if len(b_shape) == 1 else tuple(b_shape)
    if a[-1] != b[-2]:
        raise ModelError(f"node {node.name!r} (MatMul): inner dimensions differ ({a_shape} x {b_shape})")
    try:
        batch_dims = np.broadcast_shapes(a[:-2], b[:-2])
    except ValueError:
        raise ModelError(f"node {node.name!r} (MatMul): batch dimensions {a_shape[:-2]} and {b_shape[:-2]} "
                         "do not broadcast") from None
    batch = int(np.prod(batch_dims)) if batch_dims else 1
    m, k, n = int(a[-2]), int(a[-1]), int(b[-1])
    macs = batch * m * k * n
    if b_static or a_static:
        # activation x weight: rows are every token of every batch entry
        rows = batch * (m if b_static else n)
        kk, nn = (k, n) if b_static else (k, m)
        return AnchorInfo("gemm", macs, {"m": rows, "k": kk, "n": nn})
    attrs: dict[str, Any] = {"m": m, "k": k, "n": n, "batch": batch}
    if len(batch_dims) >= 2:
        attrs["heads"] = int(batch_dims[-1])
    return AnchorInfo("matmul", macs, attrs)


def pool_attrs(node: NodeProto, x: Shape, y: Shape) -> dict[str, Any]:
    a = node_attrs(node)
    spatial = tuple(int(d) for d in x[2:])
    if node.op_type.startswith("Global"):
        kernel, stride = spatial, (1,) * len(spatial)
    else:
        kernel = tuple(int(k) for k in a.get("kernel_shape", [1] * len(spatial)))
        stride = tuple(int(s) for s in a.get("strides", [1] * len(spatial)))
    return {"kernel": _hw(kernel), "stride": _hw(stride), "in_hw": _hw(spatial), "out_hw": _hw(tuple(y[2:])),
            "channels": int(x[1]) if len(x) > 1 else 1, "pool": node.op_type}


def activation_name(ops: list[NodeProto], const: Callable[[str], np.ndarray | None]) -> str | None:
    """The activation of a fused epilogue, named as device models expect (None when there is none).

    ``const`` returns the value of a constant tensor by name (None when not constant), to read the
    bounds of a Clip given as inputs (opset >= 11).
    """
    types = [n.op_type for n in ops]
    present = set(types)
    if "HardSwish" in present or {"HardSigmoid", "Mul"} <= present:
        return "hardswish"
    if {"Sigmoid", "Mul"} <= present:
        return "silu"
    if "Gelu" in present or "Erf" in present or ({"Tanh", "Pow"} <= present):
        return "gelu"
    if {"Softplus", "Tanh"} <= present or "Mish" in present:
        return "mish"
    for n in ops:
        if n.op_type == "Clip":
            return "relu6" if _clip_bounds(n, const) == (0.0, 6.0) else "clip"
    simple = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "LeakyRelu": "leakyrelu", "Elu": "elu",
              "Selu": "selu", "Celu": "celu", "PRelu": "prelu", "HardSigmoid": "hardsigmoid",
              "Softplus": "softplus", "Softsign": "softsign", "ThresholdedRelu": "thresholdedrelu"}
    for t in types:
        if t in simple:
            return simple[t]
    return None


def _clip_bounds(node: NodeProto, const: Callable[[str], np.ndarray | None]) -> tuple[float | None, float | None]:
    a = node_attrs(node)
    bounds: list[float | None] = [a.get("min"), a.get("max")]
    for slot in (1, 2):
        if len(node.input) > slot and node.input[slot]:
            value = const(node.input[slot])
            bounds[slot - 1] = None if value is None or value.size != 1 else float(value.reshape(()))
    return float(bounds[0]) if bounds[0] is not None else None, float(bounds[1]) if bounds[1] is not None else None
