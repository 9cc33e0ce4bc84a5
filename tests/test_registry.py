"""The one registry helper behind device models, partitioners and fidelities."""

from __future__ import annotations

import pytest

from hetsplit.costs.models.base import MODELS
from hetsplit.errors import ClusterError, HetsplitError
from hetsplit.estimate.fidelity import FIDELITIES
from hetsplit.registry import Registry
from hetsplit.search.base import PARTITIONERS


def test_builtins_load_on_first_lookup():
    reg: Registry[type] = Registry("thing", "hetsplit.units")   # a module that registers nothing
    assert reg.names() == []
    assert reg.get("x") is None
    reg.register("x")(int)
    assert reg.names() == ["x"] and reg.lookup("x") is int


def test_unknown_name_names_the_known_ones():
    reg: Registry[type] = Registry("widget", "hetsplit.units")
    reg.register("b")(int)
    reg.register("a")(float)
    with pytest.raises(ClusterError, match=r"device 'd': unknown widget 'c'; available: a, b"):
        reg.lookup("c", ClusterError, "device 'd'")
    with pytest.raises(HetsplitError, match="unknown widget 'c'"):
        reg.lookup("c")


def test_the_three_registries_share_it():
    for reg, builtin in ((MODELS, "roofline"), (PARTITIONERS, "exact"), (FIDELITIES, "here")):
        assert isinstance(reg, Registry)
        assert builtin in reg.names()
