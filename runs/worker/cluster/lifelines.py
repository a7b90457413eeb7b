"""Ties between the processes of one worker tree, set by the kernel (Linux prctl).

A parent that dies by SIGKILL runs no code, so only the kernel can tell its
children: PR_SET_PDEATHSIG makes it send them a signal when their parent dies.
Each process of the tree asks for one right after it is forked: a worker gets
SIGTERM (our handler hands its runs back at the next effect boundary, then it
dies), a pusher, a monitor or a sentinel gets SIGKILL (they hold nothing that
needs a goodbye). No process of the tree outlives the one that supervises it.

PR_SET_CHILD_SUBREAPER makes qcluster's main process the parent of the orphans
of its sentinel, so it still sees them (the heartbeat lists them), reaps them
and can kill them, instead of init.

Elsewhere than Linux these are no-ops: the guard loops still notice a dead
parent or child, only later.
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1           # from linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: no prctl
        return False


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send `sig` to this process when `parent_pid` (its parent at
    fork time) dies. The parent may have died between the fork and this call, in
    which case nobody would send it: then this process takes the signal now."""
    _prctl(PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)


def become_subreaper() -> bool:
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def describe_exit(exitcode: int) -> str:
    """multiprocessing's and subprocess's exit code, said plainly."""
    if exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"
