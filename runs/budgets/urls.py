from django.urls import path

from . import views

app_name = "budgets"
urlpatterns = [
    path("approvals/", views.inbox, name="inbox"),
    path("approvals/rows/", views.inbox_rows, name="inbox_rows"),
    path("approvals/<str:approval_id>/approve/", views.decide, {"decision": "approve"},
         name="approve"),
    path("approvals/<str:approval_id>/deny/", views.decide, {"decision": "deny"}, name="deny"),
    path("runs/<run_id:run_id>/budget/", views.run_budget, name="run_budget"),
    path("costs/", views.costs, name="costs"),
    path("costs.csv", views.costs_csv, name="costs_csv"),
    path("ops/budgets/", views.quotas, name="quotas"),
]
