"""The model graph: layers in a fixed topological order with the costs device models need.

A ``Graph`` is the one model representation every later stage consumes. Layers are indexed
``0..L-1`` in topological order; tensors flow between them. Position ``-1`` stands for the model
input (``INPUT``) and position ``L`` for the model outputs leaving the last stage (the sink).
Hot-path quantities are numpy arrays cached on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from hetsplit.errors import ModelError

INPUT = -1  # producer index of a model input tensor

# Layer kinds (``Layer.op``) that device models distinguish.
CONV = "conv"            # dense or grouped convolution (MACs on a crossbar / GEMM engine)
DWCONV = "dwconv"        # depthwise convolution (groups == channels)
GEMM = "gemm"            # fully connected / matmul with a weight operand
MATMUL = "matmul"        # activation x activation matmul (attention scores, context)
POOL = "pool"            # max / average / global pooling
ELTWISE = "eltwise"      # add, mul, activation, concat, split, resize... (memory-bound)
NORM = "norm"            # layer / batch / group norm not fused into a conv
SOFTMAX = "softmax"
ATTENTION = "attention"  # a fused attention block where a frontend provides one
RESHAPE = "reshape"      # shape-only ops that stand alone (flatten, transpose, gather...)
OTHER = "other"          # unknown to hetsplit (e.g. a layer read from a profile without its op)
LAYER_KINDS = (CONV, DWCONV, GEMM, MATMUL, POOL, ELTWISE, NORM, SOFTMAX, ATTENTION, RESHAPE, OTHER)
MAC_KINDS = (CONV, DWCONV, GEMM, MATMUL)  # kinds whose work is multiply-accumulates


@dataclass(frozen=True)
class Tensor:
    """A value crossing layer boundaries: produced once, read by one or more later layers."""

    name: str
    producer: int                 # layer index, or INPUT for a model input
    nbytes: int
    consumers: tuple[int, ...]    # layer indices that read it (sorted)
    is_output: bool = False       # a model output: it must reach the sink after the last layer
    shape: tuple[int, ...] = ()
    dtype: str = "float32"

    @property
    def last_use(self) -> int:
        """Last position needing the tensor: the last consumer, or L-ish sink for outputs."""
        return max(self.consumers) if self.consumers else self.producer


@dataclass(frozen=True)
class Layer:
    """One deployable unit: the ops a framework fuses (Conv+BN+ReLU is one layer)."""

    name: str
    op: str                                   # one of LAYER_KINDS
    macs: int
    param_bytes: int
    out_bytes: int                            # bytes of the tensors this layer produces for others
    in_bytes: int = 0                         # bytes of the tensors it reads
    onnx_ops: tuple[str, ...] = ()            # ONNX op types fused into it (Conv, Relu, ...)
    nodes: tuple[str, ...] = ()               # ONNX node names (for splitting into sub-models)
    attrs: dict[str, Any] = field(default_factory=dict)  # c_in, c_out, kernel, stride, groups,
    #                                           in_hw, out_hw, heads, m/n/k, activation, elements
    splittable: bool = False                  # conv / matmul that a horizontal split can shard

    def __post_init__(self) -> None:
        if self.op not in LAYER_KINDS:
            raise ModelError(f"layer {self.name!r}: unknown layer kind {self.op!r}; expected one of {LAYER_KINDS}")
        for key in ("macs", "param_bytes", "out_bytes", "in_bytes"):
            if getattr(self, key) < 0:
                raise ModelError(f"layer {self.name!r}: {key} must be >= 0, got {getattr(self, key)}")


@dataclass
class Graph:
    """A model as a DAG of layers in topological order, plus the tensors between them."""

    name: str
    layers: list[Layer]
    tensors: list[Tensor]
    source: str = ""             # where it came from: ONNX path, zoo name, profile path
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    # ---- validation ---------------------------------------------------------------------------
    def validate(self) -> None:
        """Check names are unique and every tensor flows forward in the layer order."""
        if not self.layers:
            raise ModelError(f"model {self.name!r} has no layers")
        seen: set[str] = set()
        for layer in self.layers:
            if layer.name in seen:
                raise ModelError(f"model {self.name!r}: duplicate layer name {layer.name!r}")
            seen.add(layer.name)
        n = len(self.layers)
        for t in self.tensors:
            if not (INPUT <= t.producer < n):
                raise ModelError(f"model {self.name!r}: tensor {t.name!r} has producer {t.producer} outside 0..{n - 1}")
            for c in t.consumers:
                if not (t.producer < c < n):
                    raise ModelError(
                        f"model {self.name!r}: tensor {t.name!r} from layer {t.producer} is read by layer {c}, "
                        "which is not later in topological order")

    # ---- sizes ----------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def index(self, name: str) -> int:
        """Position of a layer by name, with the list of near names on a miss."""
        try:
            return self._index_by_name[name]
        except KeyError:
            close = [n for n in self._index_by_name if name.lower() in n.lower()][:5]
            hint = f"; similar: {close}" if close else ""
            raise ModelError(f"model {self.name!r} has no layer {name!r}{hint}") from None

    @cached_property
    def _index_by_name(self) -> dict[str, int]:
        return {layer.name: i for i, layer in enumerate(self.layers)}

    @cached_property
    def names(self) -> list[str]:
        return [layer.name for layer in self.layers]

    @cached_property
    def macs(self) -> np.ndarray:
        return np.array([layer.macs for layer in self.layers], dtype=np.float64)

    @cached_property
    def param_bytes(self) -> np.ndarray:
        return np.array([layer.param_bytes for layer in self.layers], dtype=np.float64)

    @cached_property
    def out_bytes(self) -> np.ndarray:
        return np.array([layer.out_bytes for layer in self.layers], dtype=np.float64)

    @cached_property
    def in_bytes(self) -> np.ndarray:
        return np.array([layer.in_bytes for layer in self.layers], dtype=np.float64)

    @cached_property
    def input_bytes(self) -> int:
        """Bytes of all model inputs (what the source sends to the first stage)."""
        return int(sum(t.nbytes for t in self.tensors if t.producer == INPUT))

    @cached_property
    def output_bytes(self) -> int:
        """Bytes of all model outputs (what the last stage delivers to the sink)."""
        return int(sum(t.nbytes for t in self.tensors if t.is_output))

    @cached_property
    def edges(self) -> np.ndarray:
        """E x 3 int64 array of (producer, consumer, bytes); producer -1 is the model input."""
        rows = [(t.producer, c, t.nbytes) for t in self.tensors for c in t.consumers]
        return np.array(rows, dtype=np.int64).reshape(-1, 3)

    @cached_property
    def predecessors(self) -> list[tuple[int, ...]]:
        """Layers each layer reads from (INPUT = -1 for the model input)."""
        preds: list[set[int]] = [set() for _ in self.layers]
        for t in self.tensors:
            for c in t.consumers:
                preds[c].add(t.producer)
        return [tuple(sorted(p)) for p in preds]

    @cached_property
    def cut_bytes(self) -> np.ndarray:
        """Array of L+1 floats: bytes live across the cut before position k.

        ``cut_bytes[k]`` sums every tensor produced before layer k (model inputs included) and
        still needed at or after layer k (by a consumer, or by the sink for model outputs).
        ``cut_bytes[0]`` is the model input, ``cut_bytes[L]`` the model outputs. A tensor that skips
        over several cuts counts on each of them: a pipeline relays it stage by stage.
        """
        n = len(self.layers)
        diff = np.zeros(n + 2, dtype=np.float64)
        for t in self.tensors:
            last = n if t.is_output else (max(t.consumers) if t.consumers else t.producer)
            first_cut = t.producer + 1  # the cut right after the producer (0 for model inputs)
            if last >= first_cut:
                diff[first_cut] += t.nbytes
                diff[last + 1] -= t.nbytes
        return np.cumsum(diff)[: n + 1]

    @cached_property
    def total_macs(self) -> float:
        return float(self.macs.sum())

    @cached_property
    def total_param_bytes(self) -> float:
        return float(self.param_bytes.sum())

    def summary(self) -> dict[str, Any]:
        """Totals for display: layers, MACs, parameters (bytes and count), input/output bytes, the
        largest cut, layers per kind, and where the model came from."""
        return {
            "model": self.name,
            "layers": self.num_layers,
            "macs": self.total_macs,
            "param_bytes": self.total_param_bytes,
            "params": int(self.meta.get("num_params", self.total_param_bytes // 4)),
            "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes,
            "max_cut_bytes": float(self.cut_bytes.max()) if self.layers else 0.0,
            "kinds": {kind: sum(layer.op == kind for layer in self.layers)
                      for kind in LAYER_KINDS if any(layer.op == kind for layer in self.layers)},
            "source": self.source,
        }
