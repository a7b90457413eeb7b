from django.urls import path

from runs import consumers

websocket_urlpatterns = [
    path("ws/runs/", consumers.RunListConsumer.as_asgi()),
    path("ws/runs/<run_id:run_id>/", consumers.RunConsumer.as_asgi()),
]
