"""This machine's worker processes as a cluster: the ``local`` built-in's device, renamed to a plan's units.

A plan made for any cluster runs here as one worker process per device; costing it for those
processes needs a cluster whose devices carry the plan's names but are ``local-cpu`` cores joined by
the loopback link (``cluster/builtin/local.yaml``).
"""

from __future__ import annotations

from hetsplit.cluster.types import Cluster
from hetsplit.errors import HetsplitError

LOCAL_TEMPLATE = "local"      # the built-in cluster whose device and link stand for this machine's processes


def local_cluster(devices: list[str], name: str = "local-processes", link_latency_s: float | None = None,
                  message_cpu: tuple[float, float] | None = None) -> Cluster:
    """A cluster of ``devices`` (the plan's unit names), each a ``local-cpu`` worker process, joined by
    the ``local`` built-in's loopback link (its latency ``link_latency_s`` when given, e.g. measured; the
    CPU each message end costs, fixed and per byte, ``message_cpu`` when given)."""
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
    link = dict(spec["links"]["default"])
    if link_latency_s is not None:
        link["latency"] = f"{float(link_latency_s)!r}s"
    if message_cpu is not None:
        link["message"] = {"cpu": f"{float(message_cpu[0])!r}s", "byte": float(message_cpu[1])}
    spec["links"] = {"default": link}
    return cluster_from_dict(spec, origin=f"built-in {LOCAL_TEMPLATE}, renamed to the plan's units")


def loopback_latency_s() -> float:
    """The ``local`` built-in's loopback link latency (an assumption of its YAML, not measured here)."""
    from hetsplit.cluster.examples import builtin_spec
    from hetsplit.units import parse_quantity

    return parse_quantity(builtin_spec(LOCAL_TEMPLATE)["links"]["default"]["latency"], "time",
                          f"built-in {LOCAL_TEMPLATE}: links.default.latency")
