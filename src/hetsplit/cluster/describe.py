"""Plain-dict summaries of clusters, cluster specs and presets (for the CLI, JSON and reports)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hetsplit.cluster.presets import Preset, load_preset
from hetsplit.cluster.types import Cluster
from hetsplit.jsonfile import json_safe

_DEVICE_FIGURES = ("peak_macs", "mem_bandwidth", "power_active")


def spec_media(spec: dict[str, Any]) -> list[str]:
    """Media a cluster spec names (default, groups, overrides), without loading any preset."""
    found: list[Any] = []
    links = spec.get("links") or {}
    found.append(links.get("default"))
    found += [g.get("medium") for g in (spec.get("groups") or {}).values() if isinstance(g, dict)]
    found += [o.get("medium") for o in links.get("overrides") or []]
    return list(dict.fromkeys(m if isinstance(m, str) else "custom" for m in found if m is not None))


def spec_summary(spec: dict[str, Any]) -> dict[str, Any]:
    """Name, device count, device mix by preset and by kind, media and description of a spec."""
    entries = [d for d in spec["devices"] for _ in range(d.get("count", 1))]
    mix = Counter(d.get("preset") or d.get("kind", "?") for d in entries)
    kinds = Counter(d.get("kind") or load_preset(d["preset"]).kind for d in entries)
    return {"name": spec["name"], "devices": len(entries), "mix": dict(mix), "kinds": dict(kinds),
            "media": spec_media(spec),
            "groups": len(spec.get("groups") or {}), "source": spec.get("source"),
            "description": spec.get("description", "")}


def cluster_to_dict(cluster: Cluster) -> dict[str, Any]:
    """Devices, groups and links (by medium, one entry per distinct (medium, figures) and its pairs)."""
    links: dict[tuple[Any, ...], dict[str, Any]] = {}
    n = cluster.num_devices
    for u in range(n):
        for v in range(n):
            if u == v:
                continue
            name = (cluster.medium_names[u][v] if cluster.medium_names else "") or "link"
            figures = (float(cluster.bandwidth[u, v]), float(cluster.latency_s[u, v]),
                       float(cluster.energy_per_byte[u, v]))
            entry = links.setdefault((name, *figures), {
                "medium": name, "bandwidth": figures[0], "latency_s": figures[1], "energy_per_byte": figures[2],
                "pairs": 0})
            entry["pairs"] += 1
    return {"name": cluster.name, "origin": cluster.origin, "description": cluster.description,
            "source": cluster.source, "sink": cluster.sink, "groups": cluster.groups, "types": cluster.types,
            "devices": [{"name": d.name, "kind": d.kind, "type": d.type, "preset": d.preset, "model": d.model,
                         "memory_bytes": d.memory_bytes, "group": d.group, "host": d.host,
                         "params": json_safe(d.params), **({"profile": d.profile} if d.profile else {})}
                        for d in cluster.devices],
            "links": list(links.values())}


def preset_key_figures(preset: Preset) -> dict[str, Any]:
    """The figures ``hetsplit devices`` shows in its overview (SI units)."""
    if preset.is_medium:
        return {"name": preset.name, "kind": preset.kind, "bandwidth": preset.figures["bandwidth"],
                "latency_s": preset.figures["latency"], "energy_per_byte": preset.figures["energy"],
                "description": preset.description}
    figures = {k: preset.params.get(k) for k in _DEVICE_FIGURES}
    return {"name": preset.name, "kind": preset.kind, "model": preset.model, "type": preset.type,
            "memory_bytes": preset.memory_bytes, **figures, "description": preset.description}


def preset_to_dict(preset: Preset) -> dict[str, Any]:
    """Every figure of a preset: as written, in SI, and its source."""
    values = dict(preset.figures) if preset.is_medium else {"memory": preset.memory_bytes,
                                                           **{f"params.{k}": v for k, v in preset.params.items()}}
    return {**preset_key_figures(preset), "path": str(preset.path), "references": list(preset.references),
            "notes": preset.notes,
            "figures": [{"key": k, "written": preset.written[k], "si": json_safe(values[k]), "source": s}
                        for k, s in preset.sources.items()]}
