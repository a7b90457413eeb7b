from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class ObservabilityConfig(AppConfig):
    name = "runs.observability"
    label = "observability"
    verbose_name = "Observability"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from runs.observability import guard, observer

        try:
            guard.parse_networks(settings.AGENTOPS["METRICS_ALLOW"])
        except ValueError as exc:
            raise ImproperlyConfigured(f"AGENTOPS_METRICS_ALLOW: {exc}") from exc
        # Installed even with metrics and tracing off: it is also the log lines' context.
        observer.install(metrics_on=settings.AGENTOPS["METRICS"])
