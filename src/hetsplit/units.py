"""Quantities with units at the edges: parse "64GB/s", "6.5pJ/b", "16GiB", "65W" into SI floats.

Inside hetsplit everything is SI: seconds, joules, bytes, bytes/s, joules/byte, watts, MAC/s.
Bits are converted to bytes (x8) wherever a unit says ``b`` (bit) rather than ``B`` (byte).
Rates are MAC/s; FLOP/s and op/s count two per MAC (multiply + add), so "21.7TFLOP/s" is
10.85e12 MAC/s. ``parse_quantity`` reads one kind; ``detect_quantity`` finds the kind from the
unit; ``parse_param`` picks the kind from a parameter's name (``KEY_KINDS``, suffixes) first.
"""

from __future__ import annotations

import logging
import math
import re

from hetsplit.errors import UnitError

log = logging.getLogger(__name__)

_SI_PREFIX = {
    "": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9, "p": 1e-12, "f": 1e-15,
}
_BIN_PREFIX = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_QUANTITY = re.compile(rf"^\s*({_NUMBER})\s*([^\s].*?)?\s*$")

# quantity kind -> examples of how to write it (shown in error messages)
KINDS = {
    "bytes": "16GiB, 256KiB, 8GB",
    "bandwidth": "64GB/s, 3.5MB/s, 1Gb/s (bits), 125MB/s",
    "energy_per_byte": "6.5pJ/b (per bit), 100pJ/B (per byte), 0.1uJ/b",
    "power": "65W, 13mW",
    "time": "10ns, 2.5ms, 1s",
    "energy": "45uJ, 0.35J",
    "rate": "1.2e11/s (MAC/s), 15.5GMAC/s, 21.7TFLOP/s (2 FLOP per MAC)",
    "frequency": "500MHz, 3.5GHz",
    "dimensionless": "0.8, 1e3, 50%",
}

_LABEL = {"bytes": "data size", "energy_per_byte": "energy per byte", "rate": "rate (MAC/s)",
          "dimensionless": "plain number"}


def _label(kind: str) -> str:
    return _LABEL.get(kind, kind)


def _split_prefix(unit: str, base: str, allow_binary: bool) -> float | None:
    """Factor of the prefix in front of ``base`` in ``unit``; None if ``unit`` does not end in base."""
    if not unit.endswith(base):
        return None
    prefix = unit[: len(unit) - len(base)]
    if allow_binary and prefix in _BIN_PREFIX:
        return _BIN_PREFIX[prefix]
    return _SI_PREFIX.get(prefix)


def _data_factor(unit: str) -> float | None:
    """Bytes per unit of a data amount: B (byte) or b/bit (bit), SI or binary prefix."""
    for base, scale in (("bit", 1 / 8), ("B", 1.0), ("b", 1 / 8)):
        f = _split_prefix(unit, base, allow_binary=True)
        if f is not None:
            return f * scale
    return None


# per-second counts, as MACs per unit: a MAC is two operations (multiply and add)
_RATE_BASES = (("MACs/s", 1.0), ("MAC/s", 1.0), ("FLOPs/s", 0.5), ("FLOP/s", 0.5), ("FLOPS", 0.5),
               ("ops/s", 0.5), ("op/s", 0.5), ("OPS", 0.5), ("/s", 1.0))


def _rate_factor(u: str) -> float | None:
    for base, scale in _RATE_BASES:
        f = _split_prefix(u, base, allow_binary=False)
        if f is not None:
            return f * scale
    return None


def _parse_unit(unit: str, kind: str) -> float | None:
    u = unit.replace(" ", "")
    if kind == "bytes":
        return _data_factor(u)
    if kind == "bandwidth":
        for sep in ("/s", "ps"):
            if u.endswith(sep):
                return _data_factor(u[: -len(sep)])
        return None
    if kind == "energy_per_byte":
        if "/" not in u:
            return None
        energy, data = u.split("/", 1)
        e = _split_prefix(energy, "J", allow_binary=False)
        d = _data_factor(data)
        if e is None or d is None:
            return None
        return e / d
    if kind == "power":
        return _split_prefix(u, "W", allow_binary=False)
    if kind == "energy":
        return _split_prefix(u, "J", allow_binary=False)
    if kind == "time":
        return _split_prefix(u, "s", allow_binary=False)
    if kind == "frequency":
        return _split_prefix(u, "Hz", allow_binary=False)
    if kind == "rate":
        return _rate_factor(u)
    if kind == "dimensionless":
        return 0.01 if u == "%" else _SI_PREFIX.get(u)
    raise UnitError(f"unknown quantity kind {kind!r}; expected one of {sorted(KINDS)}")


# kinds whose unit is easy to get wrong by orders of magnitude (pJ/b vs J/B): a bare number warns
UNIT_EXPECTED = {"energy": "J", "energy_per_byte": "J/B"}


def parse_quantity(value: object, kind: str, where: str = "", warn_bare: bool = False) -> float:
    """Parse ``value`` (a number, or a string with a unit) as a ``kind`` quantity in SI units.

    Plain numbers are taken as already SI. ``where`` names the place (file, key) for errors.
    ``warn_bare``: log a warning when a non-zero energy (``UNIT_EXPECTED``) comes without its unit.
    """
    if kind not in KINDS:
        raise UnitError(f"unknown quantity kind {kind!r}; expected one of {sorted(KINDS)}")
    loc = f"{where}: " if where else ""
    if isinstance(value, bool):
        raise UnitError(f"{loc}expected a {_label(kind)} like {KINDS[kind]}, got {value!r}")
    unit = ""
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        m = _QUANTITY.match(value)
        if not m:
            raise UnitError(f"{loc}cannot read {value!r} as a {_label(kind)}; write it like {KINDS[kind]}")
        number, unit = float(m.group(1)), (m.group(2) or "")
        factor = 1.0 if unit == "" else _parse_unit(unit, kind)
        if factor is None:
            raise UnitError(f"{loc}unknown unit {unit!r} in {value!r} for a {_label(kind)}; "
                            f"write it like {KINDS[kind]}")
        result = float(f"{number * factor:.15g}")  # drop float noise of the prefix: 100us -> 1e-4
    else:
        raise UnitError(f"{loc}expected a {_label(kind)} like {KINDS[kind]}, got {type(value).__name__} {value!r}")
    if not math.isfinite(result) or result < 0:
        raise UnitError(f"{loc}a {_label(kind)} must be a finite non-negative number, got {value!r}")
    if warn_bare and kind in UNIT_EXPECTED and result and not unit:
        log.warning("%sbare number %r taken as %s (SI); write its unit, like %s", loc, value,
                    format_quantity(result, UNIT_EXPECTED[kind]), KINDS[kind])
    return result


def format_quantity(value: float, unit: str, digits: int = 3) -> str:
    """Format an SI value with an SI prefix: format_quantity(6.4e10, "B/s") -> "64 GB/s"."""
    if math.isnan(value):
        return "unknown"
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}"
    exp = int(math.floor(math.log10(abs(value)) / 3))
    exp = max(-5, min(5, exp))
    prefixes = {-5: "f", -4: "p", -3: "n", -2: "µ", -1: "m", 0: "", 1: "k", 2: "M", 3: "G", 4: "T", 5: "P"}
    scaled = value / 10 ** (3 * exp)
    return f"{scaled:.{digits}g} {prefixes[exp]}{unit}"


# Parameter names whose quantity kind is known; see kind_for_key for suffix rules.
KEY_KINDS: dict[str, str] = {
    "memory": "bytes", "peak_macs": "rate", "mem_bandwidth": "bandwidth", "bandwidth": "bandwidth",
    "power_active": "power", "power_idle": "power", "power": "power", "leakage_power": "power",
    "overhead_s": "time", "latency": "time", "energy_per_byte": "energy_per_byte", "efficiency": "dimensionless",
    "mem_efficiency": "dimensionless", "frequency": "frequency", "clock": "frequency",
}
POSITIVE_KEYS = {"peak_macs", "mem_bandwidth", "bandwidth", "frequency", "clock"}  # rates that divide work
_SUFFIX_KINDS = (("_energy_per_byte", "energy_per_byte"), ("_j_per_byte", "energy_per_byte"),
                 ("_bandwidth", "bandwidth"), ("_bytes", "bytes"), ("_efficiency", "dimensionless"),
                 ("_hz", "frequency"), ("_w", "power"), ("_j", "energy"), ("_s", "time"))


def kind_for_key(key: str) -> str | None:
    """The quantity kind a parameter name implies (``KEY_KINDS``, then suffixes), or None."""
    if key in KEY_KINDS:
        return KEY_KINDS[key]
    for suffix, kind in _SUFFIX_KINDS:
        if key.endswith(suffix):
            return kind
    return None


def detect_quantity(value: str, where: str = "") -> tuple[float, str]:
    """Parse a quantity string whose kind its unit tells: "64GB/s" -> (6.4e10, "bandwidth").

    A bare number is dimensionless. A unit that fits no kind, or more than one, is a UnitError.
    """
    loc = f"{where}: " if where else ""
    m = _QUANTITY.match(value)
    if not m:
        raise UnitError(f"{loc}cannot read {value!r} as a quantity; write a number with a unit, "
                        "like 64GB/s, 16GiB, 6.5pJ/b, 65W, 10ns, 1.2e11/s")
    number, unit = float(m.group(1)), (m.group(2) or "").replace(" ", "")
    if not unit:
        return parse_quantity(number, "dimensionless", where), "dimensionless"
    fits = [(k, f) for k in KINDS if (f := _parse_unit(unit, k)) is not None]
    if len(fits) != 1:
        why = "no known kind" if not fits else f"several kinds ({', '.join(k for k, _ in fits)})"
        raise UnitError(f"{loc}unit {unit!r} in {value!r} fits {why}; write it like 64GB/s (bandwidth), "
                        "16GiB (bytes), 6.5pJ/b (energy per bit), 65W, 10ns, 500MHz, 1.2e11/s (MAC/s)")
    kind, factor = fits[0]
    return parse_quantity(number * factor, kind, where), kind


def parse_param(key: str, value: object, where: str = "", warn_bare: bool = False) -> object:
    """A model parameter in SI: the kind comes from ``key`` where known, else from the unit.

    Mappings and lists are read element by element (``efficiency: {conv: 0.5}`` keeps the kind of
    ``efficiency``); strings that do not start with a number stay text (``mapping: novel``).
    ``warn_bare`` as for ``parse_quantity``.
    """
    kind = kind_for_key(key)
    if isinstance(value, dict):
        return {k: parse_param(key if kind else str(k), v, f"{where}.{k}", warn_bare) for k, v in value.items()}
    if isinstance(value, list):
        return [parse_param(key, v, f"{where}[{i}]", warn_bare) for i, v in enumerate(value)]
    if kind is not None:
        result = parse_quantity(value, kind, where, warn_bare)
        if result == 0 and key in POSITIVE_KEYS:
            raise UnitError(f"{where + ': ' if where else ''}{key} must be above 0 (work is divided by it), "
                            f"got {value!r}; write it like {KINDS[kind]}")
        return result
    if isinstance(value, str):
        if _QUANTITY.match(value) is None:
            return value  # text, e.g. a mapping scheme name
        return detect_quantity(value, where)[0]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def format_bytes(value: float, digits: int = 3) -> str:
    """Format a byte count with a binary prefix: format_bytes(8 * 2**30) -> "8 GiB"."""
    if not math.isfinite(value) or abs(value) < 1024:
        return f"{value:g} B"
    exp = min(int(math.log(abs(value), 1024)), 4)
    return f"{value / 1024 ** exp:.{digits}g} {('', 'Ki', 'Mi', 'Gi', 'Ti')[exp]}B"


_DURATION = re.compile(rf"^\s*({_NUMBER})\s*(h|m|min|s)?\s*$")
_DURATION_UNIT = {"h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0, None: 1.0}


MAX_DURATION_S = 365 * 86400.0


def parse_duration(value: str, where: str = "") -> float:
    """A wall-clock duration in seconds: "20m", "90s", "1.5h" or a bare number of seconds (> 0)."""
    m = _DURATION.match(str(value))
    loc = f"{where}: " if where else ""
    if not m or not float(m.group(1)) > 0:
        raise UnitError(f"{loc}cannot read {value!r} as a duration; write it like 20m, 90s, 1.5h or 600 (seconds)")
    seconds = float(m.group(1)) * _DURATION_UNIT[m.group(2)]
    if not seconds < MAX_DURATION_S:
        raise UnitError(f"{loc}{value!r} is longer than any search needs (at most {MAX_DURATION_S / 86400:.0f} "
                        "days); give a finite duration like 20m, 90s or 1.5h")
    return seconds
