from django.urls import path

app_name = "runs"
urlpatterns: list = []
