"""What every partitioner shares: one call shape, so they can be swapped and compared.

A partitioner is a class registered under an algorithm name with ``@register_partitioner``. It
is built from typed options and called as ``solve(problem) -> list[Plan]``; plans come back with
their metrics from the one evaluator (``hetsplit.estimate.evaluate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.plan.types import Plan
from hetsplit.registry import Registry


@dataclass(frozen=True)
class PipelineConstraints:
    """Constraints every pipeline partitioner honours.

    first_stage_devices: device names allowed to run the first stage (DONNA's edge experiment
      forces the first layer onto an edge device); None allows any.
    last_stage_devices: device names allowed to run the last stage; None allows any.
    enforce_memory: drop stages that do not fit their device's memory.
    max_stages: at most this many stages (None: up to the number of devices).
    """

    first_stage_devices: tuple[str, ...] | None = None
    enforce_memory: bool = True
    max_stages: int | None = None
    last_stage_devices: tuple[str, ...] | None = None

    def first_stage_indices(self, problem: SplitProblem) -> list[int]:
        """Indices of the devices allowed to run the first stage."""
        return _indices(problem, self.first_stage_devices)

    def last_stage_indices(self, problem: SplitProblem) -> list[int]:
        """Indices of the devices allowed to run the last stage."""
        return _indices(problem, self.last_stage_devices)


def _indices(problem: SplitProblem, names: tuple[str, ...] | None) -> list[int]:
    """Device indices of ``names`` (every device when None); an unknown name raises ClusterError."""
    if names is None:
        return list(range(problem.num_devices))
    return [problem.cluster.index(n) for n in names]


class Partitioner(Protocol):
    """solve(problem) -> plans, each with metrics filled in."""

    name: str

    def solve(self, problem: SplitProblem) -> list[Plan]: ...


PartitionerFactory = Callable[..., Partitioner]
PARTITIONERS: Registry[PartitionerFactory] = Registry("algorithm", "hetsplit.search")  # the package registers its own
register_partitioner = PARTITIONERS.register
partitioner_names = PARTITIONERS.names


def partitioner_options(name: str) -> set[str]:
    """Names of the options the partitioner registered as ``name`` accepts."""
    import inspect

    factory = PARTITIONERS.get(name)
    return set(inspect.signature(factory).parameters) - {"name"} if factory else set()


def make_partitioner(name: str, **options: Any) -> Partitioner:
    """Build the partitioner registered as ``name`` with its typed options."""
    factory = PARTITIONERS.lookup(name)
    try:
        return factory(**options)
    except TypeError as exc:
        raise HetsplitError(f"algorithm {name!r}: bad options {sorted(options)} ({exc})") from None



@dataclass
class SolveStats:
    """What a solver reports about its own run (for benchmarks and --json)."""

    seconds: float = 0.0
    states: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
