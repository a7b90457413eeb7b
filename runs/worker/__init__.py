"""The worker runtime: the processes that execute runs.

`tree` is a host's main process and the worker processes it forks, `watcher` the
main once they are forked (crash-only supervision), `execute` the run slots of a worker
process, `leases` keeps their leases, `sweep` the tree's periodic duties (worker 1's), `heartbeat` reports the processes, `fleet`
says which agent code the live trees serve, `stalls` which runs nobody advances.
"""
