"""Cluster YAML (or dict) -> Cluster, validated with messages that name the file, the key and the fix.

Format (every key but ``devices`` optional; ``links.default`` needed with two or more devices)::

    format: hetsplit.cluster/1
    name: edge-cloud
    description: free text
    media:                                   # media of this file, usable by name below
      campus: {bandwidth: 100MB/s, latency: 1ms, energy: 5nJ/b}
      slow-hb: {preset: hb-wcc, latency: 2ms}          # a preset with figures overridden
    devices:
      - {name: cim, preset: neurosim-rram, count: 4}   # count: cim0..cim3
      - {name: gpu0, preset: rtx3070ti, memory: 6GiB}  # explicit keys override the preset's
      - {name: gpu1, preset: rtx3070ti, segment: {call: 0.2ms, byte: 0.1ns/B}}  # what a segment costs
                                                       # beyond its layers (presets/README.md; 0 allowed)
      - {name: cpu0, kind: cpu, memory: 16GiB, peak_macs: 1.2e11/s, mem_bandwidth: 50GB/s,
         power_active: 65W}                            # params inline or under params:
      - {name: laptop, kind: cpu, memory: 16GiB, profile: laptop.json}  # its type's costs measured there
                                                       # (hetsplit profile; a path beside this file)
    groups:
      edge: {devices: [cim], medium: hb-wcc}           # links inside the group (cim = cim0..3)
      cloud: [gpu0, cpu0]
    links:
      default: lb-wcc                                  # every other pair
      overrides:                                       # applied in order, after groups
        - {between: [gpu0, cpu0], medium: pcie5}       # device or group names; both directions
        - {from: edge, to: cloud, medium: {bandwidth: 1MB/s, energy: 50uJ/b}}  # one direction
      ports: links                                     # or shared: one port per device, messages take turns
    source: cim0                                       # where model inputs arrive
    sink: cim0                                         # where outputs must end up

Link precedence: ``links.default``, then each group's medium inside the group, then overrides.
A medium is a preset name, a name from ``media``, or a mapping {preset, name, bandwidth,
latency (default 0 s), energy (per byte or bit, default 0 J)}.
"""

from __future__ import annotations

import copy
import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.cluster.presets import MEDIUM, MEDIUM_FIGURES, Preset, device_preset_names, load_preset, preset_names
from hetsplit.cluster.types import DEVICE_KINDS, PORTS, Cluster, Device, Medium
from hetsplit.errors import ClusterError, HetsplitError
from hetsplit.jsonfile import read_yaml
from hetsplit.units import KEY_KINDS, parse_param, parse_quantity

CLUSTER_FORMAT = "hetsplit.cluster/1"
TOP_KEYS = ("format", "name", "description", "media", "devices", "groups", "links", "source", "sink")
DEVICE_KEYS = ("name", "preset", "kind", "type", "model", "memory", "params", "group", "host", "count", "profile",
               "segment")
# what one segment (one executor call per input) costs on a device beyond its layers (costs.segment):
# the ``segment:`` key of a device entry -> the device parameter that holds it (SI: s, s per byte)
SEGMENT_PARAMS = {"call": "segment_call_s", "byte": "segment_byte_s", "host_byte": "segment_host_byte_s"}
LINK_KEYS = ("default", "overrides", "ports")
OVERRIDE_KEYS = ("between", "from", "to", "medium")
GROUP_KEYS = ("devices", "medium")
MEDIUM_KEYS = ("preset", "name", "message") + tuple(MEDIUM_FIGURES)
# what each end of a message costs its device's CPU (cluster.links): the ``message:`` key of a medium
MESSAGE_KEYS = ("cpu", "byte")
MAX_DEVICES = 1024   # link tables are D x D (32 MiB at 1,024); a million devices would ask for terabytes
# parameter names a device entry may carry inline (next to name, preset...) rather than under params:
_MEDIUM_ONLY = {"bandwidth", "latency", "energy_per_byte", "memory"}


def time_per_byte(value: Any, where: str) -> float:
    """Seconds per byte from ``0.1ns/B``, ``0.8ns/b`` (per bit), ``1us/KiB`` or a plain number (s/B)."""
    if isinstance(value, str) and "/" in value:
        m = re.match(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^/\s]*)\s*/\s*(\S+)\s*$", value)
        try:
            if m:
                seconds = parse_quantity(f"{m.group(1)}{m.group(2)}", "time", where)
                per = parse_quantity(f"1{m.group(3)}", "bytes", where)
                if per > 0:
                    return float(f"{seconds / per:.15g}")
        except HetsplitError:
            pass
        raise ClusterError(f"{where}: cannot read {value!r} as time per byte; write it like 0.1ns/B, 0.0125ns/b (per "
                           "bit) or 1e-10 (seconds per byte)")
    return parse_quantity(value, "time", where)


def _too_many(n: int, what: str = "devices") -> str:
    """Why ``n`` devices are refused: the per-pair link tables alone would take this much."""
    need = 4 * 8 * n * n   # bandwidth, latency, energy and media per pair, 8 bytes each
    size = f"{need / 2**30:,.1f} GiB" if need < 2**90 else "more memory than exists"
    return (f"{n:,} {what}, over the {MAX_DEVICES:,} a cluster may have (its link tables alone would take "
            f"{size}); describe fewer devices")


def inline_param_keys() -> set[str]:
    """Parameter names accepted at the top of a device entry: known kinds and every preset's params."""
    keys = set(KEY_KINDS) - _MEDIUM_ONLY
    for name in preset_names():
        keys.update(load_preset(name).params)
    return keys


def load_cluster(spec: str | Path, confined: bool = False) -> Cluster:
    """A cluster from a built-in name (``donna-2cpu-1gpu-1cim-hb-wcc``) or a YAML file path. ``confined``
    (a cluster a plan names): every file it names (``profile:``, preset files) must resolve inside the
    YAML's own folder, else it is refused before it is opened."""
    from hetsplit.cluster.examples import builtin_names, builtin_spec, is_builtin

    text = str(spec)
    path = Path(text)
    if is_builtin(text):
        return cluster_from_dict(builtin_spec(text), origin=f"built-in cluster {text}")
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.exists():
            raise ClusterError(f"cluster file {text} does not exist; give a YAML path or a built-in cluster "
                               "name (hetsplit clusters lists them)")
        data = read_yaml(path, ClusterError, "no such cluster file")
        return _Builder(str(path), path.parent, path.parent.resolve() if confined else None).build(data, path.stem)
    names = builtin_names()
    close = difflib.get_close_matches(text, names, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ClusterError(f"unknown cluster {text!r}; {hint}give a YAML file or one of: {', '.join(names)}")


def cluster_from_dict(data: Any, origin: str = "<dict>", base_dir: Path | None = None,
                      default_name: str = "cluster") -> Cluster:
    """Validate a cluster description (parsed YAML) and build the Cluster."""
    return _Builder(origin, base_dir).build(data, default_name)


@dataclass
class _Entry:
    """One device after count expansion, before types are assigned."""

    name: str
    where: str
    kind: str
    model: str
    memory_bytes: float
    params: dict[str, Any]
    preset: Preset | None
    type: str | None
    group: str | None
    host: str | None
    base: str  # the entry's name before count expansion
    profile: str | None = None  # measured costs of its type (absolute path)


class _Builder:
    def __init__(self, origin: str, base_dir: Path | None, confine: Path | None = None) -> None:
        self.origin = origin
        self.base_dir = base_dir
        self.confine = confine          # every file named must resolve inside it (None: anywhere)
        self.media: dict[str, Medium] = {}

    def inside(self, value: str, where: str) -> None:
        """Refuse a file path ``value`` that resolves outside ``confine`` (when set), before it is opened."""
        if self.confine is None:
            return
        path = Path(value).expanduser()
        if not path.is_absolute() and self.base_dir is not None:
            path = self.base_dir / path
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            real = None
        if real is None or not real.is_relative_to(self.confine):
            raise self.err(where, "names a file outside the cluster file's folder; a cluster a plan names may "
                                  "name only files beside it")

    def err(self, key: str, message: str) -> ClusterError:
        return ClusterError(f"{self.origin}: {key}: {message}" if key else f"{self.origin}: {message}")

    # ---- top level ------------------------------------------------------------------------------
    def build(self, data: Any, default_name: str) -> Cluster:
        if not isinstance(data, dict):
            raise self.err("", "a cluster file is a mapping with at least 'devices:'; see "
                           "hetsplit.cluster.loader for the format")
        self.reject_unknown(data, TOP_KEYS, "")
        if "format" in data and data["format"] != CLUSTER_FORMAT:
            raise self.err("format", f"expected {CLUSTER_FORMAT!r}, got {data['format']!r}")
        for mname, mspec in (self.mapping(data.get("media") or {}, "media")).items():
            self.media[str(mname)] = self.medium(mspec, f"media.{mname}", default_name=str(mname))
        entries = self.devices(data.get("devices"))
        names = [e.name for e in entries]
        groups, group_media = self.groups(data.get("groups") or {}, entries)
        devices = self.assign_types(entries)
        bw, lat, en, mnames, cpu, cpu_byte = self.links(data, names, groups, group_media)
        roles = {}
        for role in ("source", "sink"):
            value = data.get(role)
            if value is not None and value not in names:
                raise self.err(role, f"{value!r} is not a device; use one of {', '.join(names)}")
            roles[role] = value
        return Cluster(name=str(data.get("name") or default_name), devices=devices, bandwidth=bw, latency_s=lat,
                       energy_per_byte=en, medium_names=mnames, groups=groups, origin=self.origin,
                       description=str(data.get("description", "")), ports=self.ports(data),
                       message_cpu_s=cpu, message_cpu_byte_s=cpu_byte, **roles)

    # ---- devices --------------------------------------------------------------------------------
    def devices(self, raw: Any) -> list[_Entry]:
        if not isinstance(raw, list) or not raw:
            raise self.err("devices", "missing or empty; list the devices, e.g. "
                           "devices: [{name: gpu0, preset: rtx3070ti}]")
        entries: list[_Entry] = []
        seen: dict[str, str] = {}
        if len(raw) > MAX_DEVICES:
            raise self.err("devices", _too_many(len(raw)))
        for i, item in enumerate(raw):
            for entry in self.device(item, f"devices[{i}]"):
                if entry.name in seen:
                    raise self.err(f"{entry.where}.name", f"duplicate device name {entry.name!r} (also "
                                   f"{seen[entry.name]}); give each device its own name")
                seen[entry.name] = entry.where
                entries.append(entry)
            if len(entries) > MAX_DEVICES:
                raise self.err(f"devices[{i}]", _too_many(len(entries), "devices up to here"))
        return entries

    def device(self, item: Any, where: str) -> list[_Entry]:
        if not isinstance(item, dict):
            raise self.err(where, f"expected a mapping like {{name: gpu0, preset: rtx3070ti}}, got {item!r}")
        inline = [k for k in item if k not in DEVICE_KEYS]
        known = inline_param_keys() if inline else set()
        for key in inline:
            if key not in known:
                close = difflib.get_close_matches(str(key), list(DEVICE_KEYS) + sorted(known), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise self.err(f"{where}.{key}", f"unknown key; {hint}device keys are {', '.join(DEVICE_KEYS)}; "
                               "put model parameters under params: (known ones may also sit inline)")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise self.err(f"{where}.name", "missing; give the device a name, e.g. name: gpu0")
        preset = None
        if "preset" in item:
            try:
                if str(item["preset"]).endswith((".yaml", ".yml")) or "/" in str(item["preset"]):
                    self.inside(str(item["preset"]), f"{where}.preset")
                preset = load_preset(str(item["preset"]), self.base_dir)
            except ClusterError as exc:
                raise self.err(f"{where}.preset", str(exc)) from None
            if preset.kind == MEDIUM:
                raise self.err(f"{where}.preset", f"{preset.name!r} is a medium; use it under links, "
                               f"and a device preset here: {', '.join(device_preset_names())}")
        kind = item.get("kind", preset.kind if preset else None)
        if kind not in DEVICE_KINDS:
            fix = "add kind: cpu (or a preset)" if kind is None else f"use one of {', '.join(DEVICE_KINDS)}"
            raise self.err(f"{where}.kind", f"{kind!r} is not a device kind; {fix}")
        if "memory" in item:
            memory = parse_quantity(item["memory"], "bytes", f"{self.origin}: {where}.memory")
        elif preset is not None and preset.memory_bytes is not None:
            memory = preset.memory_bytes
        else:
            raise self.err(f"{where}.memory", "missing; say how much memory the device has, e.g. memory: 16GiB")
        if not memory > 0:
            raise self.err(f"{where}.memory", f"must be > 0, got {item.get('memory')!r}")
        params = copy.deepcopy(preset.params) if preset else {}  # never share the cached preset's dicts
        explicit = self.mapping(item.get("params") or {}, f"{where}.params")
        explicit.update({k: item[k] for k in inline})
        for key, value in explicit.items():
            parsed = parse_param(str(key), value, f"{self.origin}: {where}.params.{key}", warn_bare=True)
            if isinstance(parsed, dict) and isinstance(params.get(key), dict):
                parsed = {**params[key], **parsed}  # efficiency: {conv: 0.6} keeps the preset's others
            params[key] = parsed
        if "segment" in item:
            params.update(self.segment(item["segment"], f"{where}.segment"))
        count = item.get("count", None)
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise self.err(f"{where}.count", f"must be a whole number >= 1, got {count!r}")
        if count is not None and count > MAX_DEVICES:
            raise self.err(f"{where}.count", _too_many(count))
        names = [name] if count is None else [f"{name}{j}" for j in range(count)]
        group = item.get("group")
        profile = self.profile_path(item.get("profile"), f"{where}.profile") if "profile" in item else None
        return [_Entry(n, where, kind, str(item.get("model", preset.model if preset else "roofline")), memory,
                       copy.deepcopy(params), preset, item.get("type"), None if group is None else str(group),
                       item.get("host"), name, profile) for n in names]

    def segment(self, value: Any, where: str) -> dict[str, float]:
        """A device's ``segment: {call: 0.2ms, byte: 0.1ns/B, host_byte: 0.04ns/B}`` (each optional; 0 is
        a figure too) as the device parameters ``SEGMENT_PARAMS`` names, in SI units."""
        spec = self.mapping(value, where)
        self.reject_unknown(spec, tuple(SEGMENT_PARAMS), where,
                            "call: seconds per executor call; byte: per byte crossing the segment's boundary; "
                            "host_byte: per such byte copied between host and device memory")
        out = {SEGMENT_PARAMS["call"]: parse_quantity(spec["call"], "time", f"{self.origin}: {where}.call")} \
            if "call" in spec else {}
        for key in ("byte", "host_byte"):
            if key in spec:
                out[SEGMENT_PARAMS[key]] = time_per_byte(spec[key], f"{self.origin}: {where}.{key}")
        return out

    def profile_path(self, value: Any, where: str) -> str:
        """A device's ``profile:`` as an absolute path (relative to the YAML file), which must exist."""
        if not isinstance(value, str) or not value:
            raise self.err(where, f"expected the path of a profile (hetsplit profile MODEL --out FILE), got {value!r}")
        self.inside(value, where)
        path = Path(value).expanduser()
        if not path.is_absolute() and self.base_dir is not None:
            path = self.base_dir / path
        if not path.is_file():
            raise self.err(where, f"{path}: no such profile file; measure one with `hetsplit profile MODEL --device "
                                  "local-cpu --out FILE` on that device (a relative path is read beside the YAML)")
        return str(path.resolve())

    def assign_types(self, entries: list[_Entry]) -> list[Device]:
        """Explicit types stay; others take the preset's type, or a new name per distinct parameter set."""
        by_signature: dict[tuple[Any, ...], str] = {}
        taken = {str(e.type) for e in entries if e.type is not None}
        devices = []
        for e in entries:
            dtype = e.type
            if dtype is None:
                sig = (e.kind, e.model, tuple(sorted((k, repr(v)) for k, v in e.params.items())), e.profile)
                base = (e.preset.type if e.preset else None) or e.kind
                if sig not in by_signature:
                    is_preset = e.preset is not None and e.model == e.preset.model and e.kind == e.preset.kind \
                        and e.params == e.preset.params and e.profile is None
                    candidate = base if is_preset or base not in taken else f"{base}-{e.base}"
                    by_signature[sig] = candidate
                    taken.add(candidate)
                dtype = by_signature[sig]
            devices.append(Device(name=e.name, kind=e.kind, type=str(dtype), memory_bytes=e.memory_bytes,
                                  model=e.model, params=e.params, preset=e.preset.name if e.preset else None,
                                  group=e.group, host=e.host, profile=e.profile))
        return devices

    # ---- groups ---------------------------------------------------------------------------------
    def groups(self, raw: Any, entries: list[_Entry]) -> tuple[dict[str, list[str]], dict[str, Medium]]:
        names = [e.name for e in entries]
        expand: dict[str, list[str]] = {}  # a name in a group list -> device names (a counted entry's base name expands)
        for e in entries:
            expand.setdefault(e.base, []).append(e.name)
            expand[e.name] = [e.name]
        groups: dict[str, list[str]] = {}
        media: dict[str, Medium] = {}
        for gname, spec in self.mapping(raw, "groups").items():
            where = f"groups.{gname}"
            if gname in expand:
                raise self.err(where, f"group name {gname!r} is also a device name; rename the group")
            if isinstance(spec, dict):
                self.reject_unknown(spec, GROUP_KEYS, where)
                members = spec.get("devices")
                if "medium" in spec:
                    media[gname] = self.medium(spec["medium"], f"{where}.medium")
            else:
                members = spec
            if not isinstance(members, list) or not members:
                raise self.err(where, "expected a non-empty list of device names, or {devices: [...], medium: ...}")
            groups[gname] = []
            for member in members:
                if member not in expand:
                    raise self.err(where, f"{member!r} is not a device; devices are {', '.join(names)}")
                groups[gname].extend(expand[member])
        for e in entries:  # a device entry's own 'group:' key
            if e.group is not None:
                if e.group in expand:
                    raise self.err(f"{e.where}.group", f"group name {e.group!r} is also a device name; rename it")
                groups.setdefault(e.group, [])
                if e.name not in groups[e.group]:
                    groups[e.group].append(e.name)
        owner: dict[str, str] = {}
        for gname, members in groups.items():
            for m in members:
                if m in owner and owner[m] != gname:
                    raise self.err(f"groups.{gname}", f"device {m!r} is already in group {owner[m]!r}; "
                                   "a device belongs to one group")
                owner[m] = gname
        for e in entries:
            e.group = owner.get(e.name)
        return groups, media

    # ---- links ----------------------------------------------------------------------------------
    def ports(self, data: dict[str, Any]) -> str:
        value = (self.mapping(data.get("links") or {}, "links")).get("ports", "links")
        if value not in PORTS:
            raise self.err("links.ports", f"{value!r}; expected 'links' (each directed link carries its own "
                           "messages) or 'shared' (a device's messages in and out take turns on its one port)")
        return str(value)

    def links(self, data: dict[str, Any], names: list[str], groups: dict[str, list[str]], group_media: dict[str, Medium]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[str]], np.ndarray, np.ndarray]:
        n = len(names)
        raw = self.mapping(data.get("links") or {}, "links")
        self.reject_unknown(raw, LINK_KEYS, "links")
        bw = np.full((n, n), np.inf)
        lat = np.zeros((n, n))
        en = np.zeros((n, n))
        cpu = np.zeros((n, n))
        cpu_byte = np.zeros((n, n))
        mnames = [["" for _ in range(n)] for _ in range(n)]
        index = {name: i for i, name in enumerate(names)}

        def put(us: list[int], vs: list[int], medium: Medium) -> None:
            for u in us:
                for v in vs:
                    if u != v:
                        bw[u, v], lat[u, v], en[u, v] = medium.bandwidth, medium.latency_s, medium.energy_per_byte
                        cpu[u, v], cpu_byte[u, v] = medium.message_cpu_s, medium.message_cpu_byte_s
                        mnames[u][v] = medium.name

        if "default" in raw:
            put(list(range(n)), list(range(n)), self.medium(raw["default"], "links.default"))
        elif n > 1:
            raise self.err("links.default", f"missing; say how devices talk, e.g. links: {{default: pcie5}} "
                           f"(media: {', '.join(self.medium_choices())})")
        for gname, medium in group_media.items():
            members = [index[m] for m in groups[gname]]
            put(members, members, medium)
        overrides = raw.get("overrides") or []
        if not isinstance(overrides, list):
            raise self.err("links.overrides", "expected a list of {between: [a, b], medium: ...}")
        for i, item in enumerate(overrides):
            where = f"links.overrides[{i}]"
            if not isinstance(item, dict):
                raise self.err(where, "expected {between: [a, b], medium: ...} or {from: a, to: b, medium: ...}")
            self.reject_unknown(item, OVERRIDE_KEYS, where)
            if "medium" not in item:
                raise self.err(f"{where}.medium", "missing; name the medium of these links, e.g. medium: lb-wcc")
            medium = self.medium(item["medium"], f"{where}.medium")
            if "between" in item:
                if "from" in item or "to" in item:
                    raise self.err(where, "give either between: [a, b] (both directions) or from/to, not both")
                pair = item["between"]
                if not isinstance(pair, list) or len(pair) != 2:
                    raise self.err(f"{where}.between", f"expected two device or group names [a, b], got {pair!r}")
                a, b = (self.members(x, f"{where}.between", index, groups) for x in pair)
                put(a, b, medium)
                put(b, a, medium)
            elif "from" in item and "to" in item:
                put(self.members(item["from"], f"{where}.from", index, groups),
                    self.members(item["to"], f"{where}.to", index, groups), medium)
            else:
                raise self.err(where, "say which links: between: [a, b] or from: a, to: b")
        return bw, lat, en, mnames, cpu, cpu_byte

    def members(self, name: Any, where: str, index: dict[str, int], groups: dict[str, list[str]]) -> list[int]:
        if name in index:
            return [index[name]]
        if name in groups:
            return [index[m] for m in groups[name]]
        raise self.err(where, f"{name!r} is neither a device nor a group; devices: {', '.join(index)}; "
                       f"groups: {', '.join(groups) or '(none)'}")

    # ---- media ----------------------------------------------------------------------------------
    def medium_choices(self) -> list[str]:
        return sorted(self.media) + preset_names(MEDIUM)

    def medium(self, spec: Any, where: str, default_name: str | None = None) -> Medium:
        if isinstance(spec, str):
            if spec in self.media:
                return self.media[spec]
            if spec in preset_names(MEDIUM) or spec.endswith((".yaml", ".yml")):
                try:
                    if spec.endswith((".yaml", ".yml")):
                        self.inside(spec, where)
                    return load_preset(spec, self.base_dir).medium()
                except ClusterError as exc:
                    raise self.err(where, str(exc)) from None
            close = difflib.get_close_matches(spec, self.medium_choices(), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise self.err(where, f"unknown medium {spec!r}; {hint}media are {', '.join(self.medium_choices())}, "
                           "or write {bandwidth: 1GB/s, latency: 0s, energy: 0.1uJ/b}")
        if not isinstance(spec, dict):
            raise self.err(where, f"expected a medium name or {{bandwidth, latency, energy}}, got {spec!r}")
        self.reject_unknown(spec, MEDIUM_KEYS, where)
        base = self.medium(spec["preset"], f"{where}.preset") if "preset" in spec else None
        if base is None and "bandwidth" not in spec:
            raise self.err(f"{where}.bandwidth", "missing; a medium needs a bandwidth, e.g. bandwidth: 1GB/s")
        values = {"latency": base.latency_s if base else 0.0, "energy": base.energy_per_byte if base else 0.0}
        if base is not None:
            values["bandwidth"] = base.bandwidth
        for key, qkind in MEDIUM_FIGURES.items():
            if key in spec:
                values[key] = parse_quantity(spec[key], qkind, f"{self.origin}: {where}.{key}", warn_bare=True)
        if not values["bandwidth"] > 0:
            raise self.err(f"{where}.bandwidth", "must be > 0")
        cpu, cpu_byte = (base.message_cpu_s, base.message_cpu_byte_s) if base else (0.0, 0.0)
        if "message" in spec:
            cpu, cpu_byte = self.message(spec["message"], f"{where}.message", cpu, cpu_byte)
        changed = base is not None and any(k in spec for k in (*MEDIUM_FIGURES, "message"))
        name = spec.get("name") or default_name or ("custom" if base is None else f"{base.name}*" if changed else base.name)
        return Medium(str(name), values["bandwidth"], values["latency"], values["energy"],
                      source=f"{self.origin}: {where}", message_cpu_s=cpu, message_cpu_byte_s=cpu_byte)

    def message(self, value: Any, where: str, cpu: float, cpu_byte: float) -> tuple[float, float]:
        """A medium's ``message: {cpu: 0.13ms, byte: 0.3ns/B}`` (each optional, else ``cpu``/``cpu_byte``):
        the CPU each end of a message costs its device, fixed and per byte (SI)."""
        spec = self.mapping(value, where)
        self.reject_unknown(spec, MESSAGE_KEYS, where, "cpu: seconds of CPU per message end; byte: per byte")
        if "cpu" in spec:
            cpu = parse_quantity(spec["cpu"], "time", f"{self.origin}: {where}.cpu")
        if "byte" in spec:
            cpu_byte = time_per_byte(spec["byte"], f"{self.origin}: {where}.byte")
        return cpu, cpu_byte

    # ---- helpers --------------------------------------------------------------------------------
    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.err(where, f"expected a mapping (key: value), got {type(value).__name__} {value!r}")
        return dict(value)

    def reject_unknown(self, data: dict[str, Any], allowed: tuple[str, ...], where: str, extra: str = "") -> None:
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                more = f"; {extra}" if extra else ""
                path = f"{where}.{key}" if where else str(key)
                raise self.err(path, f"unknown key; {hint}allowed keys are {', '.join(allowed)}{more}")
