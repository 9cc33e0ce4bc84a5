"""Build the CostTable of a graph on a cluster: device models, a profile, or both."""

from __future__ import annotations

import numpy as np

from hetsplit.cluster.types import Cluster
from hetsplit.costs.device_profiles import profile_column
from hetsplit.costs.models.base import device_model, element_bytes, segment_cost
from hetsplit.costs.problem import ModelScope, SplitProblem
from hetsplit.costs.table import CostTable
from hetsplit.errors import ProfileError
from hetsplit.graph.precision import at_element_bytes
from hetsplit.graph.types import Graph


def build_cost_table(graph: Graph, cluster: Cluster, profile: CostTable | None = None) -> CostTable:
    """One column per cluster device type: from ``profile`` where it has the type, else from the profile
    the cluster names for the type (a device's ``profile:``, ``costs.device_profiles``), else the model.

    A graph read from a profile has no MACs or shapes, so every type must then be in the profile.
    What a segment costs beyond its layers (``costs.segment``): a profile's own figures for a measured
    type; for a modelled type, its device's (``models.base.segment_cost``: the preset's figures, or
    the cluster file's ``segment:``), nothing where it gives none.
    """
    columns: list[CostTable] = []
    for type_name in cluster.types:
        if profile is not None and type_name in profile.types:
            columns.append(profile.select([type_name]))
            continue
        measured = cluster.representative(type_name).profile
        if measured:
            columns.append(profile_column(graph, measured, type_name))
            continue
        if graph.meta.get("from_profile"):
            have = profile.types if profile is not None else []
            raise ProfileError(
                f"the profile of {graph.name!r} has no costs for device type {type_name!r} "
                f"(device {cluster.representative(type_name).name!r}); it has {have}. Profile that device "
                "type, or name a device of a profiled type in the cluster")
        device = cluster.representative(type_name)
        lc = device_model(device).layer_costs(graph)
        segment = segment_cost(device)
        columns.append(CostTable(graph.names, [type_name], np.asarray(lc.time_s)[:, None],
                                 np.asarray(lc.energy_j)[:, None], np.asarray(lc.mem_bytes)[:, None],
                                 {type_name: lc.source}, {type_name: segment} if segment is not None else {}))
    return CostTable.concat(columns)


def deployed_graph(graph: Graph, cluster: Cluster) -> Graph:
    """``graph`` as ``cluster`` runs it: at the element size every device type's model declares
    (``element_bytes``: int8 MCUs keep and send one byte per element), or as exported when the types
    do not all declare one and the same."""
    sizes = {element_bytes(cluster.representative(t)) for t in cluster.types}
    size = sizes.pop() if len(sizes) == 1 else None
    return graph if size is None else at_element_bytes(graph, size)


def build_problem(graph: Graph, cluster: Cluster, profile: CostTable | None = None,
                  scope: ModelScope = ModelScope()) -> SplitProblem:
    """The SplitProblem of ``graph`` (deployed as ``cluster`` runs it, ``deployed_graph``) on ``cluster``
    (costs from models and/or a profile); ``scope``: the whole model the graph is part of."""
    graph = deployed_graph(graph, cluster)
    return SplitProblem(graph, cluster, build_cost_table(graph, cluster, profile), scope)
