from django.urls import path

app_name = "operator"
urlpatterns: list = []
