"""The user pages' fixtures (logged-in clients, the browser), shared with tests/web."""

from tests.web.conftest import alice_client, browser, browser_context, client_for  # noqa: F401
