from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "runs.budgets"
    label = "budgets"
    verbose_name = "Budgets and approvals"
    default_auto_field = "django.db.models.BigAutoField"
