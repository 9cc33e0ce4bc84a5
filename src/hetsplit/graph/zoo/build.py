"""Regenerate the shipped shapes-only zoo models: ``python -m hetsplit.graph.zoo.build [name ...]``.

Exports each model (seed 0), strips its weight data and writes ``zoo/shapes/<name>.onnx``. The
full models also land in the cache, so a following ``zoo.onnx_path`` is instant.
"""

from __future__ import annotations

import sys
import time


from hetsplit.graph.onnx_prepare import strip_weights
from hetsplit.graph.zoo.export import SHIPPED_DIR, _save, _shipped_stamp, cache_dir, export_model
from hetsplit.graph.zoo.registry import MODELS


def main(argv: list[str]) -> int:
    todo = argv or list(MODELS)
    for name in todo:
        t0 = time.perf_counter()
        proto = export_model(name)
        _save(strip_weights(proto), SHIPPED_DIR / f"{name}.onnx")
        _save(strip_weights(proto), cache_dir() / f"{name}.shapes.onnx")
        _save(proto, cache_dir() / f"{name}.onnx")
        (cache_dir() / f"{name}.stamp").write_text(_shipped_stamp(name))
        size = (SHIPPED_DIR / f"{name}.onnx").stat().st_size
        print(f"{name}: {len(proto.graph.node)} nodes, shapes-only {size / 1024:.0f} KiB, "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
