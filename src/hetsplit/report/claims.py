"""The labelled claims of a reproduction as markdown and as ``claims.json`` (every ``reproduce`` writes them
alike); computes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from hetsplit.experiments.claims import DERIVED, FITTED, INCONCLUSIVE, Claim, ClaimSet
from hetsplit.jsonfile import json_safe
from hetsplit.outpath import write_text


def _num(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value:.4g} {unit}".strip()


def _what(c: Claim) -> str:
    """The label, with what it names: the fitted parameters, or the evaluations an inconclusive one had."""
    if c.label == FITTED:
        return f"fitted ({', '.join(c.fitted_params)})"
    if c.label == DERIVED:
        return f"derived (from {', '.join(c.derived_from)})"
    if c.label == INCONCLUSIVE:
        return f"inconclusive ({c.evaluations}" + (f" of {c.needed} needed)" if c.needed else " evaluations)")
    return c.label


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def claims_header(cs: ClaimSet) -> list[str]:
    """The counts first, then the band (once), then the set's notes."""
    lines = [f"**{cs.summary()}**", ""]
    if cs.band is not None:
        lines += [f"Band: a number holds when ours is within {cs.band.text()} of the paper's (one band for every "
                  "figure of this paper)." + (" Fitted claims are shown beside the paper for completeness: a parameter "
                                              "was set from them, so they prove nothing." if cs.of(FITTED) else ""), ""]
    lines += [f"- {n}" for n in cs.notes]
    return lines + ([""] if cs.notes else [])


def claims_table(cs: ClaimSet) -> list[str]:
    """One row per claim: label, verdict, paper beside ours, evidence and (when it fails) the reason."""
    lines = ["| claim | label | verdict | paper | ours | evidence | reason when not |", "|---|---|---|---|---|---|---|"]
    for c in cs.claims:
        where = f" ({c.where})" if c.where else ""
        lines.append(f"| {_cell(c.claim + where)} | {_what(c)} | {c.verdict} | {_num(c.paper, c.unit)} | "
                     f"{_num(c.ours, c.unit)} | {_cell(c.evidence)} | {_cell(c.reason)} |")
    return lines


def claims_section(cs: ClaimSet, title: str = "## Claims") -> list[str]:
    return [title, "", *claims_header(cs), *claims_table(cs)]


def console_lines(cs: ClaimSet) -> list[str]:
    """What ``hetsplit reproduce`` prints: the counts, then one line per claim and its evidence."""
    out = [cs.summary() + (f" (band {cs.band.text()})" if cs.band is not None else "")]
    for c in cs.claims:
        out.append(f"- [{_what(c)}: {c.verdict}] {c.claim}" if c.label not in (FITTED, INCONCLUSIVE)
                   else f"- [{_what(c)}] {c.claim}")
        out.append(f"    {c.evidence}" + (f" — {c.reason}" if c.reason else ""))
    return out


def write_claims_json(out: Path, cs: ClaimSet) -> Path:
    """``out``/claims.json: ``cs.to_dict()`` (format ``hetsplit.claims/1``, docs/claims.md), NaN as null."""
    path = out / "claims.json"
    write_text(path, json.dumps(json_safe(cs.to_dict()), indent=1) + "\n")
    return path
