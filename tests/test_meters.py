"""Energy meters: RAPL on a fake powercap tree, wrap-around, and clean "unavailable" states."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsplit.costs.meters import NvmlMeter, RaplMeter, UnavailableMeter, describe, meter_for


def fake_rapl(root: Path, packages: dict[str, int], max_range: int = 2**32) -> Path:
    for name, value in packages.items():
        d = root / name
        d.mkdir(parents=True)
        (d / "energy_uj").write_text(f"{value}\n")
        (d / "max_energy_range_uj").write_text(f"{max_range}\n")
        (d / "name").write_text("package-" + name.split(":")[1] + "\n" if name.count(":") == 1 else "core\n")
    return root


def set_energy(root: Path, name: str, value: int) -> None:
    (root / name / "energy_uj").write_text(f"{value}\n")


def test_rapl_sums_packages_and_skips_subdomains(tmp_path):
    root = fake_rapl(tmp_path, {"intel-rapl:0": 1_000_000, "intel-rapl:1": 5_000_000, "intel-rapl:0:0": 7})
    meter = RaplMeter(root)
    assert meter.available and meter.reason == ""
    assert meter.domain_names() == ["package-0", "package-1"]
    meter.start()
    set_energy(root, "intel-rapl:0", 3_500_000)    # +2.5 J
    set_energy(root, "intel-rapl:1", 5_250_000)    # +0.25 J
    set_energy(root, "intel-rapl:0:0", 10**9)      # a sub-domain: already inside package 0
    assert meter.stop() == pytest.approx(2.75)


def test_rapl_counter_wraps_around(tmp_path):
    root = fake_rapl(tmp_path, {"intel-rapl:0": 999_000}, max_range=1_000_000)
    meter = RaplMeter(root)
    meter.start()
    set_energy(root, "intel-rapl:0", 1_000)         # wrapped: 1_000 J range... 1000 + 1e6 - 999000 uJ
    assert meter.stop() == pytest.approx(2_000e-6)


def test_rapl_unavailable_without_tree_or_domains(tmp_path):
    missing = RaplMeter(tmp_path / "nope")
    assert not missing.available and "no powercap tree" in missing.reason
    missing.start()
    assert missing.stop() is None
    (tmp_path / "empty").mkdir()
    empty = RaplMeter(tmp_path / "empty")
    assert not empty.available and "no intel-rapl" in empty.reason
    assert "unavailable" in describe(empty)


def test_rapl_unreadable_counter(tmp_path):
    root = fake_rapl(tmp_path, {"intel-rapl:0": 1})
    (root / "intel-rapl:0" / "energy_uj").write_text("not a number")
    garbled = RaplMeter(root)
    assert not garbled.available and "intel-rapl:0/energy_uj" in garbled.reason
    (root / "intel-rapl:0" / "energy_uj").unlink()
    (root / "intel-rapl:0" / "energy_uj").mkdir()    # reading a directory: OSError -> unavailable
    meter = RaplMeter(root)
    assert not meter.available and "cannot read" in meter.reason


def test_nvml_and_other_kinds_report_unavailable_cleanly():
    meter = NvmlMeter()
    if not meter.available:                          # this machine: no pynvml or no NVIDIA driver
        assert meter.reason
        meter.start()
        assert meter.stop() is None
    other = meter_for("cim")
    assert isinstance(other, UnavailableMeter) and other.stop() is None
    assert "cim" in other.describe()
    assert meter_for("cpu").name == "rapl"
