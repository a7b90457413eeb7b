from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Durable runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from runs import signals  # noqa: F401  (worker process hooks)
        from runs.agent_loader import load_agents

        load_agents()
