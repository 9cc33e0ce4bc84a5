"""Partitioners and explorers. Importing this package registers the built-in ones (docs/architecture.md)."""

import importlib
import pkgutil

from hetsplit.search.base import (PipelineConstraints, Partitioner, make_partitioner, partitioner_names,
                                  partitioner_options, register_partitioner)

# Every module in this package may register partitioners; import them all once.
for _info in pkgutil.iter_modules(__path__):
    if _info.name not in ("base",):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["Partitioner", "PipelineConstraints", "make_partitioner", "partitioner_names", "partitioner_options",
           "register_partitioner"]
