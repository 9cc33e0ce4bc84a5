"""This machine's worker processes as a cluster: the ``local`` built-in's device, renamed to a plan's units.

A plan made for any cluster runs here as one worker process per device; costing it for those
processes needs a cluster whose devices carry the plan's names but are ``local-cpu`` cores joined by
the loopback link (``cluster/builtin/local.yaml``).
"""

from __future__ import annotations

from hetsplit.cluster.types import Cluster
from hetsplit.errors import HetsplitError

LOCAL_TEMPLATE = "local"      # the built-in cluster whose device and link stand for this machine's processes


def local_cluster(devices: list[str], name: str = "local-processes", link_latency_s: float | None = None) -> Cluster:
    """A cluster of ``devices`` (the plan's unit names), each a ``local-cpu`` worker process, joined by
    the ``local`` built-in's loopback link (its latency ``link_latency_s`` when given, e.g. measured)."""
    from hetsplit.cluster.examples import builtin_spec
    from hetsplit.cluster.loader import cluster_from_dict

    if not devices:
        raise HetsplitError("a cluster of this machine's processes needs at least one device")
    spec = builtin_spec(LOCAL_TEMPLATE)
    template = {k: v for k, v in spec["devices"][0].items() if k not in ("name", "count")}
    spec.update(name=name, description=f"{len(devices)} worker process(es) of this machine, named after the "
                                       "plan's units (the built-in local cluster's device and loopback link)",
                devices=[{**template, "name": d} for d in devices])
    spec.pop("groups", None)
    if link_latency_s is not None:
        spec["links"] = {"default": {**spec["links"]["default"], "latency": f"{float(link_latency_s)!r}s"}}
    return cluster_from_dict(spec, origin=f"built-in {LOCAL_TEMPLATE}, renamed to the plan's units")


def loopback_latency_s() -> float:
    """The ``local`` built-in's loopback link latency (an assumption of its YAML, not measured here)."""
    from hetsplit.cluster.examples import builtin_spec
    from hetsplit.units import parse_quantity

    return parse_quantity(builtin_spec(LOCAL_TEMPLATE)["links"]["default"]["latency"], "time",
                          f"built-in {LOCAL_TEMPLATE}: links.default.latency")
