"""The processes that run a plan on this machine: one worker per device and the driver.

Every device of a plan becomes a ``local-cpu`` worker under its own name (``cluster.local``), so the
plan applies unchanged; its costs come from a ``hetsplit.profile/1`` measured here (or, for a plan
made on the ``local`` cluster, the costs it was planned with). The driver feeds each model input to
every worker that reads it and collects each model output; every message has two ends, each costing
its process CPU (``RuntimeCosts``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hetsplit.cluster.local import local_cluster
from hetsplit.cluster.types import Cluster
from hetsplit.costs.problem import SplitProblem
from hetsplit.costs.profile import Profile
from hetsplit.costs.segment import SegmentCost
from hetsplit.errors import HetsplitError
from hetsplit.estimate.runtime_costs import RuntimeCosts
from hetsplit.graph.types import Graph
from hetsplit.plan.tasks import TaskGraph

DRIVER = "driver"             # the process that feeds the workers and collects the outputs


def runs_here(cluster: Cluster) -> bool:
    """Whether every device of ``cluster`` is one of this machine's ``local`` cores (a plan on it runs
    here, a worker process per device)."""
    from hetsplit.costs.local_calibration import MODEL as LOCAL_MODEL

    return all(cluster.representative(t).model == LOCAL_MODEL for t in cluster.types)


def workers_problem(graph: Graph, profile: Profile, devices: list[str],
                    link_latency_s: float | None = None, segment: SegmentCost | None = None) -> SplitProblem:
    """The SplitProblem of ``graph`` on ``devices`` as local-cpu worker processes, costs from ``profile``
    (links: the loopback link, at ``link_latency_s`` when given, its message ends costing the workers
    nothing there: the ``here`` fidelity charges every process's ends itself, the driver's included; what a
    segment costs a worker: ``segment`` when given, e.g. the runtime's calibration, in place of the
    profile's)."""
    from hetsplit.costs import build_problem
    from hetsplit.costs.profiler import LOCAL_CPU

    if LOCAL_CPU not in profile.costs.types:
        raise HetsplitError(f"the profile has no {LOCAL_CPU!r} costs (it has {profile.costs.types}); measure one "
                            f"here with: hetsplit profile {graph.name} --threads 1")
    if list(profile.costs.layer_names) != list(graph.names):
        raise HetsplitError(f"the profile's layers are not those of {graph.name!r} (first difference at "
                            f"{_first_diff(profile.costs.layer_names, graph.names)!r}); profile this model")
    costs = profile.costs.select([LOCAL_CPU])
    if segment is not None:
        costs = replace(costs, segment={LOCAL_CPU: segment})
    return build_problem(graph, local_cluster(devices, link_latency_s=link_latency_s, message_cpu=(0.0, 0.0)), costs)


def _first_diff(a: list[str], b: list[str]) -> str:
    for x, y in zip(a, b):
        if x != y:
            return x
    return "(one list is longer)"


def planned_profile(problem: SplitProblem) -> Profile:
    """The costs of ``problem`` (on this machine's ``local`` cluster) as a local-cpu profile, with the
    local calibration's alone-vs-co-loaded factor when those costs are the calibration's."""
    from hetsplit.costs.local_calibration import local_costs

    if not runs_here(problem.cluster):
        raise HetsplitError(f"cluster {problem.cluster.name!r} is not this machine's: cost its plans for the "
                            "processes here with a local-cpu profile (hetsplit profile MODEL --threads 1)")
    cal = local_costs().calibration
    calibrated = cal is not None and cal.source() in problem.costs.sources.values()
    source = "; ".join(dict.fromkeys(problem.costs.sources.values()))
    return Profile(problem.graph, problem.costs, {"source": source, "threads": 1,
                                                   "unloaded_factor": cal.unloaded_factor if calibrated and cal else 1.0})


def driver_message_sizes(tg: TaskGraph) -> list[tuple[str, float]]:
    """``(unit, bytes)`` of every message the driver sends or receives per input: each model input
    once to every unit that reads it, each model output once from the unit that makes it (as the
    runtime's layout does)."""
    from hetsplit.plan.tasks import SINK, SOURCE

    found: dict[tuple[Any, ...], tuple[str, float]] = {}
    names = tg.cluster.names
    for e in range(len(tg.edge_src)):
        p, q, pay = int(tg.edge_src[e]), int(tg.edge_dst[e]), int(tg.edge_payload[e])
        if p == SOURCE and q >= 0:
            found.setdefault(("in", pay, tg.tasks[q].device), (names[tg.tasks[q].device], float(tg.edge_bytes[e])))
        elif q == SINK and p >= 0:
            found.setdefault(("out", pay), (names[tg.tasks[p].device], float(tg.edge_bytes[e])))
    return list(found.values())


def message_ends(tg: TaskGraph) -> dict[str, list[float]]:
    """Per process (every unit and ``DRIVER``), the bytes of each message end it handles per input:
    both ends of every message between units and of every driver message."""
    names = tg.cluster.names
    ends: dict[str, list[float]] = {d: [] for d in [*names, DRIVER]}
    for m in tg.messages():
        ends[names[m.src]].append(m.nbytes)
        ends[names[m.dst]].append(m.nbytes)
    for unit, nbytes in driver_message_sizes(tg):
        ends[unit].append(nbytes)
        ends[DRIVER].append(nbytes)
    return ends


def ends_cpu(ends: dict[str, list[float]], runtime: RuntimeCosts) -> dict[str, float]:
    """The CPU of ``message_ends``' ends per process, per input."""
    return {proc: sum(runtime.end_cpu_s(proc == DRIVER, b) for b in nbytes) for proc, nbytes in ends.items()}
