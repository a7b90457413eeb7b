import httpx
import pytest


@pytest.fixture
def sandbox_url(live_server):
    """The base URL of the sandbox on a real HTTP server (threads, one process)."""
    return f"{live_server.url}/sandbox"


@pytest.fixture
def http(sandbox_url):
    with httpx.Client(base_url=sandbox_url, timeout=30) as client:
        yield client
