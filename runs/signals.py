from django.dispatch import receiver
from django_q.signals import post_spawn


@receiver(post_spawn)
def on_worker_spawn(sender, proc_name, **kwargs):
    # post_spawn is also sent for the monitor/pusher? No: only worker() sends it.
    from runs.worker import install_signal_handlers

    install_signal_handlers()
