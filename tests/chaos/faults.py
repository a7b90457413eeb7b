"""The faults, one function each. Every fault says when it struck and which runs it hit
(those a killed process held, or every running run for a shared service), so the
audit can measure each run's recovery: the time from the fault to its next new effect.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from datetime import UTC

from tests.chaos.db import db_call, freeze_without_the_write_lock, holders, running_runs

POINTS = {
    # kind: (engine point, specs the harness picks from)
    "point_before_effect": ("before_effect", ["kill", "kill@send_notification"]),
    "point_after_effect_before_log": ("after_effect_before_log",
                                      ["kill", "kill@send_notification", "kill@post_record"]),
    "point_after_checkpoint_before_event": ("after_checkpoint_before_event", ["kill"]),
    "point_after_checkpoint": ("after_checkpoint", ["kill"]),
    "point_lease_renewal": ("lease_renewal", ["kill"]),
    "point_before_release": ("before_release", ["kill"]),
}
# The processes of a worker tree (runs/worker/tree.py): its main and its workers. Each
# cluster runs under a restart loop (tests/support/processes.py), as under systemd: a
# damaged tree ends and a fresh one starts.
PROCESS = ["worker_sigkill", "workers_all_sigkill", "main_sigkill", "tree_sigkill",
           "tree_sigterm", "worker_sigstop", "main_sigstop", "tree_sigstop"]
SERVICES_PG = ["pg_restart", "pg_terminate"]
SERVICES = ["redis_restart", "daphne_restart", "sandbox_outage"]
# Longer than the few seconds the built-in tools once retried for: an outage the runs
# must outlast by waiting (a durable timer), not fail for.
SANDBOX_OUTAGE_SECONDS = (6.0, 15.0)
# A process its tree kills for being stopped is thawed this long after (if still there).
FROZEN_FOR_GOOD = 30.0


def available(*, postgres: bool, redis: bool) -> list[str]:
    kinds = PROCESS + list(POINTS)
    if postgres:
        kinds += SERVICES_PG
    kinds += [k for k in SERVICES if redis or k != "redis_restart"]
    return kinds


@dataclass
class Fault:
    kind: str
    at: float                      # wall time the fault struck
    detail: str = ""
    runs: list[str] = field(default_factory=list)
    epochs: dict = field(default_factory=dict)  # run id -> epoch when struck
    armed_at: float | None = None  # fault points: armed, then struck when a process hit it
    point: str = ""
    spec: str = ""


class Injector:
    def __init__(self, harness):
        self.h = harness
        self.stack = harness.stack
        self.rng = harness.rng
        self.stopped: list[tuple[float, int]] = []   # (continue at, pid)
        self.armed: list[Fault] = []
        self.terminating: list[tuple[float, object, str]] = []  # (SIGTERM at, cluster, how)
        self.outage_ends: float | None = None  # the sandbox comes back at this monotonic time

    def inject(self, kind: str) -> Fault | None:
        if kind in POINTS:
            return self.arm_point(kind)
        return getattr(self, kind)()

    # --- processes -----------------------------------------------------------------------
    def _victim_worker(self) -> tuple[int | None, list[str]]:
        """A worker that holds a run if one does within a few seconds, else any worker."""
        deadline = time.monotonic() + 8.0
        while True:
            pids = self.stack.worker_pids()
            held = holders(list(pids))
            busy = [pid for pid in pids if held.get(pid)]
            if busy or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        pool = busy or list(pids)
        if not pool:
            return None, []
        pid = self.rng.choice(sorted(pool))
        return pid, held.get(pid, [])

    def _struck(self, kind, runs, detail="") -> Fault:
        epochs = db_call(_epochs, runs)
        return Fault(kind, time.time(), detail, list(runs), epochs)

    def worker_sigkill(self) -> Fault | None:
        pid, runs = self._victim_worker()
        if pid is None:
            return None
        fault = self._struck("worker_sigkill", runs, f"pid {pid}")
        _kill(pid, signal.SIGKILL)
        return fault

    def _victim_cluster(self):
        pids = self.stack.worker_pids()
        held = holders(list(pids))
        busy = {id(c): c for pid, c in pids.items() if held.get(pid)}
        pool = list(busy.values()) or list(self.stack.clusters)
        cluster = self.rng.choice(pool)
        runs = [run for pid in cluster.worker_pids() for run in held.get(pid, [])]
        return cluster, runs

    def workers_all_sigkill(self) -> Fault:
        """Every worker of one tree at once: its main ends the tree, a fresh one starts."""
        cluster, runs = self._victim_cluster()
        pids = cluster.tree_workers()
        fault = self._struck("workers_all_sigkill", runs, f"pids {pids}")
        for pid in pids:
            _kill(pid, signal.SIGKILL)
        return fault

    def main_sigkill(self) -> Fault:
        """The main alone: the kernel tells its workers (they hand their runs back and
        end), and the restart loop starts a fresh tree."""
        cluster, runs = self._victim_cluster()
        fault = self._struck("main_sigkill", runs, f"pid {cluster.pid}")
        _kill(cluster.pid, signal.SIGKILL)
        return fault

    def tree_sigkill(self) -> Fault:
        """Every process of a tree at once (its process group): nobody hands anything
        back; the fresh tree's main expires the dead workers' leases."""
        cluster, runs = self._victim_cluster()
        fault = self._struck("tree_sigkill", runs, f"tree of main {cluster.pid}")
        cluster.signal_group(signal.SIGKILL)
        return fault

    def tree_sigterm(self) -> Fault:
        """A deploy: the new tree starts, then the old one gets SIGTERM, either on its
        main process (which passes it on) or on its whole group (most supervisors)."""
        self.stack.start_cluster()
        cluster, runs = self._victim_cluster_excluding(self.stack.clusters[-1])
        how = self.rng.choice(["main", "group"])
        fault = self._struck("tree_sigterm", runs, f"cluster pid {cluster.pid}, {how}")
        # Chaos (CI, seed 20261): a main frozen during its start-up got it, died of it once
        # thawed, and the restart loop started a fresh tree nobody ever stopped.
        cluster.stop_with(signal.SIGTERM, group=how == "group")
        self.stack.retire(cluster)
        self.terminating.append((time.monotonic(), cluster, how))
        return fault

    def _victim_cluster_excluding(self, newest):
        for _ in range(10):
            cluster, runs = self._victim_cluster()
            if cluster is not newest:
                return cluster, runs
        others = [c for c in self.stack.clusters if c is not newest]
        held = holders([pid for c in others for pid in c.worker_pids()])
        cluster = self.rng.choice(others)
        return cluster, [r for pid in cluster.worker_pids() for r in held.get(pid, [])]

    def worker_sigstop(self) -> Fault | None:
        """A worker frozen (SIGSTOP): its main sees it stopped past AGENTOPS_STOPPED_SECONDS,
        kills it and ends the tree; a fresh one takes the runs."""
        pid, runs = self._victim_worker()
        if pid is None:
            return None
        if not freeze_without_the_write_lock(lambda: _kill(pid, signal.SIGSTOP),
                                             lambda: _kill(pid, signal.SIGCONT)):
            return None
        fault = self._struck("worker_sigstop", runs, f"pid {pid}")
        self.stopped.append((time.monotonic() + FROZEN_FOR_GOOD, pid))
        return fault

    def main_sigstop(self) -> Fault | None:
        """A main frozen: its workers see it stopped, kill it, hand their runs back."""
        cluster, runs = self._victim_cluster()
        main = cluster.pid
        if not freeze_without_the_write_lock(lambda: _kill(main, signal.SIGSTOP),
                                             lambda: _kill(main, signal.SIGCONT)):
            return None
        fault = self._struck("main_sigstop", runs, f"pid {main}")
        self.stopped.append((time.monotonic() + FROZEN_FOR_GOOD, main))
        return fault

    def tree_sigstop(self) -> Fault | None:
        """Zombies: a whole tree frozen past its lease (nobody in it can notice), then
        thawed while another tree has its runs: its workers' writes are fenced."""
        cluster, runs = self._victim_cluster()
        pids = [cluster.pid, *cluster.tree_workers()]
        freeze = self.h.profile.lease_seconds + self.rng.uniform(1.0, 3.0)
        if not freeze_without_the_write_lock(lambda: _kill_all(pids, signal.SIGSTOP),
                                             lambda: _kill_all(pids, signal.SIGCONT)):
            return None
        fault = self._struck("tree_sigstop", runs,
                             " ".join(f"pid {pid}, {freeze:.1f} s;" for pid in pids))
        self.stopped.extend((time.monotonic() + freeze, pid) for pid in pids)
        return fault

    def hung_deploys(self, limit: float = 30.0) -> list[str]:
        """Clusters still running `limit` seconds after their SIGTERM (then killed)."""
        hung = []
        for item in list(self.terminating):
            at, cluster, how = item
            if not cluster.alive():
                self.terminating.remove(item)
            elif time.monotonic() - at > limit:
                self.terminating.remove(item)
                alive = [pid for pid in cluster.all_pids()]
                cluster.signal_group(signal.SIGKILL)
                hung.append(f"a cluster given SIGTERM ({how}) was still running {limit:.0f} s "
                            f"later (processes {alive}); killed")
        return hung

    def thaw(self, all_now: bool = False) -> None:
        now = time.monotonic()
        if self.outage_ends is not None and (all_now or self.outage_ends <= now):
            self.outage_ends = None
            self.stack.start_sandbox_server()
        for item in list(self.stopped):
            if all_now or item[0] <= now:
                _kill(item[1], signal.SIGCONT)
                self.stopped.remove(item)

    # --- the engine's named fault points -----------------------------------------------------
    def arm_point(self, kind: str) -> None:
        point, specs = POINTS[kind]
        if any(f.point == point for f in self.armed):
            return  # one file per point: this one is still armed
        spec = self.rng.choice(specs)
        (self.stack.faults_dir / point).write_text(spec)
        self.armed.append(Fault(kind, 0.0, f"{point} = {spec}", armed_at=time.time(),
                                point=point, spec=spec))

    def fired(self) -> list[Fault]:
        """Armed points some process hit since the last look (it killed itself there)."""
        struck = []
        for fault in list(self.armed):
            fired = list(self.stack.faults_dir.glob(f"{fault.point}.fired.*"))
            if not fired:
                continue
            path = fired[0]
            pid = int(path.name.rsplit(".", 1)[1])
            fault.at = path.stat().st_ctime  # the rename: when the process reached the point
            fault.detail += f", pid {pid}"
            fault.runs = db_call(_runs_of_pid, pid, fault.at)
            fault.epochs = db_call(_epochs, fault.runs)
            path.rename(path.with_name(f"seen-{path.name}"))
            self.armed.remove(fault)
            struck.append(fault)
        return struck

    def disarm(self) -> list[Fault]:
        left = []
        for fault in list(self.armed):
            try:
                os.remove(self.stack.faults_dir / fault.point)
                left.append(fault)
                self.armed.remove(fault)
            except FileNotFoundError:
                pass  # it fired meanwhile: fired() reports it
        return left

    # --- shared services --------------------------------------------------------------------
    def _everyone(self, kind, detail=""):
        return self._struck(kind, db_call(running_runs), detail)

    def pg_restart(self) -> Fault:
        fault = self._everyone("pg_restart")
        self.stack.postgres.restart()
        fault.detail = f"back after {time.time() - fault.at:.1f} s"
        return fault

    def pg_terminate(self) -> Fault:
        fault = self._everyone("pg_terminate")
        fault.detail = f"{self.stack.postgres.terminate_backends()} backends terminated"
        return fault

    def redis_restart(self) -> Fault:
        fault = self._everyone("redis_restart")
        self.stack.redis.stop()
        time.sleep(self.rng.uniform(0.5, 2.5))
        self.stack.redis.start()
        fault.detail = f"down {time.time() - fault.at:.1f} s"
        return fault

    def daphne_restart(self) -> Fault:
        fault = self._everyone("daphne_restart")
        connected = self.h.followers.connected()
        self.stack.restart_web()
        fault.detail = f"down {time.time() - fault.at:.1f} s, {connected} followers connected"
        return fault


    def sandbox_outage(self) -> Fault | None:
        """The outside world (the sandbox every tool calls) goes away for longer than a
        retry loop in the worker thread would wait; the harness brings it back later."""
        if self.outage_ends is not None:
            return None  # one outage at a time
        length = self.rng.uniform(*SANDBOX_OUTAGE_SECONDS)
        fault = self._everyone("sandbox_outage", f"down {length:.1f} s")
        self.stack.stop_sandbox_server()
        self.outage_ends = time.monotonic() + length
        return fault


def _kill(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _kill_all(pids: list[int], sig) -> None:
    for pid in pids:
        _kill(pid, sig)


def _epochs(run_ids) -> dict[str, int]:
    from runs.models import Run
    return dict(Run.objects.filter(pk__in=run_ids).values_list("id", "epoch"))


def _runs_of_pid(pid: int, at: float) -> list[str]:
    """The runs a process held when it died at a fault point."""
    from datetime import datetime

    from runs.models import Run, RunEvent
    held = list(Run.objects.filter(lease_owner__contains=f":{pid}:").values_list("id", flat=True))
    if held:
        return held
    before = datetime.fromtimestamp(at + 0.5, tz=UTC)
    last = (RunEvent.objects.filter(kind="status", data__worker__icontains=f":{pid}:",
                                    created_at__lte=before).order_by("-created_at").first())
    return [last.run_id] if last else []
