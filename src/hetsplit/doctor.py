"""Health checks of this machine for hetsplit: versions, link emulation, energy meters, stale namespaces.

``check(dry_run)`` returns one item per check (``item``, ``status``, ``detail``); a ``BROKEN`` status
means hetsplit cannot work as asked (``hetsplit doctor`` exits 1). Unavailable link emulation or
energy meters are reported, not errors.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys

OK, UNAVAILABLE, STALE, BROKEN = "ok", "unavailable", "stale", "BROKEN"
REQUIRED = ("numpy", "onnx", "onnxruntime", "torch")


def _package(name: str) -> tuple[str, str]:
    try:
        mod = importlib.import_module(name)
    except Exception as exc:  # ImportError, or a broken native library (OSError, RuntimeError)
        return BROKEN, f"cannot import {name}: {type(exc).__name__}: {exc}"
    return OK, str(getattr(mod, "__version__", "unknown version"))


def check(dry_run: bool) -> list[dict]:
    """Every check's item; ``dry_run`` lists stale namespaces instead of removing them."""
    from hetsplit import __version__
    from hetsplit.costs.meters import describe, meter_for
    from hetsplit.runtime.netem import emulation_available
    from hetsplit.runtime.netns_cleanup import clean_stale

    items = []

    def add(item: str, status: str, detail: str) -> None:
        items.append({"item": item, "status": status, "detail": detail})

    py_ok = sys.version_info >= (3, 11)
    add("python", OK if py_ok else BROKEN,
        f"{platform.python_version()} ({sys.executable})" + ("" if py_ok else "; hetsplit needs 3.11 or newer"))
    add("hetsplit", OK, __version__)
    for name in REQUIRED:
        add(name, *_package(name))
    why = emulation_available()
    add("link emulation", OK if why is None else UNAVAILABLE, "available (--emulate-links)" if why is None else why)
    for kind in ("cpu", "gpu"):
        meter = meter_for(kind)
        add(f"energy meter ({kind})", OK if meter.available else UNAVAILABLE, describe(meter))
    clean = clean_stale(dry_run=dry_run)
    if not clean.stale:
        add("stale namespaces", OK, "none")
    elif dry_run:
        add("stale namespaces", STALE, f"{len(clean.stale)} left by killed runs (run `hetsplit doctor` to remove): "
            + ", ".join(clean.stale))
    else:
        if clean.removed:
            add("stale namespaces", OK, clean.summary())
        if clean.failed:
            hint = "" if os.geteuid() == 0 else " (removing them needs root: run hetsplit doctor as root)"
            add("stale namespaces", BROKEN, "could not remove " + "; ".join(
                f"{n}: {why}" for n, why in clean.failed.items()) + hint)
    return items
