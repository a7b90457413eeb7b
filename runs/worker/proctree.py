"""The children of a process, from the kernel's own list of them.

psutil's `Process.children()` finds a process's children by reading the status of
every process of the host: 2-5 ms of CPU on a busy host, and a tree's heartbeat asks on
every tick of its duties, twice a second.
Linux keeps each thread's children in /proc/<pid>/task/<tid>/children
(CONFIG_PROC_CHILDREN, on in Debian's and most distributions' kernels): one short
file a thread. Like psutil's scan, the answer is a snapshot: a child forked or
reaped meanwhile may be missing from it. Where the file does not exist, psutil scans.
"""

from __future__ import annotations

import os

import psutil


def children(pid: int, recursive: bool = False) -> list[psutil.Process]:
    """The live (or zombie) children of `pid`, with theirs if `recursive`. Raises
    psutil.NoSuchProcess if `pid` is gone, as psutil does."""
    found, parents = [], [pid]
    while parents:
        parent = parents.pop()
        pids = _child_pids(parent)
        if pids is None:  # no children files here: psutil's scan of the host
            return psutil.Process(pid).children(recursive=recursive)
        for child_pid in pids:
            try:
                found.append(psutil.Process(child_pid))
            except psutil.NoSuchProcess:
                continue
            if recursive:
                parents.append(child_pid)
    return found


def _child_pids(pid: int) -> list[int] | None:
    """The pids the kernel lists as `pid`'s children, or None where it keeps no such
    list (raises NoSuchProcess for a process that is gone)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        raise psutil.NoSuchProcess(pid) from None
    pids = []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as listing:
                pids.extend(int(word) for word in listing.read().split())
        except FileNotFoundError:
            if os.path.exists(f"/proc/{pid}/task/{tid}"):
                return None  # the thread is there, its list is not: no such files
            # else the thread (or the whole process) ended since the listing
        except ProcessLookupError:  # the thread exited while being read
            continue
    return pids
