from django.urls import path

from . import views

app_name = "schedules"
urlpatterns = [
    path("", views.schedule_list, name="list"),
    path("new/", views.schedule_new, name="new"),
    path("<int:schedule_id>/", views.schedule_detail, name="detail"),
    path("<int:schedule_id>/pause/", views.schedule_pause, name="pause"),
    path("<int:schedule_id>/delete/", views.schedule_delete, name="delete"),
]
