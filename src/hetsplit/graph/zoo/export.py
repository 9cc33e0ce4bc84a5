"""Export zoo models to ONNX (seed 0) and keep them on disk.

Files (``cache_dir()`` = $HETSPLIT_CACHE or ~/.cache/hetsplit, then ``zoo-<ZOO_VERSION>/``):
  <name>.onnx          the full model with weights, in canonical form (``prepare_model``)
  <name>.shapes.onnx   the same model with its weight data stripped (``strip_weights``)
  <name>.stamp         digest of the shipped shapes-only file the full model was checked against

The package also ships the shapes-only files (``zoo/shapes/<name>.onnx``), so that loading a
zoo model for planning never runs an export. Regenerate them after changing a model definition:
``python -m hetsplit.graph.zoo.build [name ...]``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from pathlib import Path

from typing import TYPE_CHECKING, Any

import onnx

from hetsplit.errors import ModelError
from hetsplit.graph.onnx_prepare import prepare_model, strip_weights
from hetsplit.graph.zoo.registry import MODELS, ZooModel

if TYPE_CHECKING:  # torch is imported only to export
    from torch import nn

ZOO_VERSION = "1"            # bump when a definition or the export recipe changes
OPSET = 17
SEED = 0
CONSTANT_CHECK_MAX = 1 << 19
SHIPPED_DIR = Path(__file__).with_name("shapes")


def cache_root() -> Path:
    """hetsplit's cache: $HETSPLIT_CACHE, else ~/.cache/hetsplit."""
    return Path(os.environ.get("HETSPLIT_CACHE") or str(Path.home() / ".cache" / "hetsplit"))


def cache_dir() -> Path:
    return cache_root() / f"zoo-{ZOO_VERSION}"


def _lookup(name: str) -> ZooModel:
    if name not in MODELS:
        raise ModelError(f"unknown zoo model {name!r}; valid names: {', '.join(MODELS)}")
    return MODELS[name]


def _realistic_constants(model: "nn.Module") -> None:
    """Give BatchNorm statistics and constant-initialised parameters seeded random values.

    Fresh BatchNorms are identities and ones/zeros vectors are all alike: the exporter would
    deduplicate them into shared initializers, and a numerical check of a split would compare
    trivial values.
    """
    import torch
    from torch import nn

    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.running_mean is not None \
                    and mod.running_var is not None:
                mod.running_mean.normal_(0.0, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
        for p in model.parameters():
            small = 1 < p.numel() <= CONSTANT_CHECK_MAX   # randomly initialised weights are never constant
            if small and p.requires_grad and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn_like(p) * 0.02)


def build_module(name: str) -> tuple["nn.Module", Any, ZooModel]:
    """The seeded eval-mode module of a zoo model and an example input (a torch tensor)."""
    import torch

    entry = _lookup(name)
    torch.manual_seed(SEED)
    module, shape = entry.build()
    _realistic_constants(module)
    module.eval()
    example = torch.zeros(shape, dtype=torch.int64) if entry.input_name == "tokens" else torch.zeros(shape)
    return module, example, entry


def export_model(name: str) -> onnx.ModelProto:
    """Export a zoo model with torch's TorchScript exporter, in canonical form."""
    import torch

    module, example, entry = build_module(name)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        with torch.no_grad(), warnings.catch_warnings():
            # the TorchScript exporter is deprecated upstream but is the fast, deterministic one here
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=OPSET,
                              do_constant_folding=True, input_names=[entry.input_name], output_names=["output"])
        proto = onnx.load(str(path))
    proto.graph.name = name
    return prepare_model(proto, where=f"zoo model {name!r}")


def _save(proto: onnx.ModelProto, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    onnx.save(proto, str(tmp))
    tmp.replace(path)          # atomic: a concurrent reader never sees half a file


def structure(proto: onnx.ModelProto) -> list[Any]:
    """What must agree between a shapes-only and a full model: nodes, tensors, weight shapes."""
    nodes = [(n.name, n.op_type, tuple(n.input), tuple(n.output)) for n in proto.graph.node]
    inits = sorted((i.name, tuple(i.dims), i.data_type) for i in proto.graph.initializer)
    ios = [tuple(v.name for v in proto.graph.input), tuple(v.name for v in proto.graph.output)]
    return [nodes, inits, ios]


def shapes_path(name: str) -> Path:
    """A shapes-only model: shipped with the package, else cached, else exported now."""
    _lookup(name)
    shipped = SHIPPED_DIR / f"{name}.onnx"
    if shipped.is_file():
        return shipped
    cached = cache_dir() / f"{name}.shapes.onnx"
    if not cached.is_file():
        full_path(name)
    return cached


def _shipped_stamp(name: str) -> str:
    """Digest of the shipped shapes-only file ("" when none): a cached full model records it."""
    shipped = SHIPPED_DIR / f"{name}.onnx"
    return hashlib.sha256(shipped.read_bytes()).hexdigest() if shipped.is_file() else ""


def full_path(name: str) -> Path:
    """The full model with seed-0 weights, exported and cached on first use.

    A cached model exported against another shipped shapes-only file (the package was updated) is
    exported again, so that plans made on ``zoo.load`` always match it.
    """
    _lookup(name)
    path = cache_dir() / f"{name}.onnx"
    stamp_path = path.with_suffix(".stamp")
    stamp = _shipped_stamp(name)
    if path.is_file() and stamp_path.is_file() and stamp_path.read_text() == stamp:
        return path
    proto = export_model(name)
    shipped = SHIPPED_DIR / f"{name}.onnx"
    if shipped.is_file() and structure(onnx.load(str(shipped))) != structure(proto):
        raise ModelError(f"zoo model {name!r}: the exported model differs from the shipped shapes-only model "
                         f"{shipped}; regenerate it with `python -m hetsplit.graph.zoo.build {name}`")
    _save(strip_weights(proto), cache_dir() / f"{name}.shapes.onnx")
    _save(proto, path)
    stamp_path.write_text(stamp)
    return path
