from django.urls import path

from runs.chat.views import run_chat
from runs.web import views

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("rows/", views.run_rows, name="rows"),
    path("launch/", views.launch, name="launch"),
    path("launch/<str:agent>/", views.launch, name="launch"),
    path("runs/<run_id:run_id>/", views.run_detail, name="detail"),
    path("runs/<run_id:run_id>/panels/", views.run_panels, name="panels"),
    path("runs/<run_id:run_id>/events/", views.events_older, name="events"),
    path("runs/<run_id:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("runs/<run_id:run_id>/input/", views.run_input, name="input"),
    path("runs/<run_id:run_id>/chat/", run_chat, name="chat"),
    path("runs/<run_id:run_id>/output.json", views.output_json, name="output_json"),
    path("runs/<run_id:run_id>/checkpoints/<int:number>/", views.checkpoint_detail,
         name="checkpoint"),
]
