import os

from django.dispatch import receiver
from django_q.signals import post_spawn


@receiver(post_spawn)
def on_worker_spawn(sender, proc_name, **kwargs):
    # Only django-q2's worker() sends post_spawn, so this runs in worker processes.
    from runs.worker import configure_worker_process

    configure_worker_process()
    pid_dir = os.environ.get("AGENTOPS_WORKER_PID_DIR")
    if pid_dir:  # lets crash tests tell worker processes from the monitor and pusher
        open(os.path.join(pid_dir, f"worker-{os.getpid()}"), "w").close()
