"""The model zoo: PyTorch definitions exported to ONNX, cached, with a fast shapes-only path.

- ``names()``: the zoo's model names.
- ``load(name)``: the Graph, from a shapes-only model (shipped with the package; no export).
- ``onnx_path(name)``: the full model with seed-0 weights (exported and cached on first use);
  its Graph has the same layers, nodes and tensor names as ``load(name)``.

Regenerate the shipped shapes-only models after changing a definition:
``python -m hetsplit.graph.zoo.build [name ...]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from hetsplit.graph.onnx_import import load_onnx
from hetsplit.graph.types import Graph
from hetsplit.graph.zoo.export import _lookup as lookup, cache_dir, full_path, shapes_path
from hetsplit.graph.zoo.registry import MODELS

__all__ = ["names", "load", "onnx_path", "describe", "cache_dir"]


def names() -> list[str]:
    return list(MODELS)


def describe(name: str) -> str:
    """One line about a zoo model (architecture, input)."""
    return lookup(name).description


def load(name: str, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """The Graph of a zoo model, without weights (fast: no export, no weight data); ``input_shapes``
    are checked against its (static) inputs."""
    path = shapes_path(name)
    graph = load_onnx(path, name=name, input_shapes=input_shapes)
    graph.source = f"zoo:{name}"
    graph.meta["description"] = MODELS[name].description
    return graph


def onnx_path(name: str) -> Path:
    """Path of the full ONNX model with weights (exported on first use, then cached)."""
    return full_path(name)
