from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "runs.budgets"
    label = "budgets"
    verbose_name = "Budgets and approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from runs.hooks import WORKER_GATES, hooks

        from .gates import worker_gates
        from .prices import price

        # Asked before every new call of a run (budgets, quotas, approvals, shared
        # limits), and the price of a metered call (runs/hooks.py).
        hooks.add(WORKER_GATES, worker_gates)
        hooks.set_price(price)
