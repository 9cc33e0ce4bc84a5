"""Reading JSON files with errors that say which file and what is wrong (shared by every format)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
