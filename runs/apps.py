from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Durable runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        from runs import signals  # noqa: F401  (worker process hooks)
        from runs.agent_loader import load_agents
        from runs.operator.groups import ensure_operators_group

        # A flush (transactional tests) drops the group's permission; put it back.
        post_migrate.connect(ensure_operators_group, sender=self)
        load_agents()
