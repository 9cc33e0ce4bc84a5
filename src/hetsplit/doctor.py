"""Health checks of this machine for hetsplit: versions, link and device emulation, energy meters, stale
namespaces and CPU cgroups.

``check(dry_run)`` returns one item per check (``item``, ``status``, ``detail``); a ``BROKEN`` status
means hetsplit cannot work as asked (``hetsplit doctor`` exits 1). Unavailable link or device emulation or
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
    """Every check's item; ``dry_run`` lists stale namespaces, cgroups and worker folders instead of removing
    them."""
    from hetsplit import __version__
    from hetsplit.costs.meters import describe, meter_for
    from hetsplit.runtime.cpu_throttle import clean_stale_groups, throttle_available
    from hetsplit.runtime.netem import emulation_available
    from hetsplit.runtime.netns_cleanup import clean_stale
    from hetsplit.runtime.scratch import clean_stale_scratch

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
    why = throttle_available()
    add("device emulation", OK if why is None else UNAVAILABLE,
        "available (--emulate-devices)" if why is None else why)
    for kind in ("cpu", "gpu"):
        meter = meter_for(kind)
        add(f"energy meter ({kind})", OK if meter.available else UNAVAILABLE, describe(meter))
    _stale(add, "stale namespaces", clean_stale(dry_run=dry_run))
    _stale(add, "stale CPU cgroups", clean_stale_groups(dry_run=dry_run))
    _stale(add, "stale worker folders", clean_stale_scratch(dry_run=dry_run))
    return items


def _stale(add, item: str, clean) -> None:
    """The item of one stale cleanup (``runtime.owned.Cleanup``): none, listed (dry run), removed or failed."""
    if not clean.stale:
        add(item, OK, "none")
    elif clean.dry_run:
        add(item, STALE, f"{len(clean.stale)} left by killed runs (run `hetsplit doctor` to remove): "
            + ", ".join(clean.stale))
    else:
        if clean.removed:
            add(item, OK, clean.summary())
        if clean.failed:
            hint = "" if os.geteuid() == 0 else " (removing them needs root: run hetsplit doctor as root)"
            add(item, BROKEN, "could not remove " + "; ".join(f"{n}: {why}" for n, why in clean.failed.items())
                + hint)
