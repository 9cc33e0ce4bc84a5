"""Factories by name, filled by a decorator: the one registry behind device models (``costs.models``),
partitioners (``search``) and fidelities (``estimate``).

A registry names the module whose import registers the built-in entries (``builtins``); it imports it
on the first lookup, so a caller never depends on which modules happened to be imported before.
"""

from __future__ import annotations

import importlib
from typing import Callable, Generic, TypeVar

from hetsplit.errors import HetsplitError

F = TypeVar("F", bound=Callable[..., object])


class Registry(Generic[F]):
    """``what`` (e.g. "device model") factories by name; ``builtins`` is imported before any lookup."""

    def __init__(self, what: str, builtins: str) -> None:
        self.what = what
        self.builtins = builtins
        self._factories: dict[str, F] = {}
        self._loaded = False

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: make ``factory`` available under ``name`` (a second one under a name replaces it)."""

        def wrap(factory: F) -> F:
            self._factories[name] = factory
            return factory

        return wrap

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            importlib.import_module(self.builtins)

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self._load()
        return sorted(self._factories)

    def get(self, name: str) -> F | None:
        """The factory registered as ``name``; None when there is none."""
        self._load()
        return self._factories.get(name)

    def lookup(self, name: str, error: type[HetsplitError] = HetsplitError, where: str = "") -> F:
        """The factory registered as ``name``; ``error`` naming the known ones when there is none."""
        factory = self.get(name)
        if factory is None:
            prefix = f"{where}: " if where else ""
            raise error(f"{prefix}unknown {self.what} {name!r}; available: {', '.join(self.names())}")
        return factory
