from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Durable runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        from runs.agent_loader import load_agents

        # Imported for its side effect: <run_id:...> for the URLconfs.
        from runs.live import access as live_access
        from runs.operator.groups import ensure_operators_group
        from runs.web import converters  # noqa: F401

        # A flush (transactional tests) drops the group's permission; put it back.
        post_migrate.connect(ensure_operators_group, sender=self)
        live_access.connect_signals()
        load_agents()
