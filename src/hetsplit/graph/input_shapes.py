"""Input shapes the user gives (``--input-shape NAME:D0,D1,...``): parse them, check them against a
model's inputs, and fix a model's symbolic input dims with them.

``InputShapes`` maps a model input's name to its dims; the key ``BARE`` ("") stands for the only
input of a single-input model (the bare form ``D0,D1,...``) until ``resolve_input_shapes`` names it.
Intermediate symbolic dims are left to ONNX shape inference (``onnx_prepare.prepare_model``).
"""

from __future__ import annotations

from typing import Mapping, Sequence, Union

import onnx

from hetsplit.errors import ModelError, UsageError

InputShapes = dict[str, tuple[int, ...]]
Dim = Union[int, str]          # a model's dim: a size, or a symbolic name ("?" when unnamed)
BARE = ""
FLAG = "--input-shape"


def parse_input_shapes(texts: Sequence[str]) -> InputShapes:
    """``["x:1,3,64,64", ...]`` or ``["1,3,64,64"]`` -> InputShapes (sizes checked later, against the model)."""
    out: InputShapes = {}
    for text in texts:
        name, sep, dims_text = str(text).rpartition(":")
        name = name.strip()
        if sep and not name:
            raise UsageError(f"{FLAG} {text!r}: the input name before ':' is empty; write NAME:D0,D1,... or D0,D1,...")
        try:
            dims = tuple(int(d) for d in dims_text.replace("x", ",").split(","))
        except ValueError:
            raise UsageError(f"{FLAG} {text!r}: the dims must be integers separated by commas, "
                             "e.g. input:1,3,640,640") from None
        if name in out:
            raise UsageError(f"{FLAG} gives input {name or '(bare)'!r} twice; give each input once")
        out[name] = dims
    if BARE in out and len(out) > 1:
        raise UsageError(f"{FLAG}: a bare shape ({','.join(map(str, out[BARE]))}) is for a single-input model; "
                         "name every input when giving several (NAME:D0,D1,...)")
    return out


def format_shapes(shapes: Mapping[str, Sequence[Dim]]) -> str:
    """``x:1,3,64,64 y:1,8`` (how the flag writes them)."""
    return " ".join(f"{name + ':' if name else ''}{','.join(map(str, dims))}" for name, dims in shapes.items())


def _expects(inputs: Mapping[str, Sequence[Dim] | None]) -> str:
    return "; ".join(f"{n!r} [{', '.join(map(str, d))}]" if d is not None else f"{n!r} (no shape)"
                     for n, d in inputs.items())


def resolve_input_shapes(inputs: Mapping[str, Sequence[Dim] | None], shapes: Mapping[str, Sequence[int]],
                         where: str) -> InputShapes:
    """``shapes`` checked against a model's ``inputs`` (name -> dims, symbolic dims as strings), the bare
    form named: every name an input, the rank the model's, every dim positive and equal to the model's
    where the model fixes it. Errors (exit 2) name the input and what the model expects."""
    shapes = dict(shapes)
    if BARE in shapes:
        if len(inputs) != 1:
            raise UsageError(f"{where}: a bare {FLAG} is for a model with one input; this one has {len(inputs)}: "
                             f"{_expects(inputs)}; write {FLAG} NAME:D0,D1,... for each")
        shapes = {next(iter(inputs)): shapes[BARE]}
    out: InputShapes = {}
    for name, dims in shapes.items():
        if name not in inputs:
            raise UsageError(f"{where}: {FLAG} names {name!r}, which is not an input of the model; its inputs: "
                             f"{_expects(inputs)}")
        given = format_shapes({name: dims})
        model_dims = inputs[name]
        if model_dims is None:        # the model gives no shape at all: the user's stands
            if any(d <= 0 for d in dims):
                raise UsageError(f"{where}: {FLAG} {given}: every dim of input {name!r} must be a positive integer")
            out[name] = tuple(int(d) for d in dims)
            continue
        want = list(model_dims)
        if len(dims) != len(want):
            raise UsageError(f"{where}: {FLAG} {given}: input {name!r} has {len(want)} axes "
                             f"[{', '.join(map(str, want))}], the shape gives {len(dims)}")
        for axis, (d, w) in enumerate(zip(dims, want)):
            if d <= 0:
                raise UsageError(f"{where}: {FLAG} {given}: axis {axis} of input {name!r} is {d}; every dim must be a "
                                 f"positive integer (the model expects [{', '.join(map(str, want))}])")
            if isinstance(w, int) and w > 0 and d != w:
                raise UsageError(f"{where}: {FLAG} {given}: axis {axis} of input {name!r} is fixed to {w} in the "
                                 f"model, the shape gives {d} (the model expects [{', '.join(map(str, want))}])")
        out[name] = tuple(int(d) for d in dims)
    return out


def model_inputs(model: onnx.ModelProto) -> dict[str, list[Dim] | None]:
    """The model's inputs (initializers left out): name -> dims, a symbolic dim as its name or "?"; None
    for an input without any shape."""
    inits = {i.name for i in model.graph.initializer}
    out: dict[str, list[Dim] | None] = {}
    for inp in model.graph.input:
        if inp.name in inits or not inp.type.HasField("tensor_type"):
            continue
        if not inp.type.tensor_type.HasField("shape"):
            out[inp.name] = None
            continue
        dims: list[Dim] = []
        for dim in inp.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param or "?")
        out[inp.name] = dims
    return out


def fix_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], where: str) -> InputShapes:
    """Set the dims of ``model``'s inputs (in place) to ``shapes``; returns them, each under its input's name."""
    resolved = resolve_input_shapes(model_inputs(model), shapes, where)
    for inp in model.graph.input:
        if inp.name in resolved:
            shape = inp.type.tensor_type.shape
            del shape.dim[:]
            for size in resolved[inp.name]:
                shape.dim.add().dim_value = size
    return resolved


def require_static_inputs(model: onnx.ModelProto, where: str) -> None:
    """Fail unless every input dim but the batch axis (axis 0, fixed to 1 by the caller) is a size: the
    error names each input, its symbolic axes and the flag that fixes them."""
    missing = []
    for name, dims in model_inputs(model).items():
        if dims is None:
            continue          # no shape at all: prepare_model says so
        axes = [f"{a} ({d})" for a, d in enumerate(dims) if a > 0 and not isinstance(d, int)]
        if axes:
            example = ",".join("1" if a == 0 and not isinstance(d, int) else (str(d) if isinstance(d, int) else "N")
                               for a, d in enumerate(dims))
            missing.append((name, axes, example))
    if missing:
        what = "; ".join(f"input {n!r} has symbolic axes {', '.join(axes)}" for n, axes, _ in missing)
        example = " ".join(f"{FLAG} {n}:{ex}" for n, _, ex in missing)
        raise ModelError(f"{where}: {what}. Give their sizes with {FLAG} NAME:D0,D1,... (e.g. {example}, "
                         "N the size you run at)")


def check_recorded(recorded: Mapping[str, Sequence[int]], given: Mapping[str, Sequence[int]] | None,
                   what: str) -> InputShapes:
    """The shapes a plan or profile (``what``) recorded, unless ``given`` differs: then an error naming
    both (a bare shape stands for the recorded single input). With nothing recorded, ``given``."""
    rec = {n: tuple(d) for n, d in recorded.items()}
    if not given:
        return rec
    giv = {n: tuple(d) for n, d in given.items()}
    if BARE in giv and len(rec) == 1:
        giv = {next(iter(rec)): giv[BARE]}
    if rec and giv != rec:
        raise UsageError(f"{what} was made for {FLAG} {format_shapes(rec)}, but {FLAG} {format_shapes(giv)} was "
                         f"given; leave {FLAG} out to use the recorded shape, or make a new one for this shape")
    return giv
