"""What each process of a worker tree is, told the same way to `ps`, the heartbeat
and the crash tests.

A qcluster tree: the *main* process (our qcluster command: sweep, heartbeat,
keeper of the cluster), its *sentinel* (django-q2's guard loop, ours in
runs/worker/cluster/sentinel.py), and the sentinel's children: *worker*s that execute
runs, the *pusher* that moves tasks from the broker to the local task queue and
the *monitor* that saves task results. Under `manage.py worker` a *supervisor*
sits above the main. With tracing on, a process that exports spans has an *exporter*
child (runs/observability/export_process.py).

The role is the first word of the process's name after "qcluster" (setproctitle
writes it into the command line: "qcluster worker-2-3fa1 idle", "qcluster
pusher-2-77c0 pusher"), so the heartbeat reads it back from any process of the
tree, orphans included, without asking the process.
"""

from __future__ import annotations

import os

import psutil

try:
    import setproctitle as _setproctitle
except ModuleNotFoundError:  # optional for django-q2; a dependency of ours
    _setproctitle = None

MAIN, SENTINEL, WORKER, PUSHER, MONITOR, SUPERVISOR, EXPORTER = (
    "main", "sentinel", "worker", "pusher", "monitor", "supervisor", "exporter")
ROLES = (MAIN, SENTINEL, WORKER, PUSHER, MONITOR, SUPERVISOR, EXPORTER)
PREFIX = "qcluster"


def process_name(role: str, generation: int, tag: str) -> str:
    """multiprocessing's name for a child: django-q2 puts it in the child's title."""
    return f"{role}-{generation}-{tag}"


def set_title(role: str, detail: str = "") -> None:
    if _setproctitle:
        _setproctitle.setproctitle(f"{PREFIX} {role} {detail}".rstrip())


def role_of(process: psutil.Process) -> str:
    """The role a process of a qcluster tree gave itself, or "" if it gave none."""
    try:
        words = " ".join(process.cmdline()).split()
    except psutil.Error:
        return ""
    if len(words) < 2 or words[0] != PREFIX:
        return ""
    role = words[1].split("-", 1)[0]
    return role if role in ROLES else ""


def mark(role: str) -> None:
    """Crash tests find the processes of a cluster by role in AGENTOPS_WORKER_PID_DIR
    (a file per process, named role-pid); a process's liveness they ask the kernel."""
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


def is_stopped(pid: int) -> bool:
    """Stopped by SIGSTOP (or a debugger): alive, but it will do nothing until SIGCONT."""
    return status_of(pid) == psutil.STATUS_STOPPED


def send(pid: int, sig: int) -> None:
    """A signal to a process that may have ended meanwhile."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
