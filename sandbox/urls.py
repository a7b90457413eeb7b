from django.urls import path

app_name = "sandbox"
urlpatterns: list = []
