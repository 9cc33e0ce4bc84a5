"""Device and medium presets: YAML files (``hetsplit.preset/1``) whose every figure names its source.

The format is documented in ``presets/README.md`` next to this module. ``load_preset`` reads a
built-in preset by name or any preset file by path; values come back in SI units.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from hetsplit.cluster.types import DEVICE_KINDS, Medium
from hetsplit.errors import ClusterError
from hetsplit.jsonfile import read_yaml
from hetsplit.units import parse_param, parse_quantity

PRESET_FORMAT = "hetsplit.preset/1"
PRESET_DIR = Path(__file__).parent / "presets"
MEDIUM = "medium"  # the ``kind`` of a medium preset
_COMMON_KEYS = ("format", "name", "kind", "description", "references", "notes")
_DEVICE_KEYS = _COMMON_KEYS + ("model", "type", "memory", "params")
_MEDIUM_KEYS = _COMMON_KEYS + ("bandwidth", "latency", "energy", "message_cpu", "message_byte")
# optional medium figures: each end of a message's CPU (cluster.links), fixed and per byte; absent: 0
MESSAGE_FIGURES = {"message_cpu": "time", "message_byte": "time_per_byte"}
# medium figure -> quantity kind
MEDIUM_FIGURES = {"bandwidth": "bandwidth", "latency": "time", "energy": "energy_per_byte"}


@dataclass(frozen=True)
class Preset:
    """A device or medium preset in SI units; ``sources`` maps each figure's key path to its source."""

    name: str
    kind: str                                  # a device kind (cpu, gpu, ...) or "medium"
    path: Path
    description: str = ""
    model: str | None = None                   # devices: device model name
    type: str | None = None                    # devices: cost column (default: the preset name)
    memory_bytes: float | None = None          # devices
    params: dict[str, Any] = field(default_factory=dict)   # devices: model params, SI
    figures: dict[str, float] = field(default_factory=dict)  # media: bandwidth, latency, energy (SI)
    written: dict[str, Any] = field(default_factory=dict)  # each figure as written in the file
    sources: dict[str, str] = field(default_factory=dict)  # "memory", "params.peak_macs", "bandwidth"...
    references: tuple[str, ...] = ()
    notes: str = ""

    @property
    def is_medium(self) -> bool:
        return self.kind == MEDIUM

    def medium(self) -> Medium:
        """The Medium of a medium preset."""
        if not self.is_medium:
            raise ClusterError(f"{self.path}: preset {self.name!r} is a {self.kind} device, not a medium; "
                               f"media are {preset_names(MEDIUM)}")
        f = self.figures
        return Medium(self.name, f["bandwidth"], f["latency"], f["energy"],
                      source="; ".join(f"{k}: {self.sources[k]}" for k in (*MEDIUM_FIGURES, *MESSAGE_FIGURES)
                                       if k in self.sources),
                      message_cpu_s=f.get("message_cpu", 0.0), message_cpu_byte_s=f.get("message_byte", 0.0))


def preset_names(kind: str | None = None) -> list[str]:
    """Names of the built-in presets, optionally only those of one kind ("medium", "cpu", ...)."""
    names = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
    if kind is None:
        return names
    return [n for n in names if load_preset(n).kind == kind]


def device_preset_names() -> list[str]:
    return [n for n in preset_names() if not load_preset(n).is_medium]


def load_preset(spec: str | Path, base_dir: Path | None = None) -> Preset:
    """A built-in preset by name (``rtx3070ti``) or a preset file by path (relative to ``base_dir``)."""
    text = str(spec)
    if text.endswith((".yaml", ".yml")) or "/" in text:
        path = Path(text) if base_dir is None or Path(text).is_absolute() else base_dir / text
        if not path.is_file():
            raise ClusterError(f"preset file {path} does not exist; give a path to a {PRESET_FORMAT} "
                               f"YAML file or a built-in preset name ({', '.join(preset_names())})")
        return _read(path.resolve())
    path = PRESET_DIR / f"{text}.yaml"
    if not path.is_file():
        names = preset_names()
        close = difflib.get_close_matches(text, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ClusterError(f"unknown preset {text!r}; {hint}presets are: {', '.join(names)}")
    return _read(path)


def _read(path: Path) -> Preset:
    """Parse a preset file, cached until the file changes (a calibration may rewrite one)."""
    stat = path.stat()
    return _load_preset_file(str(path), stat.st_mtime_ns, stat.st_size)


def get_medium(name: str) -> Medium:
    """A built-in medium preset as a Medium (``get_medium("hb-wcc")``)."""
    return load_preset(name).medium()


@lru_cache(maxsize=256)
def _load_preset_file(path_str: str, mtime_ns: int, size: int) -> Preset:  # noqa: ARG001 (cache keys)
    path = Path(path_str)
    data = read_yaml(path, ClusterError, "no such preset file")
    if not isinstance(data, dict):
        raise ClusterError(f"{path}: a preset file is a mapping with format, name, kind, ...; "
                           "see hetsplit/cluster/presets/README.md")
    if data.get("format") != PRESET_FORMAT:
        raise ClusterError(f"{path}: format: expected {PRESET_FORMAT!r}, got {data.get('format')!r}; "
                           f"add 'format: {PRESET_FORMAT}' as the first line")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ClusterError(f"{path}: name: missing; add 'name: {path.stem}'")
    if path.parent == PRESET_DIR and name != path.stem:
        raise ClusterError(f"{path}: name: {name!r} differs from the file name; rename one to match")
    kind = data.get("kind")
    if kind not in DEVICE_KINDS + (MEDIUM,):
        raise ClusterError(f"{path}: kind: {kind!r} is not one of {', '.join(DEVICE_KINDS + (MEDIUM,))}; "
                           "set kind to one of them")
    allowed = _MEDIUM_KEYS if kind == MEDIUM else _DEVICE_KEYS
    _reject_unknown(data, allowed, str(path), "")
    refs = data.get("references") or []
    common = dict(name=name, kind=kind, path=path, description=str(data.get("description", "")),
                  references=tuple(str(r) for r in refs), notes=str(data.get("notes", "")))
    written: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if kind == MEDIUM:
        figures = {key: parse_quantity(_figure(data, key, path, written, sources), qkind, f"{path}: {key}")
                   for key, qkind in MEDIUM_FIGURES.items()}
        for key in MESSAGE_FIGURES:
            if key in data:
                value = _figure(data, key, path, written, sources)
                figures[key] = (parse_quantity(value, "time", f"{path}: {key}") if key == "message_cpu"
                                else _time_per_byte(value, f"{path}: {key}"))
        if not figures["bandwidth"] > 0:
            raise ClusterError(f"{path}: bandwidth must be > 0")
        return Preset(**common, figures=figures, written=written, sources=sources)
    memory = parse_quantity(_figure(data, "memory", path, written, sources), "bytes", f"{path}: memory")
    raw_params = data.get("params") or {}
    if not isinstance(raw_params, dict):
        raise ClusterError(f"{path}: params: expected a mapping of name: {{value, source}}")
    params = {}
    for key in raw_params:
        value = _figure(raw_params, key, path, written, sources, prefix="params.")
        params[key] = parse_param(key, value, f"{path}: params.{key}")
    return Preset(**common, model=str(data.get("model", "roofline")), type=data.get("type") or name,
                  memory_bytes=memory, params=params, written=written, sources=sources)


def _figure(data: dict[str, Any], key: str, path: Path, written: dict[str, Any], sources: dict[str, str],
            prefix: str = "") -> Any:
    """The value of ``{value, source}`` at ``key``; records what was written and its source."""
    where = f"{path}: {prefix}{key}"
    entry = data.get(key)
    if entry is None:
        raise ClusterError(f"{where}: missing; add '{key}: {{value: ..., source: \"...\"}}'")
    if not isinstance(entry, dict) or "value" not in entry:
        raise ClusterError(f"{where}: write it as {{value: {entry!r}, source: \"where the figure comes from\"}}")
    _reject_unknown(entry, ("value", "source"), str(path), f"{prefix}{key}.")
    source = entry.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ClusterError(f"{where}.source: every figure needs a source; name the datasheet, paper or "
                           "measurement, or write 'assumption: <why>'")
    written[prefix + key] = entry["value"]
    sources[prefix + key] = source.strip()
    return entry["value"]


def _reject_unknown(data: dict[str, Any], allowed: tuple[str, ...], where: str, prefix: str) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ClusterError(f"{where}: {prefix}{key}: unknown key; {hint}allowed keys are {', '.join(allowed)}")


def _time_per_byte(value: Any, where: str) -> float:
    from hetsplit.cluster.loader import time_per_byte

    return time_per_byte(value, where)
