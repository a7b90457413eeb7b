from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    name = "runs.schedules"
    label = "schedules"
    verbose_name = "Schedules"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from runs.hooks import SIDE_JOBS, hooks

        from .tick import tick

        # Launches the due schedules on every tick of each worker tree's duties (runs/hooks.py).
        hooks.add(SIDE_JOBS, tick)
