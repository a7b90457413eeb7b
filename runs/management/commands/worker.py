"""`manage.py worker`: qcluster under a thin supervisor that restarts it (runs/worker/cluster/supervisor.py).
The Procfile's worker; production supervisors may run qcluster directly (docs/workers.md)."""

from django.conf import settings
from django.core.management.base import BaseCommand

from runs.worker.cluster.supervisor import Supervisor, qcluster_argv


class Command(BaseCommand):
    help = "Runs `manage.py qcluster` and restarts it whenever it exits or stops making progress."

    def handle(self, *args, **options):
        conf = settings.AGENTOPS
        Supervisor(qcluster_argv(), stale_seconds=conf["MAIN_STALE_SECONDS"],
                   start_seconds=conf["MAIN_START_SECONDS"],
                   grace_seconds=conf["SHUTDOWN_GRACE_SECONDS"]).run()
