from django.dispatch import receiver
from django_q.signals import post_spawn


@receiver(post_spawn)
def on_worker_spawn(sender, proc_name, **kwargs):
    # Only django-q2's worker() sends post_spawn, so this runs in worker processes.
    # (Crash tests find each process by its role file: runs/worker/cluster/roles.py.)
    from runs.worker.execute import configure_worker_process

    configure_worker_process()
