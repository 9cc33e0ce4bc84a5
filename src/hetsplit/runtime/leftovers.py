"""What killed runs of this tool left on this machine, removed when the next run starts.

A run with ``--emulate-links`` creates network namespaces (``runtime.netem``), one with
``--emulate-devices`` CPU cgroups (``runtime.cpu_throttle``); a run killed with SIGKILL cannot remove
them. Their names carry the owning process (``runtime.owned``), so every run, emulated or not, first
removes the namespaces and cgroups whose owner is gone, and nothing else (``hetsplit doctor`` does the
same on demand). Removing them needs root; without it a run leaves them to ``hetsplit doctor``, which
says so. The scratch folders of joined workers killed mid-run (``runtime.scratch``) are removed too.
"""

from __future__ import annotations

import os

from hetsplit.runtime.cpu_throttle import remove_stale_groups
from hetsplit.runtime.netns_cleanup import remove_stale_namespaces
from hetsplit.runtime.scratch import remove_stale_scratch


def remove_leftovers() -> list[str]:
    """Remove the scratch folders of killed joined workers (``runtime.scratch``), and as root the
    namespaces and cgroups of hetsplit runs whose process is gone; the names removed (each kind logged as
    one warning)."""
    scratch = remove_stale_scratch()
    if os.geteuid() != 0:
        return scratch
    return remove_stale_namespaces() + remove_stale_groups() + scratch
