"""Recovery time with real qcluster processes: from the moment a worker is
killed (SIGKILL) or a cluster is told to stop (SIGTERM, a deploy) to the next
new effect of its run on another worker.

    python -m bench.recovery [REPEATS]

Baseline in the same process: the run's ordinary gap between two effects.
Targets (issue 2): SIGKILL median under 5 s; SIGTERM under 1 s.
"""

import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.setup_db import setup_django


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
    clusters = [Cluster(tmp, workers=1, name=f"c{i}") for i in range(2)]

    def holder(run_id):
        owner = Run.objects.filter(pk=run_id).values_list("lease_owner", flat=True).first()
        return owner

    def recovery(kind: str) -> tuple[float, float]:
        run = services.run_launch(user=None, agent="ticker", inputs={"steps": 2000, "delay": 0.05})
        owner = wait_until(lambda: holder(run.id), 30, message="a worker to take the run")
        wait_until(lambda: Run.objects.get(pk=run.id).step_no >= 5, 30, message="five steps")
        times = list(Effect.objects.filter(run_id=run.id).order_by("started_at")
                     .values_list("started_at", flat=True))
        gap = statistics.median((b - a).total_seconds() for a, b in zip(times, times[1:]))
        pid = int(owner.split(":")[1])
        victim = next(c for c in clusters if pid in c.worker_pids())
        start = time.time()
        if kind == "SIGKILL":
            os.kill(pid, signal.SIGKILL)
        else:
            victim.signal(signal.SIGTERM)

        def next_effect():
            return (Effect.objects.filter(run_id=run.id, started_at__gt=_dt(start))
                    .exclude(worker=owner).order_by("started_at").first())

        effect = wait_until(next_effect, 60, interval=0.01, message="the next effect")
        elapsed = effect.started_at.timestamp() - start
        services.run_cancel(run_id=run.id, user=None, reason="bench done")
        if kind == "SIGTERM":
            victim.proc.wait(30)
            clusters.remove(victim)
            clusters.append(Cluster(tmp, workers=1, name=f"c{time.monotonic_ns()}"))
        time.sleep(0.5)  # let the sweep see the cancel before the next round
        return elapsed, gap

    try:
        for kind in ("SIGKILL", "SIGTERM"):
            results = [recovery(kind) for _ in range(repeats)]
            values = [r[0] for r in results]
            gap = statistics.median(r[1] for r in results)
            print(f"{kind}: kill to next new effect on another worker: median "
                  f"{statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f}, "
                  f"n={len(values)}); baseline gap between effects {gap * 1000:.0f} ms; "
                  f"ratio {statistics.median(values) / gap:.1f}x")
    finally:
        for cluster in clusters:
            cluster.stop()


def _dt(ts):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
