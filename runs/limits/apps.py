from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class LimitsConfig(AppConfig):
    name = "runs.limits"
    label = "limits"
    verbose_name = "Shared limits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # A limit that cannot be applied is refused at start, not at a run's first call.
        from runs.durable.policies.limits import LimitConfigError

        from .config import from_settings

        try:
            from_settings()
        except (LimitConfigError, TypeError) as exc:
            raise ImproperlyConfigured(f"AGENTOPS_LIMITS: {exc}") from None
