"""Suite-wide: this machine is not measured in tests (the ``local`` cluster's devices keep their
roofline fallback, the runtime's costs the loopback link's); tests of the calibrations turn measuring
on with a fake, instant measurement. Set for the whole session, so module-scoped fixtures see it too.
The probes that check a cached calibration and the CPU counters that tell a busy machine are faked
too (a steady machine, nobody else on it): the tests of those set their own fakes."""

from collections.abc import Iterator

import pytest

PROBE_S = 1e-3          # what the faked machine probes take, always


@pytest.fixture(autouse=True, scope="session")
def _no_measuring_this_machine() -> Iterator[None]:
    from hetsplit.costs import local_calibration

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(local_calibration.ENV, "off")
        yield


@pytest.fixture(autouse=True)
def _a_steady_quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from hetsplit.costs import machine_load, machine_probe

    monkeypatch.setattr(machine_probe, "compute_probe_s", lambda: PROBE_S)
    monkeypatch.setattr(machine_probe, "message_probe_s", lambda: PROBE_S)
    monkeypatch.setattr(machine_load, "read_clock", lambda: machine_load.CpuClock(0.0, None, 0.0, 1))


@pytest.fixture(autouse=True)
def _fresh_calibration_memos() -> None:
    from hetsplit.costs import calibration_store

    calibration_store.clear_memo()
