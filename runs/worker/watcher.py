"""A worker tree's main process once its workers are forked (runs/worker/tree.py): it
watches them and ends the tree, and does nothing else.

Why a bare Python. The main imports Django, the features and the agents, then forks
its workers, which share its pages copy-on-write. From then on a page a worker writes
(a reference count is a write) exists twice, the worker's copy and the main's original:
about 20 MiB of a tree holding 1,000 waiting runs were such originals. So the main, once
its workers are forked, replaces itself (exec: the same pid, so the service manager, the
workers' death signal and their look at their main see the same process) with this
module run as a script by a Python without site-packages, which imports only what is
built into the interpreter (os, signal, sys, time): ~4 MiB of its own. Its duties (the
heartbeat, dead workers' leases, side jobs, retention) went to worker 1
(runs/worker/sweep.py). `python -m bench compare --only 6`: the tree at 1,000 waiting
runs 124 [123-125] MiB before, 104 [104-105] after (DBOS 105).

So this file imports nothing else: not the project (its packages import Django), not
logging (2.6 MiB). Its few lines are written as the project's log lines are
(runs/observability/logs.py, AGENTOPS_LOG_FORMAT); tests/cluster/test_tree.py checks
it runs where the tree runs it.

What it watches, and what it does (docs/workers.md, "Crash-only supervision"):
- a worker that ends, or stays stopped (SIGSTOP) for the stopped limit: damage. The
  stopped ones are killed (and reaped, so that a sibling ending after them sees them
  dead), the others get SIGTERM and hand their runs back, and it exits 1 for a fresh
  tree;
- SIGTERM or SIGINT: a stop. The workers get SIGTERM (each says in the heartbeat that
  the tree is stopping, then hands its runs back), those left after the grace are
  killed, and it exits 0.
A worker that ends cleanly expires the leases of the workers dead before it (tree.py).
When a stop had to kill a worker after the grace and no worker ended cleanly after it,
its leases would wait out their time: then it execs `manage.py worker --ended 0`,
which expires them and exits 0. After damage, the fresh tree expires them at its start.

Signals are taken synchronously (sigtimedwait): the main blocked them before it forked,
a blocked signal stays pending across exec, so none sent meanwhile is lost, and there
is no handler to race with.
"""

from __future__ import annotations

import os
import signal
import sys
import time

TITLE = "agentops main"         # argv[0]: `ps` and the heartbeat read the role from it
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
WATCHED = (*STOP_SIGNALS, signal.SIGCHLD)
LOOK_SECONDS = 0.5              # a look at the workers' states between signals
REAP_SECONDS = 5.0              # for a killed worker to be gone
DAMAGED = 1


def become(workers: dict[int, int], *, grace: float, stopped_limit: float, log_format: str,
           then: list[str]) -> None:
    """Exec this module in the main (it never returns). `workers`: pid -> number;
    `then`: the command that expires leases left by a stop and exits, before
    `--ended CODE`. The caller has blocked WATCHED."""
    home = os.environ.get("PYTHONHOME")
    env = dict(os.environ)
    # argv[0] is the title, not the interpreter's path, from which Python would find
    # its standard library: PYTHONHOME says where it is.
    env["PYTHONHOME"] = os.pathsep.join((sys.base_prefix, sys.base_exec_prefix))
    args = [TITLE, "-S", "-P", os.path.abspath(__file__),
            "--grace", repr(grace), "--stopped", repr(stopped_limit), "--log", log_format,
            "--workers", ",".join(f"{pid}:{number}" for pid, number in workers.items()),
            "--home", "" if home is None else "=" + home,
            "--then", sys.executable, *then]
    os.execve(sys.executable, args, env)


class Watcher:
    def __init__(self, workers: dict[int, int], grace: float, stopped_limit: float, log):
        self.workers = workers
        self.grace, self.stopped_limit = grace, stopped_limit
        self.log = log
        self.stopped_since: dict[int, float] = {}
        self.stop_signal: int | None = None
        self.leases_left = False  # a worker was killed, and none ended cleanly after it

    def watch(self) -> int:
        """Until damage or a stop signal; then the end. Returns the exit code."""
        damage = self._damage()
        while damage is None and self.stop_signal is None:
            info = signal.sigtimedwait(WATCHED, self._timeout())
            if info is not None and info.si_signo in STOP_SIGNALS:
                self.stop_signal = info.si_signo
            damage = self._damage()
        if self.stop_signal is None:
            self.log("error", f"worker tree damaged: {damage}; ending it for a fresh one")
        self._end()
        return 0 if self.stop_signal is not None else DAMAGED

    def _timeout(self) -> float:
        now = time.monotonic()
        deadlines = [since + self.stopped_limit - now for since in self.stopped_since.values()]
        return max(0.0, min([LOOK_SECONDS, *deadlines]))

    def _damage(self) -> str | None:
        now = time.monotonic()
        for pid, number in list(self.workers.items()):
            code = self._reaped(pid)
            if code is not None:
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
                return f"worker {number} (pid {pid}) ended: {how}"
            if not is_stopped(pid):
                self.stopped_since.pop(pid, None)
            elif now - self.stopped_since.setdefault(pid, now) >= self.stopped_limit:
                return f"worker {number} (pid {pid}) stopped for over {self.stopped_limit} s"
        return None

    def _reaped(self, pid: int) -> int | None:
        """The worker's exit code if it has ended (and is now reaped), else None."""
        try:
            ended, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped already: nothing left of it
            ended, status = pid, 0
        if not ended:
            return None
        del self.workers[pid]
        code = os.waitstatus_to_exitcode(status)
        self.leases_left = code != 0
        return code

    def _end(self) -> None:
        """SIGKILL to a stopped worker (it could not act on a SIGTERM), reaped before the
        others are told; SIGTERM to the others, up to the grace for them to hand their
        runs back, then SIGKILL to those left."""
        stopped = [pid for pid in self.workers if is_stopped(pid)]
        for pid in stopped:
            send(pid, signal.SIGKILL)
        self._reap(stopped, until=time.monotonic() + REAP_SECONDS)
        for pid in self.workers:
            send(pid, signal.SIGTERM)
        self._reap(self.workers, until=time.monotonic() + self.grace)
        if self.workers:
            self.log("warning", f"workers {sorted(self.workers)} still running "
                                f"{self.grace:.0f} s after SIGTERM: killing them")
            for pid in self.workers:
                send(pid, signal.SIGKILL)
            self._reap(self.workers, until=time.monotonic() + REAP_SECONDS)

    def _reap(self, pids, until: float) -> None:
        waiting = set(pids)
        while waiting and (left := until - time.monotonic()) > 0:
            waiting = {pid for pid in waiting if self._reaped(pid) is None}
            if waiting:
                signal.sigtimedwait((signal.SIGCHLD,), min(left, LOOK_SECONDS))


def is_stopped(pid: int) -> bool:
    """Stopped by SIGSTOP (or Ctrl-Z) until SIGCONT: state T of /proc/PID/stat, which is
    what psutil reads for runs/worker/roles.py's is_stopped; a process a debugger holds
    is t (tracing stop), not stopped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # "pid (comm) S ...": the command may hold spaces and parentheses
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"T"
    except (OSError, IndexError):
        return False


def send(pid: int, sig: int) -> bool:
    """A signal to a process that may have ended meanwhile: False if it had."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def line_writer(log_format: str):
    """A log line as the project's formatters write it (runs/observability/logs.py)."""
    worker = f"{os.uname().nodename}:{os.getpid()}"

    def log(level: str, message: str) -> None:
        now = time.time()
        if log_format == "json":
            import json  # only when there is something to say: 0.4 MiB

            ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
            line = json.dumps({"ts": ts, "level": level, "logger": "agentops.tree",
                               "message": message, "run_id": None, "branch": None,
                               "step": None, "effect_key": None, "worker": worker})
        else:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"
            line = f"{stamp} {os.getpid()} agentops.tree {level.upper()} {message}"
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except OSError:  # nobody reads the log any more (not contextlib: its imports)
            return  # the watching goes on

    return log


def _options(argv: list[str]) -> dict:
    options, words = {}, iter(argv)
    for word in words:
        if word == "--then":
            options["then"] = list(words)
        else:
            options[word.removeprefix("--")] = next(words)
    return options


def main(argv: list[str]) -> None:
    options = _options(argv)
    workers = {int(pid): int(number) for pid, number in
               (pair.split(":") for pair in options["workers"].split(","))}
    watcher = Watcher(workers, float(options["grace"]), float(options["stopped"]),
                      line_writer(options["log"]))
    code = watcher.watch()
    if code == 0 and watcher.leases_left:
        env = dict(os.environ)
        env.pop("PYTHONHOME")
        if options["home"]:
            env["PYTHONHOME"] = options["home"][1:]
        then = options["then"]
        os.execve(then[0], [*then, "--ended", str(code)], env)
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
