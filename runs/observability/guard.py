"""Who may read /metrics: a bearer token, or an address in an allow-list.

Neither configured: /metrics does not exist (404). Configured, a request without
the token from elsewhere is refused (403). The one rule for /metrics' access.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings

ALLOWED, FORBIDDEN, DISABLED = "allowed", "forbidden", "disabled"


def access(request) -> str:
    token = settings.AGENTOPS["METRICS_TOKEN"]
    networks = allow_list()
    if not token and not networks:
        return DISABLED
    if token and _bearer(request) is not None and hmac.compare_digest(
            _bearer(request), token.encode()):
        return ALLOWED
    if networks and _address_in(request.META.get("REMOTE_ADDR", ""), networks):
        return ALLOWED
    return FORBIDDEN


def allow_list() -> list:
    """The allow-list's networks. ObservabilityConfig.ready() parses them at startup, so
    a malformed entry stops the process with a clear error, never a request."""
    return parse_networks(settings.AGENTOPS["METRICS_ALLOW"])


def parse_networks(entries) -> list:
    return [ipaddress.ip_network(entry, strict=False) for entry in entries]


def _bearer(request) -> bytes | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    # bytes, so that any header (non-ASCII included) compares instead of raising
    return value.strip().encode("utf-8", "surrogateescape")


def _address_in(address: str, networks: list) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)
