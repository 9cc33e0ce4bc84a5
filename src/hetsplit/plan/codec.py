"""Reading plan documents (``hetsplit.plan/2`` and the pipeline-only ``/1``) into ``Plan`` objects.

Only the document's shape is checked here (keys, types, axis names); whether the plan fits a model
and a cluster is ``check_plan``'s job.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

from hetsplit.errors import PlanError
from hetsplit.plan.types import (AXES, COMBINE_KINDS, DIRECT, FORMAT, FORMAT_V1, RELAY, Combine, Metrics,
                                 Placement, Plan, Shard, Stage)

PLAN_KEYS = ("format", "model", "cluster", "algorithm", "params", "cluster_file", "stages", "assign", "combine",
             "order", "metrics", "pareto", "input_shapes")


def plan_from_dict(cls: type[Plan], d: Any, where: str) -> Plan:
    if not isinstance(d, dict):
        raise PlanError(f"{where}: a plan must be a JSON object with 'format', 'model' and 'stages' or 'assign'; "
                        f"got {type(d).__name__}")
    fmt = d.get("format")
    if fmt not in (FORMAT, FORMAT_V1):
        raise PlanError(f"{where}: 'format' is {fmt!r}; expected {FORMAT!r} (or {FORMAT_V1!r})")
    for key in d:
        if key not in PLAN_KEYS:
            close = difflib.get_close_matches(str(key), PLAN_KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise PlanError(f"{where}: unknown key {key!r}; {hint}a plan's keys are {', '.join(PLAN_KEYS)}")
    if "model" not in d:
        raise PlanError(f"{where}: the plan has no 'model'")
    params = d.get("params", {})
    if not isinstance(params, dict):
        raise PlanError(f"{where}: 'params' must be an object, got {type(params).__name__}")
    params = dict(params)
    routing = params.pop("routing", None)
    if routing not in (None, RELAY, DIRECT):
        raise PlanError(f"{where}: params.routing is {routing!r}; expected 'relay' (pipelines) or 'direct'")
    stages: list[Stage] = []
    assign: dict[str, Placement] = {}
    if "stages" in d:
        stages = _stages(d["stages"], where)
    if fmt == FORMAT and "assign" in d:
        assign = _assign(d["assign"], where)
    if fmt == FORMAT_V1 and not stages:
        raise PlanError(f"{where}: a {FORMAT_V1} plan needs 'stages' (a list of {{device, layers}})")
    if not stages and not assign:
        raise PlanError(f"{where}: the plan has neither 'stages' nor 'assign'")
    if stages and assign:
        derived = {name: st.device for st in stages for name in st.layers}
        if derived != assign:
            diff = next((n for n in derived if assign.get(n) != derived[n]), None) or \
                next(n for n in assign if n not in derived)
            raise PlanError(f"{where}: 'stages' and 'assign' disagree on layer {diff!r} "
                            f"({derived.get(diff)!r} vs {assign.get(diff)!r}); give one of them")
        assign = {}
    if not stages and routing == RELAY:
        stages = _stages_from_assign(assign, where)
        assign = {}
    combine = _combine(d.get("combine", {}), where)
    if stages and combine:
        raise PlanError(f"{where}: a pipeline plan has no shards, so 'combine' must be empty")
    if d.get("metrics") is not None and not isinstance(d["metrics"], dict):
        raise PlanError(f"{where}: 'metrics' must be an object (throughput, energy_j, ...), "
                        f"got {type(d['metrics']).__name__}")
    _check_metrics(d.get("metrics") or {}, where)
    try:
        metrics = Metrics.from_dict(d["metrics"]) if d.get("metrics") else None
    except (TypeError, ValueError) as exc:
        raise PlanError(f"{where}: malformed 'metrics' ({exc})") from None
    cluster_file = d.get("cluster_file")
    if cluster_file is not None and not isinstance(cluster_file, str):
        raise PlanError(f"{where}: 'cluster_file' must be the path of a cluster YAML, got {cluster_file!r}")
    return cls(str(d["model"]), str(d.get("cluster", "")), str(d.get("algorithm", "")), stages, params, metrics,
               d.get("pareto"), assign, combine, cluster_file, _order(d.get("order", {}), where),
               _input_shapes(d.get("input_shapes", {}), where))


def _input_shapes(raw: Any, where: str) -> dict[str, list[int]]:
    """``input_shapes``: model input -> its dims (what ``--input-shape`` fixed when the plan was made)."""
    ok = isinstance(raw, dict) and all(
        isinstance(k, str) and isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool)
                                                                 and x > 0 for x in v) for k, v in raw.items())
    if not ok:
        raise PlanError(f"{where}: 'input_shapes' must map each model input to its dims (positive integers), "
                        f"got {raw!r}")
    return {k: list(v) for k, v in raw.items()}


def _check_metrics(raw: dict[str, Any], where: str) -> None:
    """Every metric a finite number (null for "none", as hetsplit writes an infinite one), a list or
    an object of them, or (``bottleneck``) a name: NaN and Infinity are refused, not read as figures."""
    def bad(v: Any) -> bool:
        if isinstance(v, (list, dict)):
            return any(bad(x) for x in (v.values() if isinstance(v, dict) else v))
        if isinstance(v, bool) or v is None:
            return False
        return not isinstance(v, (int, float)) or not math.isfinite(v)

    for key, value in raw.items():
        if key == "bottleneck" and (value is None or isinstance(value, str)):
            continue
        if bad(value):
            raise PlanError(f"{where}: metrics.{key} is {value!r}; a metric is a finite number (null for none); "
                            "drop 'metrics' to have them estimated again")


def _order(raw: Any, where: str) -> dict[str, list[str]]:
    if not isinstance(raw, dict):
        raise PlanError(f"{where}: 'order' must be an object from device name to its task names in run order")
    out: dict[str, list[str]] = {}
    for dev, names in raw.items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise PlanError(f"{where}: order[{dev!r}] must be a list of task names, got {names!r}")
        out[str(dev)] = list(names)
    return out


def _stages(raw: Any, where: str) -> list[Stage]:
    if not isinstance(raw, list):
        raise PlanError(f"{where}: 'stages' must be a list of {{device, layers}}")
    out = []
    for i, s in enumerate(raw):
        if not isinstance(s, dict) or "device" not in s or not isinstance(s.get("layers"), list):
            raise PlanError(f"{where}: stages[{i}] must be {{\"device\": NAME, \"layers\": [NAMES]}}")
        if s.get("shard") is not None:
            raise PlanError(f"{where}: stages[{i}] has a 'shard'; shards are written in 'assign' of a "
                            f"{FORMAT} mapping, not in pipeline stages")
        out.append(Stage(str(s["device"]), [str(x) for x in s["layers"]]))
    return out


def _assign(raw: Any, where: str) -> dict[str, Placement]:
    if not isinstance(raw, dict):
        raise PlanError(f"{where}: 'assign' must be an object from layer name to a device or a list of shards")
    out: dict[str, Placement] = {}
    for layer, place in raw.items():
        if isinstance(place, str):
            out[str(layer)] = place
        elif isinstance(place, list) and place:
            out[str(layer)] = tuple(_shard(s, f"{where}: assign[{layer!r}][{i}]") for i, s in enumerate(place))
        else:
            raise PlanError(f"{where}: assign[{layer!r}] must be a device name or a non-empty list of shards "
                            f"{{device, axis, start, stop}}; got {place!r}")
    return out


def _shard(raw: Any, where: str) -> Shard:
    if not isinstance(raw, dict):
        raise PlanError(f"{where}: a shard must be {{device, axis, start, stop}}; got {raw!r}")
    missing = [k for k in ("device", "axis", "start", "stop") if k not in raw]
    if missing:
        raise PlanError(f"{where}: the shard lacks {missing}")
    if raw["axis"] not in AXES:
        raise PlanError(f"{where}: axis {raw['axis']!r} is not one of {AXES}")
    for key in ("start", "stop"):
        if not isinstance(raw[key], int) or isinstance(raw[key], bool):
            raise PlanError(f"{where}: {key} must be an integer, got {raw[key]!r}")
    if not 0 <= raw["start"] < raw["stop"]:
        raise PlanError(f"{where}: the slice [{raw['start']}, {raw['stop']}) is empty or negative")
    return Shard(str(raw["device"]), str(raw["axis"]), int(raw["start"]), int(raw["stop"]))


def _combine(raw: Any, where: str) -> dict[str, Combine]:
    if not isinstance(raw, dict):
        raise PlanError(f"{where}: 'combine' must be an object from layer name to {{kind, on, tree}}")
    out = {}
    for layer, c in raw.items():
        at = f"{where}: combine[{layer!r}]"
        if not isinstance(c, dict) or "kind" not in c or "on" not in c:
            raise PlanError(f"{at} must be {{\"kind\": \"concat\"|\"sum\"|\"broadcast\", \"on\": DEVICE}}")
        if c["kind"] not in COMBINE_KINDS:
            raise PlanError(f"{at}: kind {c['kind']!r} is not one of {COMBINE_KINDS}")
        tree = c.get("tree", 0)
        if not isinstance(tree, int) or isinstance(tree, bool) or tree < 0 or tree == 1:
            raise PlanError(f"{at}: tree must be 0 (flat) or a group size >= 2, got {tree!r}")
        if tree and c["kind"] == "concat":
            raise PlanError(f"{at}: a concat has no tree; only a sum (reduced) or a broadcast (sent) goes "
                            "through groups")
        out[str(layer)] = Combine(str(c["kind"]), str(c["on"]), int(tree))
    return out


def _stages_from_assign(assign: dict[str, Placement], where: str) -> list[Stage]:
    """Relay routing over an assign: stages are the maximal runs of one device, in the given order."""
    stages: list[Stage] = []
    for layer, place in assign.items():
        if not isinstance(place, str):
            raise PlanError(f"{where}: layer {layer!r} is sharded; routing 'relay' is for pipelines of whole "
                            "layers (use 'direct')")
        if stages and stages[-1].device == place:
            stages[-1].layers.append(layer)
        else:
            stages.append(Stage(place, [layer]))
    return stages
