"""The unsplit model's outputs that a run's outputs are verified against (``driver.verify``).

A driver process verifies one run and exits, so this computes each reference once. A warm driver
(``runtime.pool``) verifies run after run on the same inputs (same seed): it keeps the onnxruntime
session of the unsplit model and the outputs of every input it ran, keyed by the model file (path,
size, modification time), the output names and the input's bytes, so a changed file or input is run
again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

_SESSIONS: dict[tuple, object] = {}
_OUTPUTS: dict[tuple, dict[str, np.ndarray]] = {}
MAX_OUTPUTS = 64            # inputs remembered (a run verifies a handful)


def _file_key(src: Path) -> tuple:
    st = src.stat()
    return str(src.resolve()), st.st_size, st.st_mtime_ns


def input_digest(feed: dict[str, np.ndarray]) -> str:
    """A digest of an input set: its names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for name in sorted(feed):
        a = np.ascontiguousarray(feed[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _session(key: tuple):
    import onnxruntime as ort

    if key not in _SESSIONS:
        _SESSIONS.clear()           # one model at a time
        so = ort.SessionOptions()
        so.log_severity_level = 3
        _SESSIONS[key] = ort.InferenceSession(key[0], so, providers=["CPUExecutionProvider"])
    return _SESSIONS[key]


def reference_outputs(src: Path, names: list[str], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs ``names`` of the unsplit model ``src`` on ``feed`` (computed once per file and input)."""
    fkey = _file_key(src)
    key = (fkey, tuple(names), input_digest(feed))
    if key not in _OUTPUTS:
        if len(_OUTPUTS) >= MAX_OUTPUTS:
            _OUTPUTS.pop(next(iter(_OUTPUTS)))
        _OUTPUTS[key] = dict(zip(names, _session(fkey).run(names, feed)))
    return _OUTPUTS[key]
