"""A worker's free slots start a polled batch's threads before any of its runs begins
(runs/worker/execute.py, RunSlots._claim): a thread's start waits until the new thread
holds the GIL once, and behind runs already claiming and loading 1,000 starts took
4.7 s, the last runs of the batch starting that much later (bench scenario 6)."""

import threading
from concurrent.futures import ThreadPoolExecutor, wait

from runs.worker import execute

BATCH = 40


def test_no_run_of_a_batch_begins_before_every_thread_of_the_batch_has_started(monkeypatch):
    run_ids = [f"run-{i}" for i in range(BATCH)]
    monkeypatch.setattr(execute, "_due_runs", lambda exclude, limit: run_ids[:limit])
    submitted = []
    started_when_first_began = []
    lock = threading.Lock()

    def first_moment_of_a_run(slice_seconds=None):
        with lock:
            started_when_first_began.append(len(submitted))
        raise LookupError("the run itself is not this test's")

    monkeypatch.setattr(execute, "worker_config", first_moment_of_a_run)

    class CountingPool(ThreadPoolExecutor):
        def submit(self, fn, *args):
            future = super().submit(fn, *args)
            with lock:
                submitted.append(future)
            return future

    slots = execute.RunSlots(BATCH)
    running: dict = {}
    with CountingPool(BATCH) as pool:
        slots._claim(pool, running)
        wait(list(running))
    assert len(running) == BATCH
    assert started_when_first_began == [BATCH] * BATCH, started_when_first_began
