"""Calibrations that can be trusted (costs.calibration_store): a busy machine's calibration is never
cached, a cached one is checked by a probe at use and measured again when the machine has changed.
Every measurement, probe and CPU counter here is a fake; the real probes and counters run once, for
their shape only."""

from __future__ import annotations

import json
import math

import pytest

from hetsplit.costs import calibration_store as cs
from hetsplit.costs import machine_load, machine_probe
from hetsplit.costs.machine_load import CpuClock, LoadWatch, others_share
from hetsplit.costs.machine_load import read_clock as real_read_clock
from hetsplit.costs.machine_probe import compute_probe_s as real_compute_probe
from hetsplit.costs.machine_probe import message_probe_s as real_message_probe


def busy_clock(share: float, cpus: int = 2):
    """Counters of a machine on which other processes use ``share`` of every CPU, one second a reading."""
    state = {"t": 0.0}

    def clock() -> CpuClock:
        state["t"] += 1.0
        t = state["t"]
        own = 0.25 * t                                  # this process's own CPU is not the others'
        return CpuClock(t, own + share * cpus * t, own, cpus)

    return clock


class Fake:
    """A calibration whose measurement returns ``value`` with ``spread``, and whose probe takes ``probe_s``."""

    def __init__(self, value: float = 2.0, spread: float = 0.0, probe_s: float = 1e-3):
        self.value, self.spread, self.probe_s = value, spread, probe_s
        self.measured = 0

    def recipe(self, key: dict | None = None) -> cs.Recipe[float]:
        def measure() -> tuple[float, float]:
            self.measured += 1
            return self.value, self.spread

        return cs.Recipe("fake-calibration", "fake/1", key or {"machine": "m"}, measure, lambda v: {"v": v},
                         lambda d: float(d["v"]), lambda: self.probe_s)


@pytest.fixture(autouse=True)
def _cache_here(monkeypatch, tmp_path):
    monkeypatch.setenv("HETSPLIT_CACHE", str(tmp_path))


def test_others_share_is_the_machines_busy_time_less_our_own():
    before, after = CpuClock(10.0, 100.0, 5.0, 4), CpuClock(12.0, 103.0, 6.0, 4)
    assert others_share(before, after) == pytest.approx((3.0 - 1.0) / (2.0 * 4))
    assert others_share(before, CpuClock(12.0, 100.5, 6.0, 4)) == 0.0          # never below nothing
    assert others_share(CpuClock(0.0, None, 0.0, 1), CpuClock(1.0, None, 0.0, 1)) is None   # unknown
    with LoadWatch(busy_clock(0.3)) as watch:
        pass
    assert watch.share == pytest.approx(0.3)


def test_the_real_counters_and_probes_read_something():
    clock = real_read_clock()
    assert clock.own_s >= 0 and clock.cpus >= 1
    assert clock.machine_busy_s is None or clock.machine_busy_s >= 0
    for probe in (real_compute_probe, real_message_probe):
        t = probe()
        assert math.isfinite(t) and t > 0


def test_busy_means_rounds_that_disagree_or_others_on_the_cpu():
    assert cs.busy_reason(0.05, 0.02) == "" and cs.busy_reason(0.0, None) == ""
    assert "rounds 40% apart" in cs.busy_reason(0.4, None)
    assert "other processes used 30% of the machine's CPU time" in cs.busy_reason(0.0, 0.3)


def test_a_quiet_calibration_is_cached_with_its_probe_and_reused():
    fake = Fake()
    got = cs.trusted(fake.recipe())
    assert got.value == 2.0 and not got.busy and fake.measured == 1
    doc = json.loads(open(got.path).read())
    assert doc == {"format": "fake/1", "key": {"machine": "m"}, "probe_s": 1e-3, "value": {"v": 2.0}}
    assert "cached in" in got.describe() and "--recalibrate" in got.describe()
    cs.clear_memo()
    again = cs.trusted(fake.recipe())
    assert again.value == 2.0 and fake.measured == 1 and "checked at use" in again.notes[0]
    cs.trusted(fake.recipe(), recalibrate=True)
    assert fake.measured == 2
    cs.trusted(fake.recipe({"machine": "another"}))               # another key: measured
    assert fake.measured == 3


def test_a_calibration_taken_while_others_use_the_cpu_is_not_cached(monkeypatch):
    monkeypatch.setattr(machine_load, "read_clock", busy_clock(0.5))
    fake = Fake()
    got = cs.trusted(fake.recipe())
    assert got.value == 2.0 and got.path == "" and "other processes used 50%" in got.busy
    assert got.describe().startswith("WARNING: the machine was busy while calibrating")
    assert not cs.cache_path({"machine": "m"}, "fake-calibration").exists()
    assert cs.trusted(fake.recipe()) is got and fake.measured == 1            # used for this process
    cs.clear_memo()
    monkeypatch.setattr(machine_load, "read_clock", busy_clock(0.02))        # the next process, quiet
    assert cs.trusted(fake.recipe()).path and fake.measured == 2


def test_rounds_that_disagree_are_not_cached():
    fake = Fake(spread=0.3)
    got = cs.trusted(fake.recipe())
    assert "rounds 30% apart" in got.busy and got.path == ""


def test_a_changed_machine_is_measured_again():
    fake = Fake()
    cs.trusted(fake.recipe())
    cs.clear_memo()
    fake.probe_s, fake.value = 1.08e-3, 3.0                        # within 10%: the same machine
    assert cs.trusted(fake.recipe()).value == 2.0 and fake.measured == 1
    cs.clear_memo()
    fake.probe_s = 1.25e-3                                         # 25% slower: it changed
    got = cs.trusted(fake.recipe())
    assert got.value == 3.0 and fake.measured == 2 and "has changed" in got.notes[0] and "+25%" in got.notes[0]
    assert json.loads(open(got.path).read())["probe_s"] == 1.25e-3
    cs.clear_memo()
    fake.probe_s = 0.8e-3                                          # faster counts too
    assert cs.trusted(fake.recipe()).value == 3.0 and fake.measured == 3


def test_a_probe_on_a_busy_machine_keeps_the_cached_calibration(monkeypatch):
    fake = Fake()
    cs.trusted(fake.recipe())
    cs.clear_memo()
    monkeypatch.setattr(machine_load, "read_clock", busy_clock(0.6))
    fake.probe_s = 2e-3
    got = cs.trusted(fake.recipe())
    assert got.value == 2.0 and fake.measured == 1 and "kept" in got.notes[0]


def test_an_unreadable_cache_or_one_without_a_probe_is_measured_again():
    fake = Fake()
    path = cs.cache_path({"machine": "m"}, "fake-calibration")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    got = cs.trusted(fake.recipe())
    assert fake.measured == 1 and "unreadable" in got.notes[0]
    cs.clear_memo()
    path.write_text(json.dumps({"format": "fake/1", "key": {"machine": "m"}, "value": {"v": 9.0}}))
    assert cs.trusted(fake.recipe()).value == 2.0 and fake.measured == 2


def test_the_local_calibration_is_checked_by_the_compute_probe(monkeypatch):
    """The per-layer calibration of this machine: cached quiet, measured again when the compute probe moves."""
    from hetsplit.costs import local_calibration as lc

    monkeypatch.delenv(lc.ENV)
    calls: list[int] = []

    def fake_calibrate(options, key):
        calls.append(1)
        return lc.LocalCalibration(key, "now", 2.0, {}, [{"model": "m", "measured_s": 1.0, "reference_s": 0.5}],
                                   1, 0.1)

    monkeypatch.setattr(lc, "calibrate", fake_calibrate)
    assert "cached in" in lc.local_costs().source and calls == [1]
    cs.clear_memo()
    lc.local_costs()
    assert calls == [1]
    cs.clear_memo()
    monkeypatch.setattr(machine_probe, "compute_probe_s", lambda: 5e-3)
    assert lc.local_costs().calibration is not None and calls == [1, 1]


def test_the_runtime_calibration_taken_on_a_busy_machine_is_not_cached(monkeypatch):
    """The runtime's per-message calibration follows the same rules (it once cached a busy machine's)."""
    from hetsplit.costs import local_calibration as lc
    from hetsplit.estimate import RuntimeCosts
    from hetsplit.runtime import calibration as rc

    monkeypatch.delenv(lc.ENV)
    calls: list[int] = []

    def fake_calibrate(runs=rc.RUNS, rounds=2):
        calls.append(1)
        return RuntimeCosts(2e-4, 8e-5, 0.0, 0.0, 1.5e-4, "runtime measured (fake)"), 0.02

    monkeypatch.setattr(rc, "calibrate", fake_calibrate)
    monkeypatch.setattr(machine_load, "read_clock", busy_clock(0.4))
    busy = rc.runtime_costs()
    assert "WARNING: the machine was busy" in busy.source and "not cached" in busy.source
    assert not cs.cache_path(rc.runtime_key(), rc.FOLDER).exists()
    cs.clear_memo()
    monkeypatch.setattr(machine_load, "read_clock", busy_clock(0.0))
    assert "cached in" in rc.runtime_costs().source and calls == [1, 1]
    cs.clear_memo()
    monkeypatch.setattr(machine_probe, "message_probe_s", lambda: 2e-3)       # twice the conftest's probe
    rc.runtime_costs()
    assert calls == [1, 1, 1]
