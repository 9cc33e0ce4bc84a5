"""Built-in device models; importing this package registers them."""

from hetsplit.costs.models import (
    calibrated,  # noqa: F401  (registers "calibrated")
    cim,  # noqa: F401  (registers "cim")
    imc,  # noqa: F401  (registers "imc" and "dpu")
    local,  # noqa: F401  (registers "local", this machine's calibrated cores)
    mac_frequency,  # noqa: F401  (registers "mac-frequency", the thesis's analytical model)
    mcu,  # noqa: F401  (registers "mcu")
    roofline,  # noqa: F401  (registers "roofline")
)
from hetsplit.costs.models.base import (
    DeviceModel,
    LayerCosts,
    device_model,
    model_names,
    register_model,
)

__all__ = ["DeviceModel", "LayerCosts", "device_model", "model_names", "register_model"]
