"""Calibrations of this machine that can be trusted: cached only when taken on a quiet machine,
checked at use by a short probe, measured again when the machine has changed.

A calibration (``local_calibration``'s per-layer costs, the runtime's per-message costs) is described
by a ``Recipe``: where it is cached, what it holds for (the ``key``: CPU model, cores, versions), how
it is measured and stored, and its ``probe`` (``machine_probe``: a tenth of a second). ``trusted``:

- reads the cache; a cached calibration is used after its probe, run now, agrees with the probe
  stored beside it within ``DRIFT`` (else the machine has changed: measured again, unless the machine
  is busy right now, when the probe cannot tell and the cached calibration is kept, with a note);
- measures it otherwise, watching the machine (``machine_load.LoadWatch``): the machine was *busy*
  when its rounds disagree by more than ``BUSY_SPREAD`` or other processes used more than
  ``BUSY_OTHERS`` of its CPU time meanwhile. A busy calibration is used for this process only and
  never cached (the next process measures again); a quiet one is cached with its probe.

Results are kept for the process (``clear_memo`` forgets them).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from hetsplit.costs import machine_load

T = TypeVar("T")

DRIFT = 0.10          # the probe now and when cached further apart than this: the machine has changed
BUSY_SPREAD = 0.15    # a calibration's rounds further apart than this: the machine was busy
BUSY_OTHERS = 0.10    # other processes used more than this share of the machine's CPU time: busy


@dataclass(frozen=True)
class Recipe(Generic[T]):
    """One calibration: cached as ``cache_root()/folder/<digest of key>.json`` in ``format``;
    ``measure`` returns the value and its rounds' spread (relative, 0 for one round); ``encode`` /
    ``decode`` turn the value into the cache's JSON and back; ``probe`` times a short fixed workload."""

    folder: str
    format: str
    key: dict[str, Any]
    measure: Callable[[], tuple[T, float]]
    encode: Callable[[T], dict[str, Any]]
    decode: Callable[[dict[str, Any]], T]
    probe: Callable[[], float]


@dataclass
class Trusted(Generic[T]):
    """A calibration and how far to trust it: ``path`` where it is cached ("" when not), ``busy`` why it
    was not cached ("" when it was taken on a quiet machine), ``notes`` what the cache and probe said."""

    value: T
    path: str = ""
    busy: str = ""
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """Where it is kept, and a warning when the machine was busy."""
        if self.busy:
            return f"WARNING: {self.busy}: not cached, the next run measures again"
        return f"cached in {self.path}; --recalibrate redoes it" if self.path else "not cached"


def cache_path(key: dict[str, Any], folder: str) -> Path:
    """Where a measurement of this machine (``key``) is cached: ``cache_root()/folder/<digest>.json``."""
    from hetsplit.graph.zoo.export import cache_root

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / folder / f"{digest}.json"


def read_cached(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The cached document at ``path`` when it holds for ``key``; None when absent or for another key.
    Raises ValueError (or OSError) when the file is unreadable."""
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc if doc.get("key") == key else None


def write_cached(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` atomically (a reader never sees half a file); OSError when it cannot."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


def busy_reason(spread: float, others: float | None) -> str:
    """Why a measurement is not to be trusted ("" when the machine was quiet)."""
    why = []
    if spread > BUSY_SPREAD:
        why.append(f"rounds {spread:.0%} apart, the faster kept")
    if others is not None and others > BUSY_OTHERS:
        why.append(f"other processes used {others:.0%} of the machine's CPU time meanwhile")
    return f"the machine was busy while calibrating ({'; '.join(why)})" if why else ""


def probe_changed(cached_s: Any, probe: Callable[[], float]) -> tuple[bool, str]:
    """Run ``probe`` now against its time when cached: (changed, a note saying what it found). A
    difference beyond ``DRIFT`` on a busy machine is not a change: the probe cannot tell then."""
    if not isinstance(cached_s, (int, float)) or cached_s <= 0:
        return True, "the cached calibration holds no probe to check it by: measured again"
    with machine_load.LoadWatch() as watch:
        now = probe()
    change = now / cached_s - 1.0
    said = f"probe {now * 1e3:.3f} ms now, {cached_s * 1e3:.3f} ms when cached ({change:+.0%})"
    if abs(change) <= DRIFT:
        return False, f"checked at use: {said}"
    if watch.share is not None and watch.share > BUSY_OTHERS:
        return False, (f"checked at use: {said}, but other processes used {watch.share:.0%} of the CPU meanwhile, "
                       "so the cached calibration is kept")
    return True, f"this machine has changed since it was calibrated ({said}): measured again"


_MEMO: dict[str, Trusted[Any]] = {}


def trusted(recipe: Recipe[T], recalibrate: bool = False) -> Trusted[T]:
    """The calibration of ``recipe`` (see the module docstring); ``recalibrate`` measures anew. The
    errors of ``recipe.measure`` pass through (the caller falls back)."""
    path = cache_path(recipe.key, recipe.folder)
    memo = str(path)
    if not recalibrate and memo in _MEMO:
        return _MEMO[memo]
    notes: list[str] = []
    if not recalibrate:
        try:
            doc = read_cached(path, recipe.key)
            if doc is not None:
                value = recipe.decode(doc["value"])
                changed, note = probe_changed(doc.get("probe_s"), recipe.probe)
                notes.append(note)
                if not changed:
                    _MEMO[memo] = Trusted(value, str(path), notes=notes)
                    return _MEMO[memo]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            notes.append(f"the cached calibration {path} was unreadable ({exc}); measured again")
    with machine_load.LoadWatch() as watch:
        value, spread = recipe.measure()
        probe_s = recipe.probe()
    got = Trusted(value, busy=busy_reason(spread, watch.share), notes=notes)
    if not got.busy:
        try:
            write_cached(path, {"format": recipe.format, "key": recipe.key, "probe_s": probe_s,
                                "value": recipe.encode(value)})
            got.path = str(path)
        except OSError as exc:
            notes.append(f"could not cache the calibration in {path}: {exc}")
    _MEMO[memo] = got
    return got


def clear_memo() -> None:
    """Forget calibrations read or measured in this process (the cache files stay)."""
    _MEMO.clear()
