"""What a reproduction says about each claim of its paper: one labelled type for every ``reproduce``.

Every claim carries one label (DESIGN.md, "A reproduction says what each claim is"; docs/claims.md):

- ``held-out``: ours compared with a paper result (a number, or a finding about a plan) no parameter
  was set from;
- ``derived``: a paper number ours computes from fitted figures (an EDP from a fitted latency and a
  fitted energy); it names them, and is counted apart from the held-out results;
- ``sanity``: a check of the model's definition (parameter counts, weight bytes), not a result;
- ``fitted``: a parameter was set from this figure; it names the parameters and proves nothing;
- ``direction``: a trend the paper states with no number (more chips, less energy; LBLP ahead of WB);
- ``inconclusive``: too few evaluations or runs to decide, or a quantity the set-up cannot produce;
  it says how many it had (and wanted) and why.

Held-out, derived, sanity and direction claims get a verdict (holds, partly, does not hold). A paper
states its ``Band`` once: a number holds when ours is within it of the paper's. ``ClaimSet`` holds a
paper's claims and counts them, held-out results first ("held-out results: 5 of 8 hold; derived: 1 of
1 hold; sanity: 0 of 0 hold; fitted: 4; direction: 2 of 3 hold; inconclusive: 1"); ``to_dict`` is the
``claims.json`` every ``reproduce`` writes (``FORMAT``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

FORMAT = "hetsplit.claims/1"
HELD_OUT, DERIVED, SANITY = "held-out", "derived", "sanity"
FITTED, DIRECTION, INCONCLUSIVE = "fitted", "direction", "inconclusive"
LABELS = (HELD_OUT, DERIVED, SANITY, FITTED, DIRECTION, INCONCLUSIVE)   # the order the counts are given in
JUDGED = (HELD_OUT, DERIVED, SANITY, DIRECTION)                          # the labels that carry a verdict
HOLDS, PARTLY, FAILS = "holds", "partly", "does not hold"
VERDICTS = (HOLDS, PARTLY, FAILS)


@dataclass(frozen=True)
class Band:
    """A number holds when ours / paper is within ``1 +- rel``; stated once per paper."""

    rel: float

    def __post_init__(self) -> None:
        if not 0 < self.rel < 1:
            raise ValueError(f"a band is a relative tolerance in (0, 1), got {self.rel}")

    def within(self, ours: float, paper: float) -> bool:
        return 1 - self.rel <= ours / paper <= 1 + self.rel

    def at_least(self, ours: float, bound: float) -> bool:
        """For a paper's "more than ``bound``": ours reaches the bound less the band."""
        return ours >= bound * (1 - self.rel)

    def at_most(self, ours: float, bound: float) -> bool:
        """For a paper's "at most ``bound``": ours stays below the bound plus the band."""
        return ours <= bound * (1 + self.rel)

    def text(self) -> str:
        return f"±{100 * self.rel:g}%"


def grade(passed: int, total: int) -> str:
    """holds: all sub-checks pass; partly: at least half; does not hold: fewer (or none run)."""
    if total and passed == total:
        return HOLDS
    return PARTLY if total and 2 * passed >= total else FAILS


@dataclass(frozen=True)
class Claim:
    """One claim of a paper and what this reproduction says of it (see the module docstring)."""

    key: str
    claim: str
    label: str
    verdict: str                       # holds / partly / does not hold; the label for fitted and inconclusive
    evidence: str
    where: str = ""                    # where the paper says it
    paper: float | None = None
    ours: float | None = None
    unit: str = ""
    fitted_params: tuple[str, ...] = ()
    evaluations: int | None = None     # evaluations or runs behind it (inconclusive: how many it had)
    needed: int | None = None          # how many a verdict needs (inconclusive)
    reason: str = ""                   # why it does not hold: which assumption of the model
    derived_from: tuple[str, ...] = ()  # derived: the fitted figures (claim keys) it is computed from

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"claim {self.key!r}: label {self.label!r} is not one of {LABELS}")
        judged = self.label in JUDGED
        if judged and self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.key!r}: a {self.label} claim needs a verdict in {VERDICTS}")
        if not judged and self.verdict != self.label:
            raise ValueError(f"claim {self.key!r}: a {self.label} claim has no verdict of its own")
        if self.label == FITTED and not self.fitted_params:
            raise ValueError(f"claim {self.key!r}: a fitted claim names the parameters set from it")
        if self.label == INCONCLUSIVE and self.evaluations is None:
            raise ValueError(f"claim {self.key!r}: an inconclusive claim says how many evaluations it had")
        if self.label == DERIVED and not self.derived_from:
            raise ValueError(f"claim {self.key!r}: a derived claim names the fitted figures it is computed from")

    @property
    def holds(self) -> bool:
        return self.verdict == HOLDS

    @property
    def ratio(self) -> float | None:
        return None if self.ours is None or not self.paper else self.ours / self.paper

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "claim": self.claim, "label": self.label, "verdict": self.verdict,
                "evidence": self.evidence, "where": self.where, "paper": self.paper, "ours": self.ours,
                "unit": self.unit, "ratio": self.ratio, "fitted_params": list(self.fitted_params),
                "evaluations": self.evaluations, "needed": self.needed, "reason": self.reason,
                "derived_from": list(self.derived_from)}


def held_out(key: str, claim: str, ok: bool | str, evidence: str, **kw: Any) -> Claim:
    """A held-out claim; ``ok``: a verdict, or True / False for holds / does not hold."""
    return Claim(key, claim, HELD_OUT, _verdict(ok), evidence, **kw)


def number(label: str, key: str, claim: str, paper: float, ours: float, band: Band, evidence: str,
           reason: str = "", **kw: Any) -> Claim:
    """A paper figure against ours under ``label``: holds within ``band``; ``reason`` is kept only when it misses."""
    ok = band.within(ours, paper)
    return Claim(key, claim, label, _verdict(ok), evidence, paper=paper, ours=ours, reason="" if ok else reason, **kw)


def bound(label: str, key: str, claim: str, limit: float, ours: float, band: Band, evidence: str,
          at_most: bool = False, reason: str = "", **kw: Any) -> Claim:
    """A paper's "more than ``limit``" (or, ``at_most``, "at most ``limit``") against ours, with ``band``."""
    ok = band.at_most(ours, limit) if at_most else band.at_least(ours, limit)
    return Claim(key, claim, label, _verdict(ok), evidence, paper=limit, ours=ours, reason="" if ok else reason, **kw)


def held_out_number(key: str, claim: str, paper: float, ours: float, band: Band, evidence: str,
                    reason: str = "", **kw: Any) -> Claim:
    """A held-out paper figure against ours (``number``)."""
    return number(HELD_OUT, key, claim, paper, ours, band, evidence, reason, **kw)


def held_out_bound(key: str, claim: str, limit: float, ours: float, band: Band, evidence: str, at_most: bool = False,
                   reason: str = "", **kw: Any) -> Claim:
    """A held-out "more than" / "at most" figure against ours (``bound``)."""
    return bound(HELD_OUT, key, claim, limit, ours, band, evidence, at_most, reason, **kw)


def derived_number(key: str, claim: str, paper: float, ours: float, band: Band, evidence: str,
                   derived_from: Iterable[str], reason: str = "", **kw: Any) -> Claim:
    """A paper figure ours computes from fitted figures (``derived_from``), graded like a number, counted apart."""
    return number(DERIVED, key, claim, paper, ours, band, evidence, reason, derived_from=tuple(derived_from), **kw)


def sanity_number(key: str, claim: str, paper: float, ours: float, band: Band, evidence: str, reason: str = "",
                  **kw: Any) -> Claim:
    """A model-definition figure (parameters, weight bytes) against the paper's: a check of the set-up, not a result."""
    return number(SANITY, key, claim, paper, ours, band, evidence, reason, **kw)


def direction(key: str, claim: str, ok: bool | str, evidence: str, reason: str = "", **kw: Any) -> Claim:
    """A trend with no number; ``reason`` (which assumption reverses it) is kept only when it fails."""
    verdict = _verdict(ok)
    return Claim(key, claim, DIRECTION, verdict, evidence, reason="" if verdict == HOLDS else reason, **kw)


def fitted(key: str, claim: str, params: Iterable[str], evidence: str, **kw: Any) -> Claim:
    """A figure some parameters were set from (it proves nothing)."""
    return Claim(key, claim, FITTED, FITTED, evidence, fitted_params=tuple(params), **kw)


def inconclusive(key: str, claim: str, evaluations: int, evidence: str, needed: int | None = None,
                 **kw: Any) -> Claim:
    """Too few evaluations or runs to decide: ``evaluations`` it had, ``needed`` for a verdict."""
    return Claim(key, claim, INCONCLUSIVE, INCONCLUSIVE, evidence, evaluations=evaluations, needed=needed, **kw)


def _verdict(ok: bool | str) -> str:
    if isinstance(ok, str):
        return ok
    return HOLDS if ok else FAILS


@dataclass(frozen=True)
class ClaimSet:
    """A paper's claims as one reproduction checked them, and its band (None: it compares no number)."""

    paper: str
    claims: tuple[Claim, ...]
    band: Band | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        keys = [c.key for c in self.claims]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{self.paper}: claim keys repeat: {sorted(k for k in keys if keys.count(k) > 1)}")

    def of(self, label: str) -> list[Claim]:
        return [c for c in self.claims if c.label == label]

    def get(self, key: str) -> Claim:
        return next(c for c in self.claims if c.key == key)

    def summary(self) -> str:
        """Every label's count in ``LABELS`` order, held-out results first, zeros included: "held-out results: 5
        of 8 hold; derived: 1 of 1 hold; sanity: 0 of 0 hold; fitted: 4; direction: 2 of 3 hold; inconclusive: 1"."""
        parts = []
        for label in LABELS:
            cs = self.of(label)
            name = "held-out results" if label == HELD_OUT else label
            parts.append(f"{name}: {sum(c.holds for c in cs)} of {len(cs)} hold" if label in JUDGED
                         else f"{name}: {len(cs)}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The ``claims.json`` document (``FORMAT``; docs/claims.md)."""
        counts = {label: len(self.of(label)) for label in LABELS}
        holding = {label: sum(c.holds for c in self.of(label)) for label in JUDGED}
        return {"format": FORMAT, "paper": self.paper, "summary": self.summary(),
                "band": None if self.band is None else self.band.rel, "counts": counts, "hold": holding,
                "notes": list(self.notes), "claims": [c.to_dict() for c in self.claims]}
