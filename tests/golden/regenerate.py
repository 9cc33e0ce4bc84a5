"""Rewrite the golden figures: ``.venv/bin/python tests/golden/regenerate.py [CASE ...]``.

Run it when a change moves a figure on purpose, and say in the commit which figures moved and why.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from cases import CASES, figures, golden_path  # noqa: E402


def main(names: list[str]) -> None:
    unknown = set(names) - {c.name for c in CASES}
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; cases: {[c.name for c in CASES]}")
    for case in CASES:
        if names and case.name not in names:
            continue
        golden_path(case).write_text(json.dumps(figures(case), indent=1, sort_keys=True) + "\n")
        print(f"wrote {golden_path(case)}")


if __name__ == "__main__":
    main(sys.argv[1:])
