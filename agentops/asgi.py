import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from runs.api.status_phrases import complete_twisted_phrases  # noqa: E402
from runs.live.routing import websocket_urlpatterns  # noqa: E402
from runs.observability.asgi import CountViewers  # noqa: E402

complete_twisted_phrases()  # Daphne's status lines: "422 Unprocessable Entity", not "Unknown Status"

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": CountViewers(AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))),
    }
)
