"""`manage.py worker`: the worker tree of this host (runs/worker/tree.py), the Procfile's
`worker:`. It exits 0 after a stop signal and non-zero when the tree was damaged: run it
under a service manager that starts it again (docs/workers.md)."""

import os

from django.core.management.base import BaseCommand

from runs.durable import clock
from runs.storage import clock as database_clock
from runs.worker import sweep, tree


class Command(BaseCommand):
    help = "Runs this host's worker tree: a main process and AGENTOPS_WORKERS worker processes."
    # A fresh tree after a crash waits for its start: the checks took 0.3 s of CPU here,
    # and the web processes and `manage.py migrate` of a deploy run them anyway.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument(
            "--ended", type=int, metavar="CODE",
            help="the last step of a tree whose stop killed a worker after the grace (the "
                 "tree's main runs it, runs/worker/watcher.py): expire the leases of this "
                 "host's dead workers, then exit CODE")

    def handle(self, *args, **options):
        # Leases and timers on the database's clock: hosts whose clocks disagree agree on
        # them (runs/storage/clock.py). The forked workers inherit it.
        clock.use(database_clock.now)
        if options["ended"] is not None:
            sweep.free_dead_leases()
            os._exit(options["ended"])  # no teardown of Django's heap (0.2-0.5 s)
        tree.run()
