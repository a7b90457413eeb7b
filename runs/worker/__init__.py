"""The worker runtime: the processes that execute runs and keep them alive.

`execute` runs one run in a worker thread, `leases` keeps its lease, `sweep`
finds due and abandoned runs, `heartbeat` reports the processes, `cluster/`
supervises django-q2's processes, `stalls` says which runs nobody advances.
"""


def __getattr__(name):
    # Tasks queued by versions before the runs/ layout name the task
    # runs.worker.execute_run_task; resolve it lazily so importing this package
    # stays free of the executor's imports.
    if name == "execute_run_task":
        from runs.worker.execute import execute_run_task

        return execute_run_task
    raise AttributeError(name)
