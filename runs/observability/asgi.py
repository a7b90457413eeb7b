"""Websocket viewers, counted at the ASGI edge: every socket the app accepted and that
has not closed yet, by kind (run list, run page, operator), whatever consumer serves it."""

from __future__ import annotations

from runs.observability import metrics


def socket_kind(path: str) -> str:
    if path == "/ws/runs/":
        return "run_list"
    if path.startswith("/ws/runs/"):
        return "run"
    if path.startswith("/ws/operator/"):
        return "operator"
    return "other"


class CountViewers:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        gauge = metrics.VIEWERS.labels(socket_kind(scope.get("path", "")))
        accepted = False

        async def counting_send(message):
            nonlocal accepted
            if message.get("type") == "websocket.accept" and not accepted:
                accepted = True
                gauge.inc()
            await send(message)

        try:
            return await self.app(scope, receive, counting_send)
        finally:
            if accepted:
                gauge.dec()
