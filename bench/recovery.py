"""Recovery time with real worker trees (`manage.py worker`, docs/workers.md): from the
moment a process is killed (SIGKILL) or frozen (SIGSTOP), or a tree is told to stop
(SIGTERM, a deploy), to the next new effect of its run on another worker process; and,
for a tree that must come back by itself, to the moment a fresh tree is whole again.

    python -m bench.recovery [REPEATS]

Two trees of one worker each, as two hosts: SIGKILL of the run's worker, SIGTERM of its
tree (the run moves to the other tree), SIGSTOP of its whole tree (a frozen host: the
other tree takes the run once its lease runs out). Then one tree of two workers under a
restart loop (as systemd or bin/serve runs it), alone: SIGKILL and SIGSTOP of the run's
worker, of both workers, of the main, and SIGKILL of everything. Each round waits for
the tree to be whole again before the next.

Baseline in the same process: the run's ordinary gap between two effects.
Target (issue 30): every kind's median under 5 s.
"""

import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.setup_db import setup_django

# Which processes of the lone tree each kind strikes, given the pid of the run's worker.
TREE_FAULTS = {
    "SIGKILL worker": (signal.SIGKILL, lambda tree, pid: [pid]),
    "SIGKILL all workers": (signal.SIGKILL, lambda tree, pid: tree.tree_workers()),
    "SIGKILL main": (signal.SIGKILL, lambda tree, pid: [tree.pid]),
    "SIGKILL everything": (signal.SIGKILL, lambda tree, pid: [tree.pid, *tree.tree_workers()]),
    "SIGSTOP worker": (signal.SIGSTOP, lambda tree, pid: [pid]),
    "SIGSTOP all workers": (signal.SIGSTOP, lambda tree, pid: tree.tree_workers()),
    "SIGSTOP main": (signal.SIGSTOP, lambda tree, pid: [tree.pid]),
}


def main(repeats: int = 5):
    setup_django()
    from runs import services
    from runs.models import Effect, Run
    from tests.support.processes import Cluster, is_running, wait_until

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

    def recovery(strike, whole=None) -> tuple[float, float, float | None]:
        """Start a run, let it take five steps, `strike(pid of its worker)`; return the
        seconds to its next effect on another worker, its median gap before, and the
        seconds until `whole()` (if given)."""
        run = services.run_launch(user=None, agent="ticker", inputs={"steps": 2000, "delay": 0.05})
        owner = wait_until(lambda: holder(run.id), 30, message="a worker to take the run")
        wait_until(lambda: Run.objects.get(pk=run.id).step_no >= 5, 30, message="five steps")
        times = list(Effect.objects.filter(run_id=run.id).order_by("started_at")
                     .values_list("started_at", flat=True))
        gap = statistics.median((b - a).total_seconds() for a, b in zip(times, times[1:]))
        start = time.time()
        strike(int(owner.split(":")[1]))

        def next_effect():
            return (Effect.objects.filter(run_id=run.id, started_at__gt=_dt(start))
                    .exclude(worker=owner).order_by("started_at").first())

        effect = wait_until(next_effect, 60, interval=0.01, message="the next effect")
        healed = None
        if whole is not None:
            wait_until(whole, 60, interval=0.02, message="a whole tree")
            healed = time.time() - start
        services.run_cancel(run_id=run.id, user=None, reason="bench done")
        return effect.started_at.timestamp() - start, gap, healed

    def report(kind, results):
        values = [r[0] for r in results]
        gap = statistics.median(r[1] for r in results)
        line = (f"{kind}: next new effect on another worker: median "
                f"{statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f}, "
                f"n={len(values)}); baseline gap between effects {gap * 1000:.0f} ms")
        healed = [r[2] for r in results if r[2] is not None]
        if healed:
            line += f"; tree whole again: median {statistics.median(healed):.3f} s " \
                    f"(max {max(healed):.3f})"
        print(line, flush=True)

    def thaw(pids):
        for pid in pids:
            if is_running(pid):
                os.kill(pid, signal.SIGCONT)

    clusters = [Cluster(tmp, workers=1, name=f"c{i}") for i in range(2)]
    try:
        def tree_of(pid):
            return next(c for c in clusters if pid in c.worker_pids())

        def sigkill(pid):
            os.kill(pid, signal.SIGKILL)

        def sigterm(pid):
            victim = tree_of(pid)
            victim.signal(signal.SIGTERM)
            victim.proc.wait(30)
            clusters.remove(victim)
            clusters.append(Cluster(tmp, workers=1, name=f"c{time.monotonic_ns()}"))

        frozen = []

        def sigstop_tree(pid):
            victim = tree_of(pid)
            frozen.extend([victim.pid, *victim.tree_workers()])
            victim.signal_group(signal.SIGSTOP)

        for kind, strike in (("SIGKILL", sigkill), ("SIGTERM", sigterm),
                             ("SIGSTOP of its whole tree", sigstop_tree)):
            results = []
            for _ in range(repeats):
                results.append(recovery(strike))
                thaw(frozen)
                frozen.clear()
                for cluster in clusters:
                    wait_until(cluster.tree_ready, 60, message="whole trees")
            report(f"{kind} (two trees)", results)
    finally:
        for cluster in clusters:
            cluster.stop()

    tree = Cluster(tmp, workers=2, name="tree")
    try:
        for kind, (sig, victims) in TREE_FAULTS.items():
            results = []
            for _ in range(repeats):
                wait_until(tree.tree_ready, 60, message="a whole worker tree")
                struck = []

                def strike(pid, sig=sig, victims=victims, struck=struck):
                    struck.extend(victims(tree, pid))
                    for victim in struck:
                        os.kill(victim, sig)

                def whole(struck=struck):
                    return tree.tree_ready() and not any(map(is_running, struck))

                results.append(recovery(strike, whole))
                thaw(struck)
            report(f"{kind} (one tree, restarted)", results)
    finally:
        tree.stop()


def _dt(ts):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
