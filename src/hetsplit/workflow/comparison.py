"""A run set beside its prediction, as types: ``Row`` (one metric, predicted and measured) and ``Comparison``
(the rows, the notes, the run's ``RunReport`` and what was predicted). ``Comparison.to_dict`` is the
``hetsplit.run.comparison/1`` JSON (``hetsplit run --compare --out``; docs/architecture.md, Formats)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hetsplit.errors import HetsplitError
from hetsplit.plan.types import Metrics
from hetsplit.runtime.report import RunReport

if TYPE_CHECKING:
    from hetsplit.workflow.here import HereComparison

FORMAT = "hetsplit.run.comparison/1"
FIDELITIES = ("plan", "closed", "here")


@dataclass(frozen=True)
class Row:
    """One metric: predicted beside measured (None where there is no figure)."""

    metric: str
    predicted: float | None
    measured: float | None

    @property
    def ratio(self) -> float | None:
        """Measured / predicted; None without both, or with a predicted 0 or infinite."""
        p, m = self.predicted, self.measured
        return m / p if p and m is not None and math.isfinite(p) else None

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "predicted": self.predicted, "measured": self.measured, "ratio": self.ratio}

    @classmethod
    def from_dict(cls, doc: Any, where: str = "a row") -> "Row":
        if not isinstance(doc, dict) or not isinstance(doc.get("metric"), str):
            raise HetsplitError(f"{where}: a row of a run comparison is an object with a 'metric' name")
        return cls(doc["metric"], _number(doc.get("predicted"), where), _number(doc.get("measured"), where))


def _number(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise HetsplitError(f"{where}: predicted and measured are numbers or null, not {v!r}")
    return float(v)


@dataclass(frozen=True)
class Simulated:
    """The ``simulated`` fidelity's steady-state throughput and one input's latency over ``inputs`` inputs."""

    throughput: float
    latency_s: float
    inputs: int

    def to_dict(self) -> dict[str, Any]:
        return {"throughput": self.throughput, "latency_s": self.latency_s, "inputs": self.inputs}


@dataclass(frozen=True)
class Comparison:
    """A run (``report``) beside a prediction at one ``fidelity``: ``plan`` (the plan's own metrics),
    ``closed`` (re-costed from a profile, with the simulator's ``simulated``) or ``here`` (the processes that
    ran it: ``here`` holds that prediction and its measured figures). ``report`` is None only for a document
    read back that kept its rows alone; ``here`` is not read back (its figures stay in the JSON)."""

    report: RunReport | None
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    fidelity: str = "plan"
    predicted: Metrics | None = None
    simulated: Simulated | None = None
    here: "HereComparison | None" = None

    def row(self, metric: str) -> Row | None:
        return next((r for r in self.rows if r.metric == metric), None)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"format": FORMAT, "fidelity": self.fidelity, "rows": [r.to_dict() for r in self.rows],
                               "notes": list(self.notes),
                               "measured": self.report.to_dict() if self.report is not None else None}
        if self.predicted is not None:
            doc["predicted"] = self.predicted.to_dict()
        if self.simulated is not None:
            doc["simulated"] = self.simulated.to_dict()
        return {**self.here.to_dict(), **doc} if self.here is not None else doc

    @classmethod
    def from_dict(cls, doc: Any, where: str = "the run comparison") -> "Comparison":
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
            raise HetsplitError(f"{where}: 'rows' of a run comparison must be a list of objects")
        if doc.get("format", FORMAT) != FORMAT:
            raise HetsplitError(f"{where}: format {doc['format']!r} is not {FORMAT}")
        notes = doc.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise HetsplitError(f"{where}: 'notes' of a run comparison must be a list of strings")
        fidelity = doc.get("fidelity") or ("here" if "prediction" in doc else "closed" if doc.get("simulated")
                                           else "plan")
        if fidelity not in FIDELITIES:
            raise HetsplitError(f"{where}: fidelity {fidelity!r} is none of {', '.join(FIDELITIES)}")
        sim, predicted = doc.get("simulated"), doc.get("predicted")
        try:
            metrics = Metrics.from_dict(predicted) if isinstance(predicted, dict) and predicted else None
            simulated = Simulated(float(sim["throughput"]), float(sim["latency_s"]), int(sim.get("inputs", 0))) \
                if isinstance(sim, dict) else None
        except (TypeError, KeyError, ValueError) as exc:
            raise HetsplitError(f"{where}: its 'predicted' or 'simulated' figures are incomplete ({exc})") from None
        return cls(RunReport.from_dict(doc["measured"], f"{where}, measured") if doc.get("measured") else None,
                   [Row.from_dict(r, f"{where}, rows[{i}]") for i, r in enumerate(doc["rows"])], list(notes),
                   fidelity, metrics, simulated)
