"""Suite-wide: this machine is not measured in tests (the ``local`` cluster's devices keep their
roofline fallback, the runtime's costs the loopback link's); tests of the calibrations turn measuring
on with a fake, instant measurement. Set for the whole session, so module-scoped fixtures see it too."""

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _no_measuring_this_machine() -> Iterator[None]:
    from hetsplit.costs import local_calibration

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(local_calibration.ENV, "off")
        yield


@pytest.fixture(autouse=True)
def _fresh_calibration_memos() -> None:
    from hetsplit.costs import local_calibration
    from hetsplit.experiments import runtime_calibration

    local_calibration.clear_memo()
    runtime_calibration.clear_memo()
