"""What each process of a worker tree (runs/worker/tree.py) is, told the same way to
`ps`, the heartbeat and the crash tests: its role (*main* or *worker*) is the first word
of its title after "agentops" ("agentops main", "agentops worker-2", in the command line
by setproctitle), which the heartbeat reads back without asking the process.
"""

from __future__ import annotations

import os

import psutil
import setproctitle

from runs.worker.watcher import is_stopped, send  # noqa: F401 - the one rule, stdlib only

MAIN, WORKER = "main", "worker"
ROLES = (MAIN, WORKER)
PREFIX = "agentops"


def set_title(role: str, number: int | None = None) -> None:
    setproctitle.setproctitle(f"{PREFIX} {role}" + ("" if number is None else f"-{number}"))


def role_of(process: psutil.Process) -> str:
    """The role a process of a worker tree gave itself, or "" if it gave none."""
    try:
        words = " ".join(process.cmdline()).split()
    except psutil.Error:
        return ""
    if len(words) < 2 or words[0] != PREFIX:
        return ""
    return role if (role := words[1].split("-", 1)[0]) in ROLES else ""


def mark(role: str) -> None:
    """A file role-pid in AGENTOPS_WORKER_PID_DIR, by which crash tests find the tree."""
    pid_dir = os.environ.get("AGENTOPS_WORKER_PID_DIR")
    if pid_dir:
        open(os.path.join(pid_dir, f"{role}-{os.getpid()}"), "w").close()


GONE = "gone"
DEAD_STATUSES = {psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD, GONE}


def status_of(pid: int) -> str:
    """psutil's status of a process ("sleeping", "stopped", "zombie", ...), or "gone"."""
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return GONE


def is_alive(pid: int) -> bool:
    """A zombie has died: only its exit status is left for its parent to read."""
    return status_of(pid) not in DEAD_STATUSES


