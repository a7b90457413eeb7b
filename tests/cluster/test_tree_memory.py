"""What a worker tree costs, counted: its processes' memory (PSS, the kernel's own count,
which psutil reads from /proc/PID/smaps_rollup: pages shared copy-on-write between the
main and its worker are counted once, split between them) and its worker's threads, idle
and holding many runs that wait on a tool.

The bounds are today's figures with room for noise (docs/workers.md, "What a tree
costs"): a change that adds a thread per run (a LeaseRenewer per run was one), a support
process, or kilobytes per waiting run fails here. Measured on PostgreSQL, where a
worker's run threads share a pool of connections (SQLite keeps one per thread).
"""

import signal

import psutil

from runs import services
from runs.durable.effect import INTENT
from runs.models import Effect
from tests.support.processes import wait_until

# tests/cluster runs on PostgreSQL + Redis only (tests/conftest.py): the run threads'
# pooled connections are PostgreSQL's.

FIRST, MORE = 50, 250
# Measured on the bench machine (Python 3.11, Django 5.2): an idle tree 57-61 MiB (the
# main, a bare watcher, and one worker), 42-45 KiB more per waiting run (its thread,
# ~16 KiB, and ~13 KiB of Python objects: the engine's session; docs/workers.md). 55-67
# KiB before the cursor of PgStore was kept per connection instead of per thread, 47-50
# before a thread borrowed Django's connection wrapper instead of keeping its own.
IDLE_TREE_MIB = 84
# The main once its workers are forked: a bare Python watching them (runs/worker/watcher.py),
# 7-8 MiB, against 35-38 MiB when it kept Django (and the originals of every page its
# worker wrote).
MAIN_MIB = 16
PER_WAITING_RUN_KIB = 96
# The worker's own threads besides its runs': the main thread, the lease keeper,
# watch-main, the tree's duties (worker 1's), the pool's scheduler and workers.
SUPPORT_THREADS = 10
# Longer than the test: a held run's one call never ends while it is looked at. The tree
# is killed at the end (SIGKILL), so no stop waits for the calls.
HELD_SECONDS = 3600


def tree_pss_kib(cluster) -> int:
    return sum(psutil.Process(pid).memory_full_info().pss for pid in cluster.all_pids()) // 1024


def hold(cluster, worker: int, count: int) -> list[str]:
    """Launch `count` runs whose one tool call outlasts the test (a slow model call) and
    wait until each has logged its call's intent in the worker: then every one of them
    waits in its tool.

    A call that ended within the test (a ticker's 10 s, once) let the runs held first take
    steps while a loaded machine launched the rest, and what their steps left behind was
    counted as the waiting runs' (81 KiB a run with 25 s between the counts, against 61).
    The rest of CI's 122 KiB was a cache of psycopg's that grew with time, fixed in
    runs/storage/pg_statements.py.

    Waited for until each run has logged its call's intent, not only until the worker
    holds it: a run is held from its claim on, before its thread has loaded it and run
    the engine's code once. Counted at the claims, a loaded CI run found the first 50
    runs 7.3 MiB dearer than the idle tree and the next 250 at 125 KiB each: the first
    runs' warming up was counted as the later ones'."""
    run_ids = [services.run_launch(user=None, agent="one_long_call",
                                   inputs={"seconds": HELD_SECONDS}).id
               for _ in range(count)]
    wait_until(lambda: Effect.objects.filter(run_id__in=run_ids, status=INTENT,
                                             worker__contains=f":{worker}:")
               .count() == count, 120, interval=0.2,
               message=f"all {count} runs in their call, in the one worker process")
    return run_ids


def test_a_tree_and_its_waiting_runs_cost_bounded_memory_and_a_thread_each(start_cluster):
    # restart=False: the tree killed at the end stays ended.
    cluster = start_cluster(workers=1, restart=False, AGENTOPS_RUNS_PER_WORKER=FIRST + MORE + 10,
                            AGENTOPS_WORKER_DB_POOL=4)
    [worker] = cluster.worker_pids()
    assert len(cluster.all_pids()) == 2, "a tree of one worker is two processes"
    idle_kib = tree_pss_kib(cluster)
    assert idle_kib <= IDLE_TREE_MIB * 1024, f"idle tree: {idle_kib / 1024:.1f} MiB"
    main = psutil.Process(cluster.pid)
    assert main.cmdline()[:2] == ["agentops main", "-S"], main.cmdline()
    libraries = [m.path for m in main.memory_maps() if "-packages" in m.path]
    assert not libraries, f"the main maps what it should not have imported: {libraries}"
    main_mib = main.memory_full_info().pss / 2**20
    assert main_mib <= MAIN_MIB, f"the main: {main_mib:.1f} MiB"

    # A first batch warms the worker up (its pool's threads and connections, the engine's
    # code paths run once); the second one's cost is each waiting run's own.
    hold(cluster, worker, FIRST)
    first_kib, first_threads = tree_pss_kib(cluster), psutil.Process(worker).num_threads()
    assert first_threads <= FIRST + SUPPORT_THREADS, first_threads
    hold(cluster, worker, MORE)
    threads = psutil.Process(worker).num_threads()
    more_threads = threads - first_threads
    per_run_kib = (tree_pss_kib(cluster) - first_kib) / MORE
    print(f"idle tree {idle_kib / 1024:.1f} MiB (main {main_mib:.1f}); {FIRST} waiting runs "
          f"{(first_kib - idle_kib) / 1024:.1f} MiB more, {first_threads} threads; "
          f"{MORE} more: {per_run_kib:.1f} KiB and {more_threads} threads each")
    # A thread per held run and no more, beside the support threads: bounded as a whole,
    # not as the difference of two counts, since a support thread of the pool may start
    # or end between them (CI: "251 threads for 250 more waiting runs").
    assert threads <= FIRST + MORE + SUPPORT_THREADS, \
        f"{threads} threads for {FIRST + MORE} waiting runs ({more_threads} for the last {MORE})"
    assert per_run_kib <= PER_WAITING_RUN_KIB, f"{per_run_kib:.1f} KiB per waiting run"
    # Its runs wait in calls longer than the test and a stop would wait the shutdown
    # grace for them: the tree is killed instead (the fixture's stop then finds it ended).
    cluster.signal_group(signal.SIGKILL)
