from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "runs.chat"
    label = "chat"
    verbose_name = "Chat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from runs.hooks import INPUT_WAIT, hooks

        from .services import deliver_queued

        # A message sent while the run was busy answers the wait it begins, in the
        # commit of the wait (both sides deliver after their own write:
        # runs/chat/services.py).
        hooks.add(INPUT_WAIT, deliver_queued)
