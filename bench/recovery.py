"""Recovery time with real qcluster processes: from the moment a process is killed
(SIGKILL) or a cluster is told to stop (SIGTERM, a deploy) to the next new effect
of its run on another worker.

    python -m bench.recovery [REPEATS]

Two clusters of one worker each: SIGKILL of the run's worker, SIGTERM of its
cluster (the run moves to the other cluster). Then one `manage.py worker` tree of
two workers, alone, that must repair itself: SIGKILL of the run's worker, of both
workers, of the sentinel, the monitor, the pusher, the qcluster main, and of all of
them at once. Each round waits for the tree to be whole again before the next.

Baseline in the same process: the run's ordinary gap between two effects.
Targets (issues 2 and 11): every kind median under 5 s; SIGTERM and a single
worker's SIGKILL under 1 s.
"""

import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.setup_db import setup_django

TREE_KILLS = {
    "worker": lambda tree, pid: [pid],
    "all workers": lambda tree, pid: tree.worker_pids(),
    "sentinel": lambda tree, pid: tree.role_pids("sentinel"),
    "monitor": lambda tree, pid: tree.role_pids("monitor"),
    "pusher": lambda tree, pid: tree.role_pids("pusher"),
    "main": lambda tree, pid: tree.role_pids("main"),
    "all at once": lambda tree, pid: [p for role in ("main", "sentinel", "worker", "pusher",
                                                     "monitor") for p in tree.role_pids(role)],
}


def main(repeats: int = 5):
    setup_django()
    from runs import services
    from runs.models import Effect, Run
    from tests.support.processes import Cluster, wait_until

    tmp = Path(tempfile.mkdtemp(prefix="agentops-recovery-"))
    os.environ["AGENTOPS_AGENT_MODULES"] = "tests.workload_agents"
    import tests.workload_agents  # noqa: F401  (registers "ticker" in this process)

    # Without local dead-process detection a SIGKILLed worker is noticed only when
    # its lease runs out, as for a worker on another host.
    same_host = os.environ.get("AGENTOPS_DETECT_DEAD_LOCAL_WORKERS", "1") != "0"
    print(f"dead local workers detected at once: {same_host} "
          f"(lease {os.environ.get('AGENTOPS_LEASE_SECONDS', '4')} s)")

    def holder(run_id):
        return Run.objects.filter(pk=run_id).values_list("lease_owner", flat=True).first()

    def recovery(kill) -> tuple[float, float]:
        """Start a run, let it take five steps, `kill(pid of its worker)`; return the
        seconds to its next effect on another worker, and its median gap before."""
        run = services.run_launch(user=None, agent="ticker", inputs={"steps": 2000, "delay": 0.05})
        owner = wait_until(lambda: holder(run.id), 30, message="a worker to take the run")
        wait_until(lambda: Run.objects.get(pk=run.id).step_no >= 5, 30, message="five steps")
        times = list(Effect.objects.filter(run_id=run.id).order_by("started_at")
                     .values_list("started_at", flat=True))
        gap = statistics.median((b - a).total_seconds() for a, b in zip(times, times[1:]))
        start = time.time()
        kill(int(owner.split(":")[1]))

        def next_effect():
            return (Effect.objects.filter(run_id=run.id, started_at__gt=_dt(start))
                    .exclude(worker=owner).order_by("started_at").first())

        effect = wait_until(next_effect, 60, interval=0.01, message="the next effect")
        services.run_cancel(run_id=run.id, user=None, reason="bench done")
        return effect.started_at.timestamp() - start, gap

    def report(kind, results):
        values = [r[0] for r in results]
        gap = statistics.median(r[1] for r in results)
        print(f"{kind}: kill to next new effect on another worker: median "
              f"{statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f}, "
              f"n={len(values)}); baseline gap between effects {gap * 1000:.0f} ms; "
              f"ratio {statistics.median(values) / gap:.1f}x", flush=True)

    clusters = [Cluster(tmp, workers=1, name=f"c{i}") for i in range(2)]
    try:
        def sigkill(pid):
            os.kill(pid, signal.SIGKILL)

        def sigterm(pid):
            victim = next(c for c in clusters if pid in c.worker_pids())
            victim.signal(signal.SIGTERM)
            victim.proc.wait(30)
            clusters.remove(victim)
            clusters.append(Cluster(tmp, workers=1, name=f"c{time.monotonic_ns()}"))

        for kind, kill in (("SIGKILL", sigkill), ("SIGTERM", sigterm)):
            results = []
            for _ in range(repeats):
                results.append(recovery(kill))
                time.sleep(0.5)  # let the sweep see the cancel before the next round
            report(kind, results)
    finally:
        for cluster in clusters:
            cluster.stop()

    tree = Cluster(tmp, workers=2, name="tree", supervised=True)
    try:
        for kind, victims in TREE_KILLS.items():
            results = []
            for _ in range(repeats):
                wait_until(tree.tree_ready, 60, message="a whole, idle worker tree")

                def kill(pid, victims=victims):
                    for victim in victims(tree, pid):
                        os.kill(victim, signal.SIGKILL)

                results.append(recovery(kill))
            report(f"SIGKILL {kind} (one tree, self-repair)", results)
    finally:
        tree.stop()


def _dt(ts):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
