"""The one error hierarchy of hetsplit: every message says what, where and what to do."""

from __future__ import annotations


class HetsplitError(Exception):
    """Base of every error hetsplit raises on purpose (the CLI prints it and exits 2)."""


class UnitError(HetsplitError):
    """A quantity string that cannot be parsed ("64GB/s", "6.5pJ/b", ...)."""


class ModelError(HetsplitError):
    """A malformed or unsupported model (names the node and the problem)."""


class ClusterError(HetsplitError):
    """An invalid cluster description (names the file, the key and the fix)."""


class ProfileError(HetsplitError):
    """An invalid profile file."""


class PlanError(HetsplitError):
    """An invalid plan: layers not partitioned, unknown device, wrong model."""


class InfeasibleError(HetsplitError):
    """No plan satisfies the constraints (names the layer or device that cannot fit)."""


class UsageError(HetsplitError):
    """An option or request value out of range (names the option, the value and what is allowed)."""


class OutputError(HetsplitError):
    """An output path that cannot be written (names the path and why)."""


class RuntimeFailure(HetsplitError):
    """A distributed run failed: dead worker, stalled link, mismatched sub-model. ``device``: the device
    the failure is blamed on, where one is (what a run that recovers leaves out)."""

    def __init__(self, message: str, device: str | None = None) -> None:
        super().__init__(message)
        self.device = device
