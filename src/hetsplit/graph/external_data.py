"""A model's external data checked when the model is read: every command that reads a model (inspect,
plan, split, run, profile) refuses broken weights the same way, before it creates anything.

A tensor stored outside the ``.onnx`` file names a ``location`` relative to the model's folder, and an
``offset`` and ``length`` in it. ``check_external_data`` refuses, naming the model, the tensor and the
file: a location that is absolute, climbs out with ``..``, or resolves (through a link) outside the
model's folder; a file that is missing or is not a regular file (a FIFO, a device, a folder: never
opened); an offset or length that is not a whole number; and data that runs past the file's end (its
``length``, else the tensor's own size from its dims and type).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np
import onnx
from onnx import TensorProto
from onnx.external_data_helper import _get_all_tensors

from hetsplit.errors import ModelError


def check_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Raise ``ModelError`` unless every external tensor of ``model`` (read from ``path``) lies in a
    regular file inside the model's folder, within that file's size."""
    folder = path.parent.resolve()
    sizes: dict[str, int] = {}
    for tensor in _get_all_tensors(model):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        where = f"{path}: the external data of tensor {tensor.name!r}"
        location = info.get("location", "")
        file = _inside(folder, location, where)
        if location not in sizes:
            sizes[location] = _regular_size(file, where, location)
        offset = _whole(info.get("offset", "0"), "offset", where)
        length = _whole(info["length"], "length", where) if "length" in info else _nbytes(tensor)
        if offset + length > sizes[location]:
            raise ModelError(f"{where} runs past the end of {location!r} (bytes {offset:,}..{offset + length:,} of "
                             f"{sizes[location]:,}): the weights file is truncated or not this model's; export the "
                             "model again")


def _inside(folder: Path, location: str, where: str) -> Path:
    pure = PurePosixPath(location)
    if not location or "\0" in location or pure.is_absolute() or PureWindowsPath(location).is_absolute() \
            or ".." in pure.parts or ".." in PureWindowsPath(location).parts:
        raise ModelError(f"{where} is at {location!r}: give a file name beside the model (no absolute path, no "
                         "'..'); external data must lie in the model's folder")
    file = folder / pure
    try:
        real = file.resolve()
    except (OSError, RuntimeError):      # a link loop
        raise ModelError(f"{where} is at {location!r}, a link that does not resolve; external data must lie in "
                         "the model's folder") from None
    if not real.is_relative_to(folder):
        raise ModelError(f"{where} is at {location!r}, which leads out of the model's folder (a link); external "
                         "data must lie in the model's folder")
    return real


def _regular_size(file: Path, where: str, location: str) -> int:
    try:
        st = os.stat(file)
    except OSError:
        raise ModelError(f"{where} is missing: no file {location!r} beside the model; copy the weights file "
                         "with the model, or export it again") from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"{where} is at {location!r}, which is not a regular file (a folder, a pipe or a "
                         "device); external data must be a file beside the model")
    return st.st_size


def _whole(text: str, key: str, where: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ModelError(f"{where} has {key} {text[:40]!r}: not a whole number of bytes; the file is damaged")
    return value


def _nbytes(tensor: TensorProto) -> int:
    """The bytes of ``tensor``'s raw data: its elements times its type's size (strings: unknown, 0)."""
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 0
    count = 1
    for d in tensor.dims:
        count *= max(0, int(d))
    if tensor.data_type in (TensorProto.INT4, TensorProto.UINT4):
        return (count + 1) // 2
    return count * itemsize
