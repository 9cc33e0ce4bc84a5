"""One small plan of each kind the runtime runs, over devices ``a``, ``b``, ``c`` (plan files with their models).

- ``pipeline``: the toy CNN in three stages;
- ``mapping``: the toy CNN with ``b0_conv1`` split by output channels over ``a`` and ``b`` (concatenated on
  ``b``), layers placed out of order on ``a`` and ``c``;
- ``tensor-parallel``: a Transformer block planned by ``tensor-parallel`` (heads and FFN columns over the
  three devices, partial sums all-reduced on ``a``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from hetsplit.graph.types import Graph
from hetsplit.plan.io import save_plan
from hetsplit.plan.types import Combine, Plan, Shard, Stage
from hetsplit.runtime.toy import toy_model

KINDS = ("pipeline", "mapping", "tensor-parallel")


@dataclass
class Case:
    plan: Plan
    graph: Graph
    model: Path
    plan_file: Path


def toy_pipeline(graph: Graph) -> Plan:
    n = graph.names
    return Plan(graph.name, "", "hand", [Stage("a", n[:2]), Stage("b", n[2:5]), Stage("c", n[5:])])


def toy_sharded_mapping(graph: Graph, channels: int) -> Plan:
    half = channels // 2
    assign = {x: "a" for x in graph.names}
    assign.update({"b0_conv1": (Shard("a", "out", 0, half), Shard("b", "out", half, channels)), "b0_conv2": "b",
                   "b1_conv1": "c", "b1_conv2": "c", "b1_add": "c"})
    return Plan(graph.name, "", "hand", assign=assign, combine={"b0_conv1": Combine("concat", "b")})


def transformer_block(path: Path) -> Graph:
    """A small Transformer block (64 wide, 4 heads, 8 tokens) exported to ONNX."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    from hetsplit.graph.onnx_import import load_onnx

    class Block(nn.Module):
        def __init__(self, e=64, heads=4, f=128):
            super().__init__()
            self.h, self.d = heads, e // heads
            self.q, self.k, self.v, self.o = (nn.Linear(e, e) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(e), nn.LayerNorm(e)
            self.f1, self.f2 = nn.Linear(e, f), nn.Linear(f, e)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = (p(x).view(b, s, -1, self.d).transpose(1, 2) for p in (self.q, self.k, self.v))
            a = torch.softmax(q @ k.transpose(-2, -1) / self.d ** 0.5, -1)
            x = self.ln1(x + self.o((a @ v).transpose(1, 2).reshape(b, s, -1)))
            return self.ln2(x + self.f2(F.gelu(self.f1(x))))

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Block().eval(), (torch.randn(1, 8, 64),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    return load_onnx(path)


def make_case(kind: str, folder: Path, channels: int = 8, size: int = 16) -> Case:
    """The plan of ``kind`` with its model, written into ``folder``."""
    from hetsplit.search.tensor_parallel import tensor_parallel_plan

    folder.mkdir(parents=True, exist_ok=True)
    if kind == "tensor-parallel":
        model = folder / "block.onnx"
        graph = transformer_block(model)
        plan = tensor_parallel_plan(graph, ["a", "b", "c"], tree=0)
    else:
        model = folder / "toy.onnx"
        graph = toy_model(model, channels=channels, size=size)
        plan = toy_pipeline(graph) if kind == "pipeline" else toy_sharded_mapping(graph, channels)
    return Case(plan, graph, model, save_plan(plan, folder / f"{kind}.json"))
