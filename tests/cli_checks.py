"""What the bad-input tests share: the CLI's refusals (exit 2, a message, no traceback) and a small cluster."""

from __future__ import annotations

import pytest

from hetsplit.cli.main import main

TWO_CPUS = """name: two-cpus
devices:
  - {name: c, kind: cpu, memory: 4GiB, peak_macs: 4e10/s, mem_bandwidth: 20GB/s, power_active: 10W, count: 2}
links:
  default: {bandwidth: 1GB/s, energy: 0J/B}
"""


def fails(argv: list[str], capsys) -> str:
    """The CLI must exit 2 with a one-line message, no traceback; returns stderr."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    return err


def refused_by_parser(argv: list[str], capsys) -> str:
    """An option argparse refuses: exit 2 and its message; returns stderr."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    return err
