from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "runs.webhooks"
    label = "webhooks"
    verbose_name = "Webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from runs.hooks import SIDE_JOBS, hooks

        from .dispatch import dispatch

        # Turns run events into deliveries on every tick of each worker tree's duties.
        hooks.add(SIDE_JOBS, dispatch)
