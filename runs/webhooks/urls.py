from django.urls import path

from . import views

app_name = "webhooks"
urlpatterns = [
    path("", views.subscription_list, name="list"),
    path("new/", views.subscription_new, name="new"),
    path("<int:subscription_id>/", views.subscription_detail, name="detail"),
    path("<int:subscription_id>/rotate/", views.subscription_rotate, name="rotate"),
    path("<int:subscription_id>/delete/", views.subscription_delete, name="delete"),
]
