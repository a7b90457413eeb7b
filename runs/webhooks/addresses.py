"""Which URLs a webhook may be sent to (SSRF).

A subscriber chooses the URL, and the delivery is made from inside the deployment, so a
URL could point a request at the deployment's own network (a database's admin port, a
cloud metadata service at 169.254.169.254). The rule, checked when the subscription is
saved (for an address written in the URL) and again before every attempt (for the
addresses its host name resolves to at that moment):

- http and https only; no user name or password in the URL;
- every address the host resolves to must be global (public), or inside a network of
  AGENTOPS_WEBHOOK_ALLOWED_NETWORKS (loopback in local mode, nothing in a deployment);
- redirects are not followed (a public URL cannot bounce the request inwards).

What is left: a host name whose DNS answer changes between the check and the connection
(DNS rebinding) can still reach a private address for that one attempt. A deployment
that must exclude it sends webhooks through an egress proxy that enforces the same rule.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

SCHEMES = ("http", "https")


class AddressRefused(ValueError):
    """A URL webhooks may not be sent to; the message says why."""


def allowed_networks():
    networks = []
    for text in settings.WEBHOOKS["ALLOWED_NETWORKS"]:
        networks.append(ipaddress.ip_network(text, strict=False))
    return networks


def check_url(url: str) -> str:
    """The URL, stripped, if its form is acceptable; AddressRefused otherwise."""
    url = (url or "").strip()
    if not url:
        raise AddressRefused("a URL is required")
    if any(ord(c) < 33 for c in url):
        raise AddressRefused("the URL holds spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise AddressRefused(f"not a valid URL: {exc}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise AddressRefused("only http:// and https:// URLs can receive webhooks")
    if not parts.hostname:
        raise AddressRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise AddressRefused("put no user name or password in the URL (deliveries are signed)")
    if port == 0:
        raise AddressRefused("port 0 is not a port to deliver to")
    literal = _literal(parts.hostname)
    if literal is not None:
        check_address(literal)
    elif (name := parts.hostname.lower().rstrip(".")) in ("localhost", "localhost.localdomain") \
            or name.endswith(".localhost"):
        check_address(ipaddress.ip_address("127.0.0.1"))
    return url


def check_address(address) -> None:
    if address.is_global and not address.is_multicast:
        return
    if any(address in network for network in allowed_networks()
           if network.version == address.version):
        return
    raise AddressRefused(f"{address} is a private, loopback or reserved address; webhooks "
                         "are not sent there (AGENTOPS_WEBHOOK_ALLOWED_NETWORKS lists the "
                         "networks that may receive them)")


def check_resolved(url: str) -> None:
    """Resolve the URL's host now and check every address it has."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    literal = _literal(parts.hostname or "")
    if literal is not None:
        check_address(literal)
        return
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise OSError(f"cannot resolve {parts.hostname}: {exc}") from exc
    for info in infos:
        check_address(ipaddress.ip_address(info[4][0].split("%")[0]))


def _literal(host: str):
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
