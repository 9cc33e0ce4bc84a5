"""``load_model(spec)``: one entry point for a zoo name or an ONNX file."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from hetsplit.errors import ModelError
from hetsplit.graph import zoo
from hetsplit.graph.onnx_import import load_onnx
from hetsplit.graph.types import Graph


def load_model(spec: str | Path, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """A Graph from a zoo name (``resnet152``) or a path to an ``.onnx`` file; ``input_shapes`` fix its
    symbolic input dims (``graph.input_shapes``)."""
    text = str(spec)
    if text in zoo.names():
        return zoo.load(text, input_shapes)
    path = Path(text)
    if path.suffix.lower() == ".onnx" or path.is_file():
        return load_onnx(path, input_shapes=input_shapes)
    raise ModelError(f"unknown model {text!r}: give a path to an .onnx file or a zoo name: {', '.join(zoo.names())}")
