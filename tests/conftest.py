"""Suite-wide: the ``local`` cluster's devices are not calibrated on this machine in tests (roofline
fallback); tests of the calibration turn it on with a fake, instant measurement."""

import pytest


@pytest.fixture(autouse=True)
def _no_local_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    from hetsplit.costs import local_calibration

    monkeypatch.setenv(local_calibration.ENV, "off")
    local_calibration.clear_memo()
