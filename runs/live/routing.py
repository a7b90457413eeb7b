from django.urls import path

from runs.live import consumers
from runs.operator.consumers import OperatorConsumer

websocket_urlpatterns = [
    path("ws/runs/", consumers.RunListConsumer.as_asgi()),
    path("ws/runs/<run_id:run_id>/", consumers.RunConsumer.as_asgi()),
    path("ws/operator/", OperatorConsumer.as_asgi()),
]
