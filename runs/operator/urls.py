from django.urls import path

from runs.deploys import views as deploys
from runs.operator import actions, state_edit, views

app_name = "operator"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("storage/", views.storage, name="storage"),
    path("costs/", views.costs, name="costs"),
    path("attention/", views.attention, name="attention"),
    path("workers/", views.workers, name="workers"),
    path("deploys/", deploys.deploys, name="deploys"),  # docs/deploys.md
    path("runs/bulk/", actions.bulk, name="bulk"),
    path("runs/<run_id:run_id>/", views.run_page, name="run"),
    path("runs/<run_id:run_id>/live/", views.run_live, name="run_live"),
    path("runs/<run_id:run_id>/act/", actions.act, name="act"),
    path("runs/<run_id:run_id>/rollback/", actions.rollback, name="rollback"),
    path("runs/<run_id:run_id>/resolve/", actions.resolve, name="resolve"),
    path("runs/<run_id:run_id>/state/", state_edit.edit_state, name="edit_state"),
]
