"""Mutation checks of a reproduction's claims: every judged check holds on a base input and turns when its
input is moved past its band, so a check that cannot fail (or one made constant) fails the test."""

from __future__ import annotations

import copy
from typing import Any, Callable

from hetsplit.experiments.claims import HOLDS, JUDGED, ClaimSet

Mutation = Callable[[Any], None]     # edits a deep copy of the base input in place


def assert_every_check_turns(build: Callable[[Any], ClaimSet], base: Any, mutations: dict[str, list[Mutation]]) -> None:
    """``build(base)`` holds every judged claim, each has at least one mutation, and every mutation of a claim's
    input turns that claim's verdict away from "holds" (the other claims are free to move too)."""
    cs = build(base)
    judged = {c.key: c for c in cs.claims if c.label in JUDGED}
    assert judged, "no judged claim to mutate"
    not_holding = {k: c.verdict for k, c in judged.items() if c.verdict != HOLDS}
    assert not not_holding, f"the base input must hold every check: {not_holding}"
    missing = sorted(set(judged) - set(mutations))
    assert not missing, f"checks with no mutation (each check needs one): {missing}"
    unknown = sorted(set(mutations) - set(judged))
    assert not unknown, f"mutations for checks the set does not judge: {unknown}"
    for key, muts in mutations.items():
        assert muts, key
        for i, mutate in enumerate(muts):
            moved = copy.deepcopy(base)
            mutate(moved)
            after = build(moved).get(key)
            assert after.verdict != HOLDS, f"{key}: mutation {i} left the verdict at holds ({after.evidence})"


def constant(build: Callable[[Any], ClaimSet], key: str) -> Callable[[Any], ClaimSet]:
    """``build`` with claim ``key`` made constant (its verdict on the base input, whatever the input): what the
    mutation check must catch."""
    frozen: dict[str, Any] = {}

    def built(results: Any) -> ClaimSet:
        cs = build(results)
        frozen.setdefault(key, cs.get(key))
        return ClaimSet(cs.paper, tuple(frozen[key] if c.key == key else c for c in cs.claims), cs.band, cs.notes)

    return built
