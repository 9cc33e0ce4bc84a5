"""Unit parsing at the edges: bits vs bytes, prefixes, rates, detection by unit, bad units."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsplit.errors import UnitError
from hetsplit.units import (detect_quantity, format_bytes, format_quantity, kind_for_key, parse_param,
                            parse_quantity)


@pytest.mark.parametrize("text, kind, expected", [
    ("16GiB", "bytes", 16 * 2**30),
    ("8GB", "bytes", 8e9),
    ("256KiB", "bytes", 256 * 1024),
    ("1Gb", "bytes", 1.25e8),            # bits
    ("2Mib", "bytes", 2 * 2**20 / 8),    # binary bits
    ("64GB/s", "bandwidth", 64e9),
    ("1Gb/s", "bandwidth", 1.25e8),      # bits per second
    ("1Gbps", "bandwidth", 1.25e8),
    ("3.5MB/s", "bandwidth", 3.5e6),
    ("6.5pJ/b", "energy_per_byte", 6.5e-12 * 8),   # per bit -> per byte: x8
    ("100pJ/B", "energy_per_byte", 1e-10),
    ("0.1uJ/b", "energy_per_byte", 8e-7),
    ("0.1µJ/b", "energy_per_byte", 8e-7),
    ("50uJ/bit", "energy_per_byte", 4e-4),
    ("65W", "power", 65.0),
    ("13mW", "power", 0.013),
    ("10ns", "time", 1e-8),
    ("100us", "time", 1e-4),
    ("500MHz", "frequency", 5e8),
    ("45uJ", "energy", 4.5e-5),
    ("1.2e11/s", "rate", 1.2e11),
    ("15.5GMAC/s", "rate", 15.5e9),
    ("21.7TFLOP/s", "rate", 10.85e12),   # two FLOP per MAC
    ("21.7TFLOPS", "rate", 10.85e12),
    ("50%", "dimensionless", 0.5),
    (" 2.5 ms ", "time", 2.5e-3),
    (3, "bytes", 3.0),                   # plain numbers are SI
])
def test_parse_quantity(text, kind, expected):
    assert parse_quantity(text, kind) == pytest.approx(expected, rel=1e-12)


def test_prefix_noise_is_dropped():
    assert parse_quantity("100us", "time") == 1e-4
    assert parse_quantity("50uJ/b", "energy_per_byte") == 4e-4


@pytest.mark.parametrize("value, kind, fragment", [
    ("16GX", "bytes", "unknown unit 'GX'"),
    ("65V", "power", "unknown unit 'V'"),
    ("1GB", "bandwidth", "write it like 64GB/s"),     # an amount is not a rate
    ("6.5pJ", "energy_per_byte", "per bit"),           # missing /b
    ("fast", "bandwidth", "cannot read 'fast'"),
    ("-1GB/s", "bandwidth", "non-negative"),
    (True, "bytes", "expected a data size"),
    ([1], "time", "expected a time"),
])
def test_bad_units_name_the_place_and_the_fix(value, kind, fragment):
    with pytest.raises(UnitError) as exc:
        parse_quantity(value, kind, "cluster.yaml: devices[2].memory")
    msg = str(exc.value)
    assert msg.startswith("cluster.yaml: devices[2].memory: ")
    assert fragment in msg


def test_unknown_kind():
    with pytest.raises(UnitError, match="unknown quantity kind"):
        parse_quantity("1", "speed")


@pytest.mark.parametrize("text, value, kind", [
    ("64GB/s", 64e9, "bandwidth"), ("1Gb/s", 1.25e8, "bandwidth"), ("16GiB", 16 * 2**30, "bytes"),
    ("1Gb", 1.25e8, "bytes"), ("6.5pJ/b", 5.2e-11, "energy_per_byte"), ("65W", 65.0, "power"),
    ("10ns", 1e-8, "time"), ("5ms", 5e-3, "time"), ("500MHz", 5e8, "frequency"), ("45uJ", 4.5e-5, "energy"),
    ("1.2e11/s", 1.2e11, "rate"), ("0.5", 0.5, "dimensionless"), ("50%", 0.5, "dimensionless"),
])
def test_detect_quantity(text, value, kind):
    got, got_kind = detect_quantity(text)
    assert got_kind == kind
    assert got == pytest.approx(value)


def test_detect_quantity_rejects_unknown_unit():
    with pytest.raises(UnitError, match=r"p\.yaml: x: unit 'furlongs' .* fits no known kind"):
        detect_quantity("3furlongs", "p.yaml: x")


def test_kind_for_key():
    assert kind_for_key("peak_macs") == "rate"
    assert kind_for_key("l2_bytes") == "bytes"
    assert kind_for_key("clock_s") == "time"
    assert kind_for_key("l3_energy_per_byte") == "energy_per_byte"
    assert kind_for_key("core_w") == "power"
    assert kind_for_key("subarray_rows") is None


def test_parse_param_by_key_and_by_unit():
    assert parse_param("efficiency", {"conv": 0.5, "default": "30%"}) == {"conv": 0.5, "default": 0.3}
    assert parse_param("overhead_s", {"conv": "1us", "default": 0}) == {"conv": 1e-6, "default": 0.0}
    assert parse_param("l2_bytes", "2MiB") == 2 * 2**20
    assert parse_param("cache", "2MiB") == 2 * 2**20           # unknown key: the unit decides
    assert parse_param("mapping", "novel") == "novel"           # text stays text
    assert parse_param("novel_mapping", True) is True
    assert parse_param("sizes", ["1KiB", 2]) == [1024.0, 2.0]
    with pytest.raises(UnitError, match="f.yaml: params.peak_macs: unknown unit 'GB/s'"):
        parse_param("peak_macs", "1GB/s", "f.yaml: params.peak_macs")   # the key says rate
    with pytest.raises(UnitError, match="f.yaml: params.cache"):
        parse_param("cache", "16GX", "f.yaml: params.cache")            # a typo is not text


def test_format():
    assert format_quantity(6.4e10, "B/s") == "64 GB/s"
    assert format_quantity(float("nan"), "J") == "unknown"       # an unknown figure is not "nan J"
    assert format_bytes(8 * 2**30) == "8 GiB"
    assert format_bytes(100) == "100 B"


PREFIXES = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30}


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False), st.sampled_from(sorted(PREFIXES)),
       st.sampled_from(["B", "b", "bit"]))
def test_data_amount_property(number, prefix, base):
    expected = number * PREFIXES[prefix] * (1.0 if base == "B" else 1 / 8)
    got = parse_quantity(f"{number!r}{prefix}{base}", "bytes")
    assert math.isclose(got, expected, rel_tol=1e-12, abs_tol=1e-300)
    assert math.isclose(parse_quantity(f"{number!r}{prefix}{base}/s", "bandwidth"), got, rel_tol=1e-12)


@pytest.mark.parametrize("text, seconds", [("20m", 1200.0), ("90s", 90.0), ("1.5h", 5400.0), ("600", 600.0),
                                           (" 2 min ", 120.0)])
def test_durations(text, seconds):
    from hetsplit.units import parse_duration

    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5m", "20 parsecs", "", "m"])
def test_bad_durations_say_what_and_where(text):
    from hetsplit.units import parse_duration

    with pytest.raises(UnitError, match="--budget: cannot read"):
        parse_duration(text, "--budget")
