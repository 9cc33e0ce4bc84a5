"""What killed runs of this tool left on this machine, removed when the next run starts.

A run with ``--emulate-links`` creates network namespaces (``runtime.netem``), one with
``--emulate-devices`` CPU cgroups (``runtime.cpu_throttle``); a run killed with SIGKILL cannot remove
them. Their names carry the owning process (``runtime.owned``), so every run, emulated or not, first
removes the namespaces and cgroups whose owner is gone, and nothing else (``hetsplit doctor`` does the
same on demand). Removing them needs root; without it a run leaves them to ``hetsplit doctor``, which
says so.
"""

from __future__ import annotations

import os

from hetsplit.runtime.cpu_throttle import remove_stale_groups
from hetsplit.runtime.netns_cleanup import remove_stale_namespaces


def remove_leftovers() -> list[str]:
    """Remove the namespaces and cgroups of hetsplit runs whose process is gone (as root; else nothing);
    the names removed (each kind logged as one warning)."""
    if os.geteuid() != 0:
        return []
    return remove_stale_namespaces() + remove_stale_groups()
