import httpx
import pytest


@pytest.fixture
def sandbox_url(live_server):
    """The base URL of the sandbox on a real HTTP server (threads, one process)."""
    return f"{live_server.url}/sandbox"


@pytest.fixture
def http(sandbox_url):
    # Connection: close: with keep-alive, Django's live server answers each
    # request ~40 ms late (a delayed ACK), which makes a 200-page crawl slow.
    with httpx.Client(base_url=sandbox_url, timeout=30, headers={"Connection": "close"}) as client:
        yield client
