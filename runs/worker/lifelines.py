"""The kernel's tie between a worker and its main process (Linux prctl).

A main that dies by SIGKILL runs no code, so only the kernel can tell its workers:
PR_SET_PDEATHSIG makes it send each a signal when their parent dies. A worker asks for
SIGTERM, so it hands its runs back at their next effect boundary and ends: no worker
outlives its main. Elsewhere than Linux a no-op (an orphan runs on until stopped).
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1           # from linux/prctl.h


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """Have the kernel send `sig` to this process when `parent_pid` (its parent at fork
    time) dies. The parent may have died between the fork and this call, in which case
    nobody would send it: then this process takes the signal now."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no prctl
        pass
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
