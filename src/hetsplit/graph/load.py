"""``load_model(spec)``: one entry point for a zoo name or an ONNX file."""

from __future__ import annotations

from pathlib import Path

from hetsplit.errors import ModelError
from hetsplit.graph import zoo
from hetsplit.graph.onnx_import import load_onnx
from hetsplit.graph.types import Graph


def load_model(spec: str | Path) -> Graph:
    """A Graph from a zoo name (``resnet152``) or a path to an ``.onnx`` file."""
    text = str(spec)
    if text in zoo.names():
        return zoo.load(text)
    path = Path(text)
    if path.suffix.lower() == ".onnx" or path.is_file():
        return load_onnx(path)
    raise ModelError(f"unknown model {text!r}: give a path to an .onnx file or a zoo name: {', '.join(zoo.names())}")
