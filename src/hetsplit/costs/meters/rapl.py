"""RAPL energy counters through the Linux powercap sysfs tree (Intel and AMD CPUs).

Reads ``<root>/intel-rapl:N/energy_uj`` of each top-level package domain (sub-domains such as core
or dram are inside the package's count and are skipped), and handles counter wrap-around with
``max_energy_range_uj``. ``root`` defaults to /sys/class/powercap; tests pass a fake tree.
"""

from __future__ import annotations

import re
from pathlib import Path

DEFAULT_ROOT = Path("/sys/class/powercap")
_PACKAGE = re.compile(r"^intel-rapl:\d+$")   # top-level domains; intel-rapl:0:1 is a sub-domain


class RaplMeter:
    """Sum of the package energy counters, in joules, between start() and stop()."""

    name = "rapl"

    def __init__(self, root: str | Path = DEFAULT_ROOT) -> None:
        self.root = Path(root)
        self.domains: list[Path] = []
        self.available = False
        self.reason = ""
        self._start: list[int] | None = None
        if not self.root.is_dir():
            self.reason = f"no powercap tree at {self.root} (no RAPL driver, or not Linux)"
            return
        self.domains = sorted(p for p in self.root.iterdir() if _PACKAGE.match(p.name) and (p / "energy_uj").exists())
        if not self.domains:
            self.reason = f"no intel-rapl:N package domains with energy_uj under {self.root}"
            return
        try:
            self._read()
        except (OSError, ValueError) as exc:
            detail = getattr(exc, "strerror", None) or exc
            self.reason = f"cannot read {self.domains[0] / 'energy_uj'} ({detail}); reading RAPL may need root"
            self.domains = []
            return
        self.available = True

    def domain_names(self) -> list[str]:
        out = []
        for d in self.domains:
            try:
                out.append((d / "name").read_text().strip())
            except OSError:
                out.append(d.name)
        return out

    def _read(self) -> list[int]:
        return [int((d / "energy_uj").read_text().strip()) for d in self.domains]

    def _range(self, d: Path) -> int:
        try:
            return int((d / "max_energy_range_uj").read_text().strip())
        except (OSError, ValueError):
            return 2**32

    def start(self) -> None:
        self._start = self._read() if self.available else None

    def stop(self) -> float | None:
        if not self.available or self._start is None:
            return None
        end = self._read()
        total_uj = 0
        for d, a, b in zip(self.domains, self._start, end):
            total_uj += b - a if b >= a else b + self._range(d) - a   # the counter wrapped once
        self._start = None
        return total_uj * 1e-6
