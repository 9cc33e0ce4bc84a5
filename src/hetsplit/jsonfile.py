"""Reading JSON files with errors that say which file and what is wrong (shared by every format)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.errors import HetsplitError


def read_json(path: str | Path, error: type[HetsplitError], missing: str) -> Any:
    """The parsed document at ``path``; ``error`` with ``missing`` (e.g. "no such plan file") if absent."""
    p = Path(path)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise error(f"{p}: {missing}") from None
    except json.JSONDecodeError as exc:
        raise error(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def json_safe(value: Any) -> Any:
    """A JSON-friendly copy: tuples become lists, numpy scalars plain numbers, keys strings."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
