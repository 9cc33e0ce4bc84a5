"""Child processes that cannot outlive the process that started them.

``subprocess.Popen(..., preexec_fn=die_with_parent())``: on Linux the child asks the kernel
(``prctl(PR_SET_PDEATHSIG)``) for SIGKILL when its parent dies, SIGKILL of the parent included, so a
killed ``hetsplit`` never leaves its workers streaming on. The signal is tied to the thread that
started the child: start long-lived children from a thread that lives as long as they do (the
main thread). Elsewhere (no prctl) it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die with this process (None where the OS cannot)."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:   # the parent died before the request took hold
            os._exit(1)

    return arm
