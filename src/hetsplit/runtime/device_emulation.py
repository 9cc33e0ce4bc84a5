"""Which CPU share each worker gets so one machine rehearses a heterogeneous cluster (``--emulate-devices``).

A device ``d`` runs its layers ``S_d`` (a pipeline stage, or the union of a mapping's layers and shards
on it). Its worker here runs them on one thread of this machine in ``h(S_d)`` seconds (the host's costs),
while the plan's device takes ``t_d(S_d)`` (the plan's costs). Throttled to the share
``s_d = h(S_d) / (D x t_d(S_d))`` of one core, the worker takes ``t_d(S_d) x D``: every device runs at its
modelled speed, all of them slowed by one time dilation ``D`` (emulated time = measured time / D).
``D`` is the smallest >= 1 for which every share is at most one core and the shares together leave
half a core for the driver (``sum s_d <= cores - 0.5``).

The assumption: a scalar throttle per worker reproduces the total time of its layers, not each layer's
(a device fast at convolutions and slow at matrix products keeps this machine's mix within its stage).
Devices without layers (or with no host cost) are not throttled. ``plan_emulation`` works the times out
from a plan's costs; ``emulation_of`` takes them per device from any other program (the LLM pipeline's
stages, ``workflow.generate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import UsageError
from hetsplit.runtime.cpu_throttle import PERIOD_US, CpuThrottle
from hetsplit.runtime.report import DeviceShaping
from hetsplit.plan.types import Plan

DRIVER_CORES = 0.5   # left to the driver (it feeds inputs and collects outputs)


@dataclass(frozen=True)
class DeviceEmulation:
    """CPU share of one core per device name (0 < s <= 1), the time dilation ``D >= 1`` (emulated time =
    measured / D), and where the host's costs came from."""

    shares: dict[str, float]
    dilation: float
    host: str = ""

    def __post_init__(self) -> None:
        if not self.dilation >= 1.0:
            raise UsageError(f"device emulation: dilation {self.dilation} must be >= 1 (emulated time = measured / D)")
        for dev, s in self.shares.items():
            if not 0.0 < s <= 1.0:
                raise UsageError(f"device emulation: {dev}'s CPU share {s} must be in (0, 1] (of one core)")

    def throttle(self, ranks: Mapping[int, str], period_us: int = PERIOD_US) -> CpuThrottle:
        """The CPU throttle of the ranks given (rank -> the device it runs as) at their devices' shares; a
        device without a share, or at a whole core, is not throttled: a quota of the whole period still
        counts every thread of the process against one core, and a one-stage SmolLM2 generation ran 1.55x
        slower in one than without. ``period_us``: the CFS period (``cpu_throttle.quota_for``)."""
        return CpuThrottle({r: self.shares[d] for r, d in ranks.items() if self.shares.get(d, 1.0) < 1.0}, period_us)

    def describe(self, throttle: CpuThrottle | None) -> DeviceShaping:
        """How this emulation shaped a run's devices: with ``throttle``'s cgroups, or paced by the workers
        themselves (None: ``runtime.pacing``)."""
        if throttle is None:
            return DeviceShaping(self.dilation, dict(self.shares), self.host, paced=True)
        return DeviceShaping(self.dilation, dict(self.shares), self.host, throttle.controller.version,
                             throttle.period_us, throttle.groups())


def device_times(plan: Plan, problem: SplitProblem, host_problem: SplitProblem) -> dict[str, tuple[float, float]]:
    """Per device of ``plan`` that runs something: (time on the plan's device, time on the host) of its
    tasks, both the ``closed`` fidelity's compute per device: on ``problem``, and on the plan's devices
    each made the host's one-thread worker (``host_workers``)."""
    from hetsplit.estimate import estimate

    if host_problem.graph.names != problem.graph.names:
        raise UsageError("device emulation: the host's costs are of another model than the plan's problem")
    own = estimate(problem, [plan], "closed")
    host = host_workers(host_problem, plan.devices)
    on_host = estimate(host, [plan], "closed")
    return {dev: (float(own.compute_s_per_device[0, problem.cluster.index(dev)]),
                  float(on_host.compute_s_per_device[0, host.cluster.index(dev)])) for dev in plan.devices}


def host_workers(host_problem: SplitProblem, devices: list[str]) -> SplitProblem:
    """``devices``, each a copy of the host's one worker (its device model, its costs), joined by free links."""
    from dataclasses import replace

    from hetsplit.cluster.types import Cluster, Medium, uniform_links

    worker = host_problem.cluster.representative(host_problem.cluster.types[0])
    links = uniform_links(len(devices), Medium("free", np.inf))
    cluster = Cluster(f"{host_problem.cluster.name} as {len(devices)} workers",
                      [replace(worker, name=d, group=None, host=None) for d in devices], *links)
    return SplitProblem(host_problem.graph, cluster, host_problem.costs)


def plan_emulation(plan: Plan, problem: SplitProblem, host_problem: SplitProblem, cores: int) -> DeviceEmulation:
    """The shares and dilation that run ``plan`` (costed by ``problem``) on ``cores`` cores of the host
    whose one-thread worker ``host_problem`` costs; see the module doc."""
    host_type = host_problem.cluster.types[0]
    source = host_problem.costs.sources.get(host_type, "")
    host = f"{host_problem.cluster.name} {host_type}" + (f" ({source})" if source else "")
    return emulation_of(device_times(plan, problem, host_problem), cores, host)


def emulation_of(times: Mapping[str, tuple[float, float]], cores: float, host: str = "") -> DeviceEmulation:
    """The shares and dilation for devices whose work takes (seconds on the device, seconds on the host's
    one-thread worker) each, on ``cores`` cores of the host (``host``: where its costs came from)."""
    ratio: dict[str, float] = {}
    for dev, (t, h) in times.items():
        if h <= 0:
            continue                     # nothing to slow down
        if not (np.isfinite(t) and t > 0 and np.isfinite(h)):
            raise UsageError(f"device emulation: device {dev} has no finite time > 0 for its layers "
                             f"(plan's costs {t:g} s, host's {h:g} s)")
        ratio[dev] = h / t
    budget = max(cores - DRIVER_CORES, 1e-9)
    dilation = max([1.0, *ratio.values(), sum(ratio.values()) / budget])
    shares = {dev: min(1.0, r / dilation) for dev, r in ratio.items()}
    return DeviceEmulation(shares, float(dilation), host)
