"""The labelled claim every reproduction returns: labels are checked, counts lead, a band is one number."""

from __future__ import annotations

import json

import pytest

from hetsplit.experiments.claims import (Band, Claim, ClaimSet, derived_number, direction, fitted, grade, held_out,
                                         held_out_bound, held_out_number, inconclusive, sanity_number)
from hetsplit.report.claims import claims_header, claims_table, console_lines, write_claims_json


def test_a_held_out_number_holds_within_the_band_only():
    band = Band(0.25)
    assert held_out_number("a", "x", 10.0, 12.5, band, "e").verdict == "holds"
    miss = held_out_number("b", "x", 10.0, 12.6, band, "e", reason="why")
    assert miss.verdict == "does not hold" and miss.reason == "why" and miss.ratio == pytest.approx(1.26)
    assert held_out_number("c", "x", 10.0, 10.0, band, "e", reason="why").reason == ""   # holds: no reason kept
    assert band.at_least(1.9, 2.0) and not band.at_least(1.4, 2.0)
    assert band.at_most(0.07, 0.06) and not band.at_most(0.08, 0.06)
    assert held_out_bound("d", "more than 2x", 2.0, 1.4, band, "e", reason="r").verdict == "does not hold"
    assert held_out_bound("e", "at most 6%", 0.06, 0.01, band, "e", at_most=True).verdict == "holds"


def test_labels_say_what_they_must():
    with pytest.raises(ValueError, match="names the parameters"):
        Claim("k", "x", "fitted", "fitted", "e")
    with pytest.raises(ValueError, match="says how many"):
        Claim("k", "x", "inconclusive", "inconclusive", "e")
    with pytest.raises(ValueError, match="not one of"):
        Claim("k", "x", "reproduced", "holds", "e")
    with pytest.raises(ValueError, match="needs a verdict"):
        Claim("k", "x", "held-out", "fitted", "e")
    with pytest.raises(ValueError, match="no verdict of its own"):
        Claim("k", "x", "fitted", "holds", "e", fitted_params=("p",))
    with pytest.raises(ValueError, match="names the fitted figures"):
        Claim("k", "x", "derived", "holds", "e")
    with pytest.raises(ValueError, match="needs a verdict"):
        Claim("k", "x", "sanity", "sanity", "e")
    with pytest.raises(ValueError, match="repeat"):
        ClaimSet("p", (direction("k", "x", True, "e"), direction("k", "y", True, "e")))
    with pytest.raises(ValueError):
        Band(1.5)


def test_the_summary_counts_each_label_and_leads_the_markdown(tmp_path):
    cs = ClaimSet("paper", (held_out("a", "x", True, "e"), held_out("b", "x", "partly", "e"),
                            held_out_number("c", "x", 1.0, 3.0, Band(0.1), "e"), direction("d", "x", False, "e", "r"),
                            fitted("f", "x", ("p1", "p2"), "e"), inconclusive("i", "x", 3, "e", needed=100),
                            derived_number("g", "x", 27.2, 27.0, Band(0.1), "e", ("f",)),
                            sanity_number("s", "x", 60.8, 61.1, Band(0.1), "e"),
                            sanity_number("t", "x", 238, 300, Band(0.1), "e", reason="not the same export")),
                  Band(0.1), ("a note",))
    assert cs.summary() == ("held-out results: 1 of 3 hold; derived: 1 of 1 hold; sanity: 1 of 2 hold; fitted: 1; "
                            "direction: 0 of 1 hold; inconclusive: 1")
    assert ClaimSet("empty", ()).summary() == ("held-out results: 0 of 0 hold; derived: 0 of 0 hold; sanity: 0 of 0 "
                                               "hold; fitted: 0; direction: 0 of 0 hold; inconclusive: 0")
    assert grade(3, 3) == "holds" and grade(2, 4) == "partly" and grade(1, 4) == "does not hold" \
        and grade(0, 0) == "does not hold"
    head = claims_header(cs)
    assert head[0] == f"**{cs.summary()}**" and sum("±10%" in line for line in head) == 1
    table = "\n".join(claims_table(cs))
    assert "fitted (p1, p2)" in table and "inconclusive (3 of 100 needed)" in table and "derived (from f)" in table
    assert console_lines(cs)[0].startswith(cs.summary())
    d = cs.to_dict()
    assert d["format"] == "hetsplit.claims/1"
    assert d["counts"] == {"held-out": 3, "derived": 1, "sanity": 2, "fitted": 1, "direction": 1, "inconclusive": 1}
    assert d["hold"] == {"held-out": 1, "derived": 1, "sanity": 1, "direction": 0}
    assert d["claims"][4]["fitted_params"] == ["p1", "p2"] and d["claims"][6]["derived_from"] == ["f"]
    assert json.loads(write_claims_json(tmp_path, cs).read_text()) == json.loads(json.dumps(d))
