"""A ``torch.nn.Module`` and example inputs -> an ONNX file hetsplit can plan, split and run.

torch's TorchScript exporter (``dynamo=False``) is used: it works offline with the CPU build of torch
(the dynamo exporter needs onnxscript). The model is traced at the example inputs' shapes, so the file
has static shapes; ``dynamic_axes`` keeps axes symbolic (then give ``--input-shape`` / ``input_shapes``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Sequence

from hetsplit.errors import ModelError

OPSET = 17


def export_module(module: Any, example_inputs: Any, path: str | Path, input_names: Sequence[str] | None = None,
                  output_names: Sequence[str] | None = None, dynamic_axes: dict[str, dict[int, str]] | None = None,
                  opset: int = OPSET) -> Path:
    """Export ``module`` (in eval mode) at ``example_inputs`` (a tensor or a tuple of tensors) to ``path``."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"expected a torch.nn.Module to export, got {type(module).__name__}")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    if not args or not all(isinstance(a, torch.Tensor) for a in args):
        raise ModelError("example_inputs must be a tensor or a tuple of tensors (one per forward() argument)")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = list(input_names) if input_names else (["input"] if len(args) == 1 else [f"input{i}" for i in range(len(args))])
    was_training = module.training
    module.eval()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, str(out), input_names=names,
                              output_names=list(output_names) if output_names else None,
                              dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False)
    except Exception as exc:  # the exporter raises many kinds
        raise ModelError(f"torch.onnx.export of {type(module).__name__} failed: {exc}") from None
    finally:
        module.train(was_training)
    return out
