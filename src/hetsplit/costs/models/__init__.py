"""Built-in device models; importing this package registers them."""

from hetsplit.costs.models.base import DeviceModel, LayerCosts, device_model, model_names, register_model
from hetsplit.costs.models import roofline  # noqa: F401  (registers "roofline")
from hetsplit.costs.models import cim  # noqa: F401  (registers "cim")
from hetsplit.costs.models import mcu  # noqa: F401  (registers "mcu")
from hetsplit.costs.models import imc  # noqa: F401  (registers "imc" and "dpu")
from hetsplit.costs.models import calibrated  # noqa: F401  (registers "calibrated")

__all__ = ["DeviceModel", "LayerCosts", "device_model", "model_names", "register_model"]
